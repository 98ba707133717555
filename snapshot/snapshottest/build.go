package snapshottest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Kind is the type of an Entry to build.
type Kind byte

const (
	File     Kind = 'f'
	Dir      Kind = 'd'
	Symlink  Kind = 'l'
	Hardlink Kind = 'h' // a new name for the existing file at Target
	FIFO     Kind = 'p'
	CharDev  Kind = 'c'
	BlockDev Kind = 'b'
)

// Entry describes one entry for Build.
type Entry struct {
	Path   string // slash-separated, relative; parents are created as needed (0755)
	Kind   Kind
	Mode   uint32 // permission bits incl. setuid/setgid/sticky; 0 means 0644 (0755 for dirs)
	Data   []byte // file content
	Target string // symlink target (verbatim), or for Hardlink the path of the file
	Rdev   uint64 // devices
	Xattrs map[string][]byte
	// MtimeNs, when not zero, is set after everything is built (on
	// symlinks too, without following them). Zero leaves the time of
	// creation.
	MtimeNs int64
	// UID and GID, when Chown, are applied (needs root).
	Chown    bool
	UID, GID int
}

// Build creates entries under dir, in order; then applies modes, owners
// and xattrs; then mtimes, deepest first, so that directory mtimes stay as
// given. Parents missing from entries are created with mode 0755.
func Build(t testing.TB, dir string, entries []Entry) {
	t.Helper()
	Writable(t, dir)
	if err := BuildErr(dir, entries); err != nil {
		t.Fatal(err)
	}
}

// BuildErr is Build returning an error, for property tests.
func BuildErr(dir string, entries []Entry) error {
	full := func(p string) string { return filepath.Join(dir, filepath.FromSlash(p)) }
	for _, e := range entries {
		p := full(e.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		var err error
		switch e.Kind {
		case File:
			err = os.WriteFile(p, e.Data, 0o600)
		case Dir:
			err = os.Mkdir(p, 0o700)
			if os.IsExist(err) {
				err = nil
			}
		case Symlink:
			err = os.Symlink(e.Target, p)
		case Hardlink:
			err = os.Link(full(e.Target), p)
		case FIFO:
			err = unix.Mkfifo(p, 0o600)
		case CharDev:
			err = unix.Mknod(p, unix.S_IFCHR|0o600, int(e.Rdev))
		case BlockDev:
			err = unix.Mknod(p, unix.S_IFBLK|0o600, int(e.Rdev))
		default:
			err = fmt.Errorf("unknown kind %q", e.Kind)
		}
		if err != nil {
			return fmt.Errorf("build %q: %w", e.Path, err)
		}
	}
	// Metadata: xattrs before chown (user.* needs write permission), chown
	// before chmod (chown clears setuid), directories in reverse order so
	// that a read-only directory is finished after its children.
	for i := len(entries) - 1; i >= 0; i-- {
		e := entries[i]
		p := full(e.Path)
		if e.Kind == Symlink || e.Kind == Hardlink {
			if e.Chown {
				if err := os.Lchown(p, e.UID, e.GID); err != nil {
					return fmt.Errorf("build %q: %w", e.Path, err)
				}
			}
			continue
		}
		names := make([]string, 0, len(e.Xattrs))
		for n := range e.Xattrs {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			if err := unix.Lsetxattr(p, n, e.Xattrs[n], 0); err != nil {
				return fmt.Errorf("build %q: setxattr %s: %w", e.Path, n, err)
			}
		}
		if e.Chown {
			if err := os.Lchown(p, e.UID, e.GID); err != nil {
				return fmt.Errorf("build %q: %w", e.Path, err)
			}
		}
		mode := e.Mode
		if mode == 0 {
			mode = 0o644
			if e.Kind == Dir {
				mode = 0o755
			}
		}
		if err := unix.Fchmodat(unix.AT_FDCWD, p, mode, 0); err != nil {
			return fmt.Errorf("build %q: chmod: %w", e.Path, err)
		}
	}
	// Times, deepest first; among equals, later entries first.
	idx := make([]int, len(entries))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool {
		da, db := strings.Count(entries[idx[a]].Path, "/"), strings.Count(entries[idx[b]].Path, "/")
		if da != db {
			return da > db
		}
		return idx[a] > idx[b]
	})
	for _, i := range idx {
		e := entries[i]
		if e.MtimeNs == 0 || e.Kind == Hardlink {
			continue
		}
		ts := []unix.Timespec{unix.NsecToTimespec(e.MtimeNs), unix.NsecToTimespec(e.MtimeNs)}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, full(e.Path), ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("build %q: utimes: %w", e.Path, err)
		}
	}
	return nil
}

