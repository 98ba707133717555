//go:build integration

package integration

import (
	"bytes"
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

	"github.com/stratafs/strata/internal/testutil"
	"github.com/stratafs/strata/nsexec"
)

// The writer rewrites freezeFiles files in place, each with one pwrite(2)
// of freezeRecords copies of its counter: at any instant between two
// system calls every file holds one counter throughout, but a reader
// racing a write sees two (a torn file). It creates the files whole
// first, then "ready".
const (
	freezeFiles   = 8
	freezeRecords = 20000
	freezeRecLen  = 13 // "%012d\n"
	freezeWriter  = `
import os
N, R = %d, %d
def rec(i): return (b"%%012d\n" %% i) * R
names = ["f%%d" %% k for k in range(N)]
for n in names:
    with open(n + ".tmp", "wb") as f:
        f.write(rec(0))
    os.rename(n + ".tmp", n)
fds = [os.open(n, os.O_WRONLY) for n in names]
open("ready", "w").close()
i = 0
while True:
    i += 1
    data = rec(i)
    for fd in fds:
        if os.pwrite(fd, data, 0) != len(data):
            raise SystemExit("short write")
`
)

// frzWorkspace is a workspace with the writer running in it.
type frzWorkspace struct {
	h      *home
	name   string
	upper  string
	keeper int
	ns     string // the keeper's PID namespace
	// byKeeper: a rootless --subids workspace, whose keeper stops its
	// processes for a commit until the commit hangs up.
	byKeeper bool
}

// python3 is the python the writer runs with.
func python3(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3"
	}
	return testutil.LookPath(t, "python3")
}

// writerArgv is the writer's command line.
func writerArgv(t *testing.T) []string {
	return []string{python3(t), "-c", fmt.Sprintf(freezeWriter, freezeFiles, freezeRecords)}
}

