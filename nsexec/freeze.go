package nsexec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Freeze stops every process of a workspace except its keeper with
// SIGSTOP, so that a commit reads the upper directory while nothing writes
// to it: a file being written is then either before or after a write(2),
// never inside one. thaw resumes them (SIGCONT); call it exactly once.
// With no live keeper there is nothing to freeze and thaw is a no-op.
//
// cgroup.freeze would be atomic, but needs a delegated cgroup (strata
// doctor reports it); SIGSTOP needs nothing. Processes are stopped until a
// pass over the keeper's PID namespace finds no running one, so children
// forked meanwhile are caught too. A stopped process's parent may notice
// (waitpid with WUNTRACED, an interactive shell's "Stopped"); SIGCONT
// undoes it.
//
// A freezer killed before it thaws (SIGKILL in the middle of a commit)
// must not leave the workspace stopped forever: Freeze writes frozenFile
// naming itself first, and the next Exec or Freeze of the workspace whose
// freezer is gone resumes every process (ThawStale).
//
// Freezers of one workspace take turns (an flock on freezeLock, held until
// thaw or the freezer's death): otherwise the first to thaw would resume
// the processes a second one is still reading the upper behind.
func Freeze(dir string) (thaw func(), err error) {
	unlock, err := lockFreeze(dir)
	if err != nil {
		return nil, err
	}
	resume, err := freeze(dir)
	if err != nil {
		unlock()
		return nil, err
	}
	return func() { resume(); unlock() }, nil
}

// freezeLock, in a workspace's state directory, serializes its freezers.
const freezeLock = "freeze.lock"

