//go:build linux && cgo

// Package compiler compiles seccomp plans to classic BPF with libseccomp,
// the only code of strata that links it (and so cgo). strata itself does
// not: it loads the programs this package compiled once, embedded in
// package seccomp by `go generate ./seccomp` (seccomp/internal/gen), and
// TestProgramsFresh fails when they no longer match what this package
// compiles from the current plans. See docs/sandbox.md, "Compiled once".
package compiler

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"syscall"

	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/seccomp"
)

// Compile turns the filter into classic BPF programs that a process can
// load without libseccomp: seccomp(SECCOMP_SET_MODE_FILTER) once per
// program, in order, after prctl(PR_SET_NO_NEW_PRIVS): the hand-assembled
// program for the syscalls the linked libseccomp does not know (see
// seccomp.Rule.Nr) followed by libseccomp's program for the rest
// (seccomp_export_bpf), usually joined into one program.
//
// The programs are for the plan's architectures, whatever machine
// compiles them (libseccomp builds filters for foreign arches; every arch
// strata plans is little-endian).
func Compile(f *seccomp.Filter) ([][]unix.SockFilter, error) {
	if f == nil || len(f.Arches) == 0 {
		return nil, fmt.Errorf("seccomp: Compile: %w: empty filter", seccomp.ErrInvalidPolicy)
	}
	filter, fallback, err := build(f)
	if err != nil {
		return nil, err
	}
	defer filter.Release()
	// A binary tree of syscall numbers instead of libseccomp's default
	// linear list: the same rules, but loading costs a quarter (the
	// kernel runs the filter once per syscall number to build its action
	// cache, kernel/seccomp.c seccomp_cache_prepare: 340 µs down to 90 µs
	// for the agent filter), and every filtered syscall takes a short
	// path. Apply, which loads with libseccomp, is left as it is.
	if err := filter.SetOptimize(2); err != nil {
		return nil, fmt.Errorf("seccomp: binary tree optimization: %w", err)
	}
	// libseccomp 2.5 exports only to a file descriptor
	// (seccomp_export_bpf_mem is 2.6+): a memfd keeps it off the disk.
	fd, err := unix.MemfdCreate("strata-seccomp-bpf", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("seccomp: Compile: memfd_create: %w", err)
	}
	mem := os.NewFile(uintptr(fd), "strata-seccomp-bpf")
	defer mem.Close()
	if err := filter.ExportBPF(mem); err != nil {
		return nil, fmt.Errorf("seccomp: export BPF: %w", err)
	}
	if _, err := mem.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("seccomp: export BPF: %w", err)
	}
	b, err := io.ReadAll(mem)
	if err != nil {
		return nil, fmt.Errorf("seccomp: export BPF: %w", err)
	}
	prog, err := decodeBPF(b)
	if err != nil {
		return nil, err
	}
	if len(fallback) == 0 {
		return [][]unix.SockFilter{prog}, nil
	}
	// One program instead of two, each load costing tens of µs: the
	// hand-assembled program's every path to its final "ret ALLOW" is a
	// forward jump or a fall-through, so with that instruction replaced
	// by libseccomp's program, what it allowed goes on to be filtered by
	// libseccomp's, exactly as two stacked filters would.
	raw, err := rawProgram(fallback)
	if err != nil {
		return nil, err
	}
	last := raw[len(raw)-1]
	if last.Code != unix.BPF_RET|unix.BPF_K || last.K != unix.SECCOMP_RET_ALLOW {
		return nil, fmt.Errorf("seccomp: fallback program does not end in ret ALLOW")
	}
	merged := append(raw[:len(raw)-1:len(raw)-1], prog...)
	if len(merged) > bpfMaxInsns {
		return [][]unix.SockFilter{raw, prog}, nil
	}
	return [][]unix.SockFilter{merged}, nil
}

// sockFilterSize is sizeof(struct sock_filter): u16 code, u8 jt, u8 jf,
// u32 k, in the machine's byte order (Linux: include/uapi/linux/filter.h).
const sockFilterSize = 8

// bpfMaxInsns is BPF_MAXINSNS (Linux: include/uapi/linux/bpf_common.h):
// the kernel refuses a longer classic program.
const bpfMaxInsns = 4096

func decodeBPF(b []byte) ([]unix.SockFilter, error) {
	if len(b) == 0 || len(b)%sockFilterSize != 0 {
		return nil, fmt.Errorf("seccomp: export BPF: %d bytes is not a program of %d-byte instructions", len(b), sockFilterSize)
	}
	n := len(b) / sockFilterSize
	if n > bpfMaxInsns {
		return nil, fmt.Errorf("seccomp: export BPF: %d instructions; the kernel loads at most %d", n, bpfMaxInsns)
	}
	prog := make([]unix.SockFilter, n)
	for i := range prog {
		in := b[i*sockFilterSize:]
		prog[i] = unix.SockFilter{
			Code: binary.NativeEndian.Uint16(in[0:]),
			Jt:   in[2],
			Jf:   in[3],
			K:    binary.NativeEndian.Uint32(in[4:]),
		}
	}
	return prog, nil
}

var errnos = map[string]syscall.Errno{
	"EPERM":  unix.EPERM,
	"ENOSYS": unix.ENOSYS,
	"EACCES": unix.EACCES,
}

var ops = map[seccomp.Op]libseccomp.ScmpCompareOp{
	seccomp.OpEq:       libseccomp.CompareEqual,
	seccomp.OpNe:       libseccomp.CompareNotEqual,
	seccomp.OpGt:       libseccomp.CompareGreater,
	seccomp.OpMaskedEq: libseccomp.CompareMaskedEqual,
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
func build(f *seccomp.Filter) (*libseccomp.ScmpFilter, []rawRule, error) {
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

func archFilter(native libseccomp.ScmpArch, ar seccomp.ArchRules) (*libseccomp.ScmpFilter, []rawRule, error) {
	arch, err := libseccomp.GetArchFromString(ar.Arch)
	if err != nil {
		return nil, nil, fmt.Errorf("seccomp: arch %q: %w", ar.Arch, err)
	}
	audit, ok := auditArch[ar.Arch]
	if !ok {
		return nil, nil, fmt.Errorf("%w: %q", seccomp.ErrUnsupportedArch, ar.Arch)
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
			return nil, nil, fmt.Errorf("seccomp: %s: rule %s: %w: errno %q", ar.Arch, r.Syscall, seccomp.ErrInvalidPolicy, r.Errno)
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

func addRule(filter *libseccomp.ScmpFilter, call libseccomp.ScmpSyscall, errno syscall.Errno, r seccomp.Rule) error {
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
			return fmt.Errorf("rule %s: %w: op %q", r.Syscall, seccomp.ErrInvalidPolicy, a.Op)
		}
		values := []uint64{a.Value}
		if a.Op == seccomp.OpMaskedEq {
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

// Version is the linked libseccomp's version, which decides the programs
// (which syscalls it knows, how it lays out the tree).
func Version() string {
	major, minor, micro := libseccomp.GetLibraryVersion()
	return fmt.Sprintf("libseccomp %d.%d.%d", major, minor, micro)
}
