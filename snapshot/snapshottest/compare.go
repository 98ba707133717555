// Package snapshottest helps tests of packages that write directory trees:
// it builds trees with the hard cases (Build, Nasty) and compares two trees
// on disk exactly (CompareTrees, Differences).
//
// "Exactly" means: the same set of paths; for each, the same type,
// permission bits (setuid, setgid and sticky included), mtime in
// nanoseconds (directories and symlinks too), user.* xattrs, file content,
// symlink target, device number, and hardlink grouping (which paths share an
// inode); uid and gid when comparing as root (see Owner). The roots
// themselves are not compared: a snapshot does not record its root's
// metadata.
package snapshottest

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Option adjusts a comparison.
type Option func(*config)

type config struct {
	owner  bool
	ignore func(rel string) bool
	max    int
}

// Owner sets whether uid and gid are compared. The default is to compare
// them when running as root, where Materialize can apply them.
func Owner(compare bool) Option { return func(c *config) { c.owner = compare } }

// Ignore skips the paths (relative, slash-separated) for which fn returns
// true, on both sides, and everything under them.
func Ignore(fn func(rel string) bool) Option { return func(c *config) { c.ignore = fn } }

// MaxDifferences caps how many differences are reported (default 50).
func MaxDifferences(n int) Option { return func(c *config) { c.max = n } }

// CompareTrees fails t with one error per difference between the trees at
// want and got.
func CompareTrees(t testing.TB, want, got string, opts ...Option) {
	t.Helper()
	diffs, err := Differences(want, got, opts...)
	if err != nil {
		t.Fatalf("compare %s with %s: %v", want, got, err)
	}
	for _, d := range diffs {
		t.Error(d)
	}
}

// Differences lists the differences between the trees at want and got, in
// path order, one human-readable line each.
func Differences(want, got string, opts ...Option) ([]string, error) {
	c := config{owner: os.Geteuid() == 0, max: 50}
	for _, o := range opts {
		o(&c)
	}
	a, err := scan(want, &c)
	if err != nil {
		return nil, err
	}
	b, err := scan(got, &c)
	if err != nil {
		return nil, err
	}
	var diffs []string
	add := func(format string, args ...any) {
		if len(diffs) < c.max {
			diffs = append(diffs, fmt.Sprintf(format, args...))
		}
	}
	paths := map[string]bool{}
	for p := range a.entries {
		paths[p] = true
	}
	for p := range b.entries {
		paths[p] = true
	}
	sorted := make([]string, 0, len(paths))
	for p := range paths {
		sorted = append(sorted, p)
	}
	sort.Strings(sorted)
	for _, p := range sorted {
		x, inA := a.entries[p]
		y, inB := b.entries[p]
		switch {
		case !inA:
			add("%q: only in got (%s)", p, y.kind())
			continue
		case !inB:
			add("%q: only in want (%s)", p, x.kind())
			continue
		}
		if x.mode&unix.S_IFMT != y.mode&unix.S_IFMT {
			add("%q: type: want %s, got %s", p, x.kind(), y.kind())
			continue
		}
		isLink := x.mode&unix.S_IFMT == unix.S_IFLNK
		if !isLink && x.mode&0o7777 != y.mode&0o7777 {
			add("%q: mode: want %#o, got %#o", p, x.mode&0o7777, y.mode&0o7777)
		}
		if x.mtimeNs != y.mtimeNs {
			add("%q: mtime: want %d, got %d (%+dns)", p, x.mtimeNs, y.mtimeNs, y.mtimeNs-x.mtimeNs)
		}
		if c.owner && (x.uid != y.uid || x.gid != y.gid) {
			add("%q: owner: want %d:%d, got %d:%d", p, x.uid, x.gid, y.uid, y.gid)
		}
		if x.target != y.target {
			add("%q: symlink target: want %q, got %q", p, x.target, y.target)
		}
		if x.rdev != y.rdev {
			add("%q: rdev: want %#x, got %#x", p, x.rdev, y.rdev)
		}
		if x.size != y.size && x.mode&unix.S_IFMT == unix.S_IFREG {
			add("%q: size: want %d, got %d", p, x.size, y.size)
		} else if x.sum != y.sum {
			add("%q: content differs", p)
		}
		if xs, ys := fmtXattrs(x.xattrs), fmtXattrs(y.xattrs); xs != ys {
			add("%q: xattrs: want %s, got %s", p, xs, ys)
		}
		if ga, gb := a.group(p), b.group(p); !equalStrings(ga, gb) {
			add("%q: hardlinks: want %q, got %q", p, ga, gb)
		}
	}
	return diffs, nil
}

