package hotpath

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"github.com/stratafs/strata/nsexec"
)

// DefaultShell is the shell `strata shell` runs: $SHELL, then /bin/bash,
// then /bin/sh.
func DefaultShell() string {
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

// IsTerminal reports whether f is a terminal.
func IsTerminal(f *os.File) bool { return f != nil && term.IsTerminal(int(f.Fd())) }

// OnTerminal runs a command on the caller's terminal in through a pty of
// its own (open makes the pair: the host's, or the view's devpts for a
// sandboxed command, whose /dev/pts is private): run starts the command
// with the slave as its stdin, stdout and stderr and its controlling
// terminal, and returns its status. Meanwhile in is in raw mode, what is
// typed goes to the master and what the master prints goes to out, and
// the window size follows in's.
func OnTerminal(in, out *os.File, open func() (master, slave *os.File, err error), run func(slave *os.File) (nsexec.ExitStatus, error)) (nsexec.ExitStatus, error) {
	master, slave, err := open()
	if err != nil {
		return nsexec.ExitStatus{}, err
	}
	defer master.Close()
	syncWinsize(in, master)

	state, err := term.MakeRaw(int(in.Fd()))
	if err != nil {
		slave.Close()
		return nsexec.ExitStatus{}, fmt.Errorf("shell: raw mode: %w", err)
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

	st, err := run(slave)
	slave.Close()
	wg.Wait()
	return st, err
}

// OpenPTY opens a new pty pair on the host's devpts: master, and the
// slave (TIOCGPTPEER, Linux 4.13+, which opens it without a path lookup).
func OpenPTY() (master, slave *os.File, err error) {
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
