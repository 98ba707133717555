package nsexec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/internal/testutil"
	"github.com/stratafs/strata/landlock"
	"github.com/stratafs/strata/seccomp"
)

// noNSBox plans the namespace-free sandbox of a workspace: Landlock
// (NoNSPolicy) and seccomp (the agent preset's program, or strict's for
// netNone, then seccomp.UnixSocketDeny).
func noNSBox(t *testing.T, ws, tmp string, netNone bool) (*landlock.Ruleset, [][]unix.SockFilter) {
	t.Helper()
	abi, err := landlock.ABI()
	if abi < 1 {
		testutil.Skip(t, fmt.Sprintf("no Landlock (%v)", err))
	}
	if ok, why := seccomp.Available(); !ok {
		testutil.Skip(t, why)
	}
	rs, err := landlock.Plan(NoNSPolicy(ws, tmp, nil, nil, netNone), abi)
	if err != nil {
		t.Fatal(err)
	}
	p := seccomp.Agent()
	if netNone {
		p = seccomp.Strict()
	}
	return rs, append(presetProgram(t, p), unixDeny(t))
}

func presetProgram(t *testing.T, p seccomp.Policy) [][]unix.SockFilter {
	t.Helper()
	f, err := seccomp.Plan(p, runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	progs, err := seccomp.Program(f)
	if err != nil {
		t.Fatal(err)
	}
	return progs
}

func unixDeny(t *testing.T) []unix.SockFilter {
	t.Helper()
	prog, err := seccomp.UnixSocketDeny(runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	return prog
}

type noNSResult struct {
	ExitStatus
	stdout, stderr string
	err            error
}

func runNoNS(t *testing.T, ctx context.Context, spec NoNSSpec, c Command) noNSResult {
	t.Helper()
	if c.Env == nil {
		c.Env = testEnv()
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	done := make(chan struct{}, 2)
	go func() { out.ReadFrom(outR); done <- struct{}{} }()
	go func() { errb.ReadFrom(errR); done <- struct{}{} }()
	st, rerr := RunNoNS(ctx, spec, c, nil, outW, errW)
	outW.Close()
	errW.Close()
	<-done
	<-done
	return noNSResult{st, out.String(), errb.String(), rerr}
}

// noNSSpec makes a workspace directory with a file, and its tmp.
func noNSSpec(t *testing.T) NoNSSpec {
	t.Helper()
	base := t.TempDir()
	ws := filepath.Join(base, "ws")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "hello"), []byte(helloText), 0o644); err != nil {
		t.Fatal(err)
	}
	// The tmp directory exists before the Landlock rules are planned:
	// a rule on a missing path is left out.
	tmp := filepath.Join(base, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	return NoNSSpec{Name: "nons", Workspace: ws, Tmp: tmp}
}

// TestRunNoNS: a command runs with no namespace, fenced by Landlock and
// seccomp: the workspace and its private TMPDIR are writable; the system
// readable; a file outside (standing for the home), the host's /tmp,
// /dev/shm and / itself are not; unix sockets cannot be created (the
// host's session bus and agents are out of reach) while socketpair
// works; ptrace-like and namespace syscalls are denied; root keeps only a
// container's capabilities.
func TestRunNoNS(t *testing.T) {
	both(t, func(t *testing.T) {
		ctx := context.Background()
		spec := noNSSpec(t)
		rs, progs := noNSBox(t, spec.Workspace, spec.Tmp, false)
		outside, err := os.MkdirTemp("/var/tmp", "strata-nons-outside-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(outside)
		os.Chmod(outside, 0o755)
		secret := filepath.Join(outside, "secret")
		if err := os.WriteFile(secret, []byte("secret\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		boxed := func(c Command) Command {
			c.Landlock, c.Seccomp = rs, progs
			return c
		}
		check := func(what string, c Command, wantCode int, wantOut, wantErr string) {
			t.Helper()
			r := runNoNS(t, ctx, spec, boxed(c))
			if r.err != nil || r.Code != wantCode || (wantOut != "" && r.stdout != wantOut) || !strings.Contains(r.stderr, wantErr) {
				t.Errorf("%s: %v %v\nstdout %q\nstderr %q", what, r.ExitStatus, r.err, r.stdout, r.stderr)
			}
		}
		check("workspace and TMPDIR", sh(`echo inside > w && cat w hello && echo "$TMPDIR" && touch "$TMPDIR/t" && ls "$TMPDIR" && pwd`),
			0, "inside\n"+helloText+spec.Tmp+"\nt\n"+spec.Workspace+"\n", "")
		check("system read-only", sh("cat /etc/passwd >/dev/null && ls /usr/bin >/dev/null && echo ok"), 0, "ok\n", "")
		check("system not writable", sh("touch /etc/strata-nons-test"), 1, "", "Permission denied")
		check("outside", Command{Argv: []string{"cat", secret}}, 1, "", "Permission denied")
		check("outside, written", sh("echo x > "+outside+"/new"), 2, "", "Permission denied")
		check("host /tmp", sh("echo x > /tmp/strata-nons-test-$$"), 2, "", "Permission denied")
		check("/dev/shm", sh("echo x > /dev/shm/strata-nons-test-$$"), 2, "", "Permission denied")
		check("listing /", Command{Argv: []string{"ls", "/"}}, 2, "", "Permission denied")
		check("unix socket", Command{Argv: []string{"python3", "-c", "import socket; socket.socket(socket.AF_UNIX)"}}, 1, "", "PermissionError")
		check("socketpair", Command{Argv: []string{"python3", "-c", "import socket; a,b=socket.socketpair(); a.send(b'x'); print(b.recv(1).decode())"}}, 0, "x\n", "")
		check("unshare -U", Command{Argv: []string{"unshare", "-U", "true"}}, 1, "", "Operation not permitted")
		check("no such command", Command{Argv: []string{"no-such-command-xyz"}}, 127, "", "command not found")
		capEff := "CapEff: 0000000000000000\n"
		if os.Geteuid() == 0 {
			capEff = fmt.Sprintf("CapEff: %016x\n", uint64(ContainerCaps))
		}
		check("status", sh("grep -E '^(CapEff|Seccomp|NoNewPrivs):' /proc/self/status | tr -s '\t' ' '"), 0, capEff+"NoNewPrivs: 1\nSeccomp: 2\n", "")

		// --net none without a network namespace: no IP socket at all.
		rsN, progsN := noNSBox(t, spec.Workspace, spec.Tmp, true)
		r := runNoNS(t, ctx, spec, Command{Argv: []string{"python3", "-c", "import socket; socket.socket()"}, Landlock: rsN, Seccomp: progsN, NetNone: true})
		if r.err != nil || r.Code != 1 || !strings.Contains(r.stderr, "PermissionError") {
			t.Errorf("net none: %v %v %q", r.ExitStatus, r.err, r.stderr)
		}
	})
}

// TestRunNoNSRefuses: fail closed. Without Landlock (or without seccomp)
// a sandboxed run is refused before anything starts, unless the caller
// asked for no sandbox; --net none with programs that allow IP sockets,
// and programs that allow unix sockets, are refused by the child's check
// after the sandbox is applied; a view is refused.
func TestRunNoNSRefuses(t *testing.T) {
	both(t, func(t *testing.T) {
		ctx := context.Background()
		spec := noNSSpec(t)
		rs, progs := noNSBox(t, spec.Workspace, spec.Tmp, false)
		marker := filepath.Join(spec.Workspace, "ran")
		touch := sh("touch " + marker)
		refused := func(what string, s NoNSSpec, c Command, msg string) {
			t.Helper()
			r := runNoNS(t, ctx, s, c)
			if !errors.Is(r.err, ErrNoSandbox) || !strings.Contains(r.err.Error(), msg) {
				t.Errorf("%s: %v, %v", what, r.ExitStatus, r.err)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Errorf("%s: the command ran", what)
				os.Remove(marker)
			}
		}
		refused("no Landlock", spec, Command{Argv: touch.Argv, Seccomp: progs}, "Landlock is not available")
		refused("no seccomp", spec, Command{Argv: touch.Argv, Landlock: rs}, "no seccomp programs")
		refused("a view", spec, Command{Argv: touch.Argv, Landlock: rs, Seccomp: progs, View: true}, "mount namespace")
		// The agent preset alone lets unix sockets through.
		agent := presetProgram(t, seccomp.Agent())
		refused("unix sockets allowed", spec, Command{Argv: touch.Argv, Landlock: rs, Seccomp: agent}, "a unix socket can be created")
		refused("--net none with IP sockets allowed", spec, Command{Argv: touch.Argv, Landlock: rs, Seccomp: progs, NetNone: true}, "an IP socket")

		// Asked for explicitly: no sandbox at all; and unix sockets when
		// allowed.
		free := spec
		free.Unsandboxed = true
		if r := runNoNS(t, ctx, free, touch); r.err != nil || r.Code != 0 {
			t.Errorf("--sandbox none: %v %v %q", r.ExitStatus, r.err, r.stderr)
		}
		if _, err := os.Stat(marker); err != nil {
			t.Errorf("--sandbox none: the command did not run: %v", err)
		}
		allow := spec
		allow.AllowHostSockets = true
		if r := runNoNS(t, ctx, allow, Command{Argv: touch.Argv, Landlock: rs, Seccomp: agent}); r.err != nil || r.Code != 0 {
			t.Errorf("AllowHostSockets: %v %v %q", r.ExitStatus, r.err, r.stderr)
		}
	})
}

// TestRunNoNSLeavesNothing: what the command leaves running — a
// background child, and a daemon that setsid'd and double-forked — is
// killed when it exits; a timeout kills everything and reports 137.
func TestRunNoNSLeavesNothing(t *testing.T) {
	both(t, func(t *testing.T) {
		spec := noNSSpec(t)
		rs, progs := noNSBox(t, spec.Workspace, spec.Tmp, false)
		pids := filepath.Join(spec.Workspace, "pids")
		mark := marker()
		c := sh(`sleep ` + mark + ` & echo $! >> pids; setsid sh -c 'sleep ` + mark + ` & echo $! >> pids' & while [ "$(wc -l < pids)" -lt 2 ]; do sleep 0.05; done; wc -l < pids`)
		c.Landlock, c.Seccomp = rs, progs
		r := runNoNS(t, context.Background(), spec, c)
		if r.err != nil || r.Code != 0 || strings.TrimSpace(r.stdout) != "2" {
			t.Fatalf("%v %v %q %q", r.ExitStatus, r.err, r.stdout, r.stderr)
		}
		b, err := os.ReadFile(pids)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range strings.Fields(string(b)) {
			pid, _ := strconv.Atoi(f)
			if sleepAlive(pid, mark) {
				t.Errorf("pid %d (sleep %s) outlived the run", pid, mark)
			}
		}

		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		mark2 := marker()
		c = sh(`sleep ` + mark2 + ` & echo $! > pid2; sleep ` + mark2)
		c.Landlock, c.Seccomp = rs, progs
		start := time.Now()
		r = runNoNS(t, ctx, spec, c)
		if !errors.Is(r.err, context.DeadlineExceeded) || r.Code != 137 || time.Since(start) > 10*time.Second {
			t.Errorf("timeout: %v %v after %v", r.ExitStatus, r.err, time.Since(start))
		}
		if b, err := os.ReadFile(filepath.Join(spec.Workspace, "pid2")); err == nil {
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			if sleepAlive(pid, mark2) {
				t.Errorf("pid %d outlived the timeout", pid)
			}
		}
	})
}

// sleepAlive reports whether pid is a live process running sleep mark.
func sleepAlive(pid int, mark string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return err == nil && bytes.Contains(b, []byte(mark))
}

// TestNoNSReport: what is refused and what is not enforced depends on the
// Landlock ABI as documented.
func TestNoNSReport(t *testing.T) {
	find := func(items []NoNSItem, what string) NoNSItem {
		for _, i := range items {
			if i.What == what {
				return i
			}
		}
		t.Fatalf("no %q in %+v", what, items)
		return NoNSItem{}
	}
	if i := find(NoNSReport(0), "filesystem fence"); i.Status != "refused" {
		t.Errorf("ABI 0: %+v", i)
	}
	if i := find(NoNSReport(7), "filesystem fence"); i.Status != "enforced" {
		t.Errorf("ABI 7: %+v", i)
	}
	if i := find(NoNSReport(5), "PID namespace"); !strings.Contains(i.Detail, "NOT denied") {
		t.Errorf("ABI 5: %+v", i)
	}
	if i := find(NoNSReport(6), "PID namespace"); strings.Contains(i.Detail, "NOT denied") || i.Status != "not enforced" {
		t.Errorf("ABI 6: %+v", i)
	}
	find(NoNSReport(1), "renames across directories")
	for _, i := range NoNSReport(7) {
		if i.What == "renames across directories" {
			t.Errorf("ABI 7 refuses renames: %+v", i)
		}
	}
}
