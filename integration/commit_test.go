//go:build integration

package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stratafs/strata/snapshot/snapshottest"
)

// baseTree is the project every conformance case starts from.
func baseTree(t testing.TB, dir string) {
	t.Helper()
	sh(t, "", fmt.Sprintf(`set -e
mkdir -p %[1]q && cd %[1]q
mkdir -p src/deep/er tree/a/b empty docs
printf 'line 1\nline 2\nline 3\n' > src/app.txt
printf '#!/bin/sh\necho hi\n' > src/run.sh && chmod 755 src/run.sh
echo deep > src/deep/er/file
for i in 1 2 3; do echo "t$i" > tree/a/b/t$i; done
echo doc > docs/readme
echo target > docs/target
ln -s target docs/link
echo linked > src/hl1 && ln src/hl1 src/hl2
head -c 300000 /dev/urandom > src/blob.bin
echo old > replace-me
mkdir dir-to-file && echo x > dir-to-file/inner
`, dir))
}

// conformanceCases are changes made inside a workspace with a shell.
var conformanceCases = []struct{ name, script string }{
	{"add file", "echo new > src/new.txt"},
	{"modify file", "echo 'line 4' >> src/app.txt"},
	{"delete file", "rm src/app.txt"},
	{"delete tree", "rm -rf tree"},
	{"file to dir", "rm replace-me && mkdir replace-me && echo in > replace-me/x"},
	{"dir to file", "rm -rf dir-to-file && echo now-a-file > dir-to-file"},
	{"file to symlink", "rm docs/readme && ln -s target docs/readme"},
	{"symlink retarget", "ln -sfn readme docs/link"},
	{"opaque dir", "rm -rf tree/a && mkdir tree/a && echo fresh > tree/a/new"},
	{"chmod only", "chmod 700 src/run.sh"},
	{"touch only", "touch -d '2001-02-03 04:05:06' src/deep/er/file"},
	{"xattr", `python3 -c "import os; os.setxattr('docs/target', 'user.agent', b'\x00bin\xff')"`},
	{"new hardlink", "ln src/deep/er/file src/deep/er/file-link"},
	{"modify hardlink member", "echo changed >> src/hl1"},
	{"copied up unchanged", "chmod 777 src/app.txt && chmod 644 src/app.txt"},
	{"empty dirs", "mkdir -p new-empty/a/b && rmdir empty"},
	{"delete and re-create", "rm src/app.txt && printf 'line 1\\nline 2\\nline 3\\n' > src/app.txt"},
	{"newline name", `printf 'x\n' > "$(printf 'new\nline')"`},
	{"invalid utf8 name", `printf 'y\n' > "$(printf 'bad\377name')"`},
	{"fifo", "mkfifo src/pipe"},
	{"binary edit", "printf 'XXXX' | dd of=src/blob.bin bs=1 seek=1000 conv=notrunc 2>/dev/null"},
	{"rename lower dir with mv", "mv src/deep src/moved"},
	{"rename lower dir with rename(2)", `python3 -c "import os
try: os.rename('tree/a', 'tree/z')
except OSError: pass"`},
}

// cleanCases are the conformance cases after which the workspace has
// nothing to commit, given its merged view: a copy-up that changes no
// metadata, and a rename(2) of a lower directory the kernel refused
// (EXDEV without redirect_dir, as rootless).
var cleanCases = map[string]func(merged string) bool{
	"copied up unchanged": func(string) bool { return true },
	"rename lower dir with rename(2)": func(merged string) bool {
		_, err := os.Lstat(filepath.Join(merged, "tree/z"))
		return os.IsNotExist(err)
	},
}

