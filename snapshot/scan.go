package snapshot

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/store"
)

// ScanResult is what ScanWorkspace found.
type ScanResult struct {
	// Changes turn the index's base tree into what the directory holds,
	// for ApplyUpper (with the directory as the upper directory): entries
	// whose stat differs from the index, or that are racy, as Modified
	// (or Replaced, for a type change); new ones as Added, with
	// everything under a new directory; missing ones as Deleted. A
	// renamed directory is a deletion and an addition, but the files
	// under it whose inode and stat the index holds under their old path
	// are given as entries (UpperChange.Entry, the base's content): they
	// are not read.
	Changes []UpperChange
	// Entries counts the entries stat'd (the root not included).
	Entries int
	// Racy counts entries reported only because the index recorded them
	// within its racy window.
	Racy int
	// Moved counts files found under a new path and taken from the base.
	Moved int

	dir  string
	next *StatIndex
}

// Index returns the stat index of the directory as this scan saw it, to
// be saved once the tree base holding the scan's changes is committed:
// the next scan then reports only what changed since.
func (r *ScanResult) Index(base store.ID) *StatIndex {
	idx := *r.next
	idx.Base = base
	return &idx
}

// ScanWorkspace compares the directory dir with its stat index idx (see
// WriteIndex), with one lstat per entry and one listing per directory: no
// file is read. It fails with ErrIndexStale when idx was recorded on
// another device. s gives the base tree's entries of files moved with
// their directory (only then is a tree read).
func ScanWorkspace(ctx context.Context, s *store.Store, dir string, idx *StatIndex) (*ScanResult, error) {
	return scanWorkspace(ctx, storeReader{s}, dir, idx)
}

func scanWorkspace(ctx context.Context, r objectReader, dir string, idx *StatIndex) (*ScanResult, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Open(abs, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: abs, Err: err}
	}
	defer unix.Close(fd)
	var rst unix.Stat_t
	if err := unix.Fstat(fd, &rst); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: abs, Err: err}
	}
	if rst.Dev != idx.Dev {
		return nil, fmt.Errorf("scan %s: recorded on device %#x, the directory is on %#x: %w", abs, idx.Dev, rst.Dev, ErrIndexStale)
	}
	next := &StatIndex{Dev: rst.Dev}
	next.Multigrain, next.MarginNs = timestampRule(fd, rst.Dev)
	next.RecordedNs = time.Now().UnixNano()
	sc := &scanner{
		ctx: ctx, idx: idx, root: abs, next: next, buf: make([]byte, 32<<10),
		gone: map[uint64]int{},
		res:  &ScanResult{dir: abs, next: next},
	}
	if err := sc.dir(fd, "", 0, len(idx.entries), false, 0); err != nil {
		return nil, fmt.Errorf("scan %s: %w", abs, err)
	}
	next.markRacy()
	if err := sc.addFiles(r); err != nil {
		return nil, fmt.Errorf("scan %s: %w", abs, err)
	}
	return sc.res, nil
}

type scanner struct {
	ctx  context.Context
	idx  *StatIndex
	root string
	next *StatIndex
	buf  []byte
	res  *ScanResult
	// gone maps the inode of each regular file of the index that is no
	// longer at its path (deleted, or under a deleted directory) to its
	// index entry; added holds new regular files, matched against it
	// once the walk is done.
	gone  map[uint64]int
	added []addedFile
}

type addedFile struct {
	path string
	st   unix.Stat_t
}

func (sc *scanner) change(rel string, k UpperKind) {
	sc.res.Changes = append(sc.res.Changes, UpperChange{Path: rel, Kind: k, UpperPath: sc.root + "/" + rel})
}

