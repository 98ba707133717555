//go:build integration

package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stratafs/strata/internal/testutil"
)

// TestCLIInterruptExit130: SIGINT ends strata with 130 and SIGTERM with
// 143, as shells, git and docker do (issue 19: it exited 1). The batch is
// interrupted while its job runs (the job has made its marker).
func TestCLIInterruptExit130(t *testing.T) {
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "proj")
	baseTree(t, src)
	h.ok("import", src)
	for _, tc := range []struct {
		sig  syscall.Signal
		want int
	}{{syscall.SIGINT, 130}, {syscall.SIGTERM, 143}} {
		shared := t.TempDir()
		os.Chmod(shared, 0o777)
		marker := filepath.Join(shared, "started")
		file := filepath.Join(t.TempDir(), "jobs.jsonl")
		os.WriteFile(file, []byte(`{"id": "slow", "cmd": "touch `+marker+`; sleep 60"}`+"\n"), 0o644)
		cmd := exec.Command(bin(t), "--home", h.dir, "batch", file, "--rw", shared)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		for {
			if _, err := os.Stat(marker); err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		cmd.Process.Signal(tc.sig)
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != tc.want {
			t.Errorf("%v: %v, want exit %d; stderr %q", tc.sig, err, tc.want, errb.String())
		}
	}
}

// TestCLIUnwritableHome: a --home the user cannot write says "permission
// denied: DIR" and what to do, not SQLite's "unable to open database file
// (14)" (issue 19). As root, strata runs as nobody against a root-owned
// directory.
func TestCLIUnwritableHome(t *testing.T) {
	tmp := t.TempDir()
	os.Chmod(tmp, 0o755)
	os.Chmod(filepath.Dir(tmp), 0o755) // nobody must reach dir
	dir := filepath.Join(tmp, "ro")
	os.Mkdir(dir, 0o755)
	if os.Getuid() != 0 {
		os.Chmod(dir, 0o555)
		defer os.Chmod(dir, 0o755)
	}
	for _, args := range [][]string{{"init"}, {"ws", "create", "x"}, {"import", t.TempDir()}} {
		for _, home := range []string{dir, filepath.Join(dir, "sub")} {
			cmd := exec.Command(bin(t), append([]string{"--home", home}, args...)...)
			if os.Getuid() == 0 {
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			}
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 || !bytes.Contains(out, []byte("permission denied: "+dir+":")) ||
				!bytes.Contains(out, []byte("--home DIR")) || bytes.Contains(out, []byte("unable to open database")) {
				t.Errorf("--home %s %v: %v: %s", home, args, err, out)
			}
		}
	}
}

// TestCLIAnswers: answers that read wrong before issue 19 — plurals
// ("read 1 files"), apply of a workspace printing base..base, promote of a
// workspace whose changes are all uncommitted saying only "up-to-date",
// run --json leaving out policy_violations when empty.
func TestCLIAnswers(t *testing.T) {
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "one")
	cliWrite(t, src, map[string]string{"only.txt": "1\n"})
	r := h.ok("import", src, "--no-stat-cache")
	if !strings.Contains(r.stdout, "(1 file, 0 dirs, 0 other,") || !strings.Contains(r.stdout, "read 1 file,") {
		t.Errorf("import of one file: %q", r.stdout)
	}
	h.ok("ws", "create", "w")
	h.ok("exec", "w", "--", "sh", "-c", "echo 2 > only.txt")
	r = h.ok("promote", "w")
	if !strings.Contains(r.stdout, "(up-to-date)") || !strings.Contains(r.stdout, "uncommitted changes") || !strings.Contains(r.stdout, "strata commit w") {
		t.Errorf("promote with only uncommitted changes: %q", r.stdout)
	}
	target := t.TempDir()
	h.ok("export", "main", filepath.Join(target, "p"))
	r = h.ok("apply", "w", "--to", filepath.Join(target, "p"))
	base := cliHead(h, "main")[:12]
	if want := "applied workspace w's change since " + base + " (uncommitted included) to " + filepath.Join(target, "p") + ": 1 path\n"; !strings.HasSuffix(r.stdout, want) {
		t.Errorf("apply w: %q, want suffix %q", r.stdout, want)
	}
	r = h.ok("--json", "run", "--", "true")
	var m map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
		t.Fatalf("run --json: %v: %q", err, r.stdout)
	}
	if vs, ok := m["policy_violations"].([]any); !ok || len(vs) != 0 {
		t.Errorf("run --json: policy_violations = %#v, want []", m["policy_violations"])
	}
	if _, ok := m["signal"]; !ok {
		t.Errorf("run --json: no signal field: %v", m)
	}
}

