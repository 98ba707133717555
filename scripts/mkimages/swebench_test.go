package main

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

func writeTar(t *testing.T, file string, es []entry) {
	t.Helper()
	if err := os.WriteFile(file, layerTar(es), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestDiffLayer: the layer between two roots holds what is new or
// differs (mtime aside), a whiteout per removed path (not beneath another
// removed one), a hard link again when its target changed, and the extra
// entries.
func TestDiffLayer(t *testing.T) {
	tmp := t.TempDir()
	lower, upper := filepath.Join(tmp, "lower.tar"), filepath.Join(tmp, "upper.tar")
	writeTar(t, lower, []entry{
		dir("etc/"), file("etc/same", "s\n"), file("etc/changed", "old\n"), file("etc/gone", "g\n"),
		dir("old/"), file("old/a", "a\n"), file("mode", "m\n"),
		file("bin/tool", "v1\n").m(0o755), hardlink("bin/tool-link", "bin/tool"), file("owned", "o\n"),
	})
	writeTar(t, upper, []entry{
		dir("etc/"), file("etc/same", "s\n"), file("etc/changed", "new\n"), file("etc/new", "n\n"),
		file("mode", "m\n").m(0o600), symlink("link", "etc/same"),
		file("bin/tool", "v2\n").m(0o755), hardlink("bin/tool-link", "bin/tool"), file("owned", "o\n").own(5, 5),
	})
	var buf bytes.Buffer
	changed, whiteouts := diffLayer(lower, upper, []entry{file("extra", "x\n")}, &buf)
	got := map[string]string{}
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		got[h.Name] = string(h.Typeflag) + ":" + string(b)
	}
	var names []string
	for n := range got {
		names = append(names, n)
	}
	sort.Strings(names)
	want := "bin/tool bin/tool-link etc/.wh.gone etc/changed etc/new extra link mode owned .wh.old"
	wantSorted := strings.Fields(want)
	sort.Strings(wantSorted)
	if strings.Join(names, " ") != strings.Join(wantSorted, " ") {
		t.Errorf("layer holds %v; want %v", names, wantSorted)
	}
	if got["etc/changed"] != "0:new\n" || got["bin/tool-link"][0] != tar.TypeLink {
		t.Errorf("contents: %q", got)
	}
	if changed != 7 || whiteouts != 2 {
		t.Errorf("changed %d, whiteouts %d; want 7 and 2", changed, whiteouts)
	}
}

// TestBuildRepo: the generated project's history is the same on every
// build (commit ids depend on nothing of the machine), its index needs
// no refresh to read clean, and the gold patch applies at the base.
func TestBuildRepo(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	a, b := buildRepo(filepath.Join(t.TempDir(), "a"), len(history)), buildRepo(filepath.Join(t.TempDir(), "b"), len(history))
	if strings.Join(a, " ") != strings.Join(b, " ") {
		t.Fatalf("two builds differ: %v and %v", a, b)
	}
	repo := filepath.Join(t.TempDir(), "r")
	ids := buildRepo(repo, len(history))
	tb := filepath.Join(t.TempDir(), "tb")
	buildRepo(tb, tasks[0].fix-1)
	if st := git(tb, 0, "status", "--porcelain"); st != "" {
		t.Errorf("testbed not clean: %q", st)
	}
	if _, err := os.Stat(filepath.Join(tb, ".git", "logs")); err == nil {
		t.Errorf("testbed keeps reflogs")
	}
	gold := patchOf(repo, ids[tasks[0].fix-2], ids[tasks[0].fix-1], "textkit")
	if !strings.Contains(gold, `+    text = re.sub(r"[^a-z0-9]+", sep,`) {
		t.Errorf("gold patch: %s", gold)
	}
	p := filepath.Join(t.TempDir(), "gold.diff")
	os.WriteFile(p, []byte(gold), 0o644)
	git(tb, 0, "apply", "--check", p)
	if bp := breakPatch(t.TempDir(), tasks[0].fix-1, tasks[0].module); !strings.Contains(bp, "+    return (text.strip(sep)") {
		t.Errorf("broken patch: %s", bp)
	}
}
