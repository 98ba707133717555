package nsexec

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/internal/testutil"
)

// entryTestFreezer is a freezer for the tests to kill: Freeze(DIR) (or
// the keeper's Freeze with "keeper DIR"), "frozen" on stdout, then it
// waits to be killed without ever thawing.
const entryTestFreezer = "test-freezer"

func init() {
	Register(entryTestFreezer, func() int {
		var err error
		switch os.Args[1] {
		case "direct":
			_, err = Freeze(os.Args[2])
		case "keeper":
			_, err = freezeByKeeper(os.Args[2])
		default:
			err = fmt.Errorf("unknown mode %q", os.Args[1])
		}
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		fmt.Println("frozen")
		for {
			time.Sleep(time.Hour)
		}
	})
}

// freezeWS is a running workspace whose processes a test freezes: a
// writer (a shell loop forking mv to replace count with the next number)
// and a background sleep.
type freezeWS struct {
	spec Spec
	k    *Keeper
	ns   string // the keeper's PID namespace
}

func startFreezeWS(t *testing.T) *freezeWS {
	t.Helper()
	spec := newSpec(t, "")
	k := startKeeper(t, spec)
	ns, err := os.Readlink("/proc/" + itoa(k.PID) + "/ns/pid")
	if err != nil {
		t.Fatal(err)
	}
	w := &freezeWS{spec: spec, k: k, ns: ns}
	mark := marker()
	r := execIn(t, spec, sh(`(i=0; while :; do i=$((i+1)); echo $i > count.tmp; mv count.tmp count; done) >/dev/null 2>&1 &
		sleep `+mark+` >/dev/null 2>&1 &`))
	if r.Code != 0 {
		t.Fatalf("background writer: %v %q", r.ExitStatus, r.stderr)
	}
	if !waitFor(10*time.Second, func() bool { return len(procsWith(mark)) == 1 && w.count(t) > 0 }) {
		t.Fatalf("the background writer and sleep %s did not start", mark)
	}
	return w
}

// workers lists the workspace's processes but its keeper.
func (w *freezeWS) workers() []int {
	var out []int
	for _, pid := range procsInPIDNS(w.ns) {
		if pid != w.k.PID {
			out = append(out, pid)
		}
	}
	return out
}

// states maps each of the workspace's processes but the keeper to its
// state (R, S, T, ...).
func (w *freezeWS) states() map[int]byte {
	out := map[int]byte{}
	for _, pid := range w.workers() {
		if state, _, err := procStat(itoa(pid)); err == nil && state != 'Z' && state != 'X' {
			out[pid] = state
		}
	}
	return out
}

// requireStopped fails the test unless every process of the workspace but
// the keeper is stopped, and there are at least two (the writer and the
// sleep). Stopped is state T, or D for a vfork parent whose child was
// stopped before it exec'd (the shell starting mv): such a parent runs no
// code until its child goes on. A child that exec'd just before it
// stopped releases its parent, which then stops: hence the poll.
func (w *freezeWS) requireStopped(t *testing.T, what string) {
	t.Helper()
	var st map[int]byte
	var bad []string
	waitFor(5*time.Second, func() bool {
		st, bad = w.states(), nil
		for pid, s := range st {
			if s != 'T' && !(s == 'D' && stoppedChild(st, pid)) {
				bad = append(bad, fmt.Sprintf("%d (%c)", pid, s))
			}
		}
		return len(bad) == 0
	})
	if len(st) < 2 {
		t.Fatalf("%s: %d processes in the workspace (%s); want the writer and the sleep at least", what, len(st), fmtStates(st))
	}
	if len(bad) > 0 {
		t.Fatalf("%s: processes %v are not stopped (all: %s)", what, bad, fmtStates(st))
	}
}

// stoppedChild reports whether a child of pid is among st, stopped.
func stoppedChild(st map[int]byte, pid int) bool {
	for c, s := range st {
		if s == 'T' && procPPID(c) == pid {
			return true
		}
	}
	return false
}

// procPPID is field 4 of /proc/PID/stat, -1 when unreadable.
func procPPID(pid int) int {
	b, err := os.ReadFile("/proc/" + itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return -1
	}
	n, err := strconv.Atoi(f[1])
	if err != nil {
		return -1
	}
	return n
}

// requireRunning fails the test unless, within a generous deadline, no
// process of the workspace is stopped and the writer's count passes from.
func (w *freezeWS) requireRunning(t *testing.T, what string, from int) {
	t.Helper()
	noneStopped := func() bool {
		for _, s := range w.states() {
			if s == 'T' {
				return false
			}
		}
		return true
	}
	if !waitFor(10*time.Second, noneStopped) {
		t.Fatalf("%s: processes still stopped: %s", what, fmtStates(w.states()))
	}
	if !waitFor(10*time.Second, func() bool { return w.count(t) > from }) {
		t.Fatalf("%s: the writer's count stays at %d", what, w.count(t))
	}
}

