package seccomp

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"
	"unsafe"

	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"
)

var errnos = map[string]syscall.Errno{
	"EPERM":  unix.EPERM,
	"ENOSYS": unix.ENOSYS,
	"EACCES": unix.EACCES,
}

var ops = map[Op]libseccomp.ScmpCompareOp{
	OpEq:       libseccomp.CompareEqual,
	OpNe:       libseccomp.CompareNotEqual,
	OpGt:       libseccomp.CompareGreater,
	OpMaskedEq: libseccomp.CompareMaskedEqual,
}

// Apply loads the filter into the calling process, irreversibly: every
// thread gets it (libseccomp's NewFilter sets SECCOMP_FILTER_FLAG_TSYNC,
// so the Go runtime's other threads are covered, and no_new_privs, which
// Apply sets first, is synchronized with it), and so does every program
// exec'd afterwards, since a seccomp filter survives execve(2). Call it
// last before exec: after it, the process itself cannot mount or create
// namespaces either. On error the process may be partly filtered and must
// not exec the command.
func Apply(f *Filter) error {
	if f == nil || len(f.Arches) == 0 {
		return fmt.Errorf("seccomp: Apply: %w: empty filter", ErrInvalidPolicy)
	}
	filter, fallback, err := build(f)
	if err != nil {
		return err
	}
	defer filter.Release()

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("seccomp: prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	if len(fallback) > 0 {
		if err := loadRaw(fallback); err != nil {
			return err
		}
	}
	if err := filter.Load(); err != nil {
		return fmt.Errorf("seccomp: load filter: %w", err)
	}
	return nil
}

// rawRule is a deny for a syscall the linked libseccomp cannot name.
type rawRule struct {
	auditArch uint32
	nr        uint32
	errno     syscall.Errno
}

// build turns the plan into one libseccomp filter, plus the rules for
// syscalls libseccomp does not know, which Apply loads as a second,
// hand-assembled filter. Rules differ per arch, and libseccomp adds a rule
// to every arch of a filter, so each arch gets its own filter and they
// are merged.
func build(f *Filter) (*libseccomp.ScmpFilter, []rawRule, error) {
	native, err := libseccomp.GetNativeArch()
	if err != nil {
		return nil, nil, fmt.Errorf("seccomp: native arch: %w", err)
	}
	var merged *libseccomp.ScmpFilter
	var fallback []rawRule
	for _, ar := range f.Arches {
		one, raw, err := archFilter(native, ar)
		if err != nil {
			if merged != nil {
				merged.Release()
			}
			return nil, nil, err
		}
		fallback = append(fallback, raw...)
		if merged == nil {
			merged = one
			continue
		}
		if err := merged.Merge(one); err != nil { // releases one
			merged.Release()
			return nil, nil, fmt.Errorf("seccomp: merge arch %s: %w", ar.Arch, err)
		}
	}
	return merged, fallback, nil
}

func archFilter(native libseccomp.ScmpArch, ar ArchRules) (*libseccomp.ScmpFilter, []rawRule, error) {
	arch, err := libseccomp.GetArchFromString(ar.Arch)
	if err != nil {
		return nil, nil, fmt.Errorf("seccomp: arch %q: %w", ar.Arch, err)
	}
	audit, ok := auditArch[ar.Arch]
	if !ok {
		return nil, nil, fmt.Errorf("%w: %q", ErrUnsupportedArch, ar.Arch)
	}
	filter, err := libseccomp.NewFilter(libseccomp.ActAllow)
	if err != nil {
		return nil, nil, fmt.Errorf("seccomp: new filter: %w", err)
	}
	ok = false
	defer func() {
		if !ok {
			filter.Release()
		}
	}()
	// An arch the filter does not list is not allowed through: the
	// kernel kills the process. On x86-64 all three ABIs are listed, so
	// this only matters for a plan made for another machine.
	if err := filter.SetBadArchAction(libseccomp.ActKillProcess); err != nil {
		return nil, nil, fmt.Errorf("seccomp: bad arch action: %w", err)
	}
	if err := filter.SetNoNewPrivsBit(true); err != nil {
		return nil, nil, fmt.Errorf("seccomp: no_new_privs: %w", err)
	}
	if arch != native {
		if err := filter.AddArch(arch); err != nil {
			return nil, nil, fmt.Errorf("seccomp: add arch %s: %w", ar.Arch, err)
		}
		if err := filter.RemoveArch(native); err != nil {
			return nil, nil, fmt.Errorf("seccomp: remove native arch from %s filter: %w", ar.Arch, err)
		}
	}
	var raw []rawRule
	for _, r := range ar.Rules {
		errno, known := errnos[r.Errno]
		if !known {
			return nil, nil, fmt.Errorf("seccomp: %s: rule %s: %w: errno %q", ar.Arch, r.Syscall, ErrInvalidPolicy, r.Errno)
		}
		// libseccomp takes the native arch's number (or its pseudo
		// number for a syscall the native arch lacks, like i386's
		// socketcall) and translates it by name to each arch of the
		// filter; a number from another arch's table would be taken
		// for whatever native syscall has it.
		call, err := libseccomp.GetSyscallFromName(r.Syscall)
		if err != nil {
			if r.Nr == 0 || len(r.Args) > 0 {
				return nil, nil, fmt.Errorf("seccomp: %s: rule %s: %w", ar.Arch, r.Syscall, err)
			}
			raw = append(raw, rawRule{auditArch: audit, nr: uint32(r.Nr), errno: errno})
			continue
		}
		if err := addRule(filter, call, errno, r); err != nil {
			return nil, nil, fmt.Errorf("seccomp: %s: %w", ar.Arch, err)
		}
	}
	ok = true
	return filter, raw, nil
}

