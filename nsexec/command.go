package nsexec

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/internal/sandbox"
	"github.com/stratafs/strata/landlock"
)

// reaper waits for the children of a keeper or one-shot init, which is
// PID 1 of its PID namespace: every orphan in the workspace becomes its
// child and must be reaped, so it calls wait4(-1) on SIGCHLD and hands
// the statuses of the commands it started to whoever waits for them.
// exec.Cmd.Wait would race with it; commands are started with
// syscall.ForkExec instead.
type reaper struct {
	// mu is held shared while a command is forked and registered and
	// exclusively while reaping, so that a command that exits at once is
	// registered before its status is collected.
	mu      sync.RWMutex
	regMu   sync.Mutex // guards waiting among those holding mu shared
	waiting map[int]chan ExitStatus
}

// newReaper reaps on every SIGCHLD from sigchld (childInit's).
func newReaper(sigchld <-chan os.Signal) *reaper {
	r := &reaper{waiting: map[int]chan ExitStatus{}}
	go func() {
		for range sigchld {
			r.reap()
		}
	}()
	return r
}

func (r *reaper) reap() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		if c, ok := r.waiting[pid]; ok {
			delete(r.waiting, pid)
			c <- exitStatus(ws)
		}
	}
}

// killAll kills every other process of the PID namespace (the caller is
// its PID 1) and reaps them all, until none is left: a process forking
// while the first kill is delivered is caught by the next.
func (r *reaper) killAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		unix.Kill(-1, unix.SIGKILL)
		_, err := unix.Wait4(-1, nil, 0, nil)
		if err == unix.ECHILD {
			return
		}
	}
}

// started is the outcome of startCommand.
type started struct {
	pid    int
	exited chan ExitStatus // receives the status when pid exits
	// notRun is the status of a command that could not be executed: 127
	// (not found) or 126 (not executable), as a shell reports them; the
	// message is on the command's stderr.
	notRun *ExitStatus
	// warnings say what the kernel cannot enforce of the command's
	// Policy.
	warnings []string
}

// policies are the sandbox plans of the policies this process was sent
// (Command.Policy): a keeper plans each once for its life.
var policies sandbox.Cache

// errPolicy marks a sandbox policy the keeper could not plan (a Landlock
// ABI requirement the kernel does not meet): Exec returns it as the
// caller's own planning error would read, without naming the keeper.
var errPolicy = errors.New("sandbox policy")

type policyError struct{ err error }

func (e policyError) Error() string        { return e.err.Error() }
func (e policyError) Unwrap() error        { return e.err }
func (e policyError) Is(target error) bool { return target == errPolicy }

// planPolicy replaces c's Policy by its plan (from policies), and
// returns a copy of c and what the kernel cannot enforce.
func planPolicy(c *wireCommand) (*wireCommand, []string, error) {
	if c.Policy == nil {
		return c, nil, nil
	}
	if c.Landlock != nil || len(c.Seccomp) > 0 {
		return nil, nil, errors.New("a command carries a sandbox policy or a planned sandbox, not both")
	}
	plan, hit, err := policies.Get(*c.Policy)
	if err != nil {
		return nil, nil, policyError{err}
	}
	if !hit {
		logf("sandbox: planned a policy (%d kept)", policies.Len())
	}
	cc := *c
	cc.Policy, cc.Landlock = nil, plan.Landlock
	cc.Seccomp = make([]bpfProgram, len(plan.Seccomp))
	for i, p := range plan.Seccomp {
		cc.Seccomp[i] = p
	}
	return &cc, plan.Warnings, nil
}