// count is the writer's current number (0 before its first).
func (w *freezeWS) count(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(w.spec.Upper, "count"))
	if os.IsNotExist(err) {
		return 0
	} else if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("count = %q: %v", b, err) // mv replaces it whole: never torn
	}
	return n
}

func fmtStates(st map[int]byte) string {
	var parts []string
	for pid, s := range st {
		parts = append(parts, fmt.Sprintf("%d:%c", pid, s))
	}
	return strings.Join(parts, " ")
}

// stillStopped waits a moment and checks that the workspace is still
// stopped and its writer has not moved on: nothing resumed it behind the
// test's back.
func (w *freezeWS) stillStopped(t *testing.T, what string, at int) {
	t.Helper()
	time.Sleep(50 * time.Millisecond)
	w.requireStopped(t, what)
	if n := w.count(t); n != at {
		t.Fatalf("%s: the writer went on from %d to %d while stopped", what, at, n)
	}
}

// startFreezer starts the test-freezer entry (mode "direct" or "keeper")
// on dir and returns once it reports the workspace frozen.
func startFreezer(t *testing.T, mode, dir string) *exec.Cmd {
	t.Helper()
	cmd := Reexec(entryTestFreezer, mode, dir)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		line <- l
		io.Copy(io.Discard, out)
	}()
	select {
	case l := <-line:
		if l != "frozen\n" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("freezer (%s): %q", mode, l)
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("freezer (%s) did not report", mode)
	}
	return cmd
}

// TestFreeze: Freeze stops every process of the workspace but its keeper
// (state T, the writer's count stays), marks the workspace frozen by this
// process, and a command run meanwhile does not resume them (the freezer
// is alive); thaw resumes them all and removes the mark. A workspace with
// no keeper has nothing to freeze.
func TestFreeze(t *testing.T) {
	both(t, func(t *testing.T) {
		w := startFreezeWS(t)
		thaw, err := Freeze(w.spec.Dir)
		if err != nil {
			t.Fatalf("Freeze: %v", err)
		}
		thawed := false
		defer func() {
			if !thawed {
				thaw()
			}
		}()
		w.requireStopped(t, "after Freeze")
		at := w.count(t)
		b, err := os.ReadFile(filepath.Join(w.spec.Dir, frozenFile))
		if err != nil {
			t.Fatalf("no frozen mark after Freeze: %v", err)
		}
		if f := strings.Fields(string(b)); len(f) != 2 || f[0] != itoa(os.Getpid()) {
			t.Errorf("frozen mark %q does not name the freezer %d", b, os.Getpid())
		}
		// A command meanwhile runs (the keeper is not stopped) and leaves
		// the workspace frozen: its freezer is alive.
		if r := execIn(t, w.spec, sh("echo during > during")); r.Code != 0 {
			t.Fatalf("exec while frozen: %v %q", r.ExitStatus, r.stderr)
		}
		w.stillStopped(t, "after an exec while frozen", at)

		thaw()
		thawed = true
		w.requireRunning(t, "after thaw", at)
		if _, err := os.Lstat(filepath.Join(w.spec.Dir, frozenFile)); err == nil {
			t.Errorf("frozen mark left after thaw")
		}

		// Nothing to freeze without a keeper.
		if err := StopKeeper(context.Background(), w.spec.Dir); err != nil {
			t.Fatal(err)
		}
		thaw, err = Freeze(w.spec.Dir)
		if err != nil {
			t.Fatalf("Freeze of a stopped workspace: %v", err)
		}
		thaw()
		if _, err := os.Lstat(filepath.Join(w.spec.Dir, frozenFile)); err == nil {
			t.Errorf("frozen mark left by Freeze of a stopped workspace")
		}
	})
}

// TestFreezeKilled: a freezer SIGKILLed before it thaws leaves the
// workspace stopped, marked frozen; the next Exec into the workspace
// resumes every process and removes the mark.
func TestFreezeKilled(t *testing.T) {
	both(t, func(t *testing.T) {
		w := startFreezeWS(t)
		fr := startFreezer(t, "direct", w.spec.Dir)
		w.requireStopped(t, "frozen by the freezer")
		at := w.count(t)
		if b, err := os.ReadFile(filepath.Join(w.spec.Dir, frozenFile)); err != nil || !strings.HasPrefix(string(b), itoa(fr.Process.Pid)+" ") {
			t.Errorf("frozen mark = %q, %v; want it to name the freezer %d", b, err, fr.Process.Pid)
		}
		fr.Process.Kill()
		fr.Wait()
		w.stillStopped(t, "after the freezer was killed", at)
		if _, err := os.Lstat(filepath.Join(w.spec.Dir, frozenFile)); err != nil {
			t.Fatalf("frozen mark gone with its freezer: %v", err)
		}

		if r := execIn(t, w.spec, Command{Argv: []string{"true"}}); r.Code != 0 {
			t.Fatalf("exec after the killed freezer: %v %q", r.ExitStatus, r.stderr)
		}
		w.requireRunning(t, "after the next exec", at)
		if _, err := os.Lstat(filepath.Join(w.spec.Dir, frozenFile)); err == nil {
			t.Errorf("frozen mark left after the next exec resumed the workspace")
		}
	})
}

