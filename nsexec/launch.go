package nsexec

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// InitName is the small child binary that serves as keeper and one-shot
// init: cmd/strata-init, pure Go (no cgo, no SQLite), installed beside
// strata. It starts in about a millisecond where the full strata binary
// takes three or more.
const InitName = "strata-init"

// Entry points of the re-executed child (os.Args[0] is "strata:ENTRY").
const (
	entryKeeper = "keeper"
	entryRun    = "run"
)

func init() {
	Register(entryKeeper, keeperMain)
	Register(entryRun, runMain)
}

// initOverride replaces InitPath's choice (tests).
var initOverride string

var initLookup = sync.OnceValue(func() string {
	exe, err := os.Executable()
	if err != nil {
		return Self
	}
	p := filepath.Join(filepath.Dir(exe), InitName)
	if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return p
	}
	return Self
})

// InitPath returns the binary that keepers and one-shot inits run:
// strata-init beside the running executable when it is there, otherwise
// the running executable itself (Self), whose main calls Init.
func InitPath() string {
	if initOverride != "" {
		return initOverride
	}
	return initLookup()
}

// childEnv is a child's whole environment; the commands it starts get
// theirs from the request. One P is plenty for a process that mostly
// waits, and keeps an idle keeper small.
var childEnv = []string{"GOMAXPROCS=1"}

// newChild prepares a child at entry with the namespaces a workspace
// needs: mount and PID, and user unless real root (Spec.UserNS).
func newChild(entry string, spec *Spec, setsid bool) *exec.Cmd {
	cmd := &exec.Cmd{
		Path: InitPath(),
		Args: []string{argv0Prefix + entry, spec.Name},
		Env:  childEnv,
		Dir:  "/", // do not pin the caller's working directory
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID,
			Setsid:     setsid,
		},
	}
	switch {
	case spec.Root != nil && spec.userNS():
		// The image's root is the caller (checkRoot computed the maps
		// from a subordinate-id namespace).
		setRootUserNS(cmd.SysProcAttr, spec.rootMaps)
	case spec.userNS() && spec.SubIDs && inSubIDNS:
		// The caller's namespace is the workspace's (EnterSubIDs): the
		// child keeps its capabilities through execve as ambient ones.
		cmd.SysProcAttr.AmbientCaps = allCaps()
	case spec.userNS():
		SetUserNS(cmd.SysProcAttr)
	}
	return cmd
}

// startChild starts cmd and explains a refused namespace.
func startChild(cmd *exec.Cmd, spec *Spec) error {
	err := cmd.Start()
	if err == nil {
		return nil
	}
	if spec.userNS() {
		return userNSError(err)
	}
	return fmt.Errorf("start %s: %w", cmd.Path, err)
}

// checkSpec rejects a Spec the child could only fail on, and creates a
// missing target inside the state directory (DIR/merged).
func checkSpec(spec *Spec, needDir bool) error {
	switch {
	case (needDir || spec.Dir != "") && !filepath.IsAbs(spec.Dir):
		return fmt.Errorf("nsexec: state directory %q is not absolute", spec.Dir)
	case spec.Target == "" || !filepath.IsAbs(spec.Target):
		return fmt.Errorf("nsexec: target %q is not absolute", spec.Target)
	case len(spec.Lowers) == 0 && spec.Root == nil && spec.Plain == "":
		return fmt.Errorf("nsexec: no lower layer")
	case spec.Plain != "":
		if err := checkPlain(spec); err != nil {
			return err
		}
	case spec.SubIDs && NeedSubIDNS():
		return fmt.Errorf("nsexec: workspace %s maps subordinate ids: start it from their user namespace (EnterSubIDs): %w", spec.Name, ErrNeedSubIDNS)
	}
	spec.Target = filepath.Clean(spec.Target)
	if spec.Root != nil {
		// Target is a path inside the image root.
		return checkRoot(spec)
	}
	if spec.Dir != "" {
		spec.Dir = filepath.Clean(spec.Dir)
		if within(spec.Target, spec.Dir) && spec.Target != spec.Dir {
			if err := os.MkdirAll(spec.Target, 0o755); err != nil {
				return fmt.Errorf("nsexec: %w", err)
			}
		}
	}
	return nil
}

