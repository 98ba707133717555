package gogit

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stratafs/strata/internal/testutil"
	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
	"github.com/stratafs/strata/worktree"
)

// TestMain isolates git (ours and go-git's) from the user's and the
// system's configuration.
func TestMain(m *testing.M) {
	home, err := os.MkdirTemp("", "worktree-home-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := os.Chmod(home, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("HOME", home)
	os.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	os.Unsetenv("XDG_CONFIG_HOME")
	for _, k := range []string{"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES"} {
		os.Unsetenv(k)
	}
	code := m.Run()
	os.RemoveAll(home)
	os.Exit(code)
}

func requireGit(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		testutil.Skip(t, "git(1) is not installed")
	}
}

// gitEnv fixes identities and dates so that commits are reproducible.
func gitEnv(date string) []string {
	if date == "" {
		date = "2021-03-04T05:06:07Z"
	}
	return append(os.Environ(),
		"GIT_AUTHOR_NAME=Ada", "GIT_AUTHOR_EMAIL=ada@example.com",
		"GIT_COMMITTER_NAME=Ada", "GIT_COMMITTER_EMAIL=ada@example.com",
		"GIT_AUTHOR_DATE="+date, "GIT_COMMITTER_DATE="+date,
	)
}

// git runs git in dir and returns its stdout; failure fails t.
func git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	out, err := gitErr(dir, "", args...)
	if err != nil {
		t.Fatalf("git %s: %v", strings.Join(args, " "), err)
	}
	return out
}

func gitAt(t testing.TB, dir, date string, args ...string) string {
	t.Helper()
	out, err := gitErr(dir, date, args...)
	if err != nil {
		t.Fatalf("git %s: %v", strings.Join(args, " "), err)
	}
	return out
}

func gitErr(dir, date string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = gitEnv(date)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%w: %s", err, stderr.String())
	}
	return stdout.String(), nil
}