// TestCommitConformance: each kind of change, made in a real workspace,
// committed, exported: the export equals the merged view byte for byte and
// in metadata; and `diff --patch` applied with git apply to an export of
// the parent reproduces the commit's files.
func TestCommitConformance(t *testing.T) {
	parallel(t)
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "proj")
	baseTree(t, src)
	h.ok("import", src)
	parent := filepath.Join(t.TempDir(), "parent")
	h.ok("export", "main", parent)
	for i, tc := range conformanceCases {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("c%02d", i)
			h.ok("ws", "create", name)
			defer h.run("ws", "rm", "--force", name)
			h.ok("exec", name, "--sandbox", "none", "--", "/bin/sh", "-ec", tc.script)
			merged := strings.TrimSpace(h.ok("ws", "path", name).stdout)
			var cr struct {
				Commit string `json:"commit"`
				Parent string `json:"parent"`
				Clean  bool   `json:"clean"`
			}
			h.okJSON(&cr, "commit", name, "-m", tc.name)
			// A change makes a new commit on the workspace's branch, a
			// child of main's head; no change leaves the branch there.
			var head, base struct {
				Commit struct {
					ID      string   `json:"id"`
					Parents []string `json:"parents"`
					Message string   `json:"message"`
				} `json:"commit"`
			}
			h.okJSON(&head, "show", "ws/"+name)
			h.okJSON(&base, "show", "main")
			if clean := cleanCases[tc.name]; clean != nil && clean(merged) {
				if !cr.Clean || cr.Commit != base.Commit.ID || head.Commit.ID != base.Commit.ID {
					t.Errorf("commit: %+v; ws/%s is at %s; want clean, at main's head %s", cr, name, head.Commit.ID, base.Commit.ID)
				}
			} else if cr.Clean || cr.Commit != head.Commit.ID || cr.Parent != base.Commit.ID ||
				!slices.Equal(head.Commit.Parents, []string{base.Commit.ID}) || head.Commit.Message != tc.name {
				t.Errorf("commit: %+v; ws/%s is %+v; want a new commit %q on main's head %s", cr, name, head.Commit, tc.name, base.Commit.ID)
			}
			out := filepath.Join(t.TempDir(), "export")
			h.ok("export", "ws/"+name, out)
			opts := []snapshottest.Option{snapshottest.Owner(os.Geteuid() == 0)}
			if tc.name == "new hardlink" && os.Geteuid() != 0 {
				// Rootless, the kernel shows a new link to a copied-up lower
				// file with two inode numbers (the origin's for the old
				// name, the upper's for the new one), though both names are
				// one inode in the upper: docs/overlayfs.md. The commit
				// records the link; check that directly.
				opts = append(opts, snapshottest.Ignore(func(rel string) bool { return strings.HasPrefix(rel, "src/deep/er/file") }))
				var a, b syscall.Stat_t
				syscall.Lstat(filepath.Join(out, "src/deep/er/file"), &a)
				syscall.Lstat(filepath.Join(out, "src/deep/er/file-link"), &b)
				if a.Ino != b.Ino {
					t.Errorf("the new hardlink is not a hardlink in the commit")
				}
			}
			snapshottest.CompareTrees(t, merged, out, opts...)
			if r := h.ok("diff", name, "--stat"); strings.TrimSpace(r.stdout) != "" {
				t.Errorf("workspace not clean after commit:\n%s", r.stdout)
			}
			// The patch of the commit, applied to the parent with git.
			patch := h.ok("diff", "main..ws/"+name, "--patch").stdout
			applied := filepath.Join(t.TempDir(), "applied")
			sh(t, "", fmt.Sprintf("cp -a %q %q", parent, applied))
			if strings.TrimSpace(patch) != "" {
				cmd := exec.Command("git", "apply", "--whitespace=nowarn", "-")
				cmd.Dir = applied
				cmd.Stdin = strings.NewReader(patch)
				if b, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("git apply of diff --patch: %v\n%s\npatch:\n%s", err, b, patch)
				}
			}
			compareGitContent(t, out, applied)
		})
	}
}

// compareGitContent compares what git tracks: regular files (bytes and the
// executable bit) and symlinks (targets). Directories, FIFOs, mtimes and
// xattrs are outside a patch.
func compareGitContent(t testing.TB, want, got string) {
	t.Helper()
	collect := func(root string) map[string]string {
		m := map[string]string{}
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || p == root {
				return nil
			}
			rel, _ := filepath.Rel(root, p)
			fi, err := os.Lstat(p)
			if err != nil {
				return nil
			}
			switch {
			case fi.Mode()&fs.ModeSymlink != 0:
				l, _ := os.Readlink(p)
				m[rel] = "link:" + l
			case fi.Mode().IsRegular():
				b, _ := os.ReadFile(p)
				m[rel] = fmt.Sprintf("file:%t:%x", fi.Mode()&0o111 != 0, b)
			}
			return nil
		})
		return m
	}
	a, b := collect(want), collect(got)
	for k, v := range a {
		if b[k] != v {
			t.Errorf("after git apply: %q differs from the commit (want %.40s, got %.40s)", k, v, b[k])
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			t.Errorf("after git apply: %q exists but not in the commit", k)
		}
	}
}

