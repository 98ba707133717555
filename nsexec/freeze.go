package nsexec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
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
// naming itself first, and the next Exec, Freeze or StartKeeper of the
// workspace whose freezer is gone resumes every process (ThawStale).
func Freeze(dir string) (thaw func(), err error) {
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
	stopped, err := stopAll(func() []int { return pidsInNS(ns) }, k.PID)
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
	// (state T), so that no write is still in flight.
	for pid := range stopped {
		for {
			state, _, err := procStat(strconv.Itoa(pid))
			if err != nil || state == 'T' || state == 't' || state == 'Z' || state == 'X' {
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
			for _, p := range pidsInNS(ns) {
				if p != k.PID {
					_ = unix.Kill(p, syscall.SIGCONT)
				}
			}
		}
	}
	_ = os.Remove(marker)
}