// Writable registers a cleanup that gives every directory under dir owner
// write and search permission, so that t.TempDir's removal (registered
// earlier, run later) succeeds for an unprivileged user when the tree
// holds read-only directories.
func Writable(t testing.TB, dir string) {
	t.Cleanup(func() {
		filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if d != nil && d.IsDir() {
				os.Chmod(p, 0o700)
			}
			return nil
		})
	})
}

// Capabilities says what a tree may contain on this machine.
type Capabilities struct {
	Root   bool // devices, chown
	Xattrs bool // user.* xattrs on files and directories
}

// Probe finds out what dir's file system and the current user allow.
func Probe(dir string) Capabilities {
	c := Capabilities{Root: os.Geteuid() == 0}
	f, err := os.CreateTemp(dir, ".probe-")
	if err == nil {
		c.Xattrs = unix.Fsetxattr(int(f.Fd()), "user.probe", []byte("1"), 0) == nil
		f.Close()
		os.Remove(f.Name())
	}
	return c
}

// Nasty returns entries with the cases that break naive tree copiers:
// names with a newline, invalid UTF-8, spaces and a leading dash; empty and
// deeply nested directories; symlinks absolute, relative, dangling and
// pointing outside; hardlinks within and across directories; setuid,
// setgid and sticky bits; read-only directories; FIFOs; binary xattr
// values; nanosecond mtimes; empty files, files at and around the usual
// chunking thresholds and a multi-megabyte file; devices and foreign
// owners when root.
func Nasty(c Capabilities) []Entry {
	const t0 = int64(1_600_000_000_123_456_789)
	mt := func(i int) int64 { return t0 + int64(i)*1_000_000_007 }
	data := func(n int, seed byte) []byte {
		b := make([]byte, n)
		x := uint32(seed) + 1
		for i := range b {
			x ^= x << 13
			x ^= x >> 17
			x ^= x << 5
			b[i] = byte(x)
		}
		return b
	}
	es := []Entry{
		{Path: "empty-dir", Kind: Dir, MtimeNs: mt(1)},
		{Path: "line\nbreak", Kind: File, Data: []byte("newline in name\n"), MtimeNs: mt(2)},
		{Path: "bad-\xff\xfe-utf8", Kind: File, Data: []byte("invalid utf-8 name"), MtimeNs: mt(3)},
		{Path: "with space", Kind: Dir, MtimeNs: mt(4)},
		{Path: "with space/-leading dash", Kind: File, Data: []byte("dash"), MtimeNs: mt(5)},
		{Path: "zero", Kind: File, MtimeNs: mt(6)},
		{Path: "sizes", Kind: Dir, MtimeNs: mt(7)},
		{Path: "sizes/1", Kind: File, Data: []byte("x"), MtimeNs: mt(8)},
		{Path: "sizes/4095", Kind: File, Data: data(4095, 1), MtimeNs: mt(9)},
		{Path: "sizes/65535", Kind: File, Data: data(65535, 2), MtimeNs: mt(10)},
		{Path: "sizes/65536", Kind: File, Data: data(65536, 3), MtimeNs: mt(11)},
		{Path: "sizes/65537", Kind: File, Data: data(65537, 4), MtimeNs: mt(12)},
		{Path: "sizes/1048575", Kind: File, Data: data(1<<20-1, 5), MtimeNs: mt(13)},
		{Path: "sizes/1048576", Kind: File, Data: data(1<<20, 6), MtimeNs: mt(14)},
		{Path: "sizes/1048577", Kind: File, Data: data(1<<20+1, 7), MtimeNs: mt(15)},
		{Path: "sizes/5MiB", Kind: File, Data: bytes.Repeat(data(777_777, 8), 7)[:5<<20], MtimeNs: mt(16)},
		{Path: "links", Kind: Dir, MtimeNs: mt(17)},
		{Path: "links/abs", Kind: Symlink, Target: "/etc/passwd", MtimeNs: mt(18)},
		{Path: "links/rel", Kind: Symlink, Target: "../sizes/1", MtimeNs: mt(19)},
		{Path: "links/dangling", Kind: Symlink, Target: "does/not/exist", MtimeNs: mt(20)},
		{Path: "links/outside", Kind: Symlink, Target: "../../../../../../tmp", MtimeNs: mt(21)},
		{Path: "links/odd target", Kind: Symlink, Target: "a\nb\xff c", MtimeNs: mt(22)},
		{Path: "links/dir", Kind: Symlink, Target: "../with space", MtimeNs: mt(23)},
		{Path: "hard", Kind: Dir, MtimeNs: mt(24)},
		{Path: "hard/a", Kind: File, Data: []byte("shared inode"), Mode: 0o640, MtimeNs: mt(25)},
		{Path: "hard/b", Kind: Hardlink, Target: "hard/a"},
		{Path: "hard/sub/c", Kind: Hardlink, Target: "hard/a"},
		{Path: "z-other-dir", Kind: Hardlink, Target: "hard/a"},
		{Path: "hard/sub", Kind: Dir, MtimeNs: mt(26)},
		{Path: "modes", Kind: Dir, MtimeNs: mt(27)},
		{Path: "modes/setuid", Kind: File, Data: []byte("#!/bin/sh\n"), Mode: 0o4755, MtimeNs: mt(28)},
		{Path: "modes/setgid", Kind: File, Data: []byte("g"), Mode: 0o2750, MtimeNs: mt(29)},
		{Path: "modes/sticky-dir", Kind: Dir, Mode: 0o1777, MtimeNs: mt(30)},
		{Path: "modes/setgid-dir", Kind: Dir, Mode: 0o2775, MtimeNs: mt(31)},
		{Path: "modes/ro-dir", Kind: Dir, Mode: 0o555, MtimeNs: mt(33)},
		{Path: "modes/ro-dir/inside", Kind: File, Data: []byte("in a read-only dir"), Mode: 0o444, MtimeNs: mt(34)},
		{Path: "modes/ro-dir/sub", Kind: Dir, Mode: 0o500, MtimeNs: mt(35)},
		{Path: "modes/ro-dir/sub/deeper", Kind: File, Data: []byte("deeper"), MtimeNs: mt(36)},
		{Path: "fifo", Kind: FIFO, Mode: 0o640, MtimeNs: mt(37)},
		{Path: "old", Kind: File, Data: []byte("before 1970"), MtimeNs: -1_234_567_891},
	}
	deep := "deep"
	for i := 0; i < 40; i++ {
		deep += fmt.Sprintf("/%02d", i)
	}
	es = append(es, Entry{Path: deep + "/leaf", Kind: File, Data: []byte("deep"), MtimeNs: mt(38)})
	if c.Xattrs {
		es = append(es,
			Entry{Path: "xattrs", Kind: Dir, MtimeNs: mt(39), Xattrs: map[string][]byte{"user.dir": []byte("on a dir")}},
			Entry{Path: "xattrs/file", Kind: File, Data: []byte("x"), MtimeNs: mt(40), Xattrs: map[string][]byte{
				"user.binary": {0, 1, 2, 0xff, 0, '\n'},
				"user.empty":  {},
				"user.text":   []byte("hello"),
			}},
		)
	}
	if c.Root {
		// Only root can read a file without permissions back.
		es = append(es,
			Entry{Path: "modes/none", Kind: File, Data: []byte("no permissions"), Mode: 0o000, MtimeNs: mt(32)},
			Entry{Path: "dev", Kind: Dir, MtimeNs: mt(41)},
			Entry{Path: "dev/null", Kind: CharDev, Rdev: unix.Mkdev(1, 3), Mode: 0o666, MtimeNs: mt(42)},
			Entry{Path: "dev/loop", Kind: BlockDev, Rdev: unix.Mkdev(7, 200), Mode: 0o660, MtimeNs: mt(43)},
			Entry{Path: "owned", Kind: File, Data: []byte("by 1000"), Chown: true, UID: 1000, GID: 1000, Mode: 0o6755, MtimeNs: mt(44)},
			Entry{Path: "owned-link", Kind: Symlink, Target: "owned", Chown: true, UID: 1000, GID: 1234, MtimeNs: mt(45)},
			Entry{Path: "owned-dir", Kind: Dir, Chown: true, UID: 4321, GID: 1000, Mode: 0o2750, MtimeNs: mt(46)},
		)
	}
	return es
}
