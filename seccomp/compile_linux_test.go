package seccomp

import (
	"encoding/json"
	"os"
	"runtime"
	"slices"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/internal/testutil"
)

// TestCompile loads the agent and strict filters the way nsexec's pure-Go
// child does — Compile in the parent, JSON in between, then
// seccomp(SECCOMP_SET_MODE_FILTER) per program without libseccomp — and
// checks that it denies exactly what TestApply checks Apply denies: every
// Go thread (loaded with TSYNC here), a freshly exec'd static C program,
// 32-bit x86 calls, and open_tree_attr, which the linked libseccomp 2.5
// does not know (the hand-assembled program).
func TestCompile(t *testing.T) {
	probe := buildProbe(t)
	if ok, why := Available(); !ok {
		testutil.Skip(t, why)
	}
	for _, policy := range []string{"agent", "strict"} {
		for _, v := range variants {
			t.Run(policy+"/"+v, func(t *testing.T) {
				if !inChild(t, v) {
					return
				}
				p := Agent()
				want := slices.Concat(probeAgent, probeAgentNet)
				if policy == "strict" {
					p = Strict()
					want = slices.Concat(probeAgent, probeStrictNet)
				}
				f, err := Plan(p, runtime.GOARCH)
				if err != nil {
					t.Fatal(err)
				}
				progs, err := Compile(f)
				if err != nil {
					t.Fatal(err)
				}
				for i, prog := range progs {
					t.Logf("program %d: %d instructions", i, len(prog))
				}
				b, err := json.Marshal(progs)
				if err != nil {
					t.Fatal(err)
				}
				var back [][]unix.SockFilter
				if err := json.Unmarshal(b, &back); err != nil {
					t.Fatal(err)
				}
				if err := loadCompiled(back); err != nil {
					t.Fatal(err)
				}
				checkThreads(t)
				var ops []string
				for _, w := range want {
					ops = append(ops, w.op)
				}
				got := runProbe(t, probe, ops...)
				t.Logf("exec'd probe: %v", got)
				for _, w := range want {
					if got[w.op] != w.want {
						t.Errorf("exec'd probe %s: %s; want %s", w.op, got[w.op], w.want)
					}
				}
			})
		}
	}
}

// TestCompileEmpty: an empty plan is an error, as for Apply.
func TestCompileEmpty(t *testing.T) {
	if _, err := Compile(&Filter{}); err == nil {
		t.Fatal("Compile of an empty filter succeeded")
	}
	if _, err := decodeBPF(make([]byte, 7)); err == nil {
		t.Fatal("decodeBPF of 7 bytes succeeded")
	}
}

// loadCompiled is what nsexec does with Compile's programs, with TSYNC so
// that checkThreads holds for every thread of the test binary.
func loadCompiled(progs [][]unix.SockFilter) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return err
	}
	for _, prog := range progs {
		fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
		_, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
		runtime.KeepAlive(prog)
		if e != 0 {
			return os.NewSyscallError("seccomp", e)
		}
	}
	return nil
}
