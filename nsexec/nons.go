package nsexec

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/internal/sandbox"
	"github.com/stratafs/strata/landlock"
)

// Running without namespaces. Where user namespaces are denied (see
// userns.go) a workspace of the reflink or copy backend is a plain
// directory, and its commands run with no namespace at all: fenced by
// Landlock (the workspace read-write, the system read-only, nothing else)
// and seccomp, applied by a re-executed child right before exec, as in a
// keeper. What only namespaces give is refused or reported — NoNSReport
// says which, and docs/sandbox.md, "When user namespaces are not
// available", why.

// NoNSSpec is a namespace-free run.
type NoNSSpec struct {
	// Name is the workspace's name, for messages.
	Name string
	// Workspace is the workspace directory: the command's default working
	// directory. Its Landlock rules (NoNSPolicy) must make it writable.
	Workspace string
	// Tmp is the workspace's private temporary directory; the command
	// gets it as TMPDIR, TMP and TEMP. It must exist when the Landlock
	// rules are planned (landlock.Plan leaves a missing path out);
	// RunNoNS creates it (0700) if missing.
	Tmp string
	// Unsandboxed: the caller asked for no sandbox (--sandbox none), and
	// the command runs without Landlock and seccomp. Otherwise a command
	// without a Landlock rule set and seccomp programs is refused
	// (ErrNoSandbox): without namespaces they are the only fence.
	Unsandboxed bool
	// AllowHostSockets lets a sandboxed command create unix sockets,
	// and so connect to the host's (the session bus, ssh-agent,
	// docker.sock). By default its seccomp programs must deny them
	// (seccomp.UnixSocketDeny, loaded after the preset's program),
	// which the child checks.
	AllowHostSockets bool
}

// ErrNoSandbox: a namespace-free run was refused because its sandbox
// cannot be enforced (no Landlock, no seccomp, or a check failed), and
// the caller did not ask for none.
var ErrNoSandbox = errors.New("the sandbox cannot be enforced without namespaces")

// NoNSPolicy is the Landlock policy of a namespace-free command
// (sandbox.NoNSPolicy: the agent policy without /dev/shm, /dev/ptmx and
// /dev/pts, which are the host's here). With restrictTCP (--net none)
// every TCP connect and bind is denied.
func NoNSPolicy(workspace, tmp string, extraRO, extraRW []string, restrictTCP bool) landlock.Policy {
	return sandbox.NoNSPolicy(workspace, tmp, extraRO, extraRW, restrictTCP)
}

// NoNSItem is one protection of a workspace's namespaces, and what a
// namespace-free run does instead.
type NoNSItem struct {
	What string `json:"what"`
	// Status is "enforced" (by other means), "refused" (what needs it
	// fails: EACCES or EPERM) or "not enforced".
	Status string `json:"status"`
	Detail string `json:"detail"`
}

