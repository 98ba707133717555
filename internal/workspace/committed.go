package workspace

import (
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/internal/workspace/layout"
	"github.com/stratafs/strata/overlayfs"
	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
)

// The committed-state index: what a workspace's upper directory held when
// its base commit was made from it, entry by entry (inode, type and mode,
// size, mtime, ctime, link count; opaque for directories). It is what makes
// a workspace clean after a commit and the next commit O(delta since the
// last commit): an upper entry whose stat equals the index's is already in
// the base commit, so only the others are read and applied — to the base
// tree rather than to the mount base's (docs/workspaces.md, "Clean after
// commit").
//
// The index is a cache beside the registry, keyed by the base commit, the
// mount base and the upper directory it describes: written after the
// commit's transaction lands, ignored whenever any key differs (a crash in
// between, a reset, a promote that moved the workspace), in which case a
// commit reads the whole upper as before. It is never a source of truth.
type committedIndex struct {
	Base, MountBase, Upper string
	Entries                map[string]upperStat
}

// upperStat is the part of an upper entry's lstat that any change to it
// alters: a write moves mtime and ctime, chmod/chown/setxattr/link/rename
// move ctime, a new file is a new inode. ctime cannot be set by a process,
// and a commit keeps the workspace frozen until the clock has passed every
// ctime it recorded (waitPastCtimes), so a later change cannot carry an
// equal ctime.
type upperStat struct {
	Ino    uint64
	Mode   uint32
	Size   int64
	Mtime  int64
	Ctime  int64
	Nlink  uint64
	Opaque bool
}

func (a upperStat) same(b upperStat) bool {
	a.Opaque, b.Opaque = false, false
	return a == b
}

// upperState is a walk of an upper directory: every entry's upperStat by
// path ("." the root), and the latest ctime seen.
type upperState struct {
	entries  map[string]upperStat
	maxCtime int64
}

// walkUpper lstats every entry of an upper directory.
func walkUpper(upper string) (*upperState, error) {
	s := &upperState{entries: map[string]upperStat{}}
	err := filepath.WalkDir(upper, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		rel := "."
		if p != upper {
			rel = filepath.ToSlash(strings.TrimPrefix(p, upper+"/"))
		}
		ct := st.Ctim.Nano()
		s.entries[rel] = upperStat{Ino: st.Ino, Mode: st.Mode, Size: st.Size, Mtime: st.Mtim.Nano(), Ctime: ct, Nlink: uint64(st.Nlink)}
		if ct > s.maxCtime {
			s.maxCtime = ct
		}
		return nil
	})
	return s, err
}

// waitPastCtimes returns once the kernel's coarse clock (what file
// timestamps are taken from) is past ctime, so that no change made after
// it returns can carry a ctime the index recorded. It waits at most one
// clock tick (1-10 ms) and usually not at all.
func waitPastCtimes(ctime int64) {
	for i := 0; i < 1000; i++ {
		var ts unix.Timespec
		if unix.ClockGettime(unix.CLOCK_REALTIME_COARSE, &ts) != nil || ts.Nano() > ctime {
			return
		}
		time.Sleep(500 * time.Microsecond)
	}
}

// loadCommittedIndex returns the workspace's index when it describes its
// current base, mount base and upper; nil otherwise.
func loadCommittedIndex(rec *Record) *committedIndex {
	b, err := os.ReadFile(layout.CommittedIndexFile(rec.Dir))
	if err != nil {
		return nil
	}
	idx, err := decodeCommittedIndex(b)
	if err != nil {
		return nil
	}
	if idx.Base != rec.Base.String() || idx.MountBase != rec.MountBaseID().String() || idx.Upper != filepath.Base(rec.Upper) || idx.Entries == nil {
		return nil
	}
	return idx
}

// committedIndexMagic heads an index file; another version (or the gob
// encoding of earlier releases) is not read, which costs the next commit
// its shortcut only.
const committedIndexMagic = "strata committed index 2\n"

