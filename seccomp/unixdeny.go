package seccomp

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// UnixSocketDeny is a classic BPF program, assembled here in pure Go (no
// libseccomp), that denies socket(2) with family AF_UNIX (EPERM), and on
// i386 socketcall(2), whose arguments seccomp cannot see; everything else
// it allows. A command that runs without any namespace (a reflink or copy
// workspace where user namespaces are denied, nsexec.RunNoNS) loads it
// after the preset's program: without a mount namespace the host's
// pathname sockets — the session bus, ssh-agent, docker.sock — are on
// paths the command can reach, Landlock does not govern connect(2) to them
// before ABI 9, and a process that cannot create a unix socket cannot
// connect to one. socketpair(2) stays allowed (pipes between a command's
// own processes: node's and python's child-process channels). Filters
// stack: the kernel applies the most restrictive answer of all loaded
// programs, so this one needs to know nothing of the preset's rules, and
// an arch it does not know it allows (the preset's program kills those).
//
// The family is compared on its low 32 bits (an int, which is what the
// kernel uses, whatever the upper half of the register holds); every
// supported arch is little-endian, so those are the first word of the
// argument in seccomp_data.
func UnixSocketDeny(goarch string) ([]unix.SockFilter, error) {
	arches, err := Archs(goarch)
	if err != nil {
		return nil, err
	}
	// One block per audit arch: x32's calls come as AUDIT_ARCH_X86_64
	// with the x32 bit in the number, so they join amd64's block.
	var blocks []socketNrs
	for _, arch := range arches {
		nrs, ok := unixSocketNrs[arch]
		if !ok {
			return nil, fmt.Errorf("%w: no socket(2) numbers for %q", ErrUnsupportedArch, arch)
		}
		merged := false
		for i := range blocks {
			if blocks[i].audit == nrs.audit {
				blocks[i].socket = append(blocks[i].socket, nrs.socket...)
				merged = true
			}
		}
		if !merged {
			nrs.socket = append([]uint32(nil), nrs.socket...)
			blocks = append(blocks, nrs)
		}
	}
	var a bpfAsm
	a.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offArch)
	for i, nrs := range blocks {
		next := fmt.Sprintf("after-%d", i)
		a.jeq(nrs.audit, "", next)
		a.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offNr)
		for _, nr := range nrs.socket {
			a.jeq(nr, "family", "")
		}
		if nrs.socketcall != 0 {
			a.jeq(nrs.socketcall, "deny", "")
		}
		a.stmt(unix.BPF_RET|unix.BPF_K, unix.SECCOMP_RET_ALLOW)
		a.label(next)
	}
	a.stmt(unix.BPF_RET|unix.BPF_K, unix.SECCOMP_RET_ALLOW)
	a.label("family")
	a.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offArg0Low)
	a.jeq(unix.AF_UNIX, "deny", "")
	a.stmt(unix.BPF_RET|unix.BPF_K, unix.SECCOMP_RET_ALLOW)
	a.label("deny")
	a.stmt(unix.BPF_RET|unix.BPF_K, unix.SECCOMP_RET_ERRNO|uint32(unix.EPERM))
	return a.assemble()
}

// Offsets in struct seccomp_data (Linux: include/uapi/linux/seccomp.h):
// nr, arch, instruction_pointer, args[6].
const (
	offNr      = 0
	offArch    = 4
	offArg0Low = 16
)

// socketNrs are socket(2)'s numbers on one arch (x32 calls come with
// AUDIT_ARCH_X86_64 and the x32 bit set), and socketcall(2)'s where it
// exists. Linux: arch/*/entry/syscalls/*.tbl, include/uapi/asm-generic/unistd.h.
type socketNrs struct {
	audit      uint32
	socket     []uint32
	socketcall uint32
}

var unixSocketNrs = map[string]socketNrs{
	"amd64": {audit: unix.AUDIT_ARCH_X86_64, socket: []uint32{41}},
	"x32":   {audit: unix.AUDIT_ARCH_X86_64, socket: []uint32{41 | x32SyscallBit}},
	"x86":   {audit: unix.AUDIT_ARCH_I386, socket: []uint32{359}, socketcall: 102},
	"arm64": {audit: unix.AUDIT_ARCH_AARCH64, socket: []uint32{198}},
	"arm":   {audit: unix.AUDIT_ARCH_ARM, socket: []uint32{281}},
}

// bpfAsm assembles classic BPF with forward jumps to labels.
type bpfAsm struct {
	prog   []unix.SockFilter
	jumps  []bpfJump
	labels map[string]int
}

type bpfJump struct {
	pc     int
	jt, jf string // "" is the next instruction
}

func (a *bpfAsm) stmt(code uint16, k uint32) {
	a.prog = append(a.prog, unix.SockFilter{Code: code, K: k})
}

func (a *bpfAsm) jeq(k uint32, jt, jf string) {
	a.jumps = append(a.jumps, bpfJump{len(a.prog), jt, jf})
	a.prog = append(a.prog, unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: k})
}

func (a *bpfAsm) label(name string) {
	if a.labels == nil {
		a.labels = map[string]int{}
	}
	a.labels[name] = len(a.prog)
}

func (a *bpfAsm) assemble() ([]unix.SockFilter, error) {
	off := func(pc int, label string) (uint8, error) {
		if label == "" {
			return 0, nil
		}
		to, ok := a.labels[label]
		d := to - pc - 1
		if !ok || d < 0 || d > 255 {
			return 0, fmt.Errorf("seccomp: bpf jump to %q from %d: out of range", label, pc)
		}
		return uint8(d), nil
	}
	for _, j := range a.jumps {
		var err error
		if a.prog[j.pc].Jt, err = off(j.pc, j.jt); err != nil {
			return nil, err
		}
		if a.prog[j.pc].Jf, err = off(j.pc, j.jf); err != nil {
			return nil, err
		}
	}
	if len(a.prog) > bpfMaxInsns {
		return nil, fmt.Errorf("seccomp: %d instructions", len(a.prog))
	}
	return a.prog, nil
}
