package nsexec

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/overlayfs"
)

// TestRun: a one-shot run sees the merged view, writes to the upper
// directory, and reports exit codes like a shell.
func TestRun(t *testing.T) {
	both(t, func(t *testing.T) {
		spec := newSpec(t, "")
		ctx := context.Background()
		check := func(name string, cmd Command, want ExitStatus, stdout, stderr string) {
			t.Helper()
			r, err := runIn(t, ctx, spec, cmd)
			if err != nil {
				t.Fatalf("%s: Run: %v", name, err)
			}
			if r.ExitStatus != want || r.stdout != stdout || !strings.Contains(r.stderr, stderr) {
				t.Errorf("%s: %v %q %q; want %v %q %q", name, r.ExitStatus, r.stdout, r.stderr, want, stdout, stderr)
			}
		}
		check("cat", Command{Argv: []string{"cat", "hello"}}, ExitStatus{}, helloText, "")
		check("whiteout", sh("test ! -e gone && [ $$ -lt 100 ] && pwd"), ExitStatus{}, spec.Target+"\n", "")
		check("exit 7", sh("echo out; echo err >&2; exit 7"), ExitStatus{Code: 7}, "out\n", "err")
		check("127", Command{Argv: []string{"no-such-command-xyz"}}, ExitStatus{Code: 127}, "", "strata: no-such-command-xyz: command not found")
		check("126", Command{Argv: []string{"./hello"}}, ExitStatus{Code: 126}, "", "Permission denied")
		check("write", sh("echo run > run-file"), ExitStatus{}, "", "")
		if b, err := os.ReadFile(filepath.Join(spec.Upper, "run-file")); err != nil || string(b) != "run\n" {
			t.Errorf("upper/run-file: %q, %v", b, err)
		}
		check("killed", sh("kill -TERM $$"), ExitStatus{Code: 143, Signal: unix.SIGTERM}, "", "")
	})
}

// TestRunTimeout: when the context's deadline passes, Run kills PID 1 and
// with it the command and its background children: none is left when
// Run returns.
func TestRunTimeout(t *testing.T) {
	both(t, func(t *testing.T) {
		spec := newSpec(t, "")
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		mark := marker()
		r, err := runIn(t, ctx, spec, sh("sleep "+mark+" & sleep "+mark+"; echo not killed"))
		if !errors.Is(err, context.DeadlineExceeded) || r.ExitStatus != (ExitStatus{Code: 137, Signal: unix.SIGKILL}) {
			t.Errorf("Run past its deadline: %v, %v, %q", r.ExitStatus, err, r.stdout)
		}
		if pids := procsWith(mark); len(pids) > 0 {
			t.Errorf("processes %v survived the run", pids)
		}
	})
}

// TestRunSignal: a signal to the caller reaches the command of a run.
func TestRunSignal(t *testing.T) {
	both(t, func(t *testing.T) {
		spec := newSpec(t, "")
		mark := marker()
		type res struct {
			r   result
			err error
		}
		done := make(chan res, 1)
		go func() {
			out, stdout := pipeOut(t)
			st, err := Run(context.Background(), spec, Command{Argv: []string{"sleep", mark}, Env: testEnv()}, nil, out, nil)
			done <- res{result{ExitStatus: st, stdout: stdout()}, err}
		}()
		if !waitFor(5*time.Second, func() bool { return len(procsWith(mark)) == 1 }) {
			t.Fatalf("sleep %s did not start", mark)
		}
		time.Sleep(100 * time.Millisecond) // see forwardSignals
		unix.Kill(os.Getpid(), unix.SIGINT)
		r := <-done
		if r.err != nil || r.r.ExitStatus != (ExitStatus{Code: 130, Signal: unix.SIGINT}) {
			t.Errorf("Run after SIGINT: %v, %v", r.r.ExitStatus, r.err)
		}
	})
}

// TestRunSandbox: the sandbox applies to a one-shot run too.
func TestRunSandbox(t *testing.T) {
	both(t, func(t *testing.T) {
		spec := newSpec(t, "")
		rs, progs := agentSandbox(t, spec.Target)
		r, err := runIn(t, context.Background(), spec, Command{Argv: []string{"sh", "-c", "unshare -U true || echo denied; cat /proc/self/status | grep -c '^Seccomp:.*2'; ip -o link | wc -l"},
			Landlock: rs, Seccomp: progs, NetNone: true})
		if err != nil || r.Code != 0 || r.stdout != "denied\n1\n1\n" {
			t.Errorf("sandboxed run: %v, %v, %q %q", r.ExitStatus, err, r.stdout, r.stderr)
		}
	})
}