// TestCLIConflictPathsJSON: with --json, a merge conflict's paths are a
// field of the error object, not only part of its message (issue 19).
func TestCLIConflictPathsJSON(t *testing.T) {
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "p")
	cliWrite(t, src, map[string]string{"f.txt": "base\n"})
	h.ok("import", src)
	for _, w := range []string{"a", "b"} {
		h.ok("ws", "create", w)
		h.ok("exec", w, "--", "sh", "-c", "echo "+w+" > f.txt")
		h.ok("commit", w, "-m", w)
	}
	h.ok("promote", "a")
	r := h.fails(3, "--json", "promote", "b")
	var m struct {
		Kind      string `json:"kind"`
		Conflicts []struct {
			Path   string `json:"path"`
			Reason string `json:"reason"`
		} `json:"conflicts"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.stderr)), &m); err != nil || m.Kind != "conflict" || len(m.Conflicts) != 1 || m.Conflicts[0].Path != "f.txt" || m.Conflicts[0].Reason == "" {
		t.Errorf("promote b --json: %+v (%v), stderr %q", m, err, r.stderr)
	}
}

// TestCLIDoctorLayout: every check's label is followed by at least two
// spaces before its detail; "user xattrs on the store's filesystem" ran
// into it (issue 19).
func TestCLIDoctorLayout(t *testing.T) {
	h := newHome(t)
	js := h.run("--json", "doctor").stdout
	var rep struct {
		Checks []struct{ Name, Detail string } `json:"checks"`
	}
	if err := json.Unmarshal([]byte(js), &rep); err != nil || len(rep.Checks) == 0 {
		t.Fatalf("doctor --json: %v: %.200q", err, js)
	}
	text := h.run("doctor").stdout
	for _, ch := range rep.Checks {
		if !strings.Contains(text, "] "+ch.Name+"  ") {
			t.Errorf("doctor: label %q runs into its detail:\n%s", ch.Name, text)
		}
	}
}

// TestCLIRefusedInput: input that was accepted silently before issue 19 is
// refused with exit 2 and a message that names it: --ro of a missing
// path, an empty patch (as a garbage one is), workspaces named main or
// HEAD (`diff main` always means the branch).
func TestCLIRefusedInput(t *testing.T) {
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "p")
	cliWrite(t, src, map[string]string{"f.txt": "base\n"})
	h.ok("import", src)
	empty := filepath.Join(t.TempDir(), "empty.diff")
	os.WriteFile(empty, []byte("\n"), 0o644)
	jobs := filepath.Join(t.TempDir(), "jobs.jsonl")
	os.WriteFile(jobs, []byte(`{"id": "e", "patch": "`+empty+`", "cmd": "true"}`+"\n"), 0o644)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--ro", "/nonexistent", "--", "true"}, "--ro /nonexistent: no such file or directory"},
		{[]string{"run", "--patch", empty, "--", "true"}, "patch " + empty + " is empty"},
		{[]string{"batch", jobs}, "1 of 1 job is invalid; no job was run:\n  job e: patch " + empty + " is empty"},
		{[]string{"ws", "create", "main"}, `workspace name "main" is reserved`},
		{[]string{"ws", "create", "HEAD"}, `workspace name "HEAD" is reserved`},
	} {
		r := h.fails(2, tc.args...)
		if !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: stderr %q, want %q", tc.args, r.stderr, tc.want)
		}
	}
}

// TestCLIRootExecOtherUser: root's exec into another user's workspace
// names the owner and how to run as them, before anything starts (issue
// 19: the keeper answered "uid 65534 may not run commands").
func TestCLIRootExecOtherUser(t *testing.T) {
	testutil.AsRoot(t)
	dir, err := os.MkdirTemp("/var/tmp", "strata-it-owner-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	src, hdir := filepath.Join(dir, "src"), filepath.Join(dir, "home")
	cliWrite(t, src, map[string]string{"f.txt": "x\n"})
	for _, p := range []string{dir, src, filepath.Join(src, "f.txt")} {
		os.Chown(p, 65534, 65534)
	}
	as := func(args ...string) {
		cmd := exec.Command(bin(t), append([]string{"--home", hdir}, args...)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("as nobody: strata %v: %v: %s", args, err, out)
		}
	}
	as("import", src)
	as("ws", "create", "w")
	h := &home{t: t, dir: hdir}
	r := h.fails(125, "exec", "w", "--", "true")
	owner := "uid 65534"
	if u, err := user.LookupId("65534"); err == nil {
		owner = u.Username + " (uid 65534)"
	}
	if !strings.Contains(r.stderr, "workspace w belongs to "+owner) || !strings.Contains(r.stderr, "sudo -u ") {
		t.Errorf("root exec into nobody's workspace: %q", r.stderr)
	}
	if _, err := os.Stat(filepath.Join(hdir, "workspaces", "w", "keeper.sock")); err == nil {
		t.Errorf("root started a keeper in nobody's workspace")
	}
}

// TestCLIImportGitUntrackedIgnore: import --git obeys git's own ignore
// rules: an untracked .gitignore ignores .venv (as `git check-ignore`
// confirms), so .venv comes along; a --with-ignored glob that matches
// nothing is warned about (issue 19: .venv was left out, silently).
func TestCLIImportGitUntrackedIgnore(t *testing.T) {
	repo := filepath.Join(t.TempDir(), "repo")
	sh(t, "", `set -e
mkdir -p `+repo+` && cd `+repo+` && git init -q -b main .
git config user.email r@example.invalid && git config user.name r
echo 'print(1)' > app.py && git add app.py && git commit -qm one
printf '.venv/\n' > .gitignore
mkdir -p .venv/bin && echo '#!/bin/sh' > .venv/bin/python && touch .venv/pyvenv.cfg
git check-ignore -q .venv`)
	h := newHome(t)
	r := h.ok("import", "--git", repo)
	if got := h.ok("show", "main:.venv/bin/python").stdout; got != "#!/bin/sh\n" {
		t.Errorf("import --git: .venv/bin/python = %q; stderr %q", got, r.stderr)
	}
	r = h.ok("import", "--git", repo, "-b", "g", "--with-ignored", "nosuch", "--with-ignored", ".venv")
	if !strings.Contains(r.stderr, "--with-ignored nosuch: matches no directory that git ignores") || strings.Contains(r.stderr, "--with-ignored .venv") {
		t.Errorf("--with-ignored nosuch: stderr %q", r.stderr)
	}
}
