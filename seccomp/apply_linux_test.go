package seccomp

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/internal/testutil"
)

func TestAvailable(t *testing.T) {
	ok, why := Available()
	if !ok {
		testutil.Skip(t, "seccomp unavailable: "+why)
	}
	t.Log(why)
}

var (
	probeOnce sync.Once
	probePath string
	probeErr  string
)

// buildProbe compiles testdata/probe.c statically into a directory the
// unprivileged user can read.
func buildProbe(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("STRATA_SECCOMP_PROBE"); p != "" {
		return p
	}
	if runtime.GOARCH != "amd64" {
		testutil.Skip(t, "the probe uses x86-64 and int $0x80")
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		testutil.Skip(t, "gcc not installed")
	}
	probeOnce.Do(func() {
		src, err := filepath.Abs("testdata/probe.c")
		if err != nil {
			probeErr = err.Error()
			return
		}
		dir, err := os.MkdirTemp("/tmp", "strata-sctest-probe-")
		if err != nil {
			probeErr = err.Error()
			return
		}
		os.Chmod(dir, 0o755)
		out := filepath.Join(dir, "probe")
		b, err := exec.Command("gcc", "-static", "-O2", "-o", out, src).CombinedOutput()
		if err != nil {
			probeErr = "gcc -static: " + err.Error() + ": " + string(b)
			return
		}
		probePath = out
	})
	if probeErr != "" {
		testutil.Skip(t, "cannot build the static probe (libc6-dev?): "+probeErr)
	}
	t.Setenv("STRATA_SECCOMP_PROBE", probePath)
	return probePath
}

func runProbe(t *testing.T, probe string, ops ...string) map[string]string {
	t.Helper()
	out, err := exec.Command(probe, ops...).CombinedOutput()
	if err != nil {
		t.Fatalf("probe %v: %v\n%s", ops, err, out)
	}
	res := map[string]string{}
	s := bufio.NewScanner(bytes.NewReader(out))
	for s.Scan() {
		op, r, _ := strings.Cut(s.Text(), " ")
		res[op] = r
	}
	return res
}

// i386Reachable reports whether this machine can make 32-bit x86 system
// calls (int $0x80) at all, asked of the unfiltered probe. Some virtual
// machines cannot (a PVM guest, or a kernel booted with ia32_emulation=0):
// the instruction kills the process with SIGSEGV before any syscall entry,
// so seccomp never sees it and the i386-* expectations do not apply; the
// 32-bit ABI is then unreachable, which the control checks instead.
func i386Reachable(t *testing.T, probe string) bool {
	t.Helper()
	out, err := exec.Command(probe, "i386-getpid").CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGSEGV {
			t.Logf("int $0x80 kills the process here (SIGSEGV): no 32-bit x86 syscalls on this machine; the i386-* cases are left out")
			return false
		}
	}
	if err != nil {
		t.Fatalf("probe i386-getpid: %v\n%s", err, out)
	}
	return true
}

// without32 leaves out the i386-* cases where the machine cannot make them.
func without32[T any](cases []T, op func(T) string, reachable bool) []T {
	if reachable {
		return cases
	}
	var out []T
	for _, c := range cases {
		if !strings.HasPrefix(op(c), "i386-") {
			out = append(out, c)
		}
	}
	return out
}

type probeCase = struct{ op, want string }

func caseOp(c probeCase) string { return c.op }

