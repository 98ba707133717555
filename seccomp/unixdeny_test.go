package seccomp

import (
	"errors"
	"runtime"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/internal/testutil"
)

// TestUnixSocketDenyShape: one block per audit arch (x32 in amd64's),
// socketcall on i386 only, and a deny of EPERM.
func TestUnixSocketDenyShape(t *testing.T) {
	for _, goarch := range GOARCHes() {
		prog, err := UnixSocketDeny(goarch)
		if err != nil {
			t.Fatalf("%s: %v", goarch, err)
		}
		var audits, socketcall int
		var deny bool
		for _, in := range prog {
			if in.Code == unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K {
				switch in.K {
				case unix.AUDIT_ARCH_X86_64, unix.AUDIT_ARCH_I386, unix.AUDIT_ARCH_AARCH64, unix.AUDIT_ARCH_ARM:
					audits++
				case 102:
					socketcall++
				}
			}
			if in.Code == unix.BPF_RET|unix.BPF_K && in.K == unix.SECCOMP_RET_ERRNO|uint32(unix.EPERM) {
				deny = true
			}
		}
		want := map[string][2]int{"amd64": {2, 1}, "386": {1, 1}, "arm64": {2, 0}, "arm": {1, 0}}[goarch]
		if audits != want[0] || socketcall != want[1] || !deny {
			t.Errorf("%s: %d arch blocks, %d socketcall checks, deny %v; want %v", goarch, audits, socketcall, deny, want)
		}
	}
}

// TestUnixSocketDeny: loaded on top of nothing, in a child, the program
// denies socket(AF_UNIX) — also with garbage in the upper half of the
// family register — and leaves socketpair(AF_UNIX) and IP sockets alone.
func TestUnixSocketDeny(t *testing.T) {
	if ok, why := Available(); !ok {
		testutil.Skip(t, why)
	}
	for _, v := range variants {
		t.Run(v, func(t *testing.T) {
			if !inChild(t, v) {
				return
			}
			prog, err := UnixSocketDeny(runtime.GOARCH)
			if err != nil {
				t.Fatal(err)
			}
			runtime.LockOSThread()
			if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
				t.Fatal(err)
			}
			fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
			if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog))); e != 0 {
				t.Fatalf("load: %v", e)
			}
			if _, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0); !errors.Is(err, syscall.EPERM) {
				t.Errorf("socket(AF_UNIX) = %v; want EPERM", err)
			}
			if _, _, e := unix.RawSyscall(unix.SYS_SOCKET, 1<<32|unix.AF_UNIX, unix.SOCK_DGRAM, 0); e != unix.EPERM {
				t.Errorf("socket(1<<32|AF_UNIX) = %v; want EPERM", e)
			}
			fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
			if err != nil {
				t.Errorf("socketpair: %v", err)
			} else {
				unix.Close(fds[0])
				unix.Close(fds[1])
			}
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
			if err != nil {
				t.Errorf("socket(AF_INET): %v", err)
			} else {
				unix.Close(fd)
			}
		})
	}
}