// startCommand starts c with files as its stdin, stdout and stderr,
// sandboxed, and registers it with r. dir is the default working
// directory; caps says which capabilities of the caller's user namespace
// the command must lose.
//
// The sandbox is set up on a fresh OS thread that is discarded afterwards
// (the goroutine exits locked, and the Go runtime then ends the thread):
// it enters a private network namespace, restricts itself with Landlock,
// drops its capabilities and loads the seccomp programs — each of which
// Linux applies to the calling thread only — and then forks the command
// from that thread, which inherits exactly that state. The keeper's other
// threads keep their own, so one keeper serves many commands with
// different sandboxes, and no exec stage process (a Go process start,
// about a millisecond) is needed. Go creates new threads from a clean
// template thread when the current one is locked, so none inherits the
// sandbox either.
//
// A command without a sandbox needs no such thread (creating one costs
// about 0.15 ms) when nothing has to be dropped: as real root, or once
// clearAmbientCaps has made every execve drop the capabilities.
func startCommand(r *reaper, c *wireCommand, files []int, dir string, caps capsPolicy, v *view) (*started, error) {
	var policy string
	if c.Policy != nil {
		policy = c.Policy.Key()
	}
	c, warnings, err := planPolicy(c)
	if err != nil {
		return nil, err
	}
	var s *started
	launched := false
	if l := launcherFor(policy, c, caps, v); l != nil {
		s, err, launched = l.start(r, c, files, dir)
	}
	if !launched {
		s, err = startPlanned(r, c, files, dir, caps, v)
	}
	if s != nil {
		s.warnings = warnings
	}
	return s, err
}

// startPlanned is startCommand once c's sandbox is planned.
func startPlanned(r *reaper, c *wireCommand, files []int, dir string, caps capsPolicy, v *view) (*started, error) {
	if c.View && v == nil {
		return nil, errors.New("the command asks for a view and there is none")
	}
	if c.View && !caps.drop {
		// Real root: a sandboxed command keeps a container's capabilities,
		// not root's (see ContainerCaps).
		caps = capsPolicy{drop: true, keep: ContainerCaps}
	}
	dropCaps := caps.drop && (caps.keep != 0 || !execDropsCaps.Load())
	if !c.NetNone && c.Landlock == nil && len(c.Seccomp) == 0 && !dropCaps && !c.View {
		return startOnThisThread(r, c, files, dir, capsPolicy{}, nil)
	}
	type result struct {
		s   *started
		err error
	}
	res := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: see above
		caps.drop = dropCaps
		s, err := startOnThisThread(r, c, files, dir, caps, v)
		res <- result{s, err}
	}()
	out := <-res
	return out.s, out.err
}

// capsPolicy says what a command keeps of its starter's capabilities:
// nothing but keep when drop is set (a user namespace's capabilities),
// everything otherwise (real root's commands are root).
type capsPolicy struct {
	drop bool
	keep uint64 // a mask of capability numbers
	// image: an image root's command, started as user (Root.User,
	// looked up in the root).
	image bool
	user  string
}

// idCaps (a mask) are what commands keep in a workspace that maps
// subordinate ids: what acting as, and on files of, the namespace's other
// users takes — chown, setuid and setgid, reading and writing their
// files, signalling their processes. All of it is confined to ids the
// namespace maps.
const idCaps = 1<<unix.CAP_CHOWN | 1<<unix.CAP_DAC_OVERRIDE | 1<<unix.CAP_DAC_READ_SEARCH |
	1<<unix.CAP_FOWNER | 1<<unix.CAP_FSETID | 1<<unix.CAP_KILL | 1<<unix.CAP_SETGID | 1<<unix.CAP_SETUID

// ContainerCaps (a mask) are what a command with a view (a sandboxed
// one) keeps as real root, in every set including the bounding set:
// Docker's default set without CAP_MKNOD and CAP_NET_RAW. Root keeps
// acting on files and ids inside the view (chown, setuid, binding low
// ports), and loses what reaches beyond it: mounting, device nodes,
// network configuration, raw sockets, tracing, modules, the clock.
const ContainerCaps = 1<<unix.CAP_CHOWN | 1<<unix.CAP_DAC_OVERRIDE | 1<<unix.CAP_FOWNER | 1<<unix.CAP_FSETID |
	1<<unix.CAP_KILL | 1<<unix.CAP_SETGID | 1<<unix.CAP_SETUID | 1<<unix.CAP_SETPCAP | 1<<unix.CAP_NET_BIND_SERVICE |
	1<<unix.CAP_SYS_CHROOT | 1<<unix.CAP_SETFCAP | 1<<unix.CAP_AUDIT_WRITE

