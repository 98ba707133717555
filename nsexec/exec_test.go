package nsexec

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/internal/sandbox"
	"github.com/stratafs/strata/internal/testutil"
	"github.com/stratafs/strata/landlock"
	"github.com/stratafs/strata/seccomp"
)

const entryTestClient = "test-exec-client"

func init() {
	// A client process for TestClientKilled: Exec(DIR, ARGV...).
	Register(entryTestClient, func() int {
		st, err := Exec(context.Background(), os.Args[1], Command{Argv: os.Args[2:], Env: testEnv()}, nil, nil, nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 125
		}
		return st.Code
	})
}

// TestSignalForwarded: a signal sent to the client reaches the command's
// process group, and the command's death by it is its status.
func TestSignalForwarded(t *testing.T) {
	both(t, func(t *testing.T) {
		spec := newSpec(t, "")
		startKeeper(t, spec)
		for _, tc := range []struct {
			sig  unix.Signal
			cmd  func(mark string) Command
			want ExitStatus
			out  string
		}{
			{unix.SIGINT, func(m string) Command { return Command{Argv: []string{"sleep", m}} }, ExitStatus{Code: 130, Signal: unix.SIGINT}, ""},
			// The group gets it: the shell's trap runs, and its
			// background child dies too.
			{unix.SIGTERM, func(m string) Command {
				return sh(`trap 'echo got TERM; exit 5' TERM; sleep ` + m + ` & wait`)
			}, ExitStatus{Code: 5}, "got TERM\n"},
		} {
			mark := marker()
			cmd := tc.cmd(mark)
			cmd.Env = testEnv()
			out, stdout := pipeOut(t)
			type res struct {
				st  ExitStatus
				err error
			}
			done := make(chan res, 1)
			go func() {
				st, err := Exec(context.Background(), spec.Dir, cmd, nil, out, nil)
				done <- res{st, err}
			}()
			if !waitFor(5*time.Second, func() bool { return len(procsWith(mark)) == 1 }) {
				t.Fatalf("sleep %s did not start", mark)
			}
			// The shell reaches wait; Exec's signal relay is in place
			// (installed in the background, see forwardSignals).
			time.Sleep(100 * time.Millisecond)
			unix.Kill(os.Getpid(), tc.sig)
			r := <-done
			if r.err != nil || r.st != tc.want || stdout() != tc.out {
				t.Errorf("%v: %v, %v; want %v", tc.sig, r.st, r.err, tc.want)
			}
			if !waitFor(5*time.Second, func() bool { return len(procsWith(mark)) == 0 }) {
				t.Errorf("%v: sleep %s survived", tc.sig, mark)
			}
		}
	})
}

// TestClientKilled: when the client dies, the keeper kills its command.
func TestClientKilled(t *testing.T) {
	both(t, func(t *testing.T) {
		spec := newSpec(t, "")
		startKeeper(t, spec)
		mark := marker()
		client := Reexec(entryTestClient, spec.Dir, "sh", "-c", "sleep "+mark+"; echo not killed")
		if err := client.Start(); err != nil {
			t.Fatal(err)
		}
		if !waitFor(5*time.Second, func() bool { return len(procsWith(mark)) == 1 }) {
			client.Process.Kill()
			client.Wait()
			t.Fatalf("sleep %s did not start", mark)
		}
		client.Process.Kill()
		client.Wait()
		if !waitFor(5*time.Second, func() bool { return len(procsWith(mark)) == 0 }) {
			t.Errorf("the command survived its client")
		}
		// The keeper is unharmed.
		if r := execIn(t, spec, Command{Argv: []string{"true"}}); r.Code != 0 {
			t.Errorf("after a killed client: %v %q", r.ExitStatus, r.stderr)
		}
	})
}

// TestExecContext: a done context kills the command.
func TestExecContext(t *testing.T) {
	both(t, func(t *testing.T) {
		spec := newSpec(t, "")
		startKeeper(t, spec)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		mark := marker()
		st, err := Exec(ctx, spec.Dir, Command{Argv: []string{"sleep", mark}, Env: testEnv()}, nil, nil, nil)
		if err != context.DeadlineExceeded || st.Signal != unix.SIGKILL {
			t.Errorf("Exec with a deadline: %v, %v", st, err)
		}
		if pids := procsWith(mark); len(pids) > 0 {
			t.Errorf("sleep %v survived", pids)
		}
	})
}

