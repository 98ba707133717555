//go:build integration

package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runResult mirrors the fields of `strata run --json` the tests read.
type runResult struct {
	ID       string `json:"id"`
	ExitCode int    `json:"exit_code"`
	TimedOut bool   `json:"timed_out"`
	Commit   string `json:"commit"`
	Branch   string `json:"branch"`
	Work     string `json:"workspace"`
	Diff     struct {
		Files int      `json:"files"`
		Added int      `json:"insertions"`
		Paths []string `json:"paths"`
	} `json:"diff"`
	Violations []struct{ Path, Reason string } `json:"policy_violations"`
	Durations  map[string]int64                `json:"durations_ns"`
}

func decodeRun(t testing.TB, r result) runResult {
	t.Helper()
	var rr runResult
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &rr); err != nil {
		t.Fatalf("run --json output %q: %v\n%s", r.stdout, err, r)
	}
	return rr
}

// patchFor makes a git patch that replaces from with to in dir/rel, the
// way an agent's change arrives: git diff in a repository.
func patchFor(t testing.TB, dir, rel, from, to string) string {
	t.Helper()
	old, err := os.ReadFile(filepath.Join(dir, rel))
	if err != nil {
		t.Fatal(err)
	}
	repo := t.TempDir()
	os.MkdirAll(filepath.Join(repo, filepath.Dir(rel)), 0o755)
	os.WriteFile(filepath.Join(repo, rel), old, 0o644)
	sh(t, repo, "git init -q . && git add -A && git -c user.name=t -c user.email=t@example.invalid commit -qm base")
	os.WriteFile(filepath.Join(repo, rel), []byte(strings.Replace(string(old), from, to, 1)), 0o644)
	out := sh(t, repo, "git diff")
	if out == "" {
		t.Fatalf("empty patch for %s", rel)
	}
	p := filepath.Join(t.TempDir(), "change.patch")
	os.WriteFile(p, []byte(out), 0o644)
	return p
}

// TestRun: fork, patch, run, discard; commit only on success; keep; the
// result object; output files.
func TestRun(t *testing.T) {
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "proj")
	baseTree(t, src)
	h.ok("import", src)

	// Discard (default): nothing remains, main does not move.
	r := h.ok("--json", "run", "--", "sh", "-c", "echo gone > src/app.txt")
	rr := decodeRun(t, r)
	if rr.Diff.Files != 1 || rr.ExitCode != 0 {
		t.Errorf("run result: %+v", rr)
	}
	if got := h.ok("show", "main:src/app.txt").stdout; got != "line 1\nline 2\nline 3\n" {
		t.Errorf("a discarded run changed main: %q", got)
	}

	// A patch that applies, a command that sees it.
	patch := patchFor(t, src, "src/app.txt", "line 2", "line two")
	r = h.ok("--json", "run", "--patch", patch, "--", "grep", "-q", "line two", "src/app.txt")
	if rr = decodeRun(t, r); rr.Diff.Files != 1 || rr.Diff.Added != 1 {
		t.Errorf("patched run: %+v", rr)
	}

	// A patch that does not apply: exit 1 naming the hunk.
	bad := patchFor(t, src, "src/app.txt", "line 3", "line three")
	os.WriteFile(filepath.Join(src, "src", "app.txt"), []byte("changed meanwhile\n"), 0o644)
	h.ok("import", src, "-b", "moved")
	r = h.fails(1, "run", "--from", "moved", "--patch", bad, "--", "true")
	if !strings.Contains(r.stderr, "does not apply") || !strings.Contains(r.stderr, "@@") {
		t.Errorf("a patch that does not apply: want the failing hunk, got:\n%s", r.stderr)
	}

	// --commit: only when the command exits 0.
	h.fails(3, "run", "--commit", "results/a", "--", "sh", "-c", "echo x > fail.txt; exit 3")
	h.fails(1, "log", "results/a")
	r = h.ok("--json", "run", "--patch", patch, "--commit", "results/a", "--", "true")
	if rr = decodeRun(t, r); rr.Commit == "" || rr.Branch != "results/a" {
		t.Fatalf("commit run: %+v", rr)
	}
	if got := h.ok("show", "results/a:src/app.txt").stdout; !strings.Contains(got, "line two") {
		t.Errorf("committed run: %q", got)
	}

	// --keep: the workspace stays, whatever the outcome.
	r = h.fails(5, "--json", "run", "--keep", "--", "sh", "-c", "echo kept > k.txt; exit 5")
	rr = decodeRun(t, r)
	if rr.Work == "" {
		t.Fatalf("--keep named no workspace: %+v", rr)
	}
	if got := h.ok("exec", rr.Work, "--", "cat", "k.txt").stdout; got != "kept\n" {
		t.Errorf("kept workspace reads %q", got)
	}
	// A kept run leaves the runs directory, which later runs sweep.
	if left := runDirs(t, h); len(left) != 0 {
		t.Errorf("a kept run is still among the runs (swept once stale): %v", left)
	}
	h.ok("ws", "rm", "--force", rr.Work)

	// --output keeps stdout, stderr and the result.
	out := filepath.Join(t.TempDir(), "out")
	h.ok("run", "--output", out, "--", "sh", "-c", "echo to-out; echo to-err >&2")
	for f, want := range map[string]string{"stdout": "to-out\n", "stderr": "to-err\n"} {
		if b, _ := os.ReadFile(filepath.Join(out, f)); string(b) != want {
			t.Errorf("--output %s = %q", f, b)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "result.json")); err != nil {
		t.Errorf("--output: no result.json: %v", err)
	}
	h.fsckClean()
}

