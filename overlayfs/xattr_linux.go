package overlayfs

import (
	"errors"
	"io/fs"
	"strings"

	"golang.org/x/sys/unix"
)

// listXattrs returns the xattr names of path without following a final
// symlink. A filesystem without xattrs has none.
func listXattrs(path string) ([]string, error) {
	size := 256
	for {
		buf := make([]byte, size)
		n, err := unix.Llistxattr(path, buf)
		switch {
		case errors.Is(err, unix.ERANGE):
			// Grown between calls: ask for the size and retry.
			if n, err = unix.Llistxattr(path, nil); err != nil {
				return nil, &fs.PathError{Op: "llistxattr", Path: path, Err: err}
			}
			size = n + 64
			continue
		case errors.Is(err, unix.ENOTSUP):
			return nil, nil
		case err != nil:
			return nil, &fs.PathError{Op: "llistxattr", Path: path, Err: err}
		}
		var names []string
		for _, name := range strings.Split(string(buf[:n]), "\x00") {
			if name != "" {
				names = append(names, name)
			}
		}
		return names, nil
	}
}

// getXattr returns the value of xattr name on path (not following a final
// symlink); ok is false when it is not set.
func getXattr(path, name string) (val []byte, ok bool, err error) {
	size := 128
	for {
		buf := make([]byte, size)
		n, err := unix.Lgetxattr(path, name, buf)
		switch {
		case errors.Is(err, unix.ERANGE):
			if n, err = unix.Lgetxattr(path, name, nil); err != nil {
				if errors.Is(err, unix.ENODATA) {
					return nil, false, nil
				}
				return nil, false, &fs.PathError{Op: "lgetxattr " + name, Path: path, Err: err}
			}
			size = n + 64
			continue
		case errors.Is(err, unix.ENODATA), errors.Is(err, unix.ENOTSUP):
			return nil, false, nil
		case err != nil:
			return nil, false, &fs.PathError{Op: "lgetxattr " + name, Path: path, Err: err}
		}
		return buf[:n], true, nil
	}
}

// xattrSet is the xattr names of one file, with the overlay markers of one
// flavour split off.
type xattrSet struct {
	path   string
	prefix string   // flavour prefix, "user.overlay." or "trusted.overlay."
	names  []string // all names
}

func readXattrSet(path, prefix string) (xattrSet, error) {
	names, err := listXattrs(path)
	return xattrSet{path: path, prefix: prefix, names: names}, err
}

// has reports whether the overlay marker key (e.g. "opaque") is set.
func (x xattrSet) has(key string) bool {
	for _, n := range x.names {
		if n == x.prefix+key {
			return true
		}
	}
	return false
}

// marker returns the value of the overlay marker key.
func (x xattrSet) marker(key string) (string, bool, error) {
	if !x.has(key) {
		return "", false, nil
	}
	v, ok, err := getXattr(x.path, x.prefix+key)
	return string(v), ok, err
}

// user returns the user.* xattrs a reader of the merged view sees: all of
// them except, for the user flavour, the kernel's own "user.overlay."
// namespace (escaped "user.overlay.overlay.*" names included; see
// docs/overlayfs.md). Nil when there are none.
func (x xattrSet) user() (map[string][]byte, error) {
	var m map[string][]byte
	for _, n := range x.names {
		if !strings.HasPrefix(n, "user.") || strings.HasPrefix(n, x.prefix) {
			continue
		}
		v, ok, err := getXattr(x.path, n)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue // removed meanwhile
		}
		if m == nil {
			m = map[string][]byte{}
		}
		m[n] = v
	}
	return m, nil
}