// settleCaps prepares a child with cfg, once its namespace is set up, for
// starting commands, and returns what they keep: in a user namespace
// without subordinate ids every execve is made to drop the capabilities
// (clearAmbientCaps); with them, each command keeps idCaps
// (dropCapabilities on its thread).
func settleCaps(cfg *childConfig) capsPolicy {
	if cfg.Root != nil {
		// Root inside an image, rootless or not, holds a container's
		// capabilities (its own user namespace's, rootless).
		return capsPolicy{drop: true, keep: ContainerCaps, image: true, user: cfg.Root.User}
	}
	if !cfg.UserNS {
		return capsPolicy{}
	}
	if cfg.SubIDs {
		return capsPolicy{drop: true, keep: idCaps}
	}
	clearAmbientCaps()
	return capsPolicy{drop: true}
}

// execDropsCaps is set when an execve from any thread of this process
// leaves the new program without capabilities: the process is not root
// in its user namespace and has no ambient capabilities.
var execDropsCaps atomic.Bool

// clearAmbientCaps clears the ambient capabilities of every thread of a
// child that no longer needs them to execve (it keeps its permitted and
// effective ones): its commands, running as the user's non-zero uid, then
// start without capabilities from any thread (see dropCapabilities). It
// needs syscall.AllThreadsSyscall, which a binary linking cgo (the
// fallback) cannot use; there every command drops them on its own thread.
func clearAmbientCaps() {
	if os.Getuid() == 0 {
		return // execve as root regains the bounding set
	}
	_, _, e := syscall.AllThreadsSyscall6(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0, 0)
	if e == 0 {
		execDropsCaps.Store(true)
	}
}

// startOnThisThread starts the command from the calling thread, after
// changing the thread's namespaces, credentials and filters as c asks;
// with caps.drop it drops every capability of the thread but caps.keep.
// With a view (c.View) the thread enters it first: what follows — the
// working directory, the command's lookup, Landlock's paths — is the
// view's.
func startOnThisThread(r *reaper, c *wireCommand, files []int, dir string, caps capsPolicy, v *view) (*started, error) {
	if err := checkCommand(c, files); err != nil {
		return nil, err
	}
	if c.View {
		if err := v.enter(c.Binds); err != nil {
			return nil, err
		}
	}
	path, dir, notRun, err := resolveCommand(c, files, dir)
	if notRun != nil || err != nil {
		return notRun, err
	}

	var cred *syscall.Credential
	if caps.image {
		// Looked up per command (a command may have added the user),
		// before Landlock narrows what the thread may read.
		id, err := lookupUser(caps.user)
		if err != nil {
			return nil, fmt.Errorf("image root: %w", err)
		}
		if cred, err = id.credential(); err != nil {
			return nil, fmt.Errorf("image root: %w", err)
		}
	}
	if err := confine(c, caps); err != nil {
		return nil, err
	}
	return forkCommand(r, c, files, path, dir, cred)
}

// checkCommand rejects a request no command can come of.
func checkCommand(c *wireCommand, files []int) error {
	if len(c.Argv) == 0 || c.Argv[0] == "" {
		return errors.New("empty command")
	}
	if len(files) != 3 {
		return fmt.Errorf("want 3 descriptors (stdin, stdout, stderr), got %d", len(files))
	}
	return nil
}

// resolveCommand checks c's working directory (dir by default) and finds
// its program, as the calling thread sees them: the path to execute and
// the directory, or the status of a command that cannot be executed
// (127, 126) with a shell's message on its stderr.
func resolveCommand(c *wireCommand, files []int, dir string) (string, string, *started, error) {
	if c.Dir != "" {
		dir = c.Dir
	}
	if !filepath.IsAbs(dir) {
		return "", "", nil, fmt.Errorf("working directory %q is not absolute", dir)
	}
	if fi, err := os.Stat(dir); err != nil {
		return "", "", nil, fmt.Errorf("working directory: %w", err)
	} else if !fi.IsDir() {
		return "", "", nil, fmt.Errorf("working directory %s: not a directory", dir)
	}
	path, code, msg := lookPath(c.Argv[0], envValue(c.Env, "PATH", defaultPath), dir)
	if code != 0 {
		return "", "", notRun(c, files, code, msg), nil
	}
	return path, dir, nil, nil
}