// TestRunPolicy: protected paths, setuid bits and symlinks out of the tree
// are refused before a commit lands, with the paths in the result.
func TestRunPolicy(t *testing.T) {
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "proj")
	baseTree(t, src)
	h.ok("import", src)
	for _, tc := range []struct {
		script, path string
		protect      []string
	}{
		{"mkdir -p .github/workflows && echo evil > .github/workflows/ci.yml", ".github/workflows/ci.yml", []string{".github/workflows/**"}},
		{"echo hook > docs/readme", "docs/readme", []string{"docs/*"}},
		{"cp src/run.sh suid && chmod 4755 suid", "suid", nil},
		{"ln -s /etc/shadow shadow", "shadow", nil},
		{"ln -s ../../../outside src/deep/up", "src/deep/up", nil},
	} {
		args := []string{"--json", "run", "--commit", "guarded"}
		for _, p := range tc.protect {
			args = append(args, "--protect", p)
		}
		args = append(args, "--", "sh", "-c", tc.script)
		r := h.run(args...)
		if r.code != 1 {
			t.Errorf("%q: exit %d; want 1 (policy)\n%s", tc.script, r.code, r)
			continue
		}
		rr := decodeRun(t, r)
		found := false
		for _, v := range rr.Violations {
			found = found || v.Path == tc.path
		}
		if !found {
			t.Errorf("%q: violations %+v do not name %s", tc.script, rr.Violations, tc.path)
		}
		if rr.Commit != "" {
			t.Errorf("%q: committed despite the policy", tc.script)
		}
	}
	h.fails(1, "log", "guarded")
}

// TestRunTimeout: the whole PID namespace is killed; nothing survives.
func TestRunTimeout(t *testing.T) {
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "proj")
	baseTree(t, src)
	h.ok("import", src)
	marker := "strata-it-timeout-" + strconv.Itoa(os.Getpid())
	r := h.fails(124, "--json", "run", "--timeout", "500ms", "--", "bash", "-c",
		"(exec -a "+marker+" sleep 1000) & setsid -f bash -c 'exec -a "+marker+" sleep 1000' </dev/null >/dev/null 2>&1; sleep 1000")
	if rr := decodeRun(t, r); !rr.TimedOut {
		t.Errorf("timed_out is false: %+v", rr)
	}
	waitNoProcs(t, marker)
}

// TestRunKilled: a run killed with SIGKILL leaves nothing that the next run
// or gc does not clean: no process, no run directory.
func TestRunKilled(t *testing.T) {
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "proj")
	baseTree(t, src)
	h.ok("import", src)
	killRun(t, h, "strata-it-killed-"+strconv.Itoa(os.Getpid()), nil, "")
	// The next run cleans the killed run's directory.
	h.ok("run", "--", "true")
	if left := runDirs(t, h); len(left) != 0 {
		t.Errorf("after the next run, left behind: %v", left)
	}
	h.ok("gc")
	h.fsckClean()

	// A run killed in a store that is then deleted: its tmpfs directory
	// would stay in memory until reboot; any other store's gc sweeps it
	// (and its runs, at most once a minute).
	other := newHome(t)
	other.ok("import", src)
	killRun(t, other, "strata-it-killed-other-"+strconv.Itoa(os.Getpid()), nil, "")
	orphans := runDirs(t, other)
	if err := os.RemoveAll(other.dir); err != nil {
		t.Fatal(err)
	}
	h.ok("gc")
	for _, d := range orphans {
		if _, err := os.Lstat(d); err == nil {
			t.Errorf("the killed run of a deleted store is still there: %s", d)
		}
	}

	// A deleted store's kept tmpfs workspace and its tmpfs directory: gc
	// of any other store removes them (after two quiet seconds).
	third := newHome(t)
	third.ok("import", src)
	third.ok("ws", "create", "--tmpfs", "kept")
	third.ok("exec", "kept", "--", "sh", "-c", "head -c 1048576 /dev/zero > big")
	third.ok("ws", "stop", "kept")
	tdir := tmpfsDir(third)
	if _, err := os.Stat(filepath.Join(tdir, "kept", "upper", "big")); err != nil {
		t.Fatalf("the tmpfs workspace's upper is not where the test expects it: %v", err)
	}
	if err := os.RemoveAll(third.dir); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2100 * time.Millisecond)
	h.ok("gc")
	if _, err := os.Lstat(tdir); !os.IsNotExist(err) {
		t.Errorf("the tmpfs directory of a deleted store is still there: %s (%v)", tdir, err)
	}
}

