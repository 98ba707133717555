package nsexec

import (
	"fmt"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// conn is one end of a keeper connection: a unix stream socket in the Go
// runtime's poller. Package net would do, but it links cgo (its resolver)
// unless built with CGO_ENABLED=0, and nsexec must not.
type conn struct {
	f  *os.File
	rc syscall.RawConn
}

func newConn(fd int, name string) (*conn, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	f := os.NewFile(uintptr(fd), name) // non-blocking: polled
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &conn{f: f, rc: rc}, nil
}

func (c *conn) Read(b []byte) (int, error)  { return c.f.Read(b) }
func (c *conn) Write(b []byte) (int, error) { return c.f.Write(b) }
func (c *conn) Close() error                { return c.f.Close() }

// sendmsg sends b with fds attached (SCM_RIGHTS); it may send less of b.
func (c *conn) sendmsg(b []byte, fds []int) (int, error) {
	var n int
	var serr error
	err := c.rc.Write(func(fd uintptr) bool {
		n, serr = unix.SendmsgN(int(fd), b, unix.UnixRights(fds...), nil, 0)
		return serr != unix.EAGAIN
	})
	if err == nil {
		err = serr
	}
	return n, err
}

// recvmsg receives into b and oob; received descriptors are close on exec.
func (c *conn) recvmsg(b, oob []byte) (n, oobn, flags int, err error) {
	var rerr error
	err = c.rc.Read(func(fd uintptr) bool {
		n, oobn, flags, _, rerr = unix.Recvmsg(int(fd), b, oob, unix.MSG_CMSG_CLOEXEC)
		return rerr != unix.EAGAIN
	})
	if err == nil {
		err = rerr
	}
	return n, oobn, flags, err
}

// peerUID is the uid of the process at the other end, as the caller's
// user namespace sees it (unmapped ids show as the overflow uid).
func (c *conn) peerUID() (uint32, error) {
	var cred *unix.Ucred
	var cerr error
	if err := c.rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, fmt.Errorf("SO_PEERCRED: %w", cerr)
	}
	return cred.Uid, nil
}

// sockAddr is the address of the socket name in the directory dirfd,
// reached through /proc/self/fd: a state directory's path may be longer
// than sun_path (108 bytes), or hidden by a mount.
func sockAddr(dirfd int, name string) *unix.SockaddrUnix {
	return &unix.SockaddrUnix{Name: "/proc/self/fd/" + strconv.Itoa(dirfd) + "/" + name}
}

// dial connects to the unix stream socket at addr.
func dial(addr *unix.SockaddrUnix) (*conn, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	for {
		err = unix.Connect(fd, addr)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return newConn(fd, "keeper")
}

// listener is a listening unix stream socket in the poller.
type listener struct{ c *conn }

func listen(addr *unix.SockaddrUnix) (*listener, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.Bind(fd, addr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind: %w", err)
	}
	if err := unix.Listen(fd, 128); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("listen: %w", err)
	}
	c, err := newConn(fd, "listener")
	if err != nil {
		return nil, err
	}
	return &listener{c}, nil
}

func (l *listener) accept() (*conn, error) {
	var nfd int
	var aerr error
	err := l.c.rc.Read(func(fd uintptr) bool {
		nfd, _, aerr = unix.Accept4(int(fd), unix.SOCK_CLOEXEC)
		return aerr != unix.EAGAIN
	})
	if err == nil {
		err = aerr
	}
	if err != nil {
		return nil, err
	}
	return newConn(nfd, "client")
}