// notRun reports a command that could not be executed, like a shell:
// "sh: 1: foo: not found", "bash: ./x: Permission denied".
func notRun(c *wireCommand, files []int, code int, msg string) *started {
	unix.Write(files[2], []byte("strata: "+c.Argv[0]+": "+msg+"\n"))
	return &started{notRun: &ExitStatus{Code: code}}
}

// confine applies c's sandbox to the calling thread: a private network
// namespace, Landlock, the capabilities it keeps, seccomp — each of
// which Linux applies to this thread only, and every process it forks
// inherits.
func confine(c *wireCommand, caps capsPolicy) error {
	if c.NetNone {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("private network namespace: unshare(CLONE_NEWNET): %w", err)
		}
		if err := loopbackUp(); err != nil {
			return err
		}
	}
	if c.Landlock != nil {
		rs := *c.Landlock
		// landlock.Apply restricts every thread of the process on ABI 8+
		// (TSYNC), which would fence the keeper itself; this thread alone
		// is what must be restricted, which is what ABI 8+ kernels still
		// do without the flag.
		rs.KernelABI = min(rs.KernelABI, 7)
		if err := landlock.Apply(&rs); err != nil {
			return err
		}
	}
	if caps.drop {
		if err := dropCapabilities(caps.keep); err != nil {
			return err
		}
	}
	if len(c.Seccomp) > 0 {
		if err := loadSeccomp(c.Seccomp); err != nil {
			return err
		}
	}
	return nil
}

// forkCommand starts c's program at path in dir from the calling thread.
func forkCommand(r *reaper, c *wireCommand, files []int, path, dir string, cred *syscall.Credential) (*started, error) {
	sys := &syscall.SysProcAttr{Credential: cred}
	if c.TTY {
		sys.Setsid, sys.Setctty, sys.Ctty = true, true, 0
	} else {
		sys.Setpgid = true
	}
	attr := &syscall.ProcAttr{Dir: dir, Env: c.Env, Files: []uintptr{uintptr(files[0]), uintptr(files[1]), uintptr(files[2])}, Sys: sys}
	pid, exited, err := r.fork(path, c.Argv, attr)
	if errors.Is(err, unix.ENOEXEC) {
		// A script without "#!": run it with /bin/sh, as execvp(3) and
		// shells do.
		pid, exited, err = r.fork("/bin/sh", append([]string{"sh", path}, c.Argv[1:]...), attr)
	}
	var errno syscall.Errno
	switch {
	case err == nil:
		return &started{pid: pid, exited: exited}, nil
	case c.TTY && errors.Is(err, unix.ENOTTY):
		return nil, errors.New("TTY: the command's stdin is not a terminal")
	case errors.Is(err, unix.ENOENT):
		return notRun(c, files, 127, "No such file or directory"), nil
	case errors.As(err, &errno) && errno != unix.ENOMEM && errno != unix.EAGAIN:
		return notRun(c, files, 126, errnoText(errno)), nil
	}
	return nil, fmt.Errorf("start %s: %w", c.Argv[0], err)
}

// fork starts a process from the calling thread and registers it before
// the reaper can collect it.
func (r *reaper) fork(path string, argv []string, attr *syscall.ProcAttr) (int, chan ExitStatus, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	pid, err := syscall.ForkExec(path, argv, attr)
	if err != nil {
		return 0, nil, err
	}
	exited := make(chan ExitStatus, 1)
	r.regMu.Lock()
	r.waiting[pid] = exited
	r.regMu.Unlock()
	return pid, exited, nil
}

