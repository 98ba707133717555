package seccomp

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// Compile turns the filter into classic BPF programs that a process can
// load without libseccomp: seccomp(SECCOMP_SET_MODE_FILTER) once per
// program, in order, after prctl(PR_SET_NO_NEW_PRIVS). Loaded, they deny
// exactly what Apply denies: the hand-assembled program for the syscalls
// the linked libseccomp does not know (see Rule.Nr) followed by
// libseccomp's program for the rest (seccomp_export_bpf), usually joined
// into one program.
//
// It exists for nsexec, whose re-executed child is pure Go (no cgo, so no
// libseccomp) to start fast: the parent compiles, the child loads. The
// programs are for the machine that compiled them (the native byte order
// and architectures of the plan).
func Compile(f *Filter) ([][]unix.SockFilter, error) {
	if f == nil || len(f.Arches) == 0 {
		return nil, fmt.Errorf("seccomp: Compile: %w: empty filter", ErrInvalidPolicy)
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
