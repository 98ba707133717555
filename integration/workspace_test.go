//go:build integration

package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stratafs/strata/internal/testutil"
)

// corpusHome imports the corpus once per test into a fresh store and
// returns the store and the corpus path.
func corpusHome(t *testing.T) (*home, string) {
	t.Helper()
	src := corpus(t)
	h := newHome(t)
	h.ok("import", src, "-m", "corpus")
	return h, src
}

// TestWorkspaceCorpus: a workspace of the corpus runs real tools (npm test,
// git, node) at the corpus's own path; what it writes is visible through
// ws path, and invisible in the source tree and in other workspaces.
func TestWorkspaceCorpus(t *testing.T) {
	parallel(t)
	h, src := corpusHome(t)
	h.ok("ws", "create", "a")
	h.ok("ws", "create", "b")
	defer h.run("ws", "rm", "--force", "a", "b")

	// The workspace appears at the source path itself, and starts there.
	if got := strings.TrimSpace(h.ok("exec", "a", "--", "pwd").stdout); got != src {
		t.Errorf("pwd inside = %q, want the import's source %q", got, src)
	}
	r := h.ok("exec", "a", "--sandbox", "none", "--", "npm", "test")
	if !strings.Contains(r.stdout+r.stderr, "pass 2") {
		t.Errorf("npm test inside the workspace:\n%s", r)
	}
	// A fresh workspace is the source as it is: git sees in it exactly
	// what it sees in the source (the corpus's own working copy may be
	// dirty: npm rewrites package-lock.json as it installs).
	want := sh(t, src, "git -c safe.directory='*' status --porcelain")
	if r := h.ok("exec", "a", "--", "git", "status", "--porcelain"); r.stdout != want {
		t.Errorf("git status in a fresh workspace:\n%s\nin the source:\n%s", r.stdout, want)
	}
	if got := h.ok("exec", "a", "--", "node", "-e", "console.log(require('react/package.json').name)").stdout; strings.TrimSpace(got) != "react" {
		t.Errorf("node -e require(react) = %q", got)
	}

	// Write, delete and rename inside a.
	h.ok("exec", "a", "--", "sh", "-c", "echo agent-a > NEW.txt && rm src/server.js && mv src/routes.js src/router.js && rm -rf node_modules/react-dom")
	p := strings.TrimSpace(h.ok("ws", "path", "a").stdout)
	if b, err := os.ReadFile(filepath.Join(p, "NEW.txt")); err != nil || string(b) != "agent-a\n" {
		t.Errorf("ws path %s: NEW.txt = %q, %v", p, b, err)
	}
	for _, gone := range []string{"src/server.js", "src/routes.js", "node_modules/react-dom"} {
		if _, err := os.Lstat(filepath.Join(p, gone)); !os.IsNotExist(err) {
			t.Errorf("ws path: %s still there after it was removed inside (%v)", gone, err)
		}
	}
	if _, err := os.Stat(filepath.Join(p, "src/router.js")); err != nil {
		t.Errorf("ws path: renamed file missing: %v", err)
	}
	// Host tools write through ws path, and the workspace sees it.
	if err := os.WriteFile(filepath.Join(p, "FROM-HOST"), []byte("host\n"), 0o644); err != nil {
		t.Fatalf("writing through ws path: %v", err)
	}
	if got := h.ok("exec", "a", "--", "cat", "FROM-HOST").stdout; got != "host\n" {
		t.Errorf("file written through ws path reads %q inside", got)
	}

	// The source tree is untouched.
	for _, f := range []string{"src/server.js", "src/routes.js", "node_modules/react-dom/package.json"} {
		if _, err := os.Stat(filepath.Join(src, f)); err != nil {
			t.Errorf("source tree lost %s: %v", f, err)
		}
	}
	if _, err := os.Stat(filepath.Join(src, "NEW.txt")); !os.IsNotExist(err) {
		t.Errorf("a workspace's file appeared in the source tree")
	}
	// b sees none of a's changes.
	if r := h.run("exec", "b", "--", "test", "-e", "NEW.txt"); r.code != 1 {
		t.Errorf("workspace b sees a's NEW.txt: %s", r)
	}
	h.ok("exec", "b", "--", "test", "-f", "src/server.js")
}

