package nsexec

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// OpenPTY returns a new pty pair from the devpts instance of the view of
// the workspace whose state directory is dir (its live keeper allocates
// it): the terminal for a command with View and TTY. A pty of the host's
// /dev/ptmx works too, but has no name in the view, where /dev/pts is the
// view's own (tty says "not a tty"). The slave is opened with TIOCGPTPEER
// (Linux 4.13+), without a path lookup.
func OpenPTY(dir string) (master, slave *os.File, err error) {
	c, err := dialKeeper(dir)
	if err != nil {
		return nil, nil, err
	}
	defer c.Close()
	if err := writeFrame(c, &message{Version: protoVersion, PTY: true}); err != nil {
		return nil, nil, lostKeeper(dir, fmt.Errorf("ask for a pty: %w", err))
	}
	m, fds, err := readFrameFDs(c, 1)
	if err != nil {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, nil, lostKeeper(dir, fmt.Errorf("pty: %w", err))
	}
	switch {
	case m.Error != nil:
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, nil, fmt.Errorf("nsexec: pty in %s: %w", dir, m.Error.err())
	case !m.PTY || len(fds) != 1:
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, nil, errors.New("nsexec: the keeper answered a pty request without one")
	}
	return ptyPair(fds[0])
}

// ptyPair opens the slave of the unlocked master fd and returns both.
func ptyPair(fd int) (master, slave *os.File, err error) {
	sfd, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TIOCGPTPEER, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC)
	if errno != 0 {
		unix.Close(fd)
		return nil, nil, fmt.Errorf("open pty slave: %w", errno)
	}
	return os.NewFile(uintptr(fd), "ptmx"), os.NewFile(sfd, "pty"), nil
}
