package nsexec

import (
	"runtime"
	"strconv"
	"sync"
)

// A launcher is a thread of the keeper that carries one sandbox — the
// keeper's view, a policy's Landlock domain and seccomp programs, the
// capabilities its commands keep — and forks every command of that
// sandbox from itself. Without it, startCommand sets the sandbox up on a
// fresh thread for each command (the thread ends with it): entering the
// view, building Landlock's ruleset (an open and a rule per path),
// dropping capabilities (a prctl per capability as root) and loading the
// seccomp programs (which the kernel translates and compiles each time)
// cost about as much as the rest of an exec into a live keeper. A
// launcher pays them once per policy for the keeper's life. Commands
// that need more than the keeper's view (binds of their own), a network
// namespace of their own or an image root's user keep the per-command
// thread: what they set up is theirs alone.
//
// The launcher's goroutine is locked to its thread for good, so no other
// goroutine ever runs there, and threads the runtime creates later come
// from its template thread, not from a sandboxed one (see startCommand).
// A command starts from it exactly as from its own thread, but that the
// working directory and the program are looked up after the sandbox is
// applied rather than before: both are stat(2)s, which neither Landlock
// nor the seccomp programs govern.
type launcher struct {
	reqs chan launchReq
	quit chan struct{} // closed: the launcher's thread has ended
}

type launchReq struct {
	r     *reaper
	c     *wireCommand
	files []int
	dir   string
	done  chan launchRes
}

type launchRes struct {
	s   *started
	err error
}

// launchers are the keeper's launchers by sandbox. A keeper serves a
// handful of policies; past maxLaunchers it starts over (the old
// launchers' threads end).
var launchers struct {
	mu sync.Mutex
	m  map[string]*launcher
}

const maxLaunchers = 16

// launcherFor returns the launcher of the sandbox of c (planned from the
// policy whose key is policy), starting it if need be, or nil when c
// gets a thread of its own: no policy, no view or not the keeper's, a
// network namespace of its own, an image root, a sandbox that cannot be
// set up (the command's own thread tries again, and says why).
func launcherFor(policy string, c *wireCommand, caps capsPolicy, v *view) *launcher {
	if policy == "" || !c.View || c.NetNone || caps.image || v == nil || v.err != nil || v.root || len(v.missing(c.Binds)) > 0 {
		return nil
	}
	if !caps.drop {
		// Real root: a sandboxed command keeps a container's capabilities
		// (startPlanned).
		caps = capsPolicy{drop: true, keep: ContainerCaps}
	}
	caps.drop = caps.drop && (caps.keep != 0 || !execDropsCaps.Load())
	key := policy + "\x00" + strconv.FormatBool(caps.drop) + ":" + strconv.FormatUint(caps.keep, 16)
	launchers.mu.Lock()
	defer launchers.mu.Unlock()
	if l, ok := launchers.m[key]; ok {
		return l
	}
	l := &launcher{reqs: make(chan launchReq), quit: make(chan struct{})}
	ready := make(chan error, 1)
	go l.run(c, caps, v, ready)
	if err := <-ready; err != nil {
		logf("sandbox: no launcher: %v", err)
		return nil
	}
	if launchers.m == nil || len(launchers.m) >= maxLaunchers {
		for _, old := range launchers.m {
			close(old.quit)
		}
		launchers.m = map[string]*launcher{}
	}
	launchers.m[key] = l
	logf("sandbox: a launcher for a policy (%d running)", len(launchers.m))
	return l
}

// run sets the sandbox of c up on this goroutine's thread, then starts
// the commands it is sent until quit is closed; the thread ends then.
func (l *launcher) run(c *wireCommand, caps capsPolicy, v *view, ready chan<- error) {
	runtime.LockOSThread() // never unlocked: the thread carries the sandbox
	if err := v.enter(nil); err != nil {
		ready <- err
		return
	}
	if err := confine(c, caps); err != nil {
		ready <- err
		return
	}
	ready <- nil
	for {
		select {
		case req := <-l.reqs:
			s, err := startConfined(req.r, req.c, req.files, req.dir)
			req.done <- launchRes{s, err}
		case <-l.quit:
			return
		}
	}
}

// start starts c from the launcher's thread; ok is false when the
// launcher has ended (the caller starts c on a thread of its own).
func (l *launcher) start(r *reaper, c *wireCommand, files []int, dir string) (s *started, err error, ok bool) {
	done := make(chan launchRes, 1)
	select {
	case l.reqs <- launchReq{r: r, c: c, files: files, dir: dir, done: done}:
		res := <-done
		return res.s, res.err, true
	case <-l.quit:
		return nil, nil, false
	}
}

// startConfined starts c from the calling thread, which carries its
// sandbox already.
func startConfined(r *reaper, c *wireCommand, files []int, dir string) (*started, error) {
	if err := checkCommand(c, files); err != nil {
		return nil, err
	}
	path, dir, notRun, err := resolveCommand(c, files, dir)
	if notRun != nil || err != nil {
		return notRun, err
	}
	return forkCommand(r, c, files, path, dir, nil)
}