// NoNSReport says what a namespace-free run enforces on a kernel with
// Landlock ABI abi (0: none).
func NoNSReport(abi int) []NoNSItem {
	var out []NoNSItem
	add := func(what, status, detail string) { out = append(out, NoNSItem{what, status, detail}) }
	if abi == 0 {
		add("filesystem fence", "refused", "no Landlock: nothing would fence the filesystem, so sandboxed commands are refused (exit 125); only --sandbox none runs them, unsandboxed")
	} else {
		add("filesystem fence", "enforced", fmt.Sprintf("Landlock ABI %d: the workspace and its private tmp read-write; /usr /bin /sbin /lib* /etc /opt read-only and executable; /proc, CPU and cgroup parts of /sys, /dev/null and the like; nothing else — not the home, not the store, not other workspaces", abi))
	}
	if abi >= 1 && abi < 2 {
		add("renames across directories", "refused", "Landlock ABI 1 refuses moving a file to another directory (EXDEV); ABI 2 (Linux 5.19) allows it inside the workspace")
	}
	add("private /tmp", "refused", "TMPDIR, TMP and TEMP name a private directory of the workspace; /tmp itself is the host's and outside the fence (EACCES), so a tool that ignores TMPDIR fails there")
	add("/dev/shm and new terminals", "refused", "/dev/shm (POSIX shared memory and semaphores: python's multiprocessing locks) and /dev/pts (new ptys: script, expect, node-pty) are the host's, shared with every process of the user: EACCES")
	add("host unix sockets", "refused", "creating unix sockets is denied (seccomp: EPERM), so the host's session bus, ssh-agent or docker.sock cannot be reached — Landlock cannot tell them apart; socketpair(2) works")
	add("network none (--sandbox strict)", "enforced", "no IP socket of any kind (seccomp) and, with Landlock ABI 4, no TCP connect or bind; a private loopback needs a network namespace, so 127.0.0.1 servers fail too")
	pid := "signals to processes outside the sandbox are denied (Landlock ABI 6 scoping)"
	if abi < 6 {
		pid = "signals to the user's other processes are NOT denied (Landlock ABI 6, Linux 6.12, scopes them)"
	}
	add("PID namespace", "not enforced", "the command sees every process of the host in /proc (their command lines); their memory, environment and files stay closed (Landlock's ptrace rules, seccomp denies ptrace); "+pid+"; what the command leaves running is killed when it ends (a subreaper collects it)")
	add("metadata outside the fence", "not enforced", "chmod, chown, utimes and xattrs of the user's own files that a path reaches (the home) are not fenced: Landlock governs contents, not metadata, and only a mount namespace hides the paths")
	return out
}

// Entry point of the namespace-free child.
const entryNoNSRun = "nons-run"

func init() {
	Register(entryNoNSRun, noNSRunMain)
}

// noNSKill is what the parent sends the child to end the run (ctx done,
// or the parent gone: it is the child's parent-death signal too): the
// child kills every process of the run and reports.
const noNSKill = unix.SIGUSR2