// encode writes the index as its magic, the three keys, then each entry:
// path, then ino, mode, size, mtime, ctime, nlink and opaque as varints,
// entries in no particular order. encoding/gob did this before; its
// package init alone cost every strata-core process ~0.9 ms
// (docs/hotpath.md).
func (idx *committedIndex) encode() []byte {
	b := make([]byte, 0, len(committedIndexMagic)+64+len(idx.Entries)*48)
	b = append(b, committedIndexMagic...)
	str := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	str(idx.Base)
	str(idx.MountBase)
	str(idx.Upper)
	b = binary.AppendUvarint(b, uint64(len(idx.Entries)))
	for p, e := range idx.Entries {
		str(p)
		b = binary.AppendUvarint(b, e.Ino)
		b = binary.AppendUvarint(b, uint64(e.Mode))
		b = binary.AppendVarint(b, e.Size)
		b = binary.AppendVarint(b, e.Mtime)
		b = binary.AppendVarint(b, e.Ctime)
		b = binary.AppendUvarint(b, e.Nlink)
		o := uint64(0)
		if e.Opaque {
			o = 1
		}
		b = binary.AppendUvarint(b, o)
	}
	return b
}

var errBadIndex = errors.New("malformed committed index")

// decodeCommittedIndex reads what encode wrote; anything else (another
// version, a torn file) is an error.
func decodeCommittedIndex(b []byte) (*committedIndex, error) {
	if len(b) < len(committedIndexMagic) || string(b[:len(committedIndexMagic)]) != committedIndexMagic {
		return nil, errBadIndex
	}
	b = b[len(committedIndexMagic):]
	bad := false
	uv := func() uint64 {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			bad = true
			return 0
		}
		b = b[n:]
		return v
	}
	sv := func() int64 {
		v, n := binary.Varint(b)
		if n <= 0 {
			bad = true
			return 0
		}
		b = b[n:]
		return v
	}
	str := func() string {
		n := uv()
		if bad || n > uint64(len(b)) {
			bad = true
			return ""
		}
		s := string(b[:n])
		b = b[n:]
		return s
	}
	idx := &committedIndex{Base: str(), MountBase: str(), Upper: str()}
	n := uv()
	if bad || n > uint64(len(b)) { // every entry takes at least a byte
		return nil, errBadIndex
	}
	idx.Entries = make(map[string]upperStat, n)
	for i := uint64(0); i < n && !bad; i++ {
		p := str()
		e := upperStat{Ino: uv(), Mode: uint32(uv()), Size: sv(), Mtime: sv(), Ctime: sv(), Nlink: uv()}
		e.Opaque = uv() == 1
		idx.Entries[p] = e
	}
	if bad || len(b) != 0 {
		return nil, errBadIndex
	}
	return idx, nil
}

// saveCommittedIndex records state as the upper that base was made from.
// A failure only costs the next commit its shortcut.
//
// changes tell which directories are opaque; when they were read within
// the dirty entries only (ChangesWithin), the entries unchanged since prev
// keep prev's flag.
func saveCommittedIndex(rec *Record, base store.ID, state *upperState, changes []overlayfs.Change, prev *committedIndex) {
	if state == nil {
		return
	}
	if prev != nil {
		for p, e := range state.entries {
			if o, ok := prev.Entries[p]; ok && o.same(e) && o.Opaque {
				e.Opaque = true
				state.entries[p] = e
			}
		}
	}
	for _, c := range changes {
		if c.Opaque {
			if e, ok := state.entries[c.Path]; ok {
				e.Opaque = true
				state.entries[c.Path] = e
			}
		}
	}
	idx := committedIndex{Base: base.String(), MountBase: rec.MountBaseID().String(), Upper: filepath.Base(rec.Upper), Entries: state.entries}
	p := layout.CommittedIndexFile(rec.Dir)
	if WriteFileAtomic(p, idx.encode(), false) != nil {
		_ = os.Remove(p)
	}
}

// dirtySince lists the paths whose entries differ between the index and a
// walk of the upper, or exist in only one of them.
func (idx *committedIndex) dirtySince(cur *upperState) map[string]bool {
	d := map[string]bool{}
	for p, e := range cur.entries {
		if o, ok := idx.Entries[p]; !ok || !o.same(e) {
			d[p] = true
		}
	}
	for p := range idx.Entries {
		if _, ok := cur.entries[p]; !ok {
			d[p] = true
		}
	}
	return d
}

// needed is the set of upper paths a commit must read: the dirty ones and
// every directory on the way to one ("." is always read).
func (idx *committedIndex) needed(cur *upperState) map[string]bool {
	need := map[string]bool{}
	for p := range idx.dirtySince(cur) {
		for q := p; q != "." && !need[q]; q = parentPath(q) {
			need[q] = true
		}
	}
	return need
}

