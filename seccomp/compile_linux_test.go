package seccomp

import (
	"encoding/json"
	"errors"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/internal/testutil"
)

// TestProgram loads the agent and strict programs the way nsexec's keeper
// does — Program (the embedded programs libseccomp compiled at generate
// time), JSON in between, then seccomp(SECCOMP_SET_MODE_FILTER) per
// program — and checks that it denies exactly what TestApply checks
// Apply denies: every Go thread (loaded with TSYNC here), a freshly
// exec'd static C program, 32-bit x86 calls, and open_tree_attr, which
// libseccomp 2.5 does not know (the hand-assembled program).
func TestProgram(t *testing.T) {
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
				want = without32(want, caseOp, i386Reachable(t, probe))
				f, err := Plan(p, runtime.GOARCH)
				if err != nil {
					t.Fatal(err)
				}
				progs, err := Program(f)
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

// TestProgramErrors: an empty plan, and a plan of its own (not one of
// Presets), get no program; the error says what to do.
func TestProgramErrors(t *testing.T) {
	if _, err := Program(&Filter{}); !errors.Is(err, ErrInvalidPolicy) {
		t.Fatalf("Program of an empty filter: %v", err)
	}
	f, err := Plan(Policy{Allow: []string{"ptrace"}}, "amd64")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Program(f)
	if !errors.Is(err, ErrNotCompiled) || !strings.Contains(err.Error(), "go generate ./seccomp") {
		t.Fatalf("Program of a plan outside the presets: %v", err)
	}
	if err := Apply(f); !errors.Is(err, ErrNotCompiled) {
		t.Fatalf("Apply of a plan outside the presets: %v", err)
	}
	for _, goarch := range GOARCHes() {
		for _, p := range Presets() {
			f, err := Plan(p.Policy, goarch)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Program(f); err != nil {
				t.Errorf("%s on %s: %v", p.Name, goarch, err)
			}
		}
	}
}

// TestProgramCodec: EncodePrograms round-trips, and no truncation of it
// decodes.
func TestProgramCodec(t *testing.T) {
	progs := [][]Instruction{{{Code: 0x20, K: 4}, {Code: 0x15, Jt: 1, Jf: 2, K: 0xc000003e}}, {{Code: 6, K: 0x7fff0000}}}
	b := EncodePrograms(progs)
	got, ok := DecodePrograms(b)
	if !ok || len(got) != 2 || got[0][1] != progs[0][1] || got[1][0] != progs[1][0] {
		t.Fatalf("round trip: %v %v", got, ok)
	}
	for i := 0; i < len(b); i++ {
		if _, ok := DecodePrograms(b[:i]); ok {
			t.Fatalf("a truncated encoding (%d of %d bytes) decodes", i, len(b))
		}
	}
	if _, ok := DecodePrograms(append(b, 0)); ok {
		t.Fatal("trailing bytes decode")
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