// killRun starts a run in h whose command never ends, SIGKILLs strata,
// waits until nothing of the run is alive, and checks that the run's
// directory was left behind.
//
// flags are added to run's; prelude runs in the workspace first.
func killRun(t *testing.T, h *home, marker string, flags []string, prelude string) {
	t.Helper()
	args := append([]string{"--home", h.dir, "run"}, flags...)
	args = append(args, "--", "bash", "-c", prelude+"(exec -a "+marker+" sleep 1000) & sleep 1000")
	cmd := exec.Command(bin(t), args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); countProcs(t, marker) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the run never started its command")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	// The init of the run is PID 1 of its namespace and dies with a
	// parent-death signal: the namespace and everything in it go.
	waitNoProcs(t, marker)
	if len(runDirs(t, h)) == 0 {
		t.Fatal("expected the killed run's directory to be left for cleanup (is the test still meaningful?)")
	}
}

// tmpfsDir is where strata keeps a store's tmpfs uppers (runs/ and tmpfs
// workspaces): under a hash of the store's path.
func tmpfsDir(h *home) string {
	sum := sha256.Sum256([]byte(h.dir))
	return fmt.Sprintf("/dev/shm/strata-%d/%s", os.Getuid(), hex.EncodeToString(sum[:6]))
}

// runDirs lists this store's run directories, on tmpfs (where strata
// keeps them under a hash of the store's path) and on disk.
func runDirs(t testing.TB, h *home) []string {
	t.Helper()
	var out []string
	for _, root := range []string{
		filepath.Join(tmpfsDir(h), "runs"),
		filepath.Join(h.dir, "runs"),
	} {
		ents, _ := os.ReadDir(root)
		for _, e := range ents {
			out = append(out, filepath.Join(root, e.Name()))
		}
	}
	return out
}

// TestBatch: jobs in, results out, in parallel; a re-run skips finished
// jobs.
func TestBatch(t *testing.T) {
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "proj")
	baseTree(t, src)
	h.ok("import", src)
	dir := t.TempDir()
	good := patchFor(t, src, "src/app.txt", "line 2", "line two")
	var jobs []string
	for i := 0; i < 6; i++ {
		cmd := `"grep -q 'line two' src/app.txt"`
		if i%3 == 2 {
			cmd = `["sh", "-c", "exit 2"]`
		}
		jobs = append(jobs, fmt.Sprintf(`{"id": "j%d", "patch": %q, "cmd": %s, "timeout": "30s", "env": {"JOB": "%d"}}`, i, good, cmd, i))
	}
	jobs = append(jobs, `{"id": "slow", "cmd": "sleep 30", "timeout": 0.3}`)
	file := filepath.Join(dir, "jobs.jsonl")
	os.WriteFile(file, []byte(strings.Join(jobs, "\n")+"\n"), 0o644)
	out := filepath.Join(dir, "results.jsonl")
	// j2, j5 and slow fail: exit 4 (docs/cli.md), every job has its line.
	h.fails(4, "batch", file, "--parallel", "3", "--out", out)
	res := map[string]map[string]any{}
	b, _ := os.ReadFile(out)
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("result line %q: %v", line, err)
		}
		res[m["id"].(string)] = m
	}
	if len(res) != 7 {
		t.Fatalf("%d results; want 7:\n%s", len(res), b)
	}
	for id, m := range res {
		want := 0.0
		switch {
		case id == "slow":
			if m["timed_out"] != true {
				t.Errorf("job slow did not time out: %v", m)
			}
			continue
		case id == "j2" || id == "j5":
			want = 2
		}
		if m["exit_code"] != want {
			t.Errorf("job %s: exit_code %v, want %v (%v)", id, m["exit_code"], want, m)
		}
	}
	// Resumable: a second run appends nothing.
	h.ok("batch", file, "--parallel", "3", "--out", out)
	if b2, _ := os.ReadFile(out); len(b2) != len(b) {
		t.Errorf("a re-run of a finished batch appended results")
	}
}