func addRule(filter *libseccomp.ScmpFilter, call libseccomp.ScmpSyscall, errno syscall.Errno, r Rule) error {
	action := libseccomp.ActErrno.SetReturnCode(int16(errno))
	if len(r.Args) == 0 {
		if err := filter.AddRule(call, action); err != nil {
			return fmt.Errorf("rule %s: %w", r.Syscall, err)
		}
		return nil
	}
	conds := make([]libseccomp.ScmpCondition, 0, len(r.Args))
	for _, a := range r.Args {
		op, ok := ops[a.Op]
		if !ok {
			return fmt.Errorf("rule %s: %w: op %q", r.Syscall, ErrInvalidPolicy, a.Op)
		}
		values := []uint64{a.Value}
		if a.Op == OpMaskedEq {
			// libseccomp's SCMP_CMP_MASKED_EQ takes the mask first.
			values = []uint64{a.Mask, a.Value}
		}
		c, err := libseccomp.MakeCondition(a.Index, op, values...)
		if err != nil {
			return fmt.Errorf("rule %s: %w", r.Syscall, err)
		}
		conds = append(conds, c)
	}
	// Not the Exact variant: on i386 libseccomp must be free to filter
	// socket(2) as the direct syscall (its arguments cannot be checked
	// through socketcall(2), which strict denies by its own rule).
	if err := filter.AddRuleConditional(call, action, conds); err != nil {
		return fmt.Errorf("rule %s %v: %w", r.Syscall, r.Args, err)
	}
	return nil
}

// AUDIT_ARCH_* of each arch (Linux: include/uapi/linux/audit.h). x32 runs
// as AUDIT_ARCH_X86_64 with __X32_SYSCALL_BIT in the syscall number.
var auditArch = map[string]uint32{
	"amd64": unix.AUDIT_ARCH_X86_64,
	"x32":   unix.AUDIT_ARCH_X86_64,
	"x86":   unix.AUDIT_ARCH_I386,
	"arm64": unix.AUDIT_ARCH_AARCH64,
	"arm":   unix.AUDIT_ARCH_ARM,
}

// rawProgram assembles classic BPF that fails each rule's syscall with its
// errno on its arch and allows everything else:
//
//	for each arch: ld arch; jne arch → next arch; ld nr;
//	               for each rule: jne nr → next rule; ret ERRNO(errno)
//	ret ALLOW
func rawProgram(rules []rawRule) ([]unix.SockFilter, error) {
	const (
		offNr   = 0 // struct seccomp_data
		offArch = 4
	)
	stmt := func(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }
	jeq := func(k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: jt, Jf: jf, K: k}
	}
	var archs []uint32
	byArch := map[uint32][]rawRule{}
	for _, r := range rules {
		if _, seen := byArch[r.auditArch]; !seen {
			archs = append(archs, r.auditArch)
		}
		byArch[r.auditArch] = append(byArch[r.auditArch], r)
	}
	var prog []unix.SockFilter
	for _, a := range archs {
		body := []unix.SockFilter{stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offNr)}
		for _, r := range byArch[a] {
			body = append(body,
				jeq(r.nr, 0, 1),
				stmt(unix.BPF_RET|unix.BPF_K, unix.SECCOMP_RET_ERRNO|uint32(r.errno)&unix.SECCOMP_RET_DATA))
		}
		if len(body) > 255 {
			return nil, fmt.Errorf("seccomp: %d raw rules for one arch: too many for a jump", len(byArch[a]))
		}
		prog = append(prog, stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offArch), jeq(a, 0, uint8(len(body))))
		prog = append(prog, body...)
	}
	return append(prog, stmt(unix.BPF_RET|unix.BPF_K, unix.SECCOMP_RET_ALLOW)), nil
}

// loadRaw loads rawProgram(rules) on every thread.
func loadRaw(rules []rawRule) error {
	prog, err := rawProgram(rules)
	if err != nil {
		return err
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	r, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if e != 0 {
		return fmt.Errorf("seccomp: load fallback filter: %w", e)
	}
	if r != 0 {
		return fmt.Errorf("seccomp: load fallback filter: thread %d cannot be synchronized (TSYNC)", r)
	}
	return nil
}

// Available reports whether this kernel and libseccomp can load strata's
// filters, and says what it found, for strata doctor.
func Available() (bool, string) {
	major, minor, micro := libseccomp.GetLibraryVersion()
	lib := fmt.Sprintf("libseccomp %d.%d.%d", major, minor, micro)

	// PR_GET_SECCOMP fails with EINVAL on a kernel without
	// CONFIG_SECCOMP; otherwise it returns this process's mode.
	mode, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0)
	if err != nil {
		return false, fmt.Sprintf("kernel without seccomp (CONFIG_SECCOMP): prctl(PR_GET_SECCOMP): %v", err)
	}
	// SECCOMP_GET_ACTION_AVAIL (Linux 4.14) succeeds only where filter
	// mode exists and knows the action.
	action := uint32(unix.SECCOMP_RET_ERRNO)
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0, uintptr(unsafe.Pointer(&action))); e != 0 {
		return false, fmt.Sprintf("kernel without seccomp filter mode (CONFIG_SECCOMP_FILTER) or older than 4.14: seccomp(SECCOMP_GET_ACTION_AVAIL): %v", e)
	}
	if _, err := libseccomp.GetNativeArch(); err != nil {
		return false, fmt.Sprintf("%s unusable: %v", lib, err)
	}
	filters := statusField("Seccomp_filters")
	if filters == "" {
		filters = "?"
	}
	return true, fmt.Sprintf("seccomp filter mode available (%s); this process: mode %d, %s filters", lib, mode, filters)
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
