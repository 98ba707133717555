//go:build linux && cgo

package compiler

import (
	"bytes"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/seccomp"
)

const x32SyscallBit = 0x40000000

// TestProgramsFresh regenerates seccomp/programs_gen.go in memory and
// fails when the committed file differs: a plan, a preset or libseccomp
// changed and `go generate ./seccomp` was not run. It is what proves that
// the programs strata loads without cgo are the ones libseccomp compiles
// from the current plans, byte for byte.
func TestProgramsFresh(t *testing.T) {
	want, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../programs_gen.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		diff, _ := exec.Command("sh", "-c", `diff <(printf '%s' "$1") <(printf '%s' "$2") | head -20`, "sh", string(got), string(want)).Output()
		t.Fatalf("seccomp/programs_gen.go is stale: run `go generate ./seccomp` (with cgo and libseccomp-dev) and commit it\n%s", diff)
	}
}

// TestEmbeddedEqualsCompile: for every preset on every arch, the program
// package seccomp hands out (Program, no cgo) is exactly Compile's.
func TestEmbeddedEqualsCompile(t *testing.T) {
	for _, goarch := range seccomp.GOARCHes() {
		for _, p := range seccomp.Presets() {
			f, err := seccomp.Plan(p.Policy, goarch)
			if err != nil {
				t.Fatal(err)
			}
			want, err := Compile(f)
			if err != nil {
				t.Fatal(err)
			}
			got, err := seccomp.Program(f)
			if err != nil {
				t.Fatalf("%s/%s: %v", p.Name, goarch, err)
			}
			if len(got) != len(want) {
				t.Fatalf("%s/%s: %d programs; Compile made %d", p.Name, goarch, len(got), len(want))
			}
			for i := range want {
				if !slicesEqual(got[i], want[i]) {
					t.Errorf("%s/%s: program %d differs from Compile's", p.Name, goarch, i)
				}
			}
		}
	}
	// A plan of its own is compiled by Compile but not embedded.
	f, err := seccomp.Plan(seccomp.Policy{Allow: []string{"ptrace"}}, "amd64")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Compile(f); err != nil {
		t.Fatal(err)
	}
	if _, err := seccomp.Program(f); err == nil {
		t.Fatal("a plan outside the presets has an embedded program")
	}
}

func slicesEqual(a, b []unix.SockFilter) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestCompileEmpty: an empty plan is an error.
func TestCompileEmpty(t *testing.T) {
	if _, err := Compile(&seccomp.Filter{}); err == nil {
		t.Fatal("Compile of an empty filter succeeded")
	}
	if _, err := decodeBPF(make([]byte, 7)); err == nil {
		t.Fatal("decodeBPF of 7 bytes succeeded")
	}
}

// TestBuild resolves every plan against the linked libseccomp, for every
// architecture strata plans, without loading anything: a name libseccomp
// does not know on an arch fails here rather than in a sandbox.
func TestBuild(t *testing.T) {
	for _, goarch := range seccomp.GOARCHes() {
		for _, p := range []seccomp.Policy{seccomp.Agent(), seccomp.Strict()} {
			f, err := seccomp.Plan(p, goarch)
			if err != nil {
				t.Fatal(err)
			}
			filter, raw, err := build(f)
			if err != nil {
				t.Errorf("%s %+v: %v", goarch, p, err)
				continue
			}
			for _, r := range raw {
				t.Logf("%s: libseccomp does not know syscall %d on audit arch %#x; fallback filter", goarch, r.nr, r.auditArch)
			}
			out, err := os.CreateTemp(t.TempDir(), "bpf")
			if err != nil {
				t.Fatal(err)
			}
			err = filter.ExportBPF(out)
			filter.Release()
			fi, _ := out.Stat()
			out.Close()
			if err != nil || fi.Size() == 0 {
				t.Errorf("%s %+v: export BPF: %d bytes, %v", goarch, p, fi.Size(), err)
			}
		}
	}
}

// TestRawProgram runs the fallback filter's BPF on a few seccomp_data.
func TestRawProgram(t *testing.T) {
	rules := []rawRule{
		{auditArch: unix.AUDIT_ARCH_X86_64, nr: 467, errno: unix.EPERM},
		{auditArch: unix.AUDIT_ARCH_X86_64, nr: 467 | x32SyscallBit, errno: unix.EPERM},
		{auditArch: unix.AUDIT_ARCH_I386, nr: 467, errno: unix.EPERM},
		{auditArch: unix.AUDIT_ARCH_I386, nr: 435, errno: unix.ENOSYS},
	}
	prog, err := rawProgram(rules)
	if err != nil {
		t.Fatal(err)
	}
	errno := func(e syscall.Errno) uint32 { return unix.SECCOMP_RET_ERRNO | uint32(e) }
	for _, tt := range []struct {
		arch, nr uint32
		want     uint32
	}{
		{unix.AUDIT_ARCH_X86_64, 467, errno(unix.EPERM)},
		{unix.AUDIT_ARCH_X86_64, 467 | x32SyscallBit, errno(unix.EPERM)},
		{unix.AUDIT_ARCH_X86_64, 435, unix.SECCOMP_RET_ALLOW},
		{unix.AUDIT_ARCH_X86_64, 0, unix.SECCOMP_RET_ALLOW},
		{unix.AUDIT_ARCH_I386, 467, errno(unix.EPERM)},
		{unix.AUDIT_ARCH_I386, 435, errno(unix.ENOSYS)},
		{unix.AUDIT_ARCH_I386, 1, unix.SECCOMP_RET_ALLOW},
		{unix.AUDIT_ARCH_AARCH64, 467, unix.SECCOMP_RET_ALLOW},
	} {
		if got := runBPF(t, prog, tt.nr, tt.arch); got != tt.want {
			t.Errorf("arch %#x nr %d: %#x; want %#x", tt.arch, tt.nr, got, tt.want)
		}
	}
}

// runBPF interprets the few classic BPF instructions rawProgram emits.
func runBPF(t *testing.T, prog []unix.SockFilter, nr, arch uint32) uint32 {
	var a uint32
	for pc := 0; pc < len(prog); pc++ {
		in := prog[pc]
		switch in.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			switch in.K {
			case 0:
				a = nr
			case 4:
				a = arch
			default:
				t.Fatalf("load of offset %d", in.K)
			}
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K:
			if a == in.K {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case unix.BPF_RET | unix.BPF_K:
			return in.K
		default:
			t.Fatalf("unexpected instruction %+v", in)
		}
	}
	t.Fatal("fell off the program")
	return 0
}