// RunNoNS runs cmd with no namespace: a re-executed child becomes a
// subreaper (every process the command leaves behind becomes its child),
// applies cmd's Landlock rule set, drops capabilities (root keeps
// ContainerCaps), loads cmd's seccomp programs on the thread that forks
// the command, checks that they hold, starts the command with TMPDIR set
// to spec.Tmp, and when it exits kills and reaps everything the command
// left. It serves one-shot runs and execs into a workspace alike: without
// namespaces no keeper holds anything, and nothing outlives a command.
//
// Signals (SIGINT, SIGTERM, SIGHUP, SIGQUIT) sent to the caller are
// forwarded to the command's process group. When ctx is done, every
// process of the run is killed and RunNoNS returns status 137 with ctx's
// error. A command that cannot be executed gets 127 or 126.
//
// Refused, with an error wrapping ErrNoSandbox, before anything starts: a
// sandboxed run (not spec.Unsandboxed) without an enforced Landlock rule
// set or without seccomp programs; NetNone without seccomp programs (no
// network namespace here: the programs must deny IP sockets); a command
// whose programs let it create an IP socket despite NetNone, or a unix
// socket without spec.AllowHostSockets (checked in the child, after the
// sandbox is applied, before the command starts). cmd.View is refused: a
// view is a mount namespace.
func RunNoNS(ctx context.Context, spec NoNSSpec, cmd Command, stdin, stdout, stderr *os.File) (ExitStatus, error) {
	fail := func(format string, args ...any) (ExitStatus, error) {
		return ExitStatus{}, fmt.Errorf("run in %s without namespaces: "+format, append([]any{spec.Name}, args...)...)
	}
	switch {
	case !filepath.IsAbs(spec.Workspace):
		return fail("workspace %q is not absolute", spec.Workspace)
	case !filepath.IsAbs(spec.Tmp):
		return fail("tmp %q is not absolute", spec.Tmp)
	case cmd.View:
		return fail("a view needs a mount namespace: %w", ErrNoSandbox)
	case !spec.Unsandboxed && (cmd.Landlock == nil || !cmd.Landlock.Enforced()):
		return fail("Landlock is not available on this kernel, and without namespaces it is the only fence around the filesystem; refusing (--sandbox none runs the command unsandboxed, explicitly): %w", ErrNoSandbox)
	case !spec.Unsandboxed && len(cmd.Seccomp) == 0:
		return fail("no seccomp programs to load; refusing (--sandbox none runs the command unsandboxed, explicitly): %w", ErrNoSandbox)
	case cmd.NetNone && len(cmd.Seccomp) == 0:
		return fail("no network namespace here: --net none needs seccomp programs that deny IP sockets: %w", ErrNoSandbox)
	}
	if fi, err := os.Stat(spec.Workspace); err != nil {
		return fail("%w", err)
	} else if !fi.IsDir() {
		return fail("%s is not a directory", spec.Workspace)
	}
	if err := os.MkdirAll(spec.Tmp, 0o700); err != nil {
		return fail("%w", err)
	}
	env := append(slices.Clone(commandEnv(cmd)), "TMPDIR="+spec.Tmp, "TMP="+spec.Tmp, "TEMP="+spec.Tmp)
	wc, err := toWireCommand(cmd, env)
	if err != nil {
		return ExitStatus{}, err
	}
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return ExitStatus{}, err
	}
	defer cfgW.Close()
	stR, stW, err := os.Pipe()
	if err != nil {
		cfgR.Close()
		return ExitStatus{}, err
	}
	defer stR.Close()

	args := []string{argv0Prefix + entryNoNSRun, spec.Name}
	if !spec.Unsandboxed && !spec.AllowHostSockets {
		args = append(args, "no-unix-sockets")
	}
	c := &exec.Cmd{
		Path:        InitPath(),
		Args:        args,
		Env:         childEnv,
		Dir:         "/",
		ExtraFiles:  []*os.File{cfgR, stW},
		SysProcAttr: &syscall.SysProcAttr{Pdeathsig: noNSKill},
	}
	if stdin != nil {
		c.Stdin = stdin
	}
	if stdout != nil {
		c.Stdout = stdout
	}
	if stderr != nil {
		c.Stderr = stderr
	}
	fwd := forwardSignals()
	defer fwd.stop()
	configured := writeConfig(cfgW, &childConfig{Version: protoVersion, Name: spec.Name, Target: filepath.Clean(spec.Workspace), Command: wc})
	err = c.Start()
	cfgR.Close()
	stW.Close()
	if err != nil {
		<-configured
		return ExitStatus{}, fmt.Errorf("start %s: %w", c.Path, err)
	}
	waited := make(chan struct{})
	go func() {
		c.Wait()
		close(waited)
	}()
	if err := <-configured; err != nil {
		c.Process.Signal(noNSKill)
		<-waited
		return ExitStatus{}, fmt.Errorf("nsexec: configure the namespace-free child: %w", err)
	}
	type report struct {
		m   *message
		err error
	}
	reported := make(chan report, 1)
	go func() {
		m, err := readFrame(stR)
		reported <- report{m, err}
	}()
	done := ctx.Done()
	killed := false
	var r report
	for waiting := true; waiting; {
		select {
		case sig := <-fwd.c:
			c.Process.Signal(sig)
		case <-done:
			done, killed = nil, true
			c.Process.Signal(noNSKill)
		case r = <-reported:
			<-waited
			waiting = false
		}
	}
	switch {
	case r.err == nil && r.m.Exited != nil:
		if killed {
			return *r.m.Exited, ctx.Err()
		}
		return *r.m.Exited, nil
	case r.err == nil && r.m.Error != nil:
		return ExitStatus{}, fmt.Errorf("run in %s without namespaces: %w", spec.Name, r.m.Error.err())
	case killed:
		return ExitStatus{Code: 128 + int(unix.SIGKILL), Signal: unix.SIGKILL}, ctx.Err()
	}
	return ExitStatus{}, fmt.Errorf("run in %s without namespaces: the child exited (%v) without a report: %v", spec.Name, c.ProcessState, r.err)
}