// TestRenameLowerDir: renaming a directory that exists in a lower layer.
// Rootless, the kernel refuses rename(2) with EXDEV (userxattr forbids
// redirect_dir); mv falls back to copying. As root, redirect_dir=on makes
// rename(2) work.
func TestRenameLowerDir(t *testing.T) {
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "proj")
	writeTree(t, src, 7)
	h.ok("import", src)
	h.ok("ws", "create", "w")
	defer h.run("ws", "rm", "--force", "w")
	script := `import os, errno
try:
    os.rename("d1", "d1-renamed"); print("renamed")
except OSError as e:
    print(errno.errorcode[e.errno])`
	got := strings.TrimSpace(h.ok("exec", "w", "--", "/usr/bin/python3", "-c", script).stdout)
	if os.Geteuid() == 0 {
		if got != "renamed" {
			t.Errorf("as root, rename(2) of a lower dir: %s; want success (redirect_dir=on)", got)
		}
	} else if got != "EXDEV" {
		t.Errorf("rootless, rename(2) of a lower dir: %s; want EXDEV (see docs/overlayfs.md)", got)
	}
	// mv works either way (it copies on EXDEV).
	h.ok("exec", "w", "--", "mv", "d2", "d2-moved")
	h.ok("exec", "w", "--", "test", "-f", "d2-moved/f1.txt")
	h.ok("exec", "w", "--", "test", "!", "-e", "d2")
}

// TestExecExitCodes: the command's status passes through; 127 and 126 for
// a command that cannot run; 125 when strata itself fails.
func TestExecExitCodes(t *testing.T) {
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "proj")
	writeTree(t, src, 8)
	if err := os.WriteFile(filepath.Join(src, "noexec.sh"), []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.ok("import", src)
	h.ok("ws", "create", "w")
	defer h.run("ws", "rm", "--force", "w")
	h.fails(7, "exec", "w", "--", "sh", "-c", "exit 7")
	r := h.fails(127, "exec", "w", "--", "no-such-command-xyz")
	if !strings.Contains(r.stderr, "no-such-command-xyz") {
		t.Errorf("127 without naming the command:\n%s", r.stderr)
	}
	h.fails(126, "exec", "w", "--", "./noexec.sh")
	h.fails(125, "exec", "nosuchws", "--", "true")
	// stdin passes through.
	r = h.runIn(t.Context(), "", []byte("piped\n"), "exec", "w", "--", "cat")
	if r.code != 0 || r.stdout != "piped\n" {
		t.Errorf("stdin through exec: %s", r)
	}
	// A signal ends the command: 128+n.
	h.fails(128+9, "exec", "w", "--", "sh", "-c", "kill -9 $$")
}

