package strata

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
	"golang.org/x/term"
)

// Shell runs an interactive shell (opts.Argv, default $SHELL, then
// /bin/bash, then /bin/sh) in a workspace on the caller's terminal. On a
// terminal the command gets a pty of its own as its controlling terminal:
// job control works, and the window size follows the caller's.
func (r *Repo) Shell(ctx context.Context, name string, opts ExecOptions) (ExitStatus, error) {
	if len(opts.Argv) == 0 {
		opts.Argv = []string{defaultShell()}
	}
	in := opts.Stdin
	if in == nil || !term.IsTerminal(int(in.Fd())) {
		return r.Exec(ctx, name, opts)
	}
	if err := r.checkOwner(name); err != nil {
		return ExitStatus{}, err
	}
	// The keeper first: until it runs, nothing may touch the terminal (a
	// --subids workspace fails here, and the CLI starts over in the
	// subordinate-id namespace, which must find the terminal untouched).
	noNS, err := r.ready(ctx, name)
	if err != nil {
		return ExitStatus{}, err
	}
	// A sandboxed shell runs in the workspace's view, whose /dev/pts is
	// its own: its terminal comes from there, or it would have no name
	// inside (tty: "not a tty"). --sandbox none sees the host's, and so
	// does a workspace without namespaces.
	open := openPTY
	if opts.Sandbox.Mode != SandboxNone && !noNS {
		open = func() (*os.File, *os.File, error) { return r.ws.OpenPTY(name) }
	}
	master, slave, err := open()
	if err != nil {
		return ExitStatus{}, err
	}
	defer master.Close()
	syncWinsize(in, master)

	state, err := term.MakeRaw(int(in.Fd()))
	if err != nil {
		slave.Close()
		return ExitStatus{}, fmt.Errorf("shell: raw mode: %w", err)
	}
	defer term.Restore(int(in.Fd()), state)

	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer signal.Stop(winch)
	go func() {
		for range winch {
			syncWinsize(in, master)
		}
	}()

	out := opts.Stdout
	if out == nil {
		out = os.Stdout
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(out, master) // ends with EIO when the last slave closes
	}()
	go func() { _, _ = io.Copy(master, in) }()

	opts.Stdin, opts.Stdout, opts.Stderr, opts.TTY = slave, slave, slave, true
	st, err := r.Exec(ctx, name, opts)
	slave.Close()
	wg.Wait()
	return st, err
}

func defaultShell() string {
	for _, sh := range []string{os.Getenv("SHELL"), "/bin/bash", "/bin/sh"} {
		if sh == "" {
			continue
		}
		if fi, err := os.Stat(sh); err == nil && fi.Mode().IsRegular() {
			return sh
		}
	}
	return "/bin/sh"
}

// openPTY opens a new pty pair: master, and the slave (TIOCGPTPEER, Linux
// 4.13+, which opens it without a path lookup).
func openPTY() (master, slave *os.File, err error) {
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open /dev/ptmx: %w", err)
	}
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		unix.Close(fd)
		return nil, nil, fmt.Errorf("unlock pty: %w", err)
	}
	sfd, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TIOCGPTPEER, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC)
	if errno != 0 {
		unix.Close(fd)
		return nil, nil, fmt.Errorf("open pty slave: %w", errno)
	}
	return os.NewFile(uintptr(fd), "/dev/ptmx"), os.NewFile(sfd, "pty"), nil
}

// syncWinsize copies the window size of from to the pty master to.
func syncWinsize(from, to *os.File) {
	ws, err := unix.IoctlGetWinsize(int(from.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return
	}
	_ = unix.IoctlSetWinsize(int(to.Fd()), unix.TIOCSWINSZ, ws)
}