// startFrzWriter imports a small project, creates workspace name
// (with --subids when subids) and starts argv in it with a background
// `strata exec`, which the test's cleanup ends; it returns once argv has
// created the file "ready".
func startFrzWriter(t *testing.T, name string, subids bool, argv ...string) *frzWorkspace {
	t.Helper()
	if subids && !nsexec.RealRoot() {
		if _, err := nsexec.SubIDMaps(); err != nil {
			testutil.Skip(t, err.Error())
		}
	}
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "proj")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "README"), []byte("a project\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.ok("import", src)
	create := []string{"ws", "create", name}
	if subids {
		create = append(create, "--subids")
	}
	h.ok(create...)

	cmd := exec.Command(bin(t), append([]string{"--home", h.dir, "exec", name, "--"}, argv...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		h.run("ws", "rm", "--force", name) // ends the writer, and its exec
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})

	w := &frzWorkspace{h: h, name: name, byKeeper: subids && !nsexec.RealRoot()}
	var info struct {
		Upper string `json:"upper"`
		PID   int    `json:"pid"`
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-exited:
			t.Fatalf("the writer ended: %s", out.String())
		default:
		}
		if info.PID == 0 {
			for _, line := range strings.Split(strings.TrimSpace(h.ok("--json", "ws", "list").stdout), "\n") {
				var m struct {
					Name  string `json:"name"`
					Upper string `json:"upper"`
					PID   int    `json:"pid"`
				}
				if json.Unmarshal([]byte(line), &m) == nil && m.Name == name {
					info.Upper, info.PID = m.Upper, m.PID
				}
			}
		}
		if info.PID != 0 {
			if _, err := os.Stat(filepath.Join(info.Upper, "ready")); err == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the writer is not ready after 30 s (workspace %+v): %s", info, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	w.upper, w.keeper = info.Upper, info.PID
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", w.keeper))
	if err != nil {
		t.Fatal(err)
	}
	w.ns = ns
	if len(w.states()) == 0 {
		t.Fatalf("no process in the workspace besides its keeper %d", w.keeper)
	}
	return w
}

// states maps the workspace's live processes but the keeper to their
// state (R, S, T, ...).
func (w *frzWorkspace) states() map[int]byte {
	out := map[int]byte{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == w.keeper {
			continue
		}
		if l, err := os.Readlink("/proc/" + e.Name() + "/ns/pid"); err != nil || l != w.ns {
			continue
		}
		if s := frzProcState(pid); s != 0 && s != 'Z' && s != 'X' {
			out[pid] = s
		}
	}
	return out
}

// frzProcState is the state field of /proc/PID/stat, 0 when unreadable.
func frzProcState(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

func (w *frzWorkspace) allStopped() bool {
	st := w.states()
	for _, s := range st {
		if s != 'T' {
			return false
		}
	}
	return len(st) > 0
}

func (w *frzWorkspace) noneStopped() bool {
	for _, s := range w.states() {
		if s == 'T' {
			return false
		}
	}
	return true
}

// count is the writer's counter as f0 in the upper directory begins with.
func (w *frzWorkspace) count(t *testing.T) int {
	t.Helper()
	f, err := os.Open(filepath.Join(w.upper, "f0"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, freezeRecLen-1)
	if _, err := f.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(string(b))
	if err != nil {
		t.Fatalf("f0 begins with %q", b)
	}
	return n
}

// requireRunning fails unless, within a generous deadline, no process of
// the workspace is stopped and the writer's counter passes from.
func (w *frzWorkspace) requireRunning(t *testing.T, what string, from int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !w.noneStopped() || w.count(t) <= from {
		if time.Now().After(deadline) {
			t.Fatalf("%s: the workspace's processes are not running (states %v) or the writer stays at %d (from %d)", what, frzFmtStates(w.states()), w.count(t), from)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func frzFmtStates(st map[int]byte) string {
	var parts []string
	for pid, s := range st {
		parts = append(parts, fmt.Sprintf("%d:%c", pid, s))
	}
	return strings.Join(parts, " ")
}

// frzCheckCommit exports commit id and checks that every file the writer
// writes is whole: freezeRecords copies of one counter. It returns the
// smallest and largest counter.
func frzCheckCommit(t *testing.T, h *home, id string) (lo, hi int) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "export")
	h.ok("export", id, dir)
	lo = -1
	for k := 0; k < freezeFiles; k++ {
		name := fmt.Sprintf("f%d", k)
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("commit %s: %v", id, err)
		}
		if len(b) != freezeRecords*freezeRecLen {
			t.Fatalf("commit %s: %s has %d bytes; want %d", id, name, len(b), freezeRecords*freezeRecLen)
		}
		first := b[:freezeRecLen]
		for off := 0; off < len(b); off += freezeRecLen {
			if !bytes.Equal(b[off:off+freezeRecLen], first) {
				t.Fatalf("commit %s: %s is torn: record %d is %q, record 0 %q (committed while being written)", id, name, off/freezeRecLen, b[off:off+freezeRecLen], first)
			}
		}
		n, err := strconv.Atoi(string(first[:freezeRecLen-1]))
		if err != nil {
			t.Fatalf("commit %s: %s holds %q", id, name, first)
		}
		if lo < 0 || n < lo {
			lo = n
		}
		hi = max(hi, n)
	}
	return lo, hi
}

// TestFreezeCommit: commits taken while a process rewrites files
// continuously hold every file whole (the workspace is stopped while the
// upper directory is read), each commit newer than the one before, and
// the writer goes on after each commit. Also for --subids workspaces,
// whose keeper does the stopping.
func TestFreezeCommit(t *testing.T) {
	for _, subids := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "subids"}[subids], func(t *testing.T) {
			w := startFrzWriter(t, "w", subids, writerArgv(t)...)
			var ids []string
			for i := 0; i < 6; i++ {
				var res struct {
					Commit string `json:"commit"`
					Clean  bool   `json:"clean"`
				}
				w.h.okJSON(&res, "commit", w.name, "-m", fmt.Sprintf("while writing %d", i))
				if res.Commit == "" || res.Clean {
					t.Fatalf("commit %d: %+v; want a new commit", i, res)
				}
				ids = append(ids, res.Commit)
				w.requireRunning(t, fmt.Sprintf("after commit %d", i), w.count(t))
			}
			prev := -1
			for i, id := range ids {
				lo, hi := frzCheckCommit(t, w.h, id)
				if lo <= prev {
					t.Errorf("commit %d (%s) holds counter %d, not past %d of the commit before", i, id, lo, prev)
				}
				prev = hi
			}
			w.h.fsckClean()
		})
	}
}