// lockFreeze takes the workspace's freeze lock, waiting for another
// freezer to thaw. The kernel releases it when the freezer dies.
func lockFreeze(dir string) (unlock func(), err error) {
	fd, err := unix.Open(filepath.Join(dir, freezeLock), unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("freeze workspace: %w", &os.PathError{Op: "open", Path: filepath.Join(dir, freezeLock), Err: err})
	}
	for {
		err = unix.Flock(fd, unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("freeze workspace: lock: %w", err)
	}
	return func() { unix.Close(fd) }, nil
}

func freeze(dir string) (thaw func(), err error) {
	if inSubIDNS {
		return freezeByKeeper(dir)
	}
	ThawStale(dir)
	k, err := FindKeeper(dir)
	if err != nil {
		return func() {}, nil
	}
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", k.PID))
	if err != nil {
		return nil, fmt.Errorf("freeze workspace: %w", err)
	}
	_, start, err := procStat("self")
	if err != nil {
		return nil, fmt.Errorf("freeze workspace: %w", err)
	}
	marker := filepath.Join(dir, frozenFile)
	if err := os.WriteFile(marker, []byte(fmt.Sprintf("%d %d\n", os.Getpid(), start)), 0o600); err != nil {
		return nil, fmt.Errorf("freeze workspace: %w", err)
	}
	stopped, err := stopAll(nsProcesses(k.PID, ns), k.PID)
	if err != nil {
		_ = os.Remove(marker)
		return nil, fmt.Errorf("freeze workspace: %w", err)
	}
	return func() {
		contAll(stopped)
		_ = os.Remove(marker)
	}, nil
}

// stopAll stops every process that list names, but self, with SIGSTOP,
// until a pass finds no new one (children forked meanwhile are caught
// too), and waits until each has stopped. On failure it resumes them.
func stopAll(list func() []int, self int) (map[int]bool, error) {
	stopped := map[int]bool{}
	deadline := time.Now().Add(5 * time.Second)
	for {
		fresh := 0
		for _, pid := range list() {
			if pid == self || stopped[pid] {
				continue
			}
			if err := unix.Kill(pid, syscall.SIGSTOP); err == nil {
				stopped[pid] = true
				fresh++
			}
		}
		if fresh == 0 {
			break
		}
		if time.Now().After(deadline) {
			contAll(stopped)
			return nil, fmt.Errorf("processes keep appearing; commit again when the workspace is quieter")
		}
	}
	// SIGSTOP is asynchronous: wait until each process is really stopped
	// (state T), so that no write is still in flight. A parent in vfork
	// (a shell starting a command, posix_spawn, Go's os/exec) waits in
	// state D until its child execs, which a child stopped before its
	// exec never does: it runs no code and writes nothing until then, and
	// stops as soon as it returns.
	for pid := range stopped {
		for {
			state, _, err := procStat(strconv.Itoa(pid))
			if err != nil || state == 'T' || state == 't' || state == 'Z' || state == 'X' || state == 'D' && inVfork(pid) {
				break
			}
			if time.Now().After(deadline) {
				contAll(stopped)
				return nil, fmt.Errorf("process %d does not stop (state %c)", pid, state)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	return stopped, nil
}

// vforkWchans are the kernel functions a vfork parent waits in, as
// /proc/PID/wchan names them: wait_for_vfork_done, or the function it is
// inlined into (kernel_clone; _do_fork before 5.10, do_fork before 4.2).
var vforkWchans = map[string]bool{"wait_for_vfork_done": true, "kernel_clone": true, "_do_fork": true, "do_fork": true}

// inVfork reports whether pid is blocked in vfork(2), or in clone or
// clone3 with CLONE_VFORK, waiting for its child to exec or exit:
// by /proc/PID/wchan, else by /proc/PID/syscall.
func inVfork(pid int) bool {
	p := "/proc/" + strconv.Itoa(pid)
	if b, err := os.ReadFile(p + "/wchan"); err == nil && vforkWchans[string(b)] {
		return true
	}
	b, err := os.ReadFile(p + "/syscall") // "NR ARG0 ..." while blocked
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return false
	}
	nr, err1 := strconv.Atoi(f[0])
	arg0, err2 := strconv.ParseUint(strings.TrimPrefix(f[1], "0x"), 16, 64)
	switch {
	case err1 != nil || err2 != nil:
		return false
	case nr == unix.SYS_CLONE:
		return arg0&unix.CLONE_VFORK != 0
	case nr == unix.SYS_CLONE3:
		// Its flags are in the caller's memory; clone3 only waits in
		// D for a vfork child (a pending signal restarts a fork).
		return true
	}
	return runtime.GOARCH == "amd64" && nr == 58 // vfork
}

// contAll resumes what stopAll stopped.
func contAll(stopped map[int]bool) {
	for pid := range stopped {
		_ = unix.Kill(pid, syscall.SIGCONT)
	}
}

// procPIDs lists the pids in /proc.
func procPIDs() []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// freezeByKeeper is Freeze from a subordinate-id namespace: the keeper
// stops the processes, and resumes them when the connection closes.
func freezeByKeeper(dir string) (thaw func(), err error) {
	c, err := dialKeeper(dir)
	if errors.Is(err, ErrNotRunning) {
		return func() {}, nil
	} else if err != nil {
		return nil, fmt.Errorf("freeze workspace: %w", err)
	}
	if err := writeFrame(c, &message{Version: protoVersion, Freeze: true}); err != nil {
		c.Close()
		return nil, fmt.Errorf("freeze workspace: %w", err)
	}
	m, err := readFrame(c)
	switch {
	case err != nil:
		c.Close()
		return nil, fmt.Errorf("freeze workspace: %w", err)
	case m.Error != nil:
		c.Close()
		return nil, m.Error.err()
	}
	return func() { c.Close() }, nil
}

// nsProcesses returns what lists the host pids of the processes of the
// PID namespace ns whose init is the keeper init, the keeper included:
// its descendants, read from /proc/PID/task/TID/children, when the kernel
// has that file (CONFIG_PROC_CHILDREN) and init is the namespace's pid 1
// — every process of the namespace descends from it, orphans being
// reparented to it, and so do those of namespaces nested in it, which
// write to the workspace too; else a scan of every process on the host
// (pidsInNS). Which one is decided once, here: stopAll lists again and
// again. The walk costs what the workspace's processes do: the scan, a
// readlink per process of the machine, ran a commit ~1.5 ms on an idle
// 2-vCPU VM with 70 processes, and grows with a busy host's hundreds.
//
// The children files are exact only while the processes listed do not
// fork or exit; stopAll lists until a pass finds no process it has not
// stopped, and a stopped process forks nothing.
func nsProcesses(init int, ns string) func() []int {
	if walkable(init) {
		return func() []int { return descendants(init) }
	}
	return func() []int { return pidsInNS(ns) }
}

// walkable reports whether pid is its PID namespace's init and the
// kernel has the children files descendants reads.
func walkable(pid int) bool {
	p := "/proc/" + strconv.Itoa(pid)
	status, err := os.ReadFile(p + "/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(status), "\n") {
		if f, ok := strings.CutPrefix(line, "NSpid:"); ok {
			ids := strings.Fields(f)
			if len(ids) < 2 || ids[len(ids)-1] != "1" {
				return false
			}
			_, err := os.Stat(p + "/task/" + strconv.Itoa(pid) + "/children")
			return err == nil
		}
	}
	return false
}

// descendants lists root and every process below it, breadth first
// (walkable says whether that is the whole of root's PID namespace).
func descendants(root int) []int {
	out := []int{root}
	seen := map[int]bool{root: true}
	for i := 0; i < len(out); i++ {
		dir := "/proc/" + strconv.Itoa(out[i]) + "/task"
		tasks, err := os.ReadDir(dir)
		if err != nil {
			continue // it exited
		}
		for _, t := range tasks {
			b, err := os.ReadFile(dir + "/" + t.Name() + "/children")
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
					seen[pid] = true
					out = append(out, pid)
				}
			}
		}
	}
	return out
}

// pidsInNS lists the host pids of the processes whose PID namespace is ns
// (the target of a /proc/PID/ns/pid link).
func pidsInNS(ns string) []int {
	var out []int
	for _, pid := range procPIDs() {
		if l, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/pid"); err == nil && l == ns {
			out = append(out, pid)
		}
	}
	return out
}

// frozenFile marks a workspace whose processes a freezer stopped: "PID
// START" of the freezer.
const frozenFile = "frozen"

// ThawStale resumes the processes of a workspace whose freezer died before
// thawing them. It costs one failed stat when nothing is frozen.
func ThawStale(dir string) {
	marker := filepath.Join(dir, frozenFile)
	b, err := os.ReadFile(marker)
	if err != nil {
		return
	}
	var pid int
	var start uint64
	if _, err := fmt.Sscan(string(b), &pid, &start); err == nil && alive(pid, start) {
		return // a live freezer: it thaws them itself
	}
	if k, err := FindKeeper(dir); err == nil {
		if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", k.PID)); err == nil {
			for _, p := range nsProcesses(k.PID, ns)() {
				if p != k.PID {
					_ = unix.Kill(p, syscall.SIGCONT)
				}
			}
		}
	}
	_ = os.Remove(marker)
}
