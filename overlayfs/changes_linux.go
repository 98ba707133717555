package overlayfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ErrMetacopy reports an upper file whose data is still in a lower layer
// (a metacopy=on mount). strata mounts with metacopy=off; such an upper
// cannot be read offline.
var ErrMetacopy = errors.New("metacopy upper file")

// Kind says how an upper entry relates to what is beneath it.
type Kind int

const (
	// Added: nothing is beneath Path.
	Added Kind = iota + 1
	// Modified: an entry of the same type is beneath and Diff says what
	// differs. A directory keeps the entries beneath it that are not
	// changed themselves.
	Modified
	// Deleted: a whiteout hides the entry beneath Path and everything
	// below it.
	Deleted
	// Replaced: something is beneath Path but this entry does not continue
	// it: its type differs, the directory is opaque, or the directory was
	// renamed here (RedirectFrom). What was beneath goes, with its subtree;
	// the entries of a replacing directory appear as their own changes.
	Replaced
)

func (k Kind) String() string {
	switch k {
	case Added:
		return "added"
	case Modified:
		return "modified"
	case Deleted:
		return "deleted"
	case Replaced:
		return "replaced"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Diff is the set of attributes in which a Modified entry differs from the
// entry beneath.
type Diff uint16

const (
	DiffMode     Diff = 1 << iota // permission, setuid, setgid, sticky bits
	DiffOwner                     // uid or gid
	DiffMtime                     // modification time (ns)
	DiffSize                      // size of a non-directory
	DiffContent                   // the bytes differ (set when known; see Change.ContentEqual)
	DiffRdev                      // device number
	DiffLinkname                  // symlink target
	DiffXattrs                    // user.* xattrs
	DiffNlink                     // a non-directory with several names changed its link count
)

var diffNames = []string{"mode", "owner", "mtime", "size", "content", "rdev", "linkname", "xattrs", "nlink"}

func (d Diff) String() string {
	if d == 0 {
		return "none"
	}
	var parts []string
	for i, n := range diffNames {
		if d&(1<<i) != 0 {
			parts = append(parts, n)
		}
	}
	return strings.Join(parts, "|")
}

// Stat is the metadata of one entry, from lstat(2).
type Stat struct {
	Mode     fs.FileMode // type and permission bits, as fs.FileMode
	Uid, Gid uint32
	Size     int64
	Mtime    time.Time // nanosecond precision
	Rdev     uint64
	Nlink    uint64
	Ino      uint64
	Dev      uint64
	Linkname string // symlink target
}

// Change is one difference between the merged view and what is beneath.
type Change struct {
	// Path is relative to the root of the merged view, slash-separated, as
	// raw bytes (not necessarily UTF-8; may contain newlines). The root
	// itself is ".".
	Path string
	Kind Kind
	// Opaque: a directory that hides the directory beneath (Kind Replaced).
	Opaque bool
	// RedirectFrom: for a directory renamed with redirect_dir=on, the path
	// beneath whose content it continues. That path refers to the tree
	// beneath (the parent commit), not to the result of earlier changes.
	// Entries below Path that are not listed as changes are those beneath
	// RedirectFrom.
	RedirectFrom string
	// Stat of the upper entry; zero for Deleted.
	Stat Stat
	// Xattrs of the upper entry: its user.* xattrs without the kernel's
	// own namespace. Nil when none, and for Deleted.
	Xattrs map[string][]byte
	// Lower is what is beneath Path; nil for Added.
	Lower *Stat
	// Diff says what differs from Lower (Modified only).
	Diff Diff
	// UpperPath is the entry (for Deleted: the whiteout) on disk.
	UpperPath string
	// LowerPath is the real path of Lower on disk; "" when nil.
	LowerPath string
}

// ContentEqual reports whether a regular file in the upper holds the same
// bytes as the regular file beneath. It compares sizes first and reads both
// files only when they match. For symlinks it compares targets, for other
// types device numbers. With nothing beneath, or types that differ, it is
// false.
func (c Change) ContentEqual() (bool, error) {
	if c.Lower == nil || c.Kind == Deleted || c.Stat.Mode.Type() != c.Lower.Mode.Type() {
		return false, nil
	}
	switch {
	case c.Stat.Mode.Type() == fs.ModeSymlink:
		return c.Stat.Linkname == c.Lower.Linkname, nil
	case !c.Stat.Mode.IsRegular():
		return c.Stat.Rdev == c.Lower.Rdev, nil
	case c.Stat.Size != c.Lower.Size:
		return false, nil
	}
	return sameContent(c.UpperPath, c.LowerPath)
}

// Changes reads an upper directory and returns how the merged view of it
// over lowers (topmost first) differs from the lowers alone, sorted by path
// component by component (parents first, then children, each level by
// name bytes).
//
// flavour selects the xattr namespace of the markers (Config.Flavour). The
// upper must not be mounted while Changes runs. Changes reads every upper
// directory, so it needs permission to; run it where the workspace is
// mounted (as root of its user namespace) for directories a sandboxed
// command made unreadable.
//
// What is reported:
//   - whiteouts (char 0/0, or xattr whiteouts) over something beneath as
//     Deleted; whiteouts over nothing are skipped;
//   - entries with nothing beneath as Added, with their children;
//   - opaque directories, type changes and renamed directories as Replaced;
//   - entries of the same type as beneath as Modified when their metadata
//     differ; a copied-up regular file whose metadata all match is compared
//     byte for byte and left out when equal;
//   - directories that exist only because something below them changed are
//     not reported unless their own metadata differ.
func Changes(upper string, lowers []string, flavour Flavour) ([]Change, error) {
	if flavour != FlavourUser && flavour != FlavourTrusted {
		return nil, fmt.Errorf("overlayfs: changes of %s: unknown flavour %d", upper, int(flavour))
	}
	return ChangesWithin(upper, lowers, flavour, nil)
}

// ChangesWithin is Changes restricted to the entries visit accepts (by
// path relative to the upper, never "."): an entry it refuses is neither
// read nor reported, and nor is anything beneath it. A nil visit accepts
// everything. A caller that knows which upper entries changed since it
// last read them (strata's committed-state index) reads only those and
// their parents.
func ChangesWithin(upper string, lowers []string, flavour Flavour, visit func(rel string) bool) ([]Change, error) {
	if flavour != FlavourUser && flavour != FlavourTrusted {
		return nil, fmt.Errorf("overlayfs: changes of %s: unknown flavour %d", upper, int(flavour))
	}
	w := &walker{upper: filepath.Clean(upper), prefix: flavour.XattrPrefix(), lowers: newLowerSet(lowers, flavour.XattrPrefix()), visit: visit}
	if err := w.root(); err != nil {
		return nil, fmt.Errorf("overlayfs: changes of %s: %w", upper, err)
	}
	slices.SortStableFunc(w.out, func(a, b Change) int { return ComparePaths(a.Path, b.Path) })
	return w.out, nil
}

type walker struct {
	upper  string
	prefix string
	lowers *lowerSet
	out    []Change
	visit  func(rel string) bool // nil: every entry
}

func (w *walker) root() error {
	var st unix.Stat_t
	if err := unix.Lstat(w.upper, &st); err != nil {
		return &fs.PathError{Op: "lstat", Path: w.upper, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return &fs.PathError{Op: "changes", Path: w.upper, Err: unix.ENOTDIR}
	}
	x, err := readXattrSet(w.upper, w.prefix)
	if err != nil {
		return err
	}
	up, err := w.entry(w.upper, &st, x)
	if err != nil {
		return err
	}
	below, err := w.lowers.lookup("")
	if err != nil {
		return err
	}
	if below.found {
		low, err := w.lowerEntry(below)
		if err != nil {
			return err
		}
		if d := diff(up, low, true); d != 0 {
			w.emit(Change{Path: ".", Kind: Modified, Diff: d}, up, &low, below.path)
		}
	}
	return w.dir("", "", below.isDir())
}

// entry is one side of a comparison.
type entry struct {
	path   string
	stat   Stat
	xattrs map[string][]byte
}

func (w *walker) entry(p string, st *unix.Stat_t, x xattrSet) (entry, error) {
	e := entry{path: p, stat: statOf(st)}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		target, err := os.Readlink(p)
		if err != nil {
			return e, err
		}
		e.stat.Linkname = target
	}
	var err error
	e.xattrs, err = x.user()
	return e, err
}

func (w *walker) lowerEntry(b *beneath) (entry, error) {
	x, err := readXattrSet(b.path, w.prefix)
	if err != nil {
		return entry{}, err
	}
	return w.entry(b.path, &b.st, x)
}

func (w *walker) emit(c Change, up entry, low *entry, lowPath string) {
	if c.Kind != Deleted {
		c.Stat, c.Xattrs = up.stat, up.xattrs
	}
	c.UpperPath = up.path
	if low != nil {
		s := low.stat
		c.Lower, c.LowerPath = &s, lowPath
	}
	w.out = append(w.out, c)
}

// dir walks the upper directory rel ("" for the root), whose entries are
// merged with the directory beneath at path below when hasBelow.
func (w *walker) dir(rel, below string, hasBelow bool) error {
	dirPath := w.upper
	if rel != "" {
		dirPath = w.upper + "/" + rel
	}
	ents, err := os.ReadDir(dirPath) // sorted by name bytes
	if err != nil {
		return err
	}
	for _, de := range ents {
		if w.visit != nil && !w.visit(join(rel, de.Name())) {
			continue
		}
		if err := w.child(rel, below, hasBelow, de.Name()); err != nil {
			return err
		}
	}
	return nil
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

func (w *walker) child(rel, below string, hasBelow bool, name string) error {
	p := join(rel, name)
	up := w.upper + "/" + p
	var st unix.Stat_t
	if err := unix.Lstat(up, &st); err != nil {
		return &fs.PathError{Op: "lstat", Path: up, Err: err}
	}
	x, err := readXattrSet(up, w.prefix)
	if err != nil {
		return err
	}

	var b *beneath
	if hasBelow {
		if b, err = w.lowers.lookup(join(below, name)); err != nil {
			return err
		}
		if !b.found {
			b = nil
		}
	}
	var low *entry
	lowPath := ""
	if b != nil {
		e, err := w.lowerEntry(b)
		if err != nil {
			return err
		}
		low, lowPath = &e, b.path
	}

	white, err := isWhiteout(&st, x)
	if err != nil {
		return err
	}
	if white {
		if low != nil {
			w.emit(Change{Path: p, Kind: Deleted}, entry{path: up}, low, lowPath)
		}
		return nil
	}
	if st.Mode&unix.S_IFMT == unix.S_IFREG && x.has("metacopy") {
		return fmt.Errorf("%s: %w (mount with metacopy=off)", up, ErrMetacopy)
	}
	e, err := w.entry(up, &st, x)
	if err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return w.childDir(p, below, hasBelow, name, e, x, low, lowPath, b)
	}

	c := Change{Path: p}
	switch {
	case low == nil:
		c.Kind = Added
	case low.stat.Mode.Type() != e.stat.Mode.Type():
		c.Kind = Replaced
	default:
		c.Kind = Modified
		c.Diff = diff(e, *low, false)
		if c.Diff == 0 && e.stat.Mode.IsRegular() {
			// Copied up with every attribute kept (opened for writing,
			// chmod and back, written and mtime restored): only the bytes
			// can tell.
			same, err := sameContent(up, lowPath)
			if err != nil {
				return err
			}
			if !same {
				c.Diff = DiffContent
			}
		}
		if c.Diff == 0 {
			return nil
		}
	}
	w.emit(c, e, low, lowPath)
	return nil
}

func (w *walker) childDir(p, below string, hasBelow bool, name string, e entry, x xattrSet, low *entry, lowPath string, b *beneath) error {
	opaque := false
	if v, _, err := x.marker("opaque"); err != nil {
		return err
	} else if v == "y" {
		// "x" marks a directory holding xattr whiteouts; it is not
		// opaque (Linux: fs/overlayfs/util.c ovl_get_dir_xattr_val).
		opaque = true
	}

	// What the directory's entries merge with beneath, as the kernel's
	// lookup sees it: nothing under an opaque directory (a redirect is
	// not even read, ovl_lookup_single), the target of a redirect, or
	// the directory beneath at the same path.
	self := join(below, name)
	childBelow, childHasBelow := self, b != nil && b.isDir()
	redirectFrom := ""
	if opaque {
		childBelow, childHasBelow = "", false
	} else if v, ok, err := x.marker("redirect"); err != nil {
		return err
	} else if ok {
		src, err := resolveUpperRedirect(below, hasBelow, v)
		if err != nil {
			return fmt.Errorf("%s: %w", e.path, err)
		}
		if src != "" && src != self {
			sb, err := w.lowers.lookup(src)
			if err != nil {
				return err
			}
			childBelow, childHasBelow = src, sb.isDir()
			if sb.isDir() {
				redirectFrom = src
			}
		}
	}
	continues := childHasBelow && childBelow == self

	c := Change{Path: p, RedirectFrom: redirectFrom}
	switch {
	case low == nil:
		c.Kind = Added
	case !low.stat.Mode.IsDir() || !continues:
		c.Kind, c.Opaque = Replaced, opaque
	default:
		c.Kind = Modified
		c.Diff = diff(e, *low, true)
	}
	if c.Kind != Modified || c.Diff != 0 {
		w.emit(c, e, low, lowPath)
	}
	return w.dir(p, childBelow, childHasBelow)
}

// resolveUpperRedirect resolves a redirect found on an upper directory
// whose parent is at path below. A relative redirect is looked up in the
// parent's lower stack, so it reaches nothing when the parent has none; an
// absolute one always starts from the root of the layers
// (Linux: fs/overlayfs/namei.c ovl_lookup: "poe = roe").
func resolveUpperRedirect(below string, hasBelow bool, v string) (string, error) {
	src, err := ResolveRedirect(below, v)
	if err != nil {
		return "", err
	}
	if v[0] != '/' && !hasBelow {
		return "", nil
	}
	return src, nil
}

// diff compares the attributes a commit records. Directory sizes and link
// counts are filesystem artefacts and are not compared.
func diff(up, low entry, dir bool) Diff {
	const permBits = fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky
	var d Diff
	u, l := up.stat, low.stat
	if u.Mode&permBits != l.Mode&permBits {
		d |= DiffMode
	}
	if u.Uid != l.Uid || u.Gid != l.Gid {
		d |= DiffOwner
	}
	if !u.Mtime.Equal(l.Mtime) {
		d |= DiffMtime
	}
	if !dir {
		if u.Size != l.Size {
			d |= DiffSize
			if u.Mode.IsRegular() {
				d |= DiffContent
			}
		}
		if u.Rdev != l.Rdev {
			d |= DiffRdev
		}
		if u.Linkname != l.Linkname {
			d |= DiffLinkname
		}
		// With index=off a copy-up breaks lower hardlinks, and a link
		// made through the merged view exists only in the upper. Only the
		// latter needs recording: the entry now shares its inode.
		if u.Nlink > 1 && u.Nlink != l.Nlink {
			d |= DiffNlink
		}
	}
	if !equalXattrs(up.xattrs, low.xattrs) {
		d |= DiffXattrs
	}
	return d
}

func equalXattrs(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}

func statOf(st *unix.Stat_t) Stat {
	return Stat{
		Mode: fileMode(st.Mode),
		Uid:  st.Uid,
		Gid:  st.Gid,
		Size: st.Size,
		// The conversions matter on 32-bit and non-amd64 platforms.
		Mtime: time.Unix(int64(st.Mtim.Sec), int64(st.Mtim.Nsec)),
		Rdev:  uint64(st.Rdev),
		Nlink: uint64(st.Nlink),
		Ino:   st.Ino,
		Dev:   uint64(st.Dev),
	}
}

// fileMode converts st_mode to fs.FileMode as os.Lstat does.
func fileMode(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	switch m & unix.S_IFMT {
	case unix.S_IFBLK:
		mode |= fs.ModeDevice
	case unix.S_IFCHR:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFDIR:
		mode |= fs.ModeDir
	case unix.S_IFIFO:
		mode |= fs.ModeNamedPipe
	case unix.S_IFLNK:
		mode |= fs.ModeSymlink
	case unix.S_IFSOCK:
		mode |= fs.ModeSocket
	}
	if m&unix.S_ISUID != 0 {
		mode |= fs.ModeSetuid
	}
	if m&unix.S_ISGID != 0 {
		mode |= fs.ModeSetgid
	}
	if m&unix.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}

// sameContent compares two regular files byte for byte.
func sameContent(a, b string) (bool, error) {
	fa, err := os.Open(a)
	if err != nil {
		return false, err
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		return false, err
	}
	defer fb.Close()
	ba, bb := make([]byte, 64<<10), make([]byte, 64<<10)
	for {
		na, ea := io.ReadFull(fa, ba)
		nb, eb := io.ReadFull(fb, bb)
		if !bytes.Equal(ba[:na], bb[:nb]) {
			return false, nil
		}
		doneA := ea == io.EOF || ea == io.ErrUnexpectedEOF
		doneB := eb == io.EOF || eb == io.ErrUnexpectedEOF
		switch {
		case ea != nil && !doneA:
			return false, fmt.Errorf("read %s: %w", a, ea)
		case eb != nil && !doneB:
			return false, fmt.Errorf("read %s: %w", b, eb)
		case doneA || doneB:
			return doneA && doneB, nil
		}
	}
}

// ComparePaths orders slash-separated paths component by component, so a
// directory comes right before its entries; "." (the root) is first.
func ComparePaths(a, b string) int {
	if a == b {
		return 0
	}
	if a == "." {
		return -1
	}
	if b == "." {
		return 1
	}
	for {
		ca, ra, _ := strings.Cut(a, "/")
		cb, rb, _ := strings.Cut(b, "/")
		if c := strings.Compare(ca, cb); c != 0 {
			return c
		}
		if ra == "" || rb == "" {
			return strings.Compare(ra, rb)
		}
		a, b = ra, rb
	}
}