// TestWorkspaceBadInput: duplicate and invalid names, evicted layers
// rebuilt transparently, a store moved on disk.
func TestWorkspaceBadInput(t *testing.T) {
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "proj")
	writeTree(t, src, 9)
	h.ok("import", src)
	h.ok("ws", "create", "w")
	h.fails(1, "ws", "create", "w")
	for _, bad := range []string{"-x", "a/b", "..", "a b", strings.Repeat("x", 65), "x\ny"} {
		h.fails(2, "ws", "create", bad)
	}
	h.fails(1, "ws", "create", "z", "--from", "nosuchref")

	// Layers evicted (the cache is derived): rebuilt on the next use.
	h.ok("exec", "w", "--", "sh", "-c", "echo kept > mine.txt")
	h.ok("ws", "stop", "w")
	if err := os.RemoveAll(filepath.Join(h.dir, "layers")); err != nil {
		t.Fatal(err)
	}
	if got := h.ok("exec", "w", "--", "cat", "mine.txt", "d0/f0.txt").stdout; !strings.HasPrefix(got, "kept\n") {
		t.Errorf("after evicting layers: %q", got)
	}

	// The store moved on disk: everything still works from the new place.
	h.ok("ws", "stop", "w")
	moved := filepath.Join(t.TempDir(), "moved-store")
	if err := os.Rename(h.dir, moved); err != nil {
		t.Fatal(err)
	}
	h.dir = moved
	if got := h.ok("exec", "w", "--", "cat", "mine.txt").stdout; got != "kept\n" {
		t.Errorf("after moving the store: %q", got)
	}
	h.fails(3, "ws", "rm", "w") // uncommitted changes
	h.ok("ws", "rm", "--force", "w")
	h.ok("ws", "create", "w") // the name is free again
	h.ok("ws", "rm", "w")
}

// TestStopEndsEverything: nothing started in a workspace outlives ws stop,
// and a killed keeper is replaced on the next use.
func TestStopEndsEverything(t *testing.T) {
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "proj")
	writeTree(t, src, 10)
	h.ok("import", src)
	h.ok("ws", "create", "w")
	defer h.run("ws", "rm", "--force", "w")
	marker := "strata-it-sleeper-" + strconv.Itoa(os.Getpid())
	// A daemon the command leaves behind (its own session, so that it
	// outlives the exec) must still end with the workspace.
	h.ok("exec", "w", "--", "sh", "-c", "setsid -f bash -c 'exec -a "+marker+" sleep 1000' </dev/null >/dev/null 2>&1")
	waitProcs(t, marker, 1)
	h.ok("ws", "stop", "w")
	waitNoProcs(t, marker)

	// Kill the keeper outright: the next exec starts a new one.
	h.ok("exec", "w", "--", "true")
	keeper := func() (state string, pid int) {
		t.Helper()
		var w struct {
			Name  string `json:"name"`
			State string `json:"state"`
			PID   int    `json:"pid"`
		}
		lines := strings.Split(strings.TrimSpace(h.ok("--json", "ws", "list").stdout), "\n")
		if len(lines) != 1 {
			t.Fatalf("ws list: %d workspaces; want 1:\n%s", len(lines), strings.Join(lines, "\n"))
		}
		if err := json.Unmarshal([]byte(lines[0]), &w); err != nil || w.Name != "w" {
			t.Fatalf("ws list: %q: %v", lines[0], err)
		}
		return w.State, w.PID
	}
	state, pid := keeper()
	if state != "running" || pid <= 0 {
		t.Fatalf("after exec, workspace w is %s with keeper pid %d; want running with a keeper", state, pid)
	}
	if st, _ := procState(t, pid); st == "" || st == "Z" {
		t.Fatalf("keeper pid %d listed by ws list is not alive (state %q)", pid, st)
	}
	if err := exec.Command("kill", "-9", strconv.Itoa(pid)).Run(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if st, _ := procState(t, pid); st == "" || st == "Z" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("keeper %d survived SIGKILL", pid)
		}
	}
	h.ok("exec", "w", "--", "true")
	state, pid2 := keeper()
	if st, _ := procState(t, pid2); state != "running" || pid2 <= 0 || pid2 == pid || st == "" || st == "Z" {
		t.Fatalf("after the keeper was killed and exec ran again: %s, keeper %d (state %q); want running with a new live keeper, not %d", state, pid2, st, pid)
	}

	// The store deleted under a live workspace (rm -rf, not ws rm): its
	// keeper notices and ends, and everything in the workspace with it.
	marker2 := marker + "-orphan"
	h.ok("exec", "w", "--", "sh", "-c", "setsid -f bash -c 'exec -a "+marker2+" sleep 1000' </dev/null >/dev/null 2>&1")
	waitProcs(t, marker2, 1)
	sh(t, "", "chmod -R u+rwX '"+h.dir+"'; rm -rf '"+h.dir+"'")
	waitNoProcs(t, marker2)
}