type info struct {
	mode     uint32
	uid, gid uint32
	mtimeNs  int64
	size     int64
	dev, ino uint64
	nlink    uint64
	rdev     uint64
	target   string
	sum      [32]byte
	xattrs   map[string][]byte
}

func (i *info) kind() string {
	switch i.mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "file"
	case unix.S_IFDIR:
		return "dir"
	case unix.S_IFLNK:
		return "symlink"
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFCHR:
		return "chardev"
	case unix.S_IFBLK:
		return "blockdev"
	case unix.S_IFSOCK:
		return "socket"
	}
	return fmt.Sprintf("mode %#o", i.mode)
}

type tree struct {
	entries map[string]*info
	inodes  map[[2]uint64][]string // regular files with nlink > 1, paths sorted
}

// group returns the sorted paths sharing p's inode (nil if none).
func (t *tree) group(p string) []string {
	i := t.entries[p]
	if i.mode&unix.S_IFMT != unix.S_IFREG || i.nlink < 2 {
		return nil
	}
	g := t.inodes[[2]uint64{i.dev, i.ino}]
	if len(g) < 2 {
		return nil
	}
	return g
}

func scan(root string, c *config) (*tree, error) {
	t := &tree{entries: map[string]*info{}, inodes: map[[2]uint64][]string{}}
	var walk func(dir, rel string) error
	walk = func(dir, rel string) error {
		f, err := os.Open(dir)
		if err != nil {
			return err
		}
		names, err := f.Readdirnames(-1)
		f.Close()
		if err != nil {
			return err
		}
		sort.Strings(names)
		for _, name := range names {
			p := name
			if rel != "" {
				p = rel + "/" + name
			}
			if c.ignore != nil && c.ignore(p) {
				continue
			}
			full := filepath.Join(dir, name)
			i, err := stat(full)
			if err != nil {
				return err
			}
			t.entries[p] = i
			if i.mode&unix.S_IFMT == unix.S_IFREG && i.nlink > 1 {
				k := [2]uint64{i.dev, i.ino}
				t.inodes[k] = append(t.inodes[k], p)
			}
			if i.mode&unix.S_IFMT == unix.S_IFDIR {
				if err := walk(full, p); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(root, ""); err != nil {
		return nil, err
	}
	for _, g := range t.inodes {
		sort.Strings(g)
	}
	return t, nil
}

func stat(p string) (*info, error) {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return nil, &os.PathError{Op: "lstat", Path: p, Err: err}
	}
	i := &info{
		mode: st.Mode, uid: st.Uid, gid: st.Gid,
		mtimeNs: st.Mtim.Sec*1e9 + st.Mtim.Nsec,
		size:    st.Size, dev: st.Dev, ino: st.Ino, nlink: uint64(st.Nlink),
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return nil, err
		}
		copy(i.sum[:], h.Sum(nil))
	case unix.S_IFLNK:
		t, err := os.Readlink(p)
		if err != nil {
			return nil, err
		}
		i.target = t
	case unix.S_IFCHR, unix.S_IFBLK:
		i.rdev = st.Rdev
	case unix.S_IFDIR:
		i.size = 0 // directory sizes are file-system details
	}
	xs, err := Xattrs(p)
	if err != nil {
		return nil, err
	}
	i.xattrs = xs
	return i, nil
}

// Xattrs returns the user.* extended attributes of p, not following a
// symlink; an empty map when the file system has none.
func Xattrs(p string) (map[string][]byte, error) {
	sz, err := unix.Llistxattr(p, nil)
	if err == unix.ENOTSUP || sz == 0 {
		return map[string][]byte{}, nil
	}
	if err != nil {
		return nil, &os.PathError{Op: "listxattr", Path: p, Err: err}
	}
	buf := make([]byte, sz)
	sz, err = unix.Llistxattr(p, buf)
	if err != nil {
		return nil, &os.PathError{Op: "listxattr", Path: p, Err: err}
	}
	out := map[string][]byte{}
	for _, name := range strings.Split(string(buf[:sz]), "\x00") {
		if !strings.HasPrefix(name, "user.") {
			continue
		}
		vs, err := unix.Lgetxattr(p, name, nil)
		if err != nil {
			return nil, &os.PathError{Op: "getxattr " + name, Path: p, Err: err}
		}
		v := make([]byte, vs)
		vs, err = unix.Lgetxattr(p, name, v)
		if err != nil {
			return nil, &os.PathError{Op: "getxattr " + name, Path: p, Err: err}
		}
		out[name] = v[:vs]
	}
	return out, nil
}

func fmtXattrs(m map[string][]byte) string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	var b bytes.Buffer
	b.WriteByte('{')
	for i, n := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s=%q", n, m[n])
	}
	b.WriteByte('}')
	return b.String()
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