// gitRepo makes a real git repository with history, branches, a .gitignore
// and ignored dependency directories.
func gitRepo(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "repo")
	sh(t, "", fmt.Sprintf(`set -e
mkdir -p %[1]q && cd %[1]q && git init -q -b main .
git config user.email repo@example.invalid && git config user.name repo
printf 'node_modules/\ndist/\n.venv/\n' > .gitignore
mkdir -p src && printf 'a\nb\nc\n' > src/lib.txt && printf '#!/bin/sh\necho run\n' > run.sh && chmod 755 run.sh
ln -s src/lib.txt link
git add -A && git commit -qm one
printf 'a\nb\nc\nd\n' > src/lib.txt && git commit -qam two
git branch feature && git checkout -q feature && echo feat > feature.txt && git add feature.txt && git commit -qm feature && git checkout -q main
mkdir -p node_modules/dep .venv/bin dist && echo 'module.exports = 1' > node_modules/dep/index.js
echo 'home = /usr/bin' > .venv/pyvenv.cfg && echo built > dist/out.js
echo 'uncommitted edit' >> src/lib.txt
`, dir))
	return dir
}

// TestGitWorkflow: import --git snapshots a commit (not the working copy's
// edits) plus ignored dependency dirs; git works inside the workspace with
// the repository's objects shared; export-git lands exactly the change as a
// branch of the source repository, which is otherwise untouched.
func TestGitWorkflow(t *testing.T) {
	repo := gitRepo(t)
	before := sh(t, repo, "git status --porcelain; git rev-parse HEAD; git branch")
	h := newHome(t)
	h.ok("import", "--git", repo)
	h.ok("ws", "create", "w")
	defer h.run("ws", "rm", "--force", "w")
	if got := h.ok("exec", "w", "--", "cat", "src/lib.txt").stdout; got != "a\nb\nc\nd\n" {
		t.Errorf("src/lib.txt = %q; want the committed version, not the working copy's edit", got)
	}
	h.ok("exec", "w", "--", "test", "-f", "node_modules/dep/index.js")
	h.ok("exec", "w", "--", "test", "-f", ".venv/pyvenv.cfg")
	h.ok("exec", "w", "--", "test", "!", "-e", "dist") // ignored, but not a dependency dir
	if st := h.ok("exec", "w", "--", "git", "status", "--porcelain").stdout; st != "" {
		t.Errorf("git status in a fresh workspace:\n%s", st)
	}
	h.ok("exec", "w", "--", "sh", "-ec", `echo e >> src/lib.txt && rm link && echo new > new.txt && chmod 644 run.sh
git diff --stat | grep -q 'src/lib.txt' && git log --oneline | grep -q two
git add -A && git -c user.name=agent -c user.email=a@example.invalid commit -qm 'agent work' && git log --oneline -1 | grep -q 'agent work'`)
	h.ok("commit", "w", "-m", "agent work")
	h.ok("export-git", "w", "--repo", repo, "--branch", "agent/w")
	patch := sh(t, repo, "git log -p --format=%P agent/w -1")
	for _, want := range []string{"+e", "deleted file mode 120000", "new file mode 100644", "old mode 100755", "+new"} {
		if !strings.Contains(patch, want) {
			t.Errorf("git log -p agent/w lacks %q:\n%s", want, patch)
		}
	}
	for _, bad := range []string{"node_modules", ".git/", ".venv"} {
		if strings.Contains(patch, bad) {
			t.Errorf("git log -p agent/w includes %s:\n%s", bad, patch)
		}
	}
	if parent := strings.TrimSpace(strings.SplitN(patch, "\n", 2)[0]); parent != strings.TrimSpace(sh(t, repo, "git rev-parse main")) {
		t.Errorf("agent/w's parent is %s, not main", parent)
	}
	// The repository is untouched but for the new branch; an existing one
	// is not overwritten without --force.
	after := sh(t, repo, "git status --porcelain; git rev-parse HEAD; git branch")
	if strings.Replace(after, "  agent/w\n", "", 1) != before {
		t.Errorf("the source repository changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	h.fails(1, "export-git", "w", "--repo", repo, "--branch", "agent/w")
	h.ok("export-git", "w", "--repo", repo, "--branch", "agent/w", "--force")

	// Another revision: only its changed blobs are read.
	var imp struct {
		FilesRead int64 `json:"files_read"`
	}
	h.okJSON(&imp, "import", "--git", repo+"@feature", "-b", "feature")
	if imp.FilesRead > 2 {
		t.Errorf("import --git of another revision read %d blobs; want only the new ones", imp.FilesRead)
	}
	if got := h.ok("show", "feature:feature.txt").stdout; got != "feat\n" {
		t.Errorf("feature:feature.txt = %q", got)
	}
}