// waitProcs waits until exactly n processes carry marker: setsid -f
// returns before the daemon it starts has exec'd.
func waitProcs(t testing.TB, marker string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for countProcs(t, marker) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d processes %q; want %d", countProcs(t, marker), marker, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func countProcs(t testing.TB, marker string) int {
	t.Helper()
	n := 0
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.HasPrefix(string(b), marker) {
			n++
		}
	}
	return n
}

func waitNoProcs(t testing.TB, marker string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for countProcs(t, marker) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("processes %q survived", marker)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestManyWorkspaces: 200 workspaces alive at once, each with its keeper;
// reports the keepers' memory.
func TestManyWorkspaces(t *testing.T) {
	testutil.SkipShort(t)
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "proj")
	writeTree(t, src, 11)
	h.ok("import", src)
	const n = 200
	start := time.Now()
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("w%03d", i)
		h.ok("ws", "create", name, "--tmpfs")
		h.ok("exec", name, "--", "sh", "-c", "echo "+name+" > who")
	}
	t.Logf("%d workspaces created and started in %s", n, time.Since(start).Round(time.Millisecond))
	var rss int64
	var keepers int
	for _, line := range strings.Split(strings.TrimSpace(h.ok("--json", "ws", "list").stdout), "\n") {
		var w struct {
			Name  string `json:"name"`
			State string `json:"state"`
			PID   int    `json:"pid"`
		}
		if err := json.Unmarshal([]byte(line), &w); err != nil {
			t.Fatal(err)
		}
		if w.State != "running" {
			t.Errorf("workspace %s is %s", w.Name, w.State)
			continue
		}
		keepers++
		rss += rssKiB(w.PID)
	}
	if keepers != n {
		t.Fatalf("%d keepers running; want %d", keepers, n)
	}
	t.Logf("keeper memory: %d keepers, %d KiB RSS total, %d KiB each on average", keepers, rss, rss/int64(keepers))
	// Each still sees only its own file.
	for _, i := range []int{0, n / 2, n - 1} {
		name := fmt.Sprintf("w%03d", i)
		if got := strings.TrimSpace(h.ok("exec", name, "--", "cat", "who").stdout); got != name {
			t.Errorf("%s reads %q", name, got)
		}
	}
	for i := 0; i < n; i++ {
		h.ok("ws", "rm", "--force", fmt.Sprintf("w%03d", i))
	}
}

func rssKiB(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return n
		}
	}
	return 0
}