// TestThawStale: ThawStale resumes a stopped workspace unless the frozen
// mark names a live freezer: a dead process, a reused pid (another start
// time) or a garbled mark mean nobody will thaw it.
func TestThawStale(t *testing.T) {
	both(t, func(t *testing.T) {
		w := startFreezeWS(t)
		_, selfStart, err := procStat("self")
		if err != nil {
			t.Fatal(err)
		}
		dead := exec.Command("true")
		if err := dead.Run(); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name, mark string
			resumed    bool
		}{
			{"live freezer", fmt.Sprintf("%d %d\n", os.Getpid(), selfStart), false},
			{"dead freezer", fmt.Sprintf("%d %d\n", dead.Process.Pid, selfStart), true},
			{"reused pid", fmt.Sprintf("%d %d\n", os.Getpid(), selfStart+1), true},
			{"garbled", "x\n", true},
		} {
			t.Run(c.name, func(t *testing.T) {
				stopped, err := stopAll(func() []int { return pidsInNS(w.ns) }, w.k.PID)
				if err != nil {
					t.Fatal(err)
				}
				defer contAll(stopped)
				marker := filepath.Join(w.spec.Dir, frozenFile)
				if err := os.WriteFile(marker, []byte(c.mark), 0o600); err != nil {
					t.Fatal(err)
				}
				defer os.Remove(marker)
				w.requireStopped(t, "stopped by hand")
				at := w.count(t)
				ThawStale(w.spec.Dir)
				if !c.resumed {
					w.stillStopped(t, "ThawStale with a live freezer", at)
					if _, err := os.Lstat(marker); err != nil {
						t.Errorf("ThawStale removed a live freezer's mark: %v", err)
					}
					return
				}
				w.requireRunning(t, "after ThawStale", at)
				if _, err := os.Lstat(marker); err == nil {
					t.Errorf("ThawStale left the stale mark")
				}
			})
		}
	})
}

// TestFreezeByKeeper: the keeper's Freeze (how a --subids workspace is
// frozen from its mapped namespace) stops every other process of the
// workspace until the client hangs up, however it ends: closing the
// connection or being SIGKILLed. It leaves no frozen mark: nothing is
// left for the next command to resume.
func TestFreezeByKeeper(t *testing.T) {
	both(t, func(t *testing.T) {
		w := startFreezeWS(t)
		thaw, err := freezeByKeeper(w.spec.Dir)
		if err != nil {
			if strings.Contains(err.Error(), "no private /proc") {
				testutil.Skip(t, err.Error())
			}
			t.Fatalf("freezeByKeeper: %v", err)
		}
		w.requireStopped(t, "after the keeper's Freeze")
		at := w.count(t)
		thaw()
		w.requireRunning(t, "after hanging up", at)

		fr := startFreezer(t, "keeper", w.spec.Dir)
		w.requireStopped(t, "frozen by the keeper for a client")
		at = w.count(t)
		if _, err := os.Lstat(filepath.Join(w.spec.Dir, frozenFile)); err == nil {
			t.Errorf("the keeper's Freeze left a frozen mark")
		}
		if err := fr.Process.Signal(unix.SIGKILL); err != nil {
			t.Fatal(err)
		}
		fr.Wait()
		w.requireRunning(t, "after the client was killed", at)
	})
}

// TestFreezeVfork: Freeze succeeds while shells start commands: a parent
// caught in vfork, its child stopped before exec, waits in state D until
// thawed, and counts as stopped. Without that, Freeze failed after 5 s
// ("process N does not stop (state D)") whenever it caught one, which a
// shell loop makes likely: each cycle here freezes three of them.
func TestFreezeVfork(t *testing.T) {
	both(t, func(t *testing.T) {
		w := startFreezeWS(t)
		if r := execIn(t, w.spec, sh(`for i in 1 2 3; do (while :; do /bin/true; done) >/dev/null 2>&1 & done`)); r.Code != 0 {
			t.Fatalf("shell loops: %v %q", r.ExitStatus, r.stderr)
		}
		caught := 0
		cycles := 0
		for ; cycles < 200 && caught < 3; cycles++ {
			thaw, err := Freeze(w.spec.Dir)
			if err != nil {
				t.Fatalf("Freeze, cycle %d: %v", cycles, err)
			}
			st := w.states()
			for pid, s := range st {
				if s == 'D' && stoppedChild(st, pid) {
					caught++
					break
				}
			}
			w.requireStopped(t, fmt.Sprintf("cycle %d", cycles))
			at := w.count(t)
			thaw()
			w.requireRunning(t, fmt.Sprintf("after cycle %d", cycles), at)
		}
		t.Logf("%d freezes caught a shell in vfork in %d cycles", caught, cycles)
		if caught == 0 {
			t.Fatalf("no freeze in %d caught a shell in vfork: the test proves nothing here", cycles)
		}
	})
}