// noNSRunMain is the namespace-free child: a subreaper that runs one
// sandboxed command and, when it exits, kills and reaps whatever it left.
func noNSRunMain() int {
	sigs := childInit(append(slices.Clone(forwarded), noNSKill), nil)
	status := os.NewFile(runStatusFD, "status")
	fail := func(err error) int {
		writeFrame(status, &message{Error: toWireError(err)})
		return 125
	}
	cfg, err := readConfig(runConfigFD)
	if err != nil {
		return fail(err)
	}
	if cfg.Command == nil {
		return fail(errors.New("no command"))
	}
	noUnix := slices.Contains(os.Args[2:], "no-unix-sockets")
	// Every orphan of the run becomes this process's child, so that
	// nothing outlives it (there is no PID namespace to end).
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fail(fmt.Errorf("prctl(PR_SET_CHILD_SUBREAPER): %w", err))
	}
	caps := capsPolicy{}
	if os.Geteuid() == 0 {
		// Root on the host: a sandboxed command keeps a container's
		// capabilities, as in a view, not root's.
		caps = capsPolicy{drop: true, keep: ContainerCaps}
	}
	r := newReaper(sigs.chld)
	<-sigs.done
	st, err := startNoNS(r, cfg.Command, []int{0, 1, 2}, cfg.Target, caps, noUnix)
	if err != nil {
		r.killDescendants()
		return fail(err)
	}
	if st.notRun != nil {
		r.killDescendants()
		writeFrame(status, &message{Exited: st.notRun})
		return st.notRun.Code
	}
	for {
		select {
		case sig := <-sigs.sigs:
			if sig == noNSKill {
				unix.Kill(-st.pid, unix.SIGKILL)
				r.killDescendants()
				es := ExitStatus{Code: 128 + int(unix.SIGKILL), Signal: unix.SIGKILL}
				writeFrame(status, &message{Exited: &es})
				return es.Code
			}
			unix.Kill(-st.pid, sig.(unix.Signal))
		case es := <-st.exited:
			r.killDescendants()
			writeFrame(status, &message{Exited: &es})
			return es.Code
		}
	}
}

// startNoNS starts c as startCommand does, on a fresh OS thread that is
// discarded afterwards, with no namespace and no view: Landlock, dropped
// capabilities, seccomp; then it checks on that thread that what the
// sandbox promised holds — with NetNone no IP socket can be created, and
// with noUnix no unix socket — and refuses the command otherwise.
func startNoNS(r *reaper, c *wireCommand, files []int, dir string, caps capsPolicy, noUnix bool) (*started, error) {
	if c.View || len(c.Binds) > 0 {
		return nil, fmt.Errorf("a view or binds need a mount namespace: %w", ErrNoSandbox)
	}
	type result struct {
		s   *started
		err error
	}
	res := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		s, err := startNoNSOnThisThread(r, c, files, dir, caps, noUnix)
		res <- result{s, err}
	}()
	out := <-res
	return out.s, out.err
}