// TestConcurrentCommit: two workspaces on one branch commit at once: one
// wins, the other gets exit 3 and keeps its changes.
func TestConcurrentCommit(t *testing.T) {
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "proj")
	baseTree(t, src)
	h.ok("import", src)
	h.ok("ws", "create", "a")
	h.ok("ws", "create", "b", "--branch", "ws/a")
	defer h.run("ws", "rm", "--force", "a", "b")
	h.ok("exec", "a", "--", "sh", "-c", "echo from-a > a.txt")
	h.ok("exec", "b", "--", "sh", "-c", "echo from-b > b.txt")
	var wg sync.WaitGroup
	res := make([]result, 2)
	for i, name := range []string{"a", "b"} {
		wg.Add(1)
		go func(i int, name string) {
			defer wg.Done()
			res[i] = h.run("commit", name)
		}(i, name)
	}
	wg.Wait()
	codes := []int{res[0].code, res[1].code}
	if !(codes[0] == 0 && codes[1] == 3 || codes[0] == 3 && codes[1] == 0) {
		t.Fatalf("concurrent commits: exit codes %v; want one 0 and one 3\n%s\n%s", codes, res[0], res[1])
	}
	loser := "a"
	if codes[1] == 3 {
		loser = "b"
	}
	if !strings.Contains(res[map[string]int{"a": 0, "b": 1}[loser]].stderr, "moved") {
		t.Errorf("the losing commit does not say the branch moved")
	}
	ns := h.ok("diff", loser, "--name-status").stdout
	if !strings.Contains(ns, loser+".txt") {
		t.Errorf("the losing workspace lost its change; diff --name-status:\n%s", ns)
	}
	h.fsckClean()
}

// TestApplyHostile: apply never writes outside the target: a committed
// symlink to /etc/passwd is written as a symlink, and a symlink planted in
// the target is not followed.
func TestApplyHostile(t *testing.T) {
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "proj")
	baseTree(t, src)
	h.ok("import", src)
	h.ok("ws", "create", "w")
	defer h.run("ws", "rm", "--force", "w")
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.MkdirAll(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(victim, "app.txt"), []byte("precious\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.ok("exec", "w", "--", "sh", "-c", "ln -s /etc/passwd pw && echo 'line 4' >> src/app.txt && echo evil > docs/new")
	h.ok("commit", "w")

	// A clean target: the symlink is written as a symlink.
	target := filepath.Join(t.TempDir(), "repo")
	h.ok("export", "main", target)
	before, _ := os.ReadFile("/etc/passwd")
	h.ok("apply", "w", "--to", target)
	if l, err := os.Readlink(filepath.Join(target, "pw")); err != nil || l != "/etc/passwd" {
		t.Errorf("pw = %q, %v; want a symlink to /etc/passwd", l, err)
	}
	if after, _ := os.ReadFile("/etc/passwd"); !bytes.Equal(before, after) {
		t.Fatal("/etc/passwd changed")
	}

	// A target whose src is a symlink planted by someone else: refused,
	// nothing written through it.
	planted := filepath.Join(t.TempDir(), "planted")
	h.ok("export", "main", planted)
	os.RemoveAll(filepath.Join(planted, "src"))
	if err := os.Symlink(victim, filepath.Join(planted, "src")); err != nil {
		t.Fatal(err)
	}
	r := h.run("apply", "w", "--to", planted)
	if r.code == 0 {
		t.Errorf("apply through a planted symlink succeeded:\n%s", r)
	}
	r = h.run("apply", "w", "--to", planted, "--force")
	if b, _ := os.ReadFile(filepath.Join(victim, "app.txt")); string(b) != "precious\n" {
		t.Fatalf("apply wrote through a symlink out of the target: victim reads %q (%s)", b, r)
	}

	// A target the user changed: refused with exit 3, then --force.
	edited := filepath.Join(t.TempDir(), "edited")
	h.ok("export", "main", edited)
	os.WriteFile(filepath.Join(edited, "src", "app.txt"), []byte("user's own edit\n"), 0o644)
	r = h.fails(3, "apply", "w", "--to", edited)
	if !strings.Contains(r.stderr, "src/app.txt") {
		t.Errorf("refusal does not name the file:\n%s", r.stderr)
	}
	if _, err := os.Lstat(filepath.Join(edited, "pw")); !os.IsNotExist(err) {
		t.Errorf("a refused apply wrote something")
	}
	h.ok("apply", "w", "--to", edited, "--force")
}

// TestCommitOddFiles: a 2 GB file, a FIFO and a socket in the upper.
func TestCommitOddFiles(t *testing.T) {
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "proj")
	baseTree(t, src)
	h.ok("import", src)
	h.ok("ws", "create", "w")
	defer h.run("ws", "rm", "--force", "w")
	// A 2 GiB file (sparse: the disk holds none of it; the store reads
	// and chunks all of it, and deduplicates the zeros).
	h.ok("exec", "w", "--", "sh", "-c", "truncate -s 2G huge && printf tail >> huge && mkfifo fifo")
	h.ok("exec", "w", "--", "/usr/bin/python3", "-c", "import socket; s=socket.socket(socket.AF_UNIX); s.bind('sock')")
	var cr struct {
		Commit   string `json:"commit"`
		NewBytes int64  `json:"new_bytes"`
	}
	r := h.ok("--json", "commit", "w")
	if err := json.Unmarshal([]byte(r.stdout), &cr); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.stderr, "sock") {
		t.Errorf("the socket was skipped without a warning naming it:\n%s", r.stderr)
	}
	if cr.NewBytes > 64<<20 {
		t.Errorf("2 GiB of zeros stored as %d bytes", cr.NewBytes)
	}
	var e struct {
		Path  string `json:"path"`
		Entry struct {
			Size int64  `json:"size"`
			Type string `json:"type"`
		} `json:"entry"`
	}
	h.okJSON(&e, "show", "ws/w:huge")
	if e.Path != "huge" || e.Entry.Type != "file" || e.Entry.Size != 2<<30+4 {
		t.Errorf("show ws/w:huge: %+v; want a file of %d bytes", e, int64(2<<30)+4)
	}
	list := h.ok("--json", "show", "ws/w:").stdout
	if !strings.Contains(list, `"name":"fifo","type":"fifo"`) {
		t.Errorf("the FIFO is not in the commit:\n%s", list)
	}
	if strings.Contains(list, `"name":"sock"`) {
		t.Errorf("the socket is in the commit")
	}
}