// openPTY opens a pty pair with the given size.
func openPTY(t *testing.T, rows, cols uint16) (master, slave *os.File, name string) {
	t.Helper()
	m, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		testutil.Skip(t, "no pty: "+err.Error())
	}
	if err := unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(m, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	name = "/dev/pts/" + strconv.Itoa(n)
	s, err := unix.Open(name, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlSetWinsize(s, unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols}); err != nil {
		t.Fatal(err)
	}
	master, slave = os.NewFile(uintptr(m), "ptmx"), os.NewFile(uintptr(s), name)
	t.Cleanup(func() { master.Close(); slave.Close() })
	return master, slave, name
}

// readAll collects what the command writes on the pty until its last
// slave descriptor is closed (EIO).
func readAll(master *os.File) func() string {
	var buf bytes.Buffer
	done := make(chan struct{})
	go func() {
		io.Copy(&buf, master)
		close(done)
	}()
	return func() string {
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
		return buf.String()
	}
}

// ttyScript checks the terminal: its name, its size, that it is the
// controlling terminal (/dev/tty opens) and that the shell leads the
// foreground process group of its session.
const ttyScript = `tty; stty size; echo via-ctty > /dev/tty; ps -o pid=,sid=,tpgid= -p $$`

func checkTTY(t *testing.T, out, name string) {
	t.Helper()
	out = strings.ReplaceAll(out, "\r\n", "\n")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || lines[0] != name || lines[1] != "33 77" || lines[2] != "via-ctty" {
		t.Fatalf("TTY output %q; want %s, 33 77, via-ctty, ids", out, name)
	}
	ids := strings.Fields(lines[3])
	if len(ids) != 3 || ids[0] != ids[1] || ids[0] != ids[2] {
		t.Errorf("pid, sid, tpgid = %v; want a session leader in the foreground", ids)
	}
}

// TestTTY: with TTY the command gets its stdin terminal as controlling
// terminal: tty, stty size and /dev/tty work, and it is in the
// foreground.
func TestTTY(t *testing.T) {
	both(t, func(t *testing.T) {
		spec := newSpec(t, "")
		startKeeper(t, spec)
		master, slave, name := openPTY(t, 33, 77)
		out := readAll(master)
		st, err := Exec(context.Background(), spec.Dir, Command{Argv: []string{"sh", "-c", ttyScript}, Env: testEnv(), TTY: true}, slave, slave, slave)
		slave.Close()
		if err != nil || st.Code != 0 {
			t.Fatalf("Exec TTY: %v, %v: %q", st, err, out())
		}
		checkTTY(t, out(), name)

		// Without TTY the terminal is only stdin: no controlling terminal.
		master, slave, _ = openPTY(t, 33, 77)
		out = readAll(master)
		st, err = Exec(context.Background(), spec.Dir, Command{Argv: []string{"sh", "-c", "echo x > /dev/tty"}, Env: testEnv()}, slave, slave, slave)
		slave.Close()
		if err != nil || st.Code == 0 {
			t.Errorf("without TTY, /dev/tty opened: %v, %v, %q", st, err, out())
		}
	})
}

// TestNetNone: a private network namespace: the host's loopback
// listener is unreachable, the private loopback is up and works.
func TestNetNone(t *testing.T) {
	both(t, func(t *testing.T) {
		spec := newSpec(t, "")
		startKeeper(t, spec)
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
		connect := []string{"bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/" + port}
		if r := execIn(t, spec, Command{Argv: connect}); r.Code != 0 {
			t.Fatalf("host network: connect to the host listener: %v %q", r.ExitStatus, r.stderr)
		}
		if r := execIn(t, spec, Command{Argv: connect, NetNone: true}); r.Code == 0 {
			t.Errorf("NetNone: connected to the host's listener")
		}
		inside := `import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1)
c = socket.create_connection(s.getsockname()); a, _ = s.accept()
c.sendall(b"ping"); print(a.recv(4).decode())`
		if r := execIn(t, spec, Command{Argv: []string{"/usr/bin/python3", "-c", inside}, NetNone: true}); r.Code != 0 || r.stdout != "ping\n" {
			t.Errorf("NetNone: private loopback: %v %q %q", r.ExitStatus, r.stdout, r.stderr)
		}
		if r := execIn(t, spec, Command{Argv: []string{"ip", "-o", "link"}, NetNone: true}); r.Code != 0 || strings.Count(r.stdout, "\n") != 1 || !strings.Contains(r.stdout, "lo: <LOOPBACK,UP,LOWER_UP>") {
			t.Errorf("NetNone: interfaces: %v %q %q", r.ExitStatus, r.stdout, r.stderr)
		}
	})
}