// TestFreezeTakesTurns: a second freezer of a workspace (two commits at
// once) waits until the first thaws, and the first's thaw does not resume
// what the second is still reading behind. Without the freeze lock, the
// first thaw resumed every process the second had also stopped.
func TestFreezeTakesTurns(t *testing.T) {
	both(t, func(t *testing.T) {
		w := startFreezeWS(t)
		thaw1, err := Freeze(w.spec.Dir)
		if err != nil {
			t.Fatalf("Freeze: %v", err)
		}
		w.requireStopped(t, "after the first Freeze")
		second := make(chan func(), 1)
		go func() {
			thaw2, err := Freeze(w.spec.Dir)
			if err != nil {
				t.Errorf("second Freeze: %v", err)
				thaw2 = func() {}
			}
			second <- thaw2
		}()
		select {
		case thaw2 := <-second:
			thaw2()
			thaw1()
			t.Fatal("a second Freeze went ahead while the first held the workspace")
		case <-time.After(300 * time.Millisecond):
		}
		thaw1()
		var thaw2 func()
		select {
		case thaw2 = <-second:
		case <-time.After(10 * time.Second):
			t.Fatal("the second Freeze did not go ahead after the first thawed")
		}
		// Both thawed in turn; the second holds the workspace now.
		w.requireStopped(t, "while the second freezer holds it")
		at := w.count(t)
		thaw2()
		w.requireRunning(t, "after the second thaw", at)
	})
}

// TestFreezeNestedPIDNS: Freeze stops a process of a PID namespace nested
// in the workspace's (unshare -p inside it; rootless, with a nested user
// namespace: unshare -r -p), which writes to the workspace
// as much as any other; the keeper's descendants, as nsProcesses lists
// them while everything is stopped, are exactly what a scan of every
// process finds in the namespace plus those of the nested one.
func TestFreezeNestedPIDNS(t *testing.T) {
	both(t, func(t *testing.T) {
		w := startFreezeWS(t)
		mark := marker()
		if r := execIn(t, w.spec, sh(`(unshare -p -f sleep `+mark+` || unshare -r -p -f sleep `+mark+`) >/dev/null 2>&1 &`)); r.Code != 0 {
			t.Fatalf("unshare -p in the workspace: %v %q", r.ExitStatus, r.stderr)
		}
		var nested int
		if !waitFor(10*time.Second, func() bool {
			for _, p := range procsWith(mark) { // unshare and its child
				if comm, _ := os.ReadFile("/proc/" + itoa(p) + "/comm"); string(comm) == "sleep\n" {
					nested = p
				}
			}
			return nested != 0
		}) {
			t.Fatalf("sleep %s in a nested PID namespace did not start", mark)
		}
		ns, err := os.Readlink("/proc/" + itoa(nested) + "/ns/pid")
		if err != nil || ns == w.ns {
			t.Fatalf("sleep %s: PID namespace %q (%v); want one nested in the workspace's %s", mark, ns, err, w.ns)
		}
		thaw, err := Freeze(w.spec.Dir)
		if err != nil {
			t.Fatalf("Freeze: %v", err)
		}
		defer thaw()
		w.requireStopped(t, "after Freeze")
		if !waitFor(5*time.Second, func() bool {
			s, _, err := procStat(itoa(nested))
			return err == nil && s == 'T'
		}) {
			s, _, _ := procStat(itoa(nested))
			t.Errorf("the nested namespace's sleep is in state %c after Freeze; want T", s)
		}
		if !walkable(w.k.PID) {
			t.Skip("no /proc/PID/task/TID/children (CONFIG_PROC_CHILDREN): Freeze scans every process")
		}
		got := descendants(w.k.PID)
		want := map[int]bool{}
		for _, p := range append(pidsInNS(w.ns), pidsInNS(ns)...) {
			want[p] = true
		}
		have := map[int]bool{}
		for _, p := range got {
			have[p] = true
		}
		for p := range want {
			if !have[p] {
				t.Errorf("descendants of the keeper %d lack %d", w.k.PID, p)
			}
		}
		for p := range have {
			if !want[p] {
				t.Errorf("descendants of the keeper %d include %d, in no namespace of the workspace", w.k.PID, p)
			}
		}
	})
}