// TestPromote: fast-forward, merge with a line-level text merge, and a
// conflict that changes nothing (exit 3).
func TestPromote(t *testing.T) {
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "proj")
	baseTree(t, src)
	if err := os.WriteFile(filepath.Join(src, "shared.txt"), []byte("1\n2\n3\n4\n5\n6\n7\n8\n9\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.ok("import", src)
	for _, n := range []string{"a", "b", "c"} {
		h.ok("ws", "create", n)
		defer h.run("ws", "rm", "--force", n)
	}
	h.ok("exec", "a", "--", "sh", "-c", "sed -i 's/^1$/one/' shared.txt && echo a > a.txt")
	h.ok("commit", "a")
	var p struct {
		How    string `json:"how"`
		Commit string `json:"commit"`
	}
	h.okJSON(&p, "promote", "a")
	if p.How != "fast-forward" {
		t.Errorf("first promote: %s; want fast-forward", p.How)
	}
	h.ok("exec", "b", "--", "sh", "-c", "sed -i 's/^9$/nine/' shared.txt && echo b > b.txt")
	h.ok("commit", "b")
	h.okJSON(&p, "promote", "b")
	if p.How != "merge" {
		t.Errorf("second promote: %s; want merge", p.How)
	}
	if got := h.ok("show", "main:shared.txt").stdout; got != "one\n2\n3\n4\n5\n6\n7\n8\nnine\n" {
		t.Errorf("merged shared.txt = %q", got)
	}
	mainBefore := h.ok("log", "-n", "1").stdout
	h.ok("exec", "c", "--", "sh", "-c", "sed -i 's/^1$/uno/' shared.txt")
	h.ok("commit", "c")
	cBefore := h.ok("log", "ws/c", "-n", "1").stdout
	r := h.fails(3, "promote", "c")
	if !strings.Contains(r.stderr, "shared.txt") {
		t.Errorf("conflict does not list shared.txt:\n%s", r.stderr)
	}
	if h.ok("log", "-n", "1").stdout != mainBefore || h.ok("log", "ws/c", "-n", "1").stdout != cBefore {
		t.Errorf("a conflicting promote changed a branch")
	}
	h.fsckClean()
}

// TestResetCheckpoint: checkpoints are commits; reset to one rolls back.
func TestResetCheckpoint(t *testing.T) {
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "proj")
	baseTree(t, src)
	h.ok("import", src)
	h.ok("ws", "create", "w")
	defer h.run("ws", "rm", "--force", "w")
	h.ok("exec", "w", "--", "sh", "-c", "echo 1 > step")
	var cp struct {
		Commit string `json:"commit"`
	}
	h.okJSON(&cp, "commit", "w", "-m", "checkpoint 1")
	h.ok("exec", "w", "--", "sh", "-c", "echo 2 > step && rm -rf src")
	h.ok("commit", "w", "-m", "checkpoint 2")
	h.ok("exec", "w", "--", "sh", "-c", "echo uncommitted > junk")
	h.ok("reset", "w")
	h.ok("exec", "w", "--", "test", "!", "-e", "junk")
	h.ok("reset", "w", cp.Commit)
	if got := h.ok("exec", "w", "--", "cat", "step").stdout; got != "1\n" {
		t.Errorf("after reset to checkpoint 1: step = %q", got)
	}
	h.ok("exec", "w", "--", "test", "-f", "src/app.txt")
	if r := h.ok("diff", "w", "--stat"); strings.TrimSpace(r.stdout) != "" {
		t.Errorf("not clean after reset:\n%s", r.stdout)
	}
}