// TestFreezeKilledCommit: a commit SIGKILLed while the workspace's
// processes are stopped leaves them stopped, and the next command on the
// workspace (here diff) resumes them. From a --subids workspace (rootless),
// where the keeper stops them for the commit, they resume as soon as the
// commit dies. The workspace commits whole files afterwards.
func TestFreezeKilledCommit(t *testing.T) {
	for _, subids := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "subids"}[subids], func(t *testing.T) {
			w := startFrzWriter(t, "w", subids, writerArgv(t)...)
			caught := false
			for attempt := 0; attempt < 40 && !caught; attempt++ {
				caught = w.killCommitFrozen(t)
				if caught {
					t.Logf("commit killed while the workspace was stopped, attempt %d", attempt)
				}
				if !caught && !w.noneStopped() {
					// Killed just after its thaw, before the processes
					// ran again: not what this test is after.
					w.requireRunning(t, "after a commit killed as it thawed", 0)
				}
			}
			if !caught {
				t.Fatalf("no attempt killed a commit while the workspace was stopped")
			}
			if w.byKeeper {
				w.requireRunning(t, "after the commit died (the keeper resumes them)", w.count(t))
			} else {
				at := w.count(t)
				time.Sleep(100 * time.Millisecond)
				if !w.allStopped() || w.count(t) != at {
					t.Fatalf("the workspace resumed without a command: states %s, counter %d then %d", frzFmtStates(w.states()), at, w.count(t))
				}
				// Any command on the workspace resumes them, a read
				// such as diff too (nsexec's TestFreezeKilled covers
				// exec).
				w.h.ok("diff", "--stat", w.name)
				w.requireRunning(t, "after the next command (diff)", at)
			}
			var res struct {
				Commit string `json:"commit"`
			}
			w.h.okJSON(&res, "commit", w.name, "-m", "after the kill")
			frzCheckCommit(t, w.h, res.Commit)
			w.requireRunning(t, "after the last commit", w.count(t))
			w.h.fsckClean()
		})
	}
}

// killCommitFrozen starts a commit of the workspace and SIGKILLs it once
// the workspace's processes are stopped (state T). It reports whether it
// did, with them still stopped after the kill (or, frozen by the keeper,
// stopped at the kill).
func (w *frzWorkspace) killCommitFrozen(t *testing.T) bool {
	t.Helper()
	cmd := exec.Command(bin(t), "--home", w.h.dir, "commit", w.name, "-m", "killed")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("commit (not killed): %v\n%s", err, out.String())
			}
			return false // finished before the test saw the workspace stopped
		default:
		}
		if w.allStopped() {
			cmd.Process.Signal(syscall.SIGKILL)
			err := <-done
			ee, ok := err.(*exec.ExitError)
			if !ok || !ee.Sys().(syscall.WaitStatus).Signaled() {
				return false // it finished first
			}
			if w.byKeeper {
				return true // the keeper resumes them as the commit dies
			}
			return w.allStopped()
		}
	}
}

// TestFreezeCommitShells: commits succeed while shells start commands in
// a loop. A shell caught in vfork, its child stopped before exec, cannot
// reach state T until thawed; commit used to wait for it and fail after
// 5 s ("freeze workspace: process N does not stop (state D)"), which here
// happened to most commits. The unit test TestFreezeVfork checks that such
// a freeze was caught; this one that the CLI's commits go through.
func TestFreezeCommitShells(t *testing.T) {
	for _, subids := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "subids"}[subids], func(t *testing.T) {
			w := startFrzWriter(t, "w", subids, "sh", "-c", `for i in 1 2 3; do (while :; do /bin/true; done) & done; : > ready; wait`)
			for i := 0; i < 10; i++ {
				w.h.ok("commit", w.name, "-m", fmt.Sprintf("shells %d", i))
				for deadline := time.Now().Add(10 * time.Second); !w.noneStopped(); time.Sleep(10 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("after commit %d: processes stopped: %s", i, frzFmtStates(w.states()))
					}
				}
			}
		})
	}
}