// agentSandbox plans the agent sandbox for a workspace, as the CLI does.
func agentSandbox(t *testing.T, target string) (*landlock.Ruleset, [][]unix.SockFilter) {
	t.Helper()
	abi, err := landlock.ABI()
	if abi < 2 {
		testutil.Skip(t, fmt.Sprintf("Landlock ABI %d (%v); want 2+", abi, err))
	}
	if ok, why := seccomp.Available(); !ok {
		testutil.Skip(t, why)
	}
	rs, err := landlock.Plan(landlock.Agent(target, "/tmp", nil, nil), abi)
	if err != nil {
		t.Fatal(err)
	}
	f, err := seccomp.Plan(seccomp.Agent(), runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	progs, err := seccomp.Program(f)
	if err != nil {
		t.Fatal(err)
	}
	return rs, progs
}

// TestSandbox: Landlock from the Command denies a file outside while the
// workspace stays writable; the seccomp programs deny unshare -U; and the
// keeper itself stays unconfined, so the next command without a sandbox
// can do both.
func TestSandbox(t *testing.T) {
	both(t, func(t *testing.T) {
		spec := newSpec(t, "")
		k := startKeeper(t, spec)
		rs, progs := agentSandbox(t, spec.Target)
		outside, err := os.MkdirTemp("/var/tmp", "strata-nsexec-outside-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(outside)
		os.Chmod(outside, 0o755)
		secret := outside + "/secret"
		if err := os.WriteFile(secret, []byte("secret\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		boxed := func(c Command) Command {
			c.Landlock, c.Seccomp = rs, progs
			return c
		}
		if r := execIn(t, spec, boxed(Command{Argv: []string{"cat", secret}})); r.Code == 0 || !strings.Contains(r.stderr, "Permission denied") {
			t.Errorf("Landlock: read outside: %v %q %q", r.ExitStatus, r.stdout, r.stderr)
		}
		if r := execIn(t, spec, boxed(sh("echo inside > w && cat w && cat hello >/dev/null"))); r.Code != 0 || r.stdout != "inside\n" {
			t.Errorf("Landlock: workspace: %v %q %q", r.ExitStatus, r.stdout, r.stderr)
		}
		if r := execIn(t, spec, boxed(Command{Argv: []string{"unshare", "-U", "true"}})); r.Code == 0 || !strings.Contains(r.stderr, "Operation not permitted") {
			t.Errorf("seccomp: unshare -U: %v %q", r.ExitStatus, r.stderr)
		}
		capEff := "CapEff: 0000000000000000\n"
		if RealRoot() {
			// Root keeps its capabilities.
			capEff = "CapEff: " + statusFields("/proc/self/status", "CapEff")[0] + "\n"
		}
		if r := execIn(t, spec, boxed(sh("grep -E '^(CapEff|Seccomp|NoNewPrivs):' /proc/self/status | tr -s '\t' ' '"))); r.stdout != capEff+"NoNewPrivs: 1\nSeccomp: 2\n" {
			t.Errorf("sandboxed status: %q %q", r.stdout, r.stderr)
		}
		// The keeper's threads never keep the sandbox: the thread that
		// forked a sandboxed command ends (at once, but asynchronously).
		confined := func() (bad []string) {
			tasks, _ := os.ReadDir("/proc/" + itoa(k.PID) + "/task")
			for _, task := range tasks {
				p := "/proc/" + itoa(k.PID) + "/task/" + task.Name() + "/status"
				for _, f := range []string{"Seccomp", "NoNewPrivs"} {
					if s := statusFields(p, f); len(s) == 1 && s[0] != "0" {
						bad = append(bad, task.Name()+" "+f+" "+s[0])
					}
				}
			}
			return bad
		}
		if !waitFor(2*time.Second, func() bool { return len(confined()) == 0 }) {
			t.Errorf("keeper threads confined: %v", confined())
		}
		if r := execIn(t, spec, Command{Argv: []string{"cat", secret}}); r.Code != 0 {
			t.Errorf("unsandboxed read after a sandboxed command: %v %q", r.ExitStatus, r.stderr)
		}
		if r := execIn(t, spec, Command{Argv: []string{"unshare", "-U", "true"}}); r.Code != 0 {
			t.Errorf("unsandboxed unshare -U after a sandboxed command: %v %q", r.ExitStatus, r.stderr)
		}
	})
}

// TestSandboxPolicy: a command that names its sandbox policy
// (Command.Policy) instead of carrying a plan is sandboxed exactly as
// TestSandbox's planned one, the first time and from the keeper's cache
// after it; the keeper plans each distinct policy once (its log says when
// it plans); a policy the kernel cannot meet is an error that reaches the
// client; and Run plans a policy in the caller.
func TestSandboxPolicy(t *testing.T) {
	both(t, func(t *testing.T) {
		spec := newSpec(t, "")
		startKeeper(t, spec)
		agentSandbox(t, spec.Target) // the capability gates
		outside, err := os.MkdirTemp("/var/tmp", "strata-nsexec-outside-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(outside)
		os.Chmod(outside, 0o755)
		secret := outside + "/secret"
		if err := os.WriteFile(secret, []byte("secret\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		planned := func() int {
			b, _ := os.ReadFile(filepath.Join(spec.Dir, "keeper.log"))
			return strings.Count(string(b), "sandbox: planned a policy")
		}
		policy := func(strict bool) *sandbox.Request {
			return &sandbox.Request{Strict: strict, Target: spec.Target, Tmp: "/tmp"}
		}
		for i := range 3 {
			boxed := func(c Command) Command { c.Policy = policy(false); return c }
			if r := execIn(t, spec, boxed(Command{Argv: []string{"cat", secret}})); r.Code == 0 || !strings.Contains(r.stderr, "Permission denied") {
				t.Errorf("round %d: Landlock: read outside: %v %q %q", i, r.ExitStatus, r.stdout, r.stderr)
			}
			if r := execIn(t, spec, boxed(sh("echo inside > w && cat w"))); r.Code != 0 || r.stdout != "inside\n" {
				t.Errorf("round %d: Landlock: workspace: %v %q %q", i, r.ExitStatus, r.stdout, r.stderr)
			}
			if r := execIn(t, spec, boxed(Command{Argv: []string{"unshare", "-U", "true"}})); r.Code == 0 || !strings.Contains(r.stderr, "Operation not permitted") {
				t.Errorf("round %d: seccomp: unshare -U: %v %q", i, r.ExitStatus, r.stderr)
			}
			if r := execIn(t, spec, boxed(sh("grep -E '^(NoNewPrivs|Seccomp|Seccomp_filters):' /proc/self/status | tr -s '\t' ' '"))); r.stdout != "NoNewPrivs: 1\nSeccomp: 2\nSeccomp_filters: 1\n" {
				t.Errorf("round %d: sandboxed status: %q %q", i, r.stdout, r.stderr)
			}
			if n := planned(); n != 1 {
				t.Fatalf("round %d: the keeper planned %d times; want once", i, n)
			}
		}
		// Strict is another policy: planned once more, and it has no
		// network (its seccomp program denies AF_INET sockets).
		c := sh("python3 -c 'import socket; socket.socket()' 2>&1 | grep -c 'Operation not permitted'")
		c.Policy = policy(true)
		if _, err := os.Stat("/usr/bin/python3"); err == nil {
			if r := execIn(t, spec, c); r.stdout != "1\n" {
				t.Errorf("strict: socket(AF_INET): %v %q %q", r.ExitStatus, r.stdout, r.stderr)
			}
		} else {
			execIn(t, spec, c)
		}
		if n := planned(); n != 2 {
			t.Errorf("after a strict command the keeper planned %d times; want 2", n)
		}
		// A requirement the kernel cannot meet fails before anything runs.
		bad := policy(false)
		bad.RequireABI = 99
		_, err = Exec(context.Background(), spec.Dir, Command{Argv: []string{"true"}, Env: testEnv(), Policy: bad}, nil, nil, nil)
		if err == nil || !strings.HasPrefix(err.Error(), "landlock: ") || !strings.Contains(err.Error(), "RequireABI 99") {
			t.Errorf("RequireABI 99: %v; want landlock's own error, as the caller planning it would get", err)
		}
		// Run: the caller plans.
		r, err := runIn(t, context.Background(), spec, Command{Argv: []string{"unshare", "-U", "true"}, Policy: policy(false)})
		if err != nil || r.Code == 0 || !strings.Contains(r.stderr, "Operation not permitted") {
			t.Errorf("Run with a policy: unshare -U: %v %v %q", r.ExitStatus, err, r.stderr)
		}
	})
}