func writeFile(t testing.TB, p, data string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func symlink(t testing.TB, target, p string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	os.Remove(p)
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

// testRepo is a repository with history, branches, tags and ignored
// directories in its working copy.
type testRepo struct {
	dir            string
	c1, c2, c3, c4 string // main: c1, c2, c4 (HEAD); feature: c1, c3
}

// newTestRepo builds it. Commit c2 of main: modified, deleted, added
// files, a mode change, a retargeted symlink; feature (c3) branches from
// c1. The working copy holds ignored node_modules (with a hardlink and a
// symlink), .venv (pyvenv.cfg), env without pyvenv.cfg, dist,
// packages/p1/node_modules, and scratch/node_modules in an untracked
// directory.
func newTestRepo(t testing.TB) *testRepo {
	t.Helper()
	requireGit(t)
	dir := filepath.Join(t.TempDir(), "repo")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r := &testRepo{dir: dir}
	git(t, dir, "init", "-q", "-b", "main")
	git(t, dir, "config", "user.name", "Repo User")
	git(t, dir, "config", "user.email", "repo@example.com")
	w := func(p, data string, mode os.FileMode) { writeFile(t, filepath.Join(dir, p), data, mode) }
	w(".gitignore", "node_modules/\ndist/\n.venv/\nenv/\n*.log\n", 0o644)
	w("README.md", "# demo\n", 0o644)
	w("src/main.go", "package main\n\nfunc main() {}\n", 0o644)
	w("src/util.go", "package main\n", 0o644)
	w("bin/run.sh", "#!/bin/sh\necho run\n", 0o755)
	w("bin/tool", "#!/bin/sh\n", 0o644)
	w("dir with space/file with spaces.txt", "spaces\n", 0o644)
	w("weird\nname.txt", "newline in the name\n", 0o644)
	w("empty", "", 0o644)
	w("docs/big.bin", strings.Repeat("0123456789abcdef", 8<<10), 0o644) // 128 KiB: chunked
	w("dup1.txt", "same\n", 0o644)
	w("dup2.txt", "same\n", 0o644)
	symlink(t, "README.md", filepath.Join(dir, "link"))
	symlink(t, "../src", filepath.Join(dir, "docs/src-link"))
	git(t, dir, "add", "-A")
	gitAt(t, dir, "2020-01-02T03:04:05Z", "commit", "-q", "-m", "one")
	r.c1 = strings.TrimSpace(git(t, dir, "rev-parse", "HEAD"))
	gitAt(t, dir, "2020-01-02T03:04:05Z", "tag", "-a", "-m", "version 1", "v1")
	git(t, dir, "tag", "light")

	git(t, dir, "checkout", "-q", "-b", "feature")
	w("feature.txt", "feature work\n", 0o644)
	git(t, dir, "add", "-A")
	gitAt(t, dir, "2020-02-03T04:05:06Z", "commit", "-q", "-m", "feature")
	r.c3 = strings.TrimSpace(git(t, dir, "rev-parse", "HEAD"))
	git(t, dir, "checkout", "-q", "main")

	w("README.md", "# demo\n\nmore\n", 0o644)
	os.Remove(filepath.Join(dir, "src/util.go"))
	w("src/new.go", "package main\n\nvar x = 1\n", 0o644)
	if err := os.Chmod(filepath.Join(dir, "bin/tool"), 0o755); err != nil {
		t.Fatal(err)
	}
	symlink(t, "src/main.go", filepath.Join(dir, "link"))
	w("packages/p1/package.json", "{}\n", 0o644)
	git(t, dir, "add", "-A")
	gitAt(t, dir, "2020-03-04T05:06:07Z", "commit", "-q", "-m", "two")
	r.c2 = strings.TrimSpace(git(t, dir, "rev-parse", "HEAD"))

	w("CHANGELOG", "two\n", 0o644)
	git(t, dir, "add", "-A")
	gitAt(t, dir, "2020-04-05T06:07:08Z", "commit", "-q", "-m", "three")
	r.c4 = strings.TrimSpace(git(t, dir, "rev-parse", "HEAD"))

	// The working copy's ignored directories.
	w("node_modules/a/index.js", "module.exports = 1\n", 0o644)
	w("node_modules/a/package.json", `{"name":"a"}`+"\n", 0o644)
	w("node_modules/b/package.json", `{"name":"b"}`+"\n", 0o644)
	w("node_modules/.bin/a", "#!/bin/sh\n", 0o755)
	symlink(t, "../a/index.js", filepath.Join(dir, "node_modules/.bin/a-link"))
	if err := os.Link(filepath.Join(dir, "node_modules/a/index.js"), filepath.Join(dir, "node_modules/b/index.js")); err != nil {
		t.Fatal(err)
	}
	w(".venv/pyvenv.cfg", "home = /usr/bin\n", 0o644)
	w(".venv/lib/site.py", "x = 1\n", 0o644)
	w("env/notes.txt", "not a virtualenv\n", 0o644)
	w("dist/out.js", "built\n", 0o644)
	w("debug.log", "log\n", 0o644)
	w("packages/p1/node_modules/m/index.js", "m\n", 0o644)
	w("scratch/node_modules/s.js", "s\n", 0o644)
	w("untracked.txt", "untracked\n", 0o644)
	return r
}

func openStore(t testing.TB) *store.Store {
	t.Helper()
	s, err := store.Open(t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

var refSeq atomic.Int64

// snap runs Snapshot and commits its tree on a fresh branch.
func snap(t testing.TB, s *store.Store, arg string, opts worktree.SnapshotOptions) *worktree.SnapshotResult {
	t.Helper()
	res, err := snapErr(t, s, arg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func snapErr(t testing.TB, s *store.Store, arg string, opts worktree.SnapshotOptions) (*worktree.SnapshotResult, error) {
	t.Helper()
	ctx := context.Background()
	w, err := s.NewWriter(ctx, "test "+arg)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	res, err := Snapshot(ctx, s, w, arg, opts)
	if err != nil {
		return nil, err
	}
	err = w.Finish(func(tx *store.Tx) error {
		c, err := tx.PutCommit(&store.Commit{Tree: res.Tree, TimeNs: 1, Source: "git:" + arg, Stats: res.Stats})
		if err != nil {
			return err
		}
		return tx.SetRef(fmt.Sprintf("test-%d", refSeq.Add(1)), store.ZeroID, c)
	})
	if err != nil {
		t.Fatal(err)
	}
	return res, nil
}

// materialize writes tree into a new directory and returns it.
func materialize(t testing.TB, s *store.Store, tree store.ID) string {
	t.Helper()
	d := filepath.Join(t.TempDir(), "m")
	if err := snapshot.Materialize(context.Background(), s, tree, d, snapshot.MaterializeOptions{Chown: os.Geteuid() == 0}); err != nil {
		t.Fatal(err)
	}
	return d
}

// useRealObjects points a materialized synthetic .git at the source's
// objects directory, as the keeper's bind mount would.
func useRealObjects(t testing.TB, d, gitDir string) {
	t.Helper()
	objects, err := worktree.ObjectsDir(gitDir)
	if err != nil {
		t.Fatal(err)
	}
	alt := filepath.Join(d, ".git/objects/info/alternates")
	b, err := os.ReadFile(alt)
	if err != nil {
		t.Fatal(err)
	}
	want := worktree.AlternatesPath(objects) + "\n"
	if !strings.HasPrefix(string(b), want) {
		t.Fatalf("alternates = %q, want it to start with %q", b, want)
	}
	if err := os.WriteFile(alt, []byte(objects+"\n"+string(b[len(want):])), 0o644); err != nil {
		t.Fatal(err)
	}
}

// runAsUser runs the tests matching pattern in a copy of this test binary
// as the unprivileged user strata-test (uid 1000 if there is none), when
// we are root. It reports whether it ran them (false: not root).
func runAsUser(t *testing.T, pattern string) bool {
	t.Helper()
	if os.Geteuid() != 0 {
		return false
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		testutil.Skip(t, "running as root and setpriv(1) is missing: cannot drop privileges")
		return true
	}
	uid, gid := "1000", "1000"
	if u, err := user.Lookup("strata-test"); err == nil {
		uid, gid = u.Uid, u.Gid
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp("", "worktree-asuser-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	if err := os.Chmod(tmp, 0o777); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(tmp, "worktree.test")
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(setpriv, "--reuid="+uid, "--regid="+gid, "--clear-groups", "--",
		bin, "-test.run", pattern, "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("as uid %s: %v\n%s", uid, err, out)
	}
	if !strings.Contains(string(out), "--- PASS") || strings.Contains(string(out), "--- SKIP") {
		t.Fatalf("as uid %s: tests did not all run:\n%s", uid, out)
	}
	t.Logf("as uid %s:\n%s", uid, out)
	return true
}