// TestRunTTY: a one-shot run on a terminal.
func TestRunTTY(t *testing.T) {
	both(t, func(t *testing.T) {
		spec := newSpec(t, "")
		master, slave, name := openPTY(t, 33, 77)
		out := readAll(master)
		st, err := Run(context.Background(), spec, Command{Argv: []string{"sh", "-c", ttyScript}, Env: testEnv(), TTY: true}, slave, slave, slave)
		slave.Close()
		if err != nil || st.Code != 0 {
			t.Fatalf("Run TTY: %v, %v: %q", st, err, out())
		}
		checkTTY(t, out(), name)
	})
}

// TestMountError: a mount that fails comes back as *overlayfs.MountError
// from StartKeeper (leaving no keeper and a free lock) and from Run.
func TestMountError(t *testing.T) {
	both(t, func(t *testing.T) {
		spec := newSpec(t, "")
		spec.Lowers = append(spec.Lowers, filepath.Join(t.TempDir(), "missing"))
		_, err := StartKeeper(context.Background(), spec)
		var me *overlayfs.MountError
		if !errors.As(err, &me) || !errors.Is(err, unix.ENOENT) || me.Target != spec.Target {
			t.Fatalf("StartKeeper with a missing layer = %v; want a *MountError with ENOENT", err)
		}
		t.Logf("StartKeeper: %v", err)
		if held, _ := lockHeld(spec.Dir); held {
			t.Errorf("keeper.lock still held")
		}
		if _, err := FindKeeper(spec.Dir); !errors.Is(err, ErrNotRunning) {
			t.Errorf("FindKeeper = %v", err)
		}
		if b, _ := os.ReadFile(filepath.Join(spec.Dir, logName)); !strings.Contains(string(b), "missing") {
			t.Errorf("keeper.log does not say what failed: %q", b)
		}
		_, err = Run(context.Background(), spec, Command{Argv: []string{"true"}}, nil, nil, nil)
		if !errors.As(err, &me) || !errors.Is(err, unix.ENOENT) {
			t.Errorf("Run with a missing layer = %v; want a *MountError", err)
		}
	})
}

// TestLongPaths: a state directory and target longer than a unix socket
// address (108 bytes), outside /tmp; the target is DIR/merged, created
// on demand.
func TestLongPaths(t *testing.T) {
	both(t, func(t *testing.T) {
		base, err := os.MkdirTemp("/var/tmp", "strata-nsexec-long-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			openTree(base)
			os.RemoveAll(base)
		})
		long := filepath.Join(base, strings.Repeat("d", 60), strings.Repeat("e", 60))
		spec := newSpec(t, long)
		// DIR/merged, which StartKeeper creates.
		spec.Target = filepath.Join(spec.Dir, "merged")
		if n := len(filepath.Join(spec.Dir, sockName)); n <= 108 {
			t.Fatalf("socket path of %d bytes is not long", n)
		}
		k := startKeeper(t, spec)
		if r := execIn(t, spec, sh("cat hello && pwd && echo $(ls -A /tmp | wc -l)")); r.Code != 0 || r.stdout != helloText+spec.Target+"\n0\n" {
			t.Errorf("long paths: %v %q %q", r.ExitStatus, r.stdout, r.stderr)
		}
		if _, err := os.Stat(filepath.Join(k.Path(), "hello")); err != nil {
			t.Error(err)
		}
		r, err := runIn(t, context.Background(), spec, Command{Argv: []string{"cat", "hello"}})
		if err != nil || r.stdout != helloText {
			t.Errorf("Run with long paths: %v %v %q", r.ExitStatus, err, r.stderr)
		}
	})
}

// TestFallbackBinary: without strata-init, the running binary re-executes
// itself (its main calls Init), for keepers and one-shot runs alike, and
// its commands have no capabilities either.
func TestFallbackBinary(t *testing.T) {
	both(t, func(t *testing.T) {
		old := initOverride
		initOverride = Self
		t.Cleanup(func() { initOverride = old })
		spec := newSpec(t, "")
		startKeeper(t, spec)
		info, err := readInfo(spec.Dir)
		if err != nil {
			t.Fatal(err)
		}
		if exe, _ := os.Executable(); info.Init != exe {
			t.Errorf("keeper runs %s; want the test binary %s", info.Init, exe)
		}
		if r := execIn(t, spec, Command{Argv: []string{"cat", "hello"}}); r.stdout != helloText {
			t.Errorf("Exec: %v %q %q", r.ExitStatus, r.stdout, r.stderr)
		}
		// The test binary links cgo, as strata does: no AllThreadsSyscall,
		// so each command drops the capabilities on its own thread.
		if r := execIn(t, spec, sh("grep CapEff /proc/self/status")); !RealRoot() && !strings.HasSuffix(r.stdout, "\t0000000000000000\n") {
			t.Errorf("rootless command's capabilities: %q %q", r.stdout, r.stderr)
		}
		if r, err := runIn(t, context.Background(), spec, sh("exit 9")); err != nil || r.Code != 9 {
			t.Errorf("Run: %v, %v", r.ExitStatus, err)
		}
	})
}