// errnoText is the C library's message for an errno, capitalized as
// strerror(3) has it ("Permission denied").
func errnoText(e syscall.Errno) string {
	s := e.Error()
	if s == "" {
		return "error"
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// defaultPath is the PATH a command without one gets (as in sh and
// execvp): the standard directories.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

func envValue(env []string, key, def string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], key+"="); ok {
			return v
		}
	}
	return def
}

// lookPath resolves a command like a shell: a name with a slash is taken
// as a path (relative to dir); a bare name is searched in PATH, where an
// empty entry is dir. It returns the path to execute, or code 127 (not
// found) or 126 (found only as something that cannot be executed) and
// the message a shell prints.
func lookPath(name, pathEnv, dir string) (path string, code int, msg string) {
	abs := func(p string) string {
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	if strings.Contains(name, "/") {
		fi, err := os.Stat(abs(name))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return "", 127, "No such file or directory"
		case err == nil && fi.IsDir():
			return "", 126, "Is a directory"
		}
		// Everything else (permissions, formats) execve reports.
		return name, 0, ""
	}
	denied := ""
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, name)
		if !filepath.IsAbs(d) {
			p = "./" + p // relative to dir, where the command starts
		}
		fi, err := os.Stat(abs(p))
		if err != nil || fi.IsDir() {
			continue
		}
		if fi.Mode()&0o111 != 0 {
			return p, 0, ""
		}
		if denied == "" {
			denied = p
		}
	}
	if denied != "" {
		return "", 126, "Permission denied"
	}
	return "", 127, "command not found"
}

// loopbackUp sets the loopback interface of the calling thread's network
// namespace up (ip link set lo up), with CAP_NET_ADMIN of the namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("private network namespace: socket: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("private network namespace: lo: SIOCGIFFLAGS: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("private network namespace: set lo up: %w", err)
	}
	return nil
}

// dropCapabilities leaves the calling thread with no capabilities but
// those in keep (a mask), so that the command it starts has only those:
// the ambient set, and the permitted, effective and inheritable sets.
// Without keep: a command running as a non-zero uid loses all but the
// ambient ones at execve anyway, and no file can give it any: the user
// namespace maps no uid 0, so setuid-root files do not apply and file
// capabilities are not honoured (Linux: security/commoncap.c
// rootid_owns_currentns). As uid 0 in the namespace (Spec.UserNS as real
// root) execve would restore the bounding set, so that is emptied too
// (first: it needs CAP_SETPCAP), 41 calls of prctl. With keep (a
// subordinate-id workspace, which maps a uid 0 a command may become) the
// bounding set is cut to keep as well, and keep stays ambient: through
// execve, setuid and setuid-root files alike a command holds at most keep.
func dropCapabilities(keep uint64) error {
	if os.Getuid() == 0 || keep != 0 {
		for c := range len(allCaps()) {
			if keep&(1<<c) != 0 {
				continue
			}
			if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL {
				return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
			}
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData // version 3: two 32-bit halves
	for i := range data {
		half := uint32(keep >> (32 * i))
		data[i] = unix.CapUserData{Effective: half, Permitted: half, Inheritable: half}
	}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	for c := range 64 {
		if keep&(1<<c) != 0 {
			if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_RAISE, uintptr(c), 0, 0); err != nil {
				return fmt.Errorf("keep capability %d: %w", c, err)
			}
		}
	}
	return nil
}

// loadSeccomp loads classic BPF programs (seccomp.Program's) on the
// calling thread, after no_new_privs, which the kernel requires of a
// caller without CAP_SYS_ADMIN and which keeps setuid programs from
// gaining privileges inside the sandbox. Without TSYNC: only this
// thread, and what it forks, is filtered.
func loadSeccomp(progs []bpfProgram) error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("seccomp: prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	for i, prog := range progs {
		if len(prog) == 0 {
			continue
		}
		fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
		_, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog)))
		runtime.KeepAlive(prog)
		if e != 0 {
			return fmt.Errorf("seccomp: load program %d of %d (%d instructions): %w", i+1, len(progs), len(prog), e)
		}
	}
	return nil
}
