package mcp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// errEscape: a workspace path that leaves the workspace.
var errEscape = errors.New("path leaves the workspace")

// root is a workspace's merged view, opened for resolving paths beneath it.
type root struct {
	fd     int    // O_PATH directory descriptor of the view's root
	target string // where the workspace is mounted inside its namespace
}

func (r *root) Close() error { return unix.Close(r.fd) }

// openRoot opens the merged view of workspace name (starting its keeper if
// needed) as a directory descriptor that every file tool resolves beneath.
func (s *Server) openRoot(ctx context.Context, name string) (*root, error) {
	p, err := s.repo.WorkspacePath(ctx, name)
	if err != nil {
		return nil, err
	}
	// The view is /proc/PID/root + the mount target (nsexec.Keeper.Path).
	target := p
	if rest, ok := strings.CutPrefix(p, "/proc/"); ok {
		if i := strings.Index(rest, "/root"); i >= 0 {
			target = rest[i+len("/root"):]
		}
	}
	fd, err := unix.Open(p, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("workspace %q: open its view: %w", name, err)
	}
	return &root{fd: fd, target: target}, nil
}

// rel turns a workspace path into one relative to the view's root: a
// relative path is taken as is, an absolute one must lie under the path
// the workspace is mounted at. The path is not cleaned lexically — `..`
// after a symlink means the symlink's parent, which only the kernel's
// lookup gets right — but one that climbs above the root even lexically is
// refused here with a clear message; symlinks are checked as the kernel
// resolves the path (open).
func (r *root) rel(p string) (string, error) {
	if p == "" {
		return "", errors.New("empty path: give a path relative to the workspace root (\".\" is the root)")
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", errors.New("path contains a NUL byte")
	}
	if path.IsAbs(p) {
		switch c := path.Clean(p); {
		case c == r.target:
			return ".", nil
		case strings.HasPrefix(c, r.target+"/") && strings.HasPrefix(p, r.target+"/"):
			p = strings.TrimLeft(p[len(r.target):], "/")
		default:
			return "", fmt.Errorf("%q: %w (it is mounted at %s; give a path relative to the workspace root)", p, errEscape, r.target)
		}
	}
	if c := path.Clean(p); c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("%q: %w (`..` climbs above the workspace root)", p, errEscape)
	}
	return p, nil
}

// open resolves p beneath the root with openat2: RESOLVE_BENEATH refuses
// `..` and symlinks (absolute ones included) that would leave the root,
// RESOLVE_NO_MAGICLINKS refuses /proc-style links.
func (r *root) open(p string, flags int, mode uint32) (*os.File, string, error) {
	rel, err := r.rel(p)
	if err != nil {
		return nil, "", err
	}
	fd, err := r.openat(rel, flags, mode)
	if err != nil {
		return nil, rel, err
	}
	return os.NewFile(uintptr(fd), rel), rel, nil
}

func (r *root) openat(rel string, flags int, mode uint32) (int, error) {
	how := unix.OpenHow{
		Flags:   uint64(flags | unix.O_CLOEXEC),
		Mode:    uint64(mode),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
	}
	for {
		fd, err := unix.Openat2(r.fd, rel, &how)
		switch {
		case err == nil:
			return fd, nil
		case errors.Is(err, unix.EINTR), errors.Is(err, unix.EAGAIN):
			continue // the kernel asks for a retry when a rename raced the lookup
		case errors.Is(err, unix.EXDEV), errors.Is(err, unix.ELOOP) && flags&unix.O_NOFOLLOW == 0:
			return -1, fmt.Errorf("%q: %w (a symlink or `..` on the way points outside it)", rel, errEscape)
		case errors.Is(err, unix.ENOSYS):
			return -1, fmt.Errorf("%q: this kernel lacks openat2 (Linux 5.6+), which file tools need to stay inside the workspace: %w", rel, errors.ErrUnsupported)
		}
		return -1, &os.PathError{Op: "open", Path: rel, Err: err}
	}
}

// mkdirAll creates the parents of rel beneath the root, each resolved
// beneath it like open.
func (r *root) mkdirAll(rel string) error {
	var parts []string
	for _, c := range strings.Split(rel, "/") {
		if c != "" && c != "." {
			parts = append(parts, c)
		}
	}
	if len(parts) < 2 {
		return nil
	}
	parts = parts[:len(parts)-1]
	for i := range parts {
		sub := strings.Join(parts[:i+1], "/")
		fd, err := r.openat(sub, unix.O_PATH|unix.O_DIRECTORY, 0)
		if err == nil {
			unix.Close(fd)
			continue
		}
		if !errors.Is(err, unix.ENOENT) {
			return err
		}
		parent := "."
		if i > 0 {
			parent = strings.Join(parts[:i], "/")
		}
		pfd, err := r.openat(parent, unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			return err
		}
		err = unix.Mkdirat(pfd, parts[i], 0o755)
		unix.Close(pfd)
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return &os.PathError{Op: "mkdir", Path: sub, Err: err}
		}
	}
	return nil
}