func startNoNSOnThisThread(r *reaper, c *wireCommand, files []int, dir string, caps capsPolicy, noUnix bool) (*started, error) {
	if len(c.Argv) == 0 || c.Argv[0] == "" {
		return nil, errors.New("empty command")
	}
	if c.Dir != "" {
		dir = c.Dir
	}
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("working directory %q is not absolute", dir)
	}
	if fi, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("working directory: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("working directory %s: not a directory", dir)
	}
	path, code, msg := lookPath(c.Argv[0], envValue(c.Env, "PATH", defaultPath), dir)
	if code != 0 {
		unix.Write(files[2], []byte("strata: "+c.Argv[0]+": "+msg+"\n"))
		return &started{notRun: &ExitStatus{Code: code}}, nil
	}
	if c.Landlock != nil {
		rs := *c.Landlock
		rs.KernelABI = min(rs.KernelABI, 7) // this thread only: see startOnThisThread
		if err := landlock.Apply(&rs); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNoSandbox, err)
		}
	}
	if caps.drop {
		if err := dropCapabilities(caps.keep); err != nil {
			return nil, err
		}
	}
	if len(c.Seccomp) > 0 {
		if err := loadSeccomp(c.Seccomp); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNoSandbox, err)
		}
	}
	// Fail closed: what the plan says must hold on this thread, which the
	// command inherits.
	if c.NetNone {
		for _, fam := range []int{unix.AF_INET, unix.AF_INET6} {
			for _, typ := range []int{unix.SOCK_STREAM, unix.SOCK_DGRAM} {
				if fd, err := unix.Socket(fam, typ|unix.SOCK_CLOEXEC, 0); err == nil {
					unix.Close(fd)
					return nil, fmt.Errorf("--net none: an IP socket (family %d, type %d) can be created under the seccomp programs, and there is no network namespace to fall back on: %w", fam, typ, ErrNoSandbox)
				}
			}
		}
	}
	if noUnix {
		if fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err == nil {
			unix.Close(fd)
			return nil, fmt.Errorf("a unix socket can be created under the seccomp programs, so the host's (session bus, ssh-agent, docker.sock) are reachable without a mount namespace; deny them (seccomp.UnixSocketDeny) or allow them explicitly: %w", ErrNoSandbox)
		}
	}
	sys := &syscall.SysProcAttr{}
	if c.TTY {
		sys.Setsid, sys.Setctty, sys.Ctty = true, true, 0
	} else {
		sys.Setpgid = true
	}
	attr := &syscall.ProcAttr{Dir: dir, Env: c.Env, Files: []uintptr{uintptr(files[0]), uintptr(files[1]), uintptr(files[2])}, Sys: sys}
	pid, exited, err := r.fork(path, c.Argv, attr)
	if errors.Is(err, unix.ENOEXEC) {
		pid, exited, err = r.fork("/bin/sh", append([]string{"sh", path}, c.Argv[1:]...), attr)
	}
	var errno syscall.Errno
	switch {
	case err == nil:
		return &started{pid: pid, exited: exited}, nil
	case errors.Is(err, unix.ENOENT):
		unix.Write(files[2], []byte("strata: "+c.Argv[0]+": No such file or directory\n"))
		return &started{notRun: &ExitStatus{Code: 127}}, nil
	case errors.As(err, &errno) && errno != unix.ENOMEM && errno != unix.EAGAIN:
		unix.Write(files[2], []byte("strata: "+c.Argv[0]+": "+errnoText(errno)+"\n"))
		return &started{notRun: &ExitStatus{Code: 126}}, nil
	}
	return nil, fmt.Errorf("start %s: %w", c.Argv[0], err)
}

// killDescendants kills every child of this process (a subreaper: every
// orphan of the run is one) until none is left, reaping them: a child
// that forks meanwhile leaves its own children to us when it dies, and
// the next round takes them. It holds the reaper's lock, so that the
// statuses it reaps are not waited for elsewhere.
func (r *reaper) killDescendants() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		for _, pid := range childPIDs() {
			unix.Kill(pid, unix.SIGKILL)
		}
		_, err := unix.Wait4(-1, nil, 0, nil)
		if err == unix.ECHILD {
			return
		}
	}
}

// childPIDs lists this process's children: /proc/self/task/*/children
// (CONFIG_PROC_CHILDREN), else a scan of /proc for our pid as parent.
func childPIDs() []int {
	var out []int
	tasks, err := os.ReadDir("/proc/self/task")
	ok := err == nil
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + t.Name() + "/children")
		if err != nil {
			ok = false
			break
		}
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
	}
	if ok {
		return out
	}
	out = out[:0]
	self := strconv.Itoa(os.Getpid())
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		n, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + p.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 {
			if f := strings.Fields(s[i+1:]); len(f) > 1 && f[1] == self {
				out = append(out, n)
			}
		}
	}
	return out
}