// dir scans the directory open at fd (at rel). lo and hi bound the index
// entries below it (hi == lo: none; added: it is new, everything in it is
// added).
func (sc *scanner) dir(fd int, rel string, lo, hi int, added bool, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("%q: directories nested deeper than %d", rel, maxDepth)
	}
	if err := sc.ctx.Err(); err != nil {
		return err
	}
	names, err := readDirNames(fd, sc.buf)
	if err != nil {
		return &fs.PathError{Op: "readdir", Path: rel, Err: err}
	}
	sort.Strings(names)
	skip := len(rel) + 1
	if rel == "" {
		skip = 0
	}
	i := lo
	childName := func(i int) string { return sc.idx.entries[i].path[skip:] }
	nextSibling := func(i int) int { return i + 1 + sc.idx.entries[i].desc }
	for _, name := range names {
		for i < hi && childName(i) < name {
			sc.deleted(i)
			i = nextSibling(i)
		}
		var old *ixEntry
		oldAt := -1
		if i < hi && childName(i) == name {
			old, oldAt = &sc.idx.entries[i], i
			i = nextSibling(i)
		}
		crel := joinRel(rel, name)
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if isVanished(err) {
				if old != nil {
					sc.deleted(oldAt)
				}
				continue
			}
			return &fs.PathError{Op: "lstat", Path: crel, Err: err}
		}
		sc.res.Entries++
		isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
		switch {
		case (old == nil || added) && st.Mode&unix.S_IFMT == unix.S_IFREG:
			sc.added = append(sc.added, addedFile{crel, st}) // decided in addFiles
		case old == nil || added:
			sc.change(crel, UpperAdded)
		case old.mode&unix.S_IFMT != st.Mode&unix.S_IFMT:
			sc.change(crel, UpperReplaced)
			if old.mode&unix.S_IFMT == unix.S_IFDIR {
				sc.goneBelow(oldAt)
			} else if old.mode&unix.S_IFMT == unix.S_IFREG {
				sc.noteGone(oldAt)
			}
		case !sc.same(old, &st):
			sc.change(crel, UpperModified)
			if old.racy && sc.sameStat(old, &st) {
				sc.res.Racy++
			}
		}
		at := len(sc.next.entries)
		if !isDir {
			sc.next.entries = append(sc.next.entries, statEntry(crel, &st))
			continue
		}
		sub, restore, err := openScanDir(fd, name, &st)
		if err != nil {
			if isVanished(err) {
				continue
			}
			return &fs.PathError{Op: "open", Path: crel, Err: err}
		}
		sc.next.entries = append(sc.next.entries, statEntry(crel, &st))
		clo, chi, cadded := 0, 0, true
		if old != nil && !added && old.mode&unix.S_IFMT == unix.S_IFDIR {
			clo, chi, cadded = oldAt+1, oldAt+1+old.desc, false
		}
		err = sc.dir(sub, crel, clo, chi, cadded, depth+1)
		unix.Close(sub)
		if restore != nil {
			// What the next scan will see: the ctime the restored mode
			// left.
			nst, rerr := restore()
			if err == nil && rerr != nil {
				err = &fs.PathError{Op: "chmod", Path: crel, Err: rerr}
			}
			if rerr == nil {
				sc.next.entries[at] = statEntry(crel, nst)
			}
		}
		if err != nil {
			return err
		}
		sc.next.entries[at].desc = len(sc.next.entries) - at - 1
	}
	for i < hi {
		sc.deleted(i)
		i = nextSibling(i)
	}
	return nil
}

// same reports whether st is what the index recorded and the index's
// record is not racy.
func (sc *scanner) same(e *ixEntry, st *unix.Stat_t) bool {
	return !e.racy && sc.sameStat(e, st)
}

func (sc *scanner) sameStat(e *ixEntry, st *unix.Stat_t) bool {
	return st.Dev == sc.idx.Dev && e.ino == st.Ino && e.mode == st.Mode && e.nlink == uint32(st.Nlink) &&
		e.uid == st.Uid && e.gid == st.Gid && e.size == st.Size &&
		e.mtimeNs == timespecNs(st.Mtim) && e.ctimeNs == timespecNs(st.Ctim)
}

// deleted reports the index entry i (and what is below it) as gone.
func (sc *scanner) deleted(i int) {
	sc.change(sc.idx.entries[i].path, UpperDeleted)
	sc.noteGone(i)
	sc.goneBelow(i)
}

func (sc *scanner) goneBelow(i int) {
	for j := i + 1; j <= i+sc.idx.entries[i].desc; j++ {
		sc.noteGone(j)
	}
}

// noteGone remembers the regular file at index entry i as a source of
// moved files: one with a single link, whose record is not racy.
func (sc *scanner) noteGone(i int) {
	e := &sc.idx.entries[i]
	if e.mode&unix.S_IFMT == unix.S_IFREG && e.nlink == 1 && !e.racy {
		sc.gone[e.ino] = i
	}
}

// addFiles reports the new regular files: as entries of the base tree
// when the index holds the same inode, unchanged, under a path that is
// gone (a file moved with its directory: rename(2) leaves the ctime of
// what lies below the renamed directory alone), else as Added, read by
// ApplyUpper.
func (sc *scanner) addFiles(r objectReader) error {
	type move struct {
		a   addedFile
		old string
	}
	var moves []move
	for _, a := range sc.added {
		if i, ok := sc.gone[a.st.Ino]; ok && a.st.Nlink == 1 && sc.sameStat(&sc.idx.entries[i], &a.st) {
			moves = append(moves, move{a, sc.idx.entries[i].path})
			continue
		}
		sc.change(a.path, UpperAdded)
	}
	if len(moves) == 0 {
		return nil
	}
	return r.view(sc.ctx, func(tg treeGetter) error {
		for _, m := range moves {
			e, err := lookup(tg, sc.idx.Base, m.old)
			if err != nil || e.Type != store.TypeFile || e.Size != m.a.st.Size {
				// The base does not hold it as the index says: read it.
				sc.change(m.a.path, UpperAdded)
				continue
			}
			ne := *e
			ne.LinkGroup = "" // one link: alone
			sc.res.Changes = append(sc.res.Changes, UpperChange{
				Path: m.a.path, Kind: UpperAdded, UpperPath: sc.root + "/" + m.a.path, Entry: &ne,
			})
			sc.res.Moved++
		}
		return nil
	})
}
