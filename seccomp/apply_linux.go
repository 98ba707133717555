package seccomp

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Program returns the classic BPF programs that enforce f, as nsexec
// loads them (seccomp(SECCOMP_SET_MODE_FILTER) once per program, in
// order, after no_new_privs): the ones libseccomp compiled for this plan
// at `go generate` time, embedded in the binary and selected by the
// plan's key alone, so that strata needs neither cgo nor libseccomp to
// sandbox. ErrNotCompiled when the plan is not one of Presets.
func Program(f *Filter) ([][]unix.SockFilter, error) {
	progs, err := Compiled(f)
	if err != nil {
		return nil, err
	}
	out := make([][]unix.SockFilter, len(progs))
	for i, p := range progs {
		out[i] = make([]unix.SockFilter, len(p))
		for j, in := range p {
			out[i][j] = unix.SockFilter{Code: in.Code, Jt: in.Jt, Jf: in.Jf, K: in.K}
		}
	}
	return out, nil
}

// Apply loads the filter's program (Program) into the calling process,
// irreversibly: every thread gets it (SECCOMP_FILTER_FLAG_TSYNC, so the Go
// runtime's other threads are covered; no_new_privs, set first, is
// synchronized with it), and so does every program exec'd afterwards,
// since a seccomp filter survives execve(2). Call it last before exec:
// after it, the process itself cannot mount or create namespaces either.
// On error the process may be partly filtered and must not exec the
// command. nsexec loads the same programs on one thread instead.
func Apply(f *Filter) error {
	progs, err := Program(f)
	if err != nil {
		return err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("seccomp: prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	for i, prog := range progs {
		fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
		r, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
		runtime.KeepAlive(prog)
		if e != 0 {
			return fmt.Errorf("seccomp: load program %d of %d: %w", i+1, len(progs), e)
		}
		if r != 0 {
			return fmt.Errorf("seccomp: load program %d of %d: thread %d cannot be synchronized (TSYNC)", i+1, len(progs), r)
		}
	}
	return nil
}

// Available reports whether this kernel can load strata's filters, and
// says what it found, for strata doctor. It makes no filter: it asks the
// kernel (prctl, seccomp(SECCOMP_GET_ACTION_AVAIL)) and reads this
// process's Seccomp fields in /proc/self/status.
func Available() (bool, string) {
	// PR_GET_SECCOMP fails with EINVAL on a kernel without
	// CONFIG_SECCOMP; otherwise it returns this process's mode.
	if _, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0); err != nil {
		return false, fmt.Sprintf("kernel without seccomp (CONFIG_SECCOMP): prctl(PR_GET_SECCOMP): %v", err)
	}
	// SECCOMP_GET_ACTION_AVAIL (Linux 4.14) succeeds only where filter
	// mode exists and knows the action.
	action := uint32(unix.SECCOMP_RET_ERRNO)
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0, uintptr(unsafe.Pointer(&action))); e != 0 {
		return false, fmt.Sprintf("kernel without seccomp filter mode (CONFIG_SECCOMP_FILTER) or older than 4.14: seccomp(SECCOMP_GET_ACTION_AVAIL): %v", e)
	}
	f, err := Plan(Agent(), runtime.GOARCH)
	if err == nil {
		_, err = Compiled(f)
	}
	if err != nil {
		return false, err.Error()
	}
	mode, filters := statusField("Seccomp"), statusField("Seccomp_filters")
	if mode == "" {
		mode = "?"
	}
	if filters == "" {
		filters = "?"
	}
	return true, fmt.Sprintf("seccomp filter mode available (programs compiled by %s); this process: mode %s, %s filters", compiledBy, mode, filters)
}

// statusField reads one field of /proc/self/status.
func statusField(name string) string {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return ""
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
