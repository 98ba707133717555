package snapshot

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/store"
)

// validName reports whether name is one clean path element: not empty, not
// "." or "..", without '/' or NUL. The store's decoder rejects such names
// already; Materialize checks again (defence in depth, DESIGN invariant 6).
func validName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, "/\x00")
}

// joinRel joins a relative directory path and a name.
func joinRel(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// entryType maps a st_mode to the store's entry type; 0 for unknown.
func entryType(mode uint32) store.EntryType {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return store.TypeFile
	case unix.S_IFDIR:
		return store.TypeDir
	case unix.S_IFLNK:
		return store.TypeSymlink
	case unix.S_IFIFO:
		return store.TypeFIFO
	case unix.S_IFCHR:
		return store.TypeCharDev
	case unix.S_IFBLK:
		return store.TypeBlockDev
	case unix.S_IFSOCK:
		return store.TypeSocket
	}
	return 0
}

func timespecNs(ts unix.Timespec) int64 { return ts.Sec*1e9 + ts.Nsec }

func nsTimespec(ns int64) unix.Timespec { return unix.NsecToTimespec(ns) }

// openat2 support, probed once. ENOSYS (kernels before 5.6) and seccomp
// filters that return EPERM make us fall back to a walk of O_NOFOLLOW
// openat calls, which is as safe and slower on deep paths.
var (
	openat2Once sync.Once
	openat2OK   bool
)

// openBeneath opens rel (slash-separated, relative, "" for dirfd itself)
// beneath dirfd without following any symlink, in the last element or any
// other, and without leaving dirfd's subtree. flags must not include O_CREAT.
func openBeneath(dirfd int, rel string, flags int) (int, error) {
	flags |= unix.O_NOFOLLOW | unix.O_CLOEXEC
	if rel == "" {
		rel = "."
	}
	openat2Once.Do(func() {
		fd, err := unix.Openat2(dirfd, ".", &unix.OpenHow{
			Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS,
		})
		if err == nil {
			unix.Close(fd)
			openat2OK = true
		}
	})
	if openat2OK {
		for {
			fd, err := unix.Openat2(dirfd, rel, &unix.OpenHow{
				Flags:   uint64(flags),
				Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
			})
			if err == unix.EINTR || err == unix.EAGAIN { // EAGAIN: a rename raced the lookup
				continue
			}
			if err != unix.ENAMETOOLONG { // longer than PATH_MAX: walk it
				return fd, err
			}
			break
		}
	}
	elems := strings.Split(rel, "/")
	cur := dirfd
	for i, e := range elems {
		if !validName(e) && !(e == "." && len(elems) == 1) {
			if cur != dirfd {
				unix.Close(cur)
			}
			return -1, fmt.Errorf("path %q: %w", rel, unix.EINVAL)
		}
		f := unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
		if i == len(elems)-1 {
			f = flags
		}
		fd, err := unix.Openat(cur, e, f, 0)
		if cur != dirfd {
			unix.Close(cur)
		}
		if err != nil {
			return -1, err
		}
		cur = fd
	}
	return cur, nil
}

// xattrNamespace is the only namespace recorded and restored: trusted.* and
// security.* need privilege and describe the host, not the project, and
// system.* (ACLs) is derived from the mode on most file systems.
const xattrNamespace = "user."

// xattrSource reads extended attributes of one entry, by path (not
// following a symlink) or by open descriptor.
type xattrSource struct {
	path string
	fd   int // when path is ""
}

func (x xattrSource) list(buf []byte) (int, error) {
	if x.path == "" {
		return unix.Flistxattr(x.fd, buf)
	}
	return unix.Llistxattr(x.path, buf)
}

func (x xattrSource) get(name string, buf []byte) (int, error) {
	if x.path == "" {
		return unix.Fgetxattr(x.fd, name, buf)
	}
	return unix.Lgetxattr(x.path, name, buf)
}

// listUserXattrs returns the user.* xattrs of an entry, sorted by name. A
// file system without xattr support has none.
func listUserXattrs(src xattrSource) ([]store.Xattr, error) {
	var stack [1024]byte
	buf := stack[:]
	var n int
	for {
		var err error
		n, err = src.list(buf)
		if err == nil {
			break
		}
		switch err {
		case unix.ENOTSUP, unix.ENOSYS:
			return nil, nil
		case unix.ERANGE:
			sz, err := src.list(nil)
			if err != nil {
				return nil, err
			}
			buf = make([]byte, sz+64)
			continue
		}
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	var xs []store.Xattr
	for _, name := range strings.Split(string(buf[:n]), "\x00") {
		if !strings.HasPrefix(name, xattrNamespace) {
			continue
		}
		v, err := getXattr(src, name)
		if errors.Is(err, unix.ENODATA) { // removed since the listing
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("xattr %s: %w", name, err)
		}
		xs = append(xs, store.Xattr{Name: name, Value: v})
	}
	sort.Slice(xs, func(i, j int) bool { return xs[i].Name < xs[j].Name })
	return xs, nil
}

func getXattr(src xattrSource, name string) ([]byte, error) {
	buf := make([]byte, 256)
	for {
		n, err := src.get(name, buf)
		if err == nil {
			return buf[:n:n], nil
		}
		if err != unix.ERANGE {
			return nil, err
		}
		sz, err := src.get(name, nil)
		if err != nil {
			return nil, err
		}
		buf = make([]byte, sz+64)
	}
}

// readlinkat reads a symlink's target verbatim.
func readlinkat(dirfd int, name string, size int64) (string, error) {
	n := int(size) + 1
	if n < 128 {
		n = 128
	}
	for {
		buf := make([]byte, n)
		m, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if m < n {
			return string(buf[:m]), nil
		}
		n *= 2 // the link grew since lstat
	}
}

// isPermission reports whether err means "not allowed to read".
func isPermission(err error) bool {
	return errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM)
}

// isVanished reports whether err means the entry was removed or replaced
// while we looked at it.
func isVanished(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP)
}
