package nsexec

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Descriptors of a keeper child, in startLocked's ExtraFiles order. Its
// stdin is /dev/null, its stdout and stderr keeper.log.
const (
	keeperConfigFD = 3 // configuration pipe (childConfig), read to EOF
	keeperLockFD   = 4 // keeper.lock, flock'ed by the parent: held for life
	keeperReadyFD  = 5 // one message: Started (ready) or Error
)

// keeper is the state of a running keeper.
type keeper struct {
	cfg    *childConfig
	caps   capsPolicy // what its commands keep
	reaper *reaper
	uid    uint32
	// view is what commands with View run in, once viewDone is closed;
	// viewErr says why there is none (they are refused then).
	view     *view
	viewErr  error
	viewDone chan struct{}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s keeper[%d]: %s\n", time.Now().Format(time.RFC3339Nano), os.Getpid(), fmt.Sprintf(format, args...))
}

// keeperMain is the keeper: PID 1 of a workspace's PID namespace.
func keeperMain() int {
	// The keeper ends by SIGTERM (or SIGKILL) and ignores keyboard
	// signals.
	sigs := childInit([]os.Signal{unix.SIGTERM}, []os.Signal{unix.SIGINT, unix.SIGHUP, unix.SIGQUIT})
	ready := os.NewFile(keeperReadyFD, "ready")
	fail := func(err error) int {
		logf("%v", err)
		writeFrame(ready, &message{Error: toWireError(err)})
		return 125
	}
	cfg, err := readConfig(keeperConfigFD)
	if err != nil {
		return fail(err)
	}
	// The state directory, opened before anything is mounted: it may be
	// beneath /tmp, which the private tmpfs hides, and its path may be
	// longer than a unix socket address.
	dirfd, err := unix.Open(cfg.Dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail(&os.PathError{Op: "open", Path: cfg.Dir, Err: err})
	}
	// The keeper's pid as its callers see it, through the /proc they
	// share until the keeper mounts its own.
	self, err := os.Readlink("/proc/self")
	if err != nil {
		return fail(err)
	}
	pid, err := strconv.Atoi(self)
	if err != nil {
		return fail(fmt.Errorf("/proc/self is %q", self))
	}
	_, start, err := procStat("self")
	if err != nil {
		return fail(err)
	}
	hs, err := setupNamespace(cfg)
	if err != nil {
		return fail(err)
	}
	for _, w := range hs.warnings {
		logf("warning: %s", w)
	}
	k := &keeper{cfg: cfg, reaper: newReaper(sigs.chld), uid: uint32(os.Getuid()), viewDone: make(chan struct{})}
	// The view is built once, while the keeper gets ready and its first
	// client prepares its request (about a millisecond, which the first
	// sandboxed command waits for only what is left of); every sandboxed
	// command of the workspace joins it. Without one, they are refused,
	// and the rest works.
	go func() {
		defer close(k.viewDone)
		start := time.Now()
		// With one P the builder, which makes some 150 system calls,
		// loses it to the main goroutine at every long one and waits to
		// get it back: 2-3 ms instead of 1. Two while it builds.
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
		k.view, k.viewErr = hs.buildView(cfg)
		if k.viewErr != nil {
			logf("warning: no view for sandboxed commands: %v", k.viewErr)
			return
		}
		logf("view built in %s", time.Since(start).Round(time.Microsecond))
	}()
	k.caps = settleCaps(cfg)
	// Not dumpable: the keeper's descriptors (the namespaces above), root
	// and memory stay out of reach of its commands, which run as the same
	// user (/proc/1/fd, /proc/1/root: ptrace_may_access). The owner of
	// its user namespace (the user, from the host) and real root keep
	// access: ws path (/proc/PID/root) still works.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fail(fmt.Errorf("prctl(PR_SET_DUMPABLE): %w", err))
	}

	unix.Unlinkat(dirfd, sockName, 0)
	ln, err := listen(sockAddr(dirfd, sockName))
	if err != nil {
		return fail(fmt.Errorf("socket %s/%s: %w", cfg.Dir, sockName, err))
	}

	info := &keeperInfo{PID: pid, StartTime: start, Name: cfg.Name, Target: cfg.Target, Started: time.Now(), Init: os.Args[0]}
	if exe, err := os.Readlink("/proc/self/exe"); err == nil {
		info.Init = exe
	}
	if err := writeInfo(dirfd, info); err != nil {
		return fail(err)
	}

	<-sigs.done
	go k.serve(ln)
	logf("serving %s on %s (pid %d, %s)", cfg.Name, cfg.Target, pid, info.Init)
	writeFrame(ready, &message{Started: pid})
	ready.Close()

	go watchStateDir(dirfd, cfg.Dir, sigs.sigs)

	<-sigs.sigs // SIGTERM
	logf("stopping")
	// Gone before the lock is released at exit, so that a new keeper
	// never sees this one's files.
	unix.Unlinkat(dirfd, infoName, 0)
	unix.Unlinkat(dirfd, sockName, 0)
	// Every other process of the PID namespace; the kernel would do it
	// when PID 1 exits, this makes it explicit and immediate.
	unix.Kill(-1, unix.SIGKILL)
	return 0
}