// What the probe sees under each policy. i386-* are 32-bit x86 calls from
// the same 64-bit process. ptrace goes last: unfiltered, TRACEME would
// leave the probe traced.
var (
	probeAgent = []struct{ op, want string }{
		{"getpid", "OK"},
		{"unshare-fs", "OK"},
		{"clone-plain", "OK"},
		{"unshare-user", "EPERM"},
		{"unshare-net", "EPERM"},
		{"clone-newns", "EPERM"},
		{"clone-newuser", "EPERM"},
		{"clone3", "ENOSYS"},
		{"setns", "EPERM"},
		{"mount", "EPERM"},
		{"umount2", "EPERM"},
		{"fsopen", "EPERM"},
		{"open_tree_attr", "EPERM"},
		{"i386-open_tree_attr", "EPERM"},
		{"io_uring_setup", "EPERM"},
		{"keyctl", "EPERM"},
		{"socket-unix", "OK"},
		{"socket-netlink-route", "OK"},
		{"i386-getpid", "OK"},
		{"i386-unshare-user", "EPERM"},
		{"i386-mount", "EPERM"},
		{"i386-clone3", "ENOSYS"},
		{"ptrace", "EPERM"},
		{"i386-ptrace", "EPERM"},
	}
	probeAgentNet = []struct{ op, want string }{
		{"socket-inet", "OK"},
		{"socket-netlink-audit", "OK"},
		{"socket-highbits", "OK"},
		{"i386-socket", "OK"},
		{"i386-socketcall", "OK"},
	}
	probeStrictNet = []struct{ op, want string }{
		{"socket-inet", "EPERM"},
		{"socket-inet6", "EPERM"},
		{"socket-packet", "EPERM"},
		{"socket-vsock", "EPERM"},
		{"socket-netlink-audit", "EPERM"},
		{"socket-highbits", "EPERM"},
		{"i386-socket", "EPERM"},
		{"i386-socketcall", "EPERM"},
	}
)

// TestProbeControl runs the probe without a filter: the calls the filter
// denies then fail differently or succeed, so the EPERMs and ENOSYSes in
// TestApply are the filter's. Each call runs in its own process.
func TestProbeControl(t *testing.T) {
	probe := buildProbe(t)
	ops := []string{"clone3", "setns", "mount", "umount2", "open_tree_attr", "i386-open_tree_attr", "i386-mount", "i386-clone3",
		"socket-inet", "socket-highbits", "i386-socket", "i386-socketcall", "socket-netlink-audit", "ptrace", "i386-ptrace"}
	for _, op := range without32(ops, func(s string) string { return s }, i386Reachable(t, probe)) {
		got := runProbe(t, probe, op)[op]
		t.Logf("unfiltered %s: %s", op, got)
		if got == "EPERM" || got == "ENOSYS" || got == "" {
			t.Errorf("unfiltered %s: %q", op, got)
		}
	}
}

// TestApply loads the agent and strict filters in a child, then checks
// that the child's Go threads and a freshly exec'd static C program are
// denied: the filter covers every thread (TSYNC), survives execve, and
// covers 32-bit x86 calls.
func TestApply(t *testing.T) {
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
				// Through JSON, as from nsexec's parent to its child.
				b, err := json.Marshal(f)
				if err != nil {
					t.Fatal(err)
				}
				var back Filter
				if err := json.Unmarshal(b, &back); err != nil {
					t.Fatal(err)
				}
				if err := Apply(&back); err != nil {
					t.Fatal(err)
				}
				t.Logf("uid %d, %s filter loaded", os.Getuid(), policy)

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

// checkThreads: every thread of this Go process is filtered, including
// ones the runtime started before Apply.
func checkThreads(t *testing.T) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			// Unfiltered, a multi-threaded process gets EINVAL.
			errs[i] = unix.Unshare(unix.CLONE_NEWUSER)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, syscall.EPERM) {
			t.Errorf("goroutine %d: unshare(CLONE_NEWUSER) = %v; want EPERM", i, err)
		}
	}
	if err := unix.Mount("none", "/nonexistent-strata", "tmpfs", 0, ""); !errors.Is(err, syscall.EPERM) {
		t.Errorf("mount = %v; want EPERM", err)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/status")
		if err != nil {
			continue // the thread exited
		}
		if !bytes.Contains(b, []byte("\nSeccomp:\t2\n")) || !bytes.Contains(b, []byte("\nNoNewPrivs:\t1\n")) {
			t.Errorf("thread %s is not filtered (TSYNC):\n%s", task.Name(), b)
		}
	}
	if len(tasks) < 2 {
		t.Errorf("only %d threads; the TSYNC check needs several", len(tasks))
	}
}