// deltaSince turns the upper's changes (relative to the mount base's
// stack) into the changes since the last commit, relative to the base
// commit's tree. ok is false when the delta cannot be expressed that way
// (a redirect, a replaced root, an entry that vanished from the upper
// while something is beneath it in the stack): the caller then applies
// every change to the mount base's tree.
func (idx *committedIndex) deltaSince(cur *upperState, changes []overlayfs.Change, upper string, lowers []string) (_ []snapshot.UpperChange, ok bool) {
	dirty := idx.dirtySince(cur)
	if len(dirty) == 0 {
		return nil, true
	}
	var out []snapshot.UpperChange
	listed := map[string]bool{}
	for _, u := range UpperChanges(changes) {
		listed[u.Path] = true
		if !dirty[u.Path] {
			continue
		}
		if u.RedirectFrom != "" || (u.Path == "." && (u.Opaque || u.Kind == snapshot.UpperReplaced)) {
			return nil, false
		}
		// The base entry may differ from the one beneath in the stack.
		u.ContentEqual = nil
		o, inIdx := idx.Entries[u.Path]
		c := cur.entries[u.Path]
		if (u.Kind == snapshot.UpperAdded || u.Kind == snapshot.UpperReplaced) && inIdx &&
			o.Mode&unix.S_IFMT == unix.S_IFDIR && c.Mode&unix.S_IFMT == unix.S_IFDIR && o.Ino == c.Ino && o.Opaque == u.Opaque {
			// A directory the base already holds as the upper made it:
			// its entries since are changes of their own.
			u.Kind, u.Opaque = snapshot.UpperModified, false
		}
		out = append(out, u)
	}
	// Directories the result takes whole from the upper: a vanished
	// entry beneath one of them is gone with the rest of what it held.
	fresh := map[string]bool{}
	for _, u := range out {
		if (u.Kind == snapshot.UpperAdded || u.Kind == snapshot.UpperReplaced) && cur.entries[u.Path].Mode&unix.S_IFMT == unix.S_IFDIR {
			fresh[u.Path] = true
		}
	}
	underFresh := func(p string) bool {
		for q := parentPath(p); q != "."; q = parentPath(q) {
			if fresh[q] {
				return true
			}
		}
		return false
	}
	// Dirty entries Changes does not list are equal to what is beneath
	// them in the stack, which the base may not be: a directory takes the
	// upper's metadata again (its entries are changes of their own);
	// anything else sends the caller the long way.
	for p := range dirty {
		c, ok := cur.entries[p]
		if !ok || listed[p] || p == "." {
			continue
		}
		if c.Mode&unix.S_IFMT != unix.S_IFDIR {
			return nil, false
		}
		out = append(out, snapshot.UpperChange{Path: p, Kind: snapshot.UpperModified, UpperPath: upper + "/" + p})
	}
	// Entries gone from the upper: a file or directory made after the
	// mount and deleted since (the kernel leaves no whiteout when nothing
	// is beneath). Only the topmost of a vanished subtree is deleted.
	for p := range dirty {
		if _, ok := cur.entries[p]; ok || underFresh(p) {
			continue
		}
		if par := parentPath(p); par != "." {
			if _, ok := cur.entries[par]; !ok {
				continue
			}
		}
		for _, l := range lowers {
			var st unix.Stat_t
			if unix.Lstat(filepath.Join(l, p), &st) == nil {
				return nil, false
			}
		}
		out = append(out, snapshot.UpperChange{Path: p, Kind: snapshot.UpperDeleted, UpperPath: upper + "/" + p})
	}
	sort.Slice(out, func(i, j int) bool { return overlayfs.ComparePaths(out[i].Path, out[j].Path) < 0 })
	return out, true
}

func parentPath(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return "."
}

// Uncommitted reports whether a workspace's upper holds anything its base
// commit does not (by the committed-state index; without a valid one,
// whether the upper holds anything at all) and how many bytes of regular
// files that is.
func (o overlay) Uncommitted(rec *Record) (bool, int64) {
	if DirEmpty(rec.Upper) {
		return false, 0
	}
	idx := loadCommittedIndex(rec)
	if idx == nil && !rec.Root.scoped() {
		return true, DirBytes(rec.Upper)
	}
	cur, err := walkUpper(rec.Upper)
	if err != nil {
		return true, DirBytes(rec.Upper)
	}
	if rec.Root.scoped() {
		return uncommittedScope(rec, idx, cur)
	}
	var n int64
	d := idx.dirtySince(cur)
	for p := range d {
		if e, ok := cur.entries[p]; ok && e.Mode&unix.S_IFMT == unix.S_IFREG {
			n += e.Size
		}
	}
	return len(d) > 0, n
}