// TestNoUserNamespaces: with user namespaces refused by the kernel, a
// rootless exec fails with exit 125 and a message naming the setting, as
// doctor does. user.max_user_namespaces is per user namespace: the test
// runs strata as the unprivileged test user inside a user namespace whose
// limit it set to 0, so the host's setting is never touched.
func TestNoUserNamespaces(t *testing.T) {
	testutil.AsRoot(t)
	user := os.Getenv("STRATA_TEST_USER")
	if user == "" {
		testutil.Skip(t, "STRATA_TEST_USER is not set")
	}
	uid := strings.TrimSpace(sh(t, "", "id -u "+user))
	gid := strings.TrimSpace(sh(t, "", "id -g "+user))
	dir, err := os.MkdirTemp("", "strata-nouserns-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	home := filepath.Join(dir, "store")
	proj := filepath.Join(dir, "proj")
	writeTree(t, proj, 12)
	sh(t, "", "chmod -R a+rwX "+dir)
	as := func(args ...string) result {
		script := `echo 0 > /proc/sys/user/max_user_namespaces && exec "$@"`
		cmd := exec.Command("unshare", append([]string{"--user", "--map-user=" + uid, "--map-group=" + gid, "--keep-caps", "--",
			"sh", "-c", script, "sh", bin(t), "--home", home}, args...)...)
		cmd.Env = append(os.Environ(), "HOME="+dir)
		out, err := cmd.CombinedOutput()
		r := result{stdout: string(out)}
		if ee, ok := err.(*exec.ExitError); ok {
			r.code = ee.ExitCode()
		}
		return r
	}
	if r := as("import", proj); r.code != 0 {
		t.Fatalf("import as %s: %s", user, r)
	}
	// An overlay workspace needs them: its exec fails naming the sysctl.
	if r := as("ws", "create", "w", "--backend", "overlay"); r.code != 0 {
		t.Fatalf("ws create as %s: %s", user, r)
	}
	r := as("exec", "w", "--", "true")
	if r.code != 125 || !strings.Contains(r.stdout, "max_user_namespaces") {
		t.Errorf("exec in an overlay workspace without user namespaces: want exit 125 naming user.max_user_namespaces, got %s", r)
	}
	// auto picks a namespace-free backend, whose commands run fenced by
	// Landlock and seccomp, saying what they go without.
	r = as("ws", "create", "a")
	if r.code != 0 || !strings.Contains(r.stdout, "(copy)") && !strings.Contains(r.stdout, "(reflink)") {
		t.Fatalf("ws create (auto) without user namespaces: want a copy or reflink workspace, got %s", r)
	}
	r = as("exec", "a", "--", "sh", "-c", "echo hi > f && cat f")
	if r.code != 0 || !strings.Contains(r.stdout, "hi\n") || !strings.Contains(r.stdout, "no user namespaces here") {
		t.Errorf("exec in an auto workspace without user namespaces: %s", r)
	}
	r = as("doctor")
	if r.code != 1 || !strings.Contains(r.stdout, "max_user_namespaces") {
		t.Errorf("doctor without user namespaces: want exit 1 naming the sysctl, got %s", r)
	}
}

// TestMaxLayers: a store whose stacks may be 2 layers deep gives a commit
// with more below it one flattened layer, which holds everything; lowering
// the limit under live workspaces is refused.
func TestMaxLayers(t *testing.T) {
	h := newHome(t)
	h.ok("init", "--max-layers", "2")
	src := filepath.Join(t.TempDir(), "proj")
	baseTree(t, src)
	h.ok("import", src)
	h.ok("ws", "create", "a")
	defer h.run("ws", "rm", "--force", "a", "b")
	for i := 1; i <= 3; i++ {
		h.ok("exec", "a", "--", "sh", "-c", fmt.Sprintf("echo %d > layer%d.txt", i, i))
		h.ok("commit", "a", "-m", fmt.Sprint("layer ", i))
	}
	h.ok("ws", "create", "b", "--from", "ws/a")
	if got := h.ok("exec", "b", "--", "cat", "layer1.txt", "layer2.txt", "layer3.txt").stdout; got != "1\n2\n3\n" {
		t.Errorf("the flattened stack reads %q", got)
	}
	flavour := "user"
	if os.Geteuid() == 0 {
		flavour = "trusted"
	}
	var head struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(h.ok("--json", "log", "ws/a", "-n", "1").stdout), &head); err != nil || head.ID == "" {
		t.Fatalf("log: %v", err)
	}
	if _, err := os.Stat(filepath.Join(h.dir, "layers", flavour, head.ID+".full")); err != nil {
		all, _ := filepath.Glob(filepath.Join(h.dir, "layers", flavour, "*"))
		t.Errorf("the head %s, 4 layers deep, has no flattened layer: %v (layers: %v)", head.ID[:12], err, all)
	}
	h.fails(3, "init", "--max-layers", "1")
	h.fails(2, "init", "--max-layers", "501")
	h.ok("init", "--max-layers", "8")
	h.ok("gc")
	if got := h.ok("exec", "b", "--", "cat", "layer3.txt").stdout; got != "3\n" {
		t.Errorf("after gc: %q", got)
	}
	h.fsckClean()
}