// writeConfig writes cfg to the child's configuration pipe and closes it,
// in the background: a configuration larger than the pipe's buffer is
// written while the child reads.
func writeConfig(w *os.File, cfg *childConfig) <-chan error {
	errc := make(chan error, 1)
	go func() {
		var e encoder
		e.config(cfg)
		_, err := w.Write(e.b)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		errc <- err
	}()
	return errc
}

// readConfig reads the child's configuration from its pipe.
func readConfig(fd int) (*childConfig, error) {
	f := os.NewFile(uintptr(fd), "config")
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("read configuration: %w", err)
	}
	d := decoder{b: b}
	cfg, err := d.config()
	if err != nil {
		return nil, fmt.Errorf("read configuration: %w", err)
	}
	return cfg, nil
}

// childSignals are a child's signal channels, ready (handlers installed)
// when done is closed.
type childSignals struct {
	chld chan os.Signal // SIGCHLD, for the reaper
	sigs chan os.Signal // the signals the child handles
	done chan struct{}
}

// childInit prepares the process state of a re-executed child before it
// starts any command.
//
// Descriptors it inherited beyond stdio become close on exec: the child's
// own ones (config, lock, pipes) are used by number, and any other a
// caller leaked to it must not reach the commands.
//
// The main goroutine stays on the main thread, which a sandbox must never
// be applied to: see startCommand.
//
// Signals: the child handles SIGCHLD, handled (delivered on sigs) and
// discarded (dropped), and it must wait for done before it starts a
// command: a signal that is ignored (SIG_IGN) when a command is forked
// stays ignored in it across execve, where a handler is reset. (The Go
// runtime installs handlers for every signal but SIGHUP and SIGINT when
// they were ignored at start, e.g. under nohup.) Installing them is
// slow — each signal.Notify is a round trip with the runtime's
// signal-mask goroutine, 30 µs each here — so it runs while the child
// mounts.
func childInit(handled, discarded []os.Signal) *childSignals {
	// The main goroutine keeps the main thread. A goroutine that ends
	// locked to its thread ends the thread (startCommand relies on it),
	// except the main thread, which the runtime parks forever instead.
	runtime.LockOSThread()
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		// Before Linux 5.11: one by one.
		ents, _ := os.ReadDir("/proc/self/fd")
		for _, e := range ents {
			if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
				unix.CloseOnExec(fd)
			}
		}
	}
	s := &childSignals{chld: make(chan os.Signal, 1), sigs: make(chan os.Signal, 4), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		signal.Notify(s.chld, unix.SIGCHLD)
		signal.Notify(s.sigs, handled...)
		for _, sig := range []os.Signal{unix.SIGHUP, unix.SIGINT} {
			if signal.Ignored(sig) {
				discarded = append(discarded, sig)
			}
		}
		if len(discarded) > 0 {
			drop := make(chan os.Signal, 1)
			signal.Notify(drop, discarded...)
			go func() {
				for range drop {
				}
			}()
		}
	}()
	return s
}

// devNull opens /dev/null for a missing stdio file.
func stdioFiles(stdin, stdout, stderr *os.File) (files [3]*os.File, closeAll func(), err error) {
	var opened []*os.File
	closeAll = func() {
		for _, f := range opened {
			f.Close()
		}
	}
	for i, f := range []*os.File{stdin, stdout, stderr} {
		if f == nil {
			flag := os.O_WRONLY
			if i == 0 {
				flag = os.O_RDONLY
			}
			f, err = os.OpenFile(os.DevNull, flag, 0)
			if err != nil {
				closeAll()
				return files, nil, err
			}
			opened = append(opened, f)
		}
		files[i] = f
	}
	return files, closeAll, nil
}

// commandEnv is the environment a command gets: its own, or the caller's.
func commandEnv(c Command) []string {
	if c.Env == nil {
		return os.Environ()
	}
	return c.Env
}