// writeInfo writes keeper.json atomically in the directory dirfd.
func writeInfo(dirfd int, info *keeperInfo) error {
	b, err := json.Marshal(info)
	if err != nil {
		return err
	}
	tmp := infoName + ".tmp"
	fd, err := unix.Openat(dirfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("write %s: %w", infoName, err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	_, err = f.Write(append(b, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(dirfd, tmp, dirfd, infoName)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", infoName, err)
	}
	return nil
}

func (k *keeper) serve(ln *listener) {
	for {
		c, err := ln.accept()
		if err != nil {
			if errors.Is(err, os.ErrClosed) {
				return
			}
			logf("accept: %v", err)
			time.Sleep(10 * time.Millisecond) // e.g. EMFILE: do not spin
			continue
		}
		go k.handle(c)
	}
}

// handle runs one command for one client connection.
func (k *keeper) handle(c *conn) {
	defer c.Close()
	reply := func(m *message) {
		if err := writeFrame(c, m); err != nil {
			logf("reply: %v", err)
		}
	}
	replyErr := func(err error) { reply(&message{Error: toWireError(err)}) }

	if uid, err := c.peerUID(); err != nil {
		replyErr(err)
		return
	} else if uid != k.uid && uid != 0 {
		// The socket's directory is the user's; this is defense in depth.
		logf("refused a client with uid %d", uid)
		replyErr(fmt.Errorf("uid %d may not run commands in a workspace of uid %d", uid, k.uid))
		return
	}
	m, fds, err := readFrameFDs(c, 3)
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	switch {
	case err != nil:
		replyErr(fmt.Errorf("read request: %w", err))
		return
	case m.Version != protoVersion:
		replyErr(fmt.Errorf("the keeper speaks protocol %d, the client %d: restart the workspace (strata ws stop) after upgrading strata", protoVersion, m.Version))
		return
	case m.Freeze:
		k.freeze(c, reply, replyErr)
		return
	case m.PTY:
		k.pty(c, replyErr)
		return
	case m.Command == nil:
		replyErr(errors.New("request without a command"))
		return
	case len(fds) != 3:
		replyErr(fmt.Errorf("request with %d descriptors; want stdin, stdout, stderr", len(fds)))
		return
	}
	st, err := startCommand(k.reaper, m.Command, fds, k.cfg.Target, k.caps, k.viewFor(m.Command))
	// The command has its copies; the keeper must not keep pipes open.
	for _, fd := range fds {
		unix.Close(fd)
	}
	fds = nil
	if err != nil {
		replyErr(err)
		return
	}
	if st.notRun != nil {
		reply(&message{Exited: st.notRun, Warnings: st.warnings})
		return
	}
	reply(&message{Started: st.pid, Warnings: st.warnings})

	// Signals from the client go to the command's process group; the
	// client hanging up kills it.
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		for {
			m, err := readFrame(c)
			if err != nil {
				return
			}
			if m.Signal > 0 && m.Signal < 65 {
				unix.Kill(-st.pid, unix.Signal(m.Signal))
			}
		}
	}()
	select {
	case status := <-st.exited:
		reply(&message{Exited: &status})
	case <-gone:
		select {
		case <-st.exited:
		default:
			unix.Kill(-st.pid, unix.SIGKILL)
			<-st.exited
		}
	}
}

// viewFor returns the view a command runs in: nil for one without View,
// else the keeper's, or a view that reports why there is none.
func (k *keeper) viewFor(c *wireCommand) *view {
	if !c.View {
		return nil
	}
	<-k.viewDone
	if k.view == nil {
		return &view{err: k.viewErr}
	}
	return k.view
}

// pty opens a new pty in the keeper's view (its devpts instance) and
// sends the client the master: a terminal for a command with View, whose
// name resolves there (tty, ttyname).
func (k *keeper) pty(c *conn, replyErr func(error)) {
	<-k.viewDone
	if k.view == nil {
		replyErr(fmt.Errorf("pty: the workspace has no view: %v", k.viewErr))
		return
	}
	type result struct {
		fd  int
		err error
	}
	res := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends in the view
		if err := k.view.enter(nil); err != nil {
			res <- result{-1, err}
			return
		}
		fd, err := unix.Open("/dev/pts/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if err != nil {
			res <- result{-1, fmt.Errorf("pty: open /dev/pts/ptmx: %w", err)}
			return
		}
		if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
			unix.Close(fd)
			res <- result{-1, fmt.Errorf("pty: unlock: %w", err)}
			return
		}
		res <- result{fd, nil}
	}()
	r := <-res
	if r.err != nil {
		replyErr(r.err)
		return
	}
	defer unix.Close(r.fd)
	if err := writeFrameFDs(c, &message{PTY: true}, []int{r.fd}); err != nil {
		logf("pty: reply: %v", err)
	}
}

// freeze stops every other process of the workspace for a client that
// cannot (Freeze from a subordinate-id namespace: processes running as
// other ids are not its to signal), and resumes them when the client
// hangs up, however it ends.
func (k *keeper) freeze(c *conn, reply func(*message), replyErr func(error)) {
	if self, err := os.Readlink("/proc/self"); err != nil || self != "1" {
		replyErr(errors.New("freeze: the workspace has no private /proc to find its processes in"))
		return
	}
	stopped, err := stopAll(procPIDs, 1)
	if err != nil {
		replyErr(fmt.Errorf("freeze workspace: %w", err))
		return
	}
	defer contAll(stopped)
	reply(&message{Freeze: true})
	for {
		if _, err := readFrame(c); err != nil {
			return
		}
	}
}

// stateDirPoll is how often a keeper checks that its state directory
// still exists.
const stateDirPoll = 2 * time.Second

// watchStateDir stops the keeper (as SIGTERM would) once its state
// directory has been deleted — the workspace's or the whole store's
// directory removed without `ws rm` — so that no keeper outlives its
// workspace holding a mount of deleted files.
func watchStateDir(dirfd int, dir string, stop chan<- os.Signal) {
	for range time.Tick(stateDirPoll) {
		var st unix.Stat_t
		if err := unix.Fstat(dirfd, &st); err != nil || st.Nlink == 0 {
			logf("state directory %s was deleted: stopping", dir)
			stop <- unix.SIGTERM
			return
		}
	}
}
