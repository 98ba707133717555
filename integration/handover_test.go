//go:build integration

package integration

import (
	"bytes"
	"debug/buildinfo"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCoreHandsOverToFull (both passes): the strata-core `make build`
// builds (the strata_lean tag) links no go-git and no registry client and
// hands import --git, export-git, push and pull to strata-full beside it.
// Without strata-full each of them fails before it changes anything, exit
// 1, kind unsupported, naming strata-full and how to install it; with it,
// they work as one command. A strata-core built without the tag (make
// cover's) needs no strata-full: the same command lines work without it.
func TestCoreHandsOverToFull(t *testing.T) {
	parallel(t)
	src := filepath.Dir(bin(t))
	info, err := buildinfo.ReadFile(filepath.Join(src, "strata-core"))
	if err != nil {
		t.Fatal(err)
	}
	lean := false
	for _, s := range info.Settings {
		if s.Key == "-tags" && strings.Contains(","+s.Value+",", ",strata_lean,") {
			lean = true
		}
	}
	// The binaries without strata-full, where this user can run them.
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	install := func(name string) {
		in, err := os.Open(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		out, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, in); err != nil {
			t.Fatal(err)
		}
		if err := out.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"strata", "strata-core", "strata-init"} {
		install(name)
	}
	store := filepath.Join(t.TempDir(), "store")
	run := func(args ...string) result {
		t.Helper()
		cmd := exec.Command(filepath.Join(dir, "strata"), append([]string{"--home", store}, args...)...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		r := result{stdout: out.String(), stderr: errb.String()}
		if ee, ok := err.(*exec.ExitError); ok {
			r.code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("strata %s: %v", strings.Join(args, " "), err)
		}
		return r
	}
	repo := gitRepo(t)
	if r := run("init"); r.code != 0 {
		t.Fatalf("init: %s", r)
	}
	if r := run("import", repo, "-b", "plain"); r.code != 0 {
		t.Fatalf("import of a directory: %s", r)
	}
	oci := filepath.Join(t.TempDir(), "oci")
	verbs := [][]string{
		{"import", "--git", repo, "-b", "g"},
		{"export-git", "g", "--branch", "from-strata"},
		{"push", "plain", "oci:" + oci},
		{"pull", "oci:" + oci, "-b", "pulled"},
	}
	if !lean {
		t.Logf("strata-core in %s is built without strata_lean: it needs no strata-full", src)
		if r := run(verbs[0]...); r.code != 0 {
			t.Fatalf("a full strata-core's import --git: %s", r)
		}
		return
	}

	branches := run("branch", "list").stdout
	for _, v := range verbs {
		r := run(v...)
		if r.code != 1 || !strings.Contains(r.stderr, "strata-full is not beside it in "+dir) || !strings.Contains(r.stderr, "go install github.com/stratafs/strata/cmd/...@latest") {
			t.Errorf("strata %s without strata-full: want exit 1 naming strata-full and the install; got %s", strings.Join(v, " "), r)
		}
		if r := run(append([]string{"--json"}, v...)...); r.code != 1 || !strings.Contains(r.stderr, `"kind":"unsupported"`) {
			t.Errorf("strata --json %s without strata-full: %s", strings.Join(v, " "), r)
		}
	}
	if got := run("branch", "list").stdout; got != branches {
		t.Errorf("the refused commands changed the branches:\n%s\nafter:\n%s", branches, got)
	}
	if _, err := os.Stat(oci); err == nil {
		t.Errorf("a refused push made %s", oci)
	}
	if out, err := exec.Command("git", "-C", repo, "branch", "--list", "from-strata").Output(); err != nil || len(out) != 0 {
		t.Errorf("a refused export-git made a branch: %q %v", out, err)
	}

	// With strata-full beside it, the same command lines work.
	install("strata-full")
	for _, v := range verbs {
		if r := run(v...); r.code != 0 {
			t.Errorf("strata %s with strata-full: %s", strings.Join(v, " "), r)
		}
	}
	if out, err := exec.Command("git", "-C", repo, "branch", "--list", "from-strata").Output(); err != nil || !strings.Contains(string(out), "from-strata") {
		t.Errorf("export-git through strata-full made no branch: %q %v", out, err)
	}
}
