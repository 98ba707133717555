package snapshot

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/store"
)

// A stat index records, for every entry of a plain workspace directory (a
// reflink or copy workspace, written by Clone), the stat it had when the
// directory was known to hold a given tree: right after Clone, and after
// each commit. ScanWorkspace compares the directory with it the way git
// compares a working tree with its index: an entry whose device, inode,
// type and mode, link count, owner, size, mtime and ctime are all equal is
// unchanged and is not read; only the others are reported, for ApplyUpper
// to read. See docs/snapshot.md, "Stat index".
//
// The racy window: a change that lands in the same timestamp granule as
// the stat the index recorded leaves mtime and ctime as they were. Linux
// 6.13+ gives XFS, Btrfs, ext4 and tmpfs multigrain timestamps: once a
// ctime has been read by stat, the next change of the inode gets a
// strictly newer one, so there is no racy window; WriteIndex checks this
// on the directory's filesystem. Elsewhere an entry whose mtime or ctime
// is within margin of the time the index was recorded is "racy" and is
// reported (read again) by the next scan, git's rule.

// IndexInfo summarizes a stat index.
type IndexInfo struct {
	// Entries is the number of entries recorded (the root not included).
	Entries int `json:"entries"`
	// Racy counts entries the next scan reads again because they changed
	// within the racy window of the recording.
	Racy int `json:"racy"`
	// Multigrain: the filesystem gives a changed inode a new ctime after
	// any stat of it, so no entry is racy.
	Multigrain bool `json:"multigrain"`
	// Bytes is the size of the index file.
	Bytes int64 `json:"bytes"`
}

// StatIndex is a loaded stat index.
type StatIndex struct {
	// Base is the tree the directory held when the index was recorded.
	Base store.ID
	// Dev is the directory's device; an index of another device (a copied
	// or moved directory) matches nothing.
	Dev uint64
	// RecordedNs is when the recording began.
	RecordedNs int64
	// Multigrain and MarginNs decide which entries are racy (see above).
	Multigrain bool
	MarginNs   int64

	entries []ixEntry
}

// ixEntry is the stat of one entry, in walk order; desc counts the
// entries below a directory, so that its next sibling is at i+1+desc.
type ixEntry struct {
	path             string
	mode             uint32 // st_mode: type and permission bits
	nlink            uint32
	uid, gid         uint32
	ino              uint64
	size             int64
	mtimeNs, ctimeNs int64
	desc             int
	racy             bool
}

// Info summarizes idx (Bytes is not known).
func (idx *StatIndex) Info() IndexInfo {
	in := IndexInfo{Entries: len(idx.entries), Multigrain: idx.Multigrain}
	for i := range idx.entries {
		if idx.entries[i].racy {
			in.Racy++
		}
	}
	return in
}

// ErrIndexStale: a stat index does not describe this directory (another
// device, another base): the caller reads the directory whole instead.
var ErrIndexStale = errors.New("stat index does not match the directory")

// WriteIndex records the stat of every entry under dir, which holds tree
// base, into a stat index at path (replaced atomically). dir must be what
// base says it is: no process may change it meanwhile.
func WriteIndex(dir, path string, base store.ID) (*IndexInfo, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	return writeIndexFD(fd, path, base)
}

func writeIndexFD(rootFD int, path string, base store.ID) (*IndexInfo, error) {
	idx, err := recordIndex(rootFD, base)
	if err != nil {
		return nil, err
	}
	return idx.Save(path)
}

// recordIndex walks the directory open at rootFD.
func recordIndex(rootFD int, base store.ID) (*StatIndex, error) {
	var rst unix.Stat_t
	if err := unix.Fstat(rootFD, &rst); err != nil {
		return nil, err
	}
	idx := &StatIndex{Base: base, Dev: rst.Dev}
	idx.Multigrain, idx.MarginNs = timestampRule(rootFD, rst.Dev)
	idx.RecordedNs = time.Now().UnixNano()
	w := &recorder{idx: idx, buf: make([]byte, 32<<10)}
	if err := w.dir(rootFD, "", 0); err != nil {
		return nil, err
	}
	idx.markRacy()
	return idx, nil
}

// markRacy flags the entries a change could have left looking unchanged.
func (idx *StatIndex) markRacy() {
	if idx.Multigrain {
		return
	}
	limit := idx.RecordedNs - idx.MarginNs
	for i := range idx.entries {
		e := &idx.entries[i]
		e.racy = e.mtimeNs >= limit || e.ctimeNs >= limit
	}
}

type recorder struct {
	idx *StatIndex
	buf []byte
}

func (w *recorder) dir(fd int, rel string, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("%q: directories nested deeper than %d", rel, maxDepth)
	}
	names, err := readDirNames(fd, w.buf)
	if err != nil {
		return &fs.PathError{Op: "readdir", Path: rel, Err: err}
	}
	sort.Strings(names)
	for _, name := range names {
		crel := joinRel(rel, name)
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return &fs.PathError{Op: "lstat", Path: crel, Err: err}
		}
		i := len(w.idx.entries)
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			w.idx.entries = append(w.idx.entries, statEntry(crel, &st))
			continue
		}
		sub, restore, err := openScanDir(fd, name, &st)
		if err != nil {
			return &fs.PathError{Op: "open", Path: crel, Err: err}
		}
		w.idx.entries = append(w.idx.entries, statEntry(crel, &st))
		err = w.dir(sub, crel, depth+1)
		unix.Close(sub)
		if restore != nil {
			nst, rerr := restore()
			if err == nil && rerr != nil {
				err = &fs.PathError{Op: "chmod", Path: crel, Err: rerr}
			}
			if rerr == nil {
				w.idx.entries[i] = statEntry(crel, nst)
			}
		}
		if err != nil {
			return err
		}
		w.idx.entries[i].desc = len(w.idx.entries) - i - 1
	}
	return nil
}

func statEntry(rel string, st *unix.Stat_t) ixEntry {
	return ixEntry{
		path: rel, mode: st.Mode, nlink: uint32(st.Nlink), uid: st.Uid, gid: st.Gid,
		ino: st.Ino, size: st.Size, mtimeNs: timespecNs(st.Mtim), ctimeNs: timespecNs(st.Ctim),
	}
}

// openScanDir opens the directory name in parent (stat st) for listing.
// A directory its owner cannot list or search (mode 0 or 0200, which a
// tree may hold) is opened after granting the owner r-x; restore, not
// nil then, gives the mode back once the caller is done below it and
// returns the directory's stat after (its ctime moved).
func openScanDir(parent int, name string, st *unix.Stat_t) (fd int, restore func() (*unix.Stat_t, error), err error) {
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	if st.Mode&0o500 == 0o500 || int(st.Uid) != os.Geteuid() || os.Geteuid() == 0 {
		fd, err = unix.Openat(parent, name, flags, 0)
		return fd, nil, err
	}
	if err := chmodNoFollow(parent, name, st.Mode&0o7777|0o500); err != nil {
		return -1, nil, err
	}
	restore = func() (*unix.Stat_t, error) {
		if err := chmodNoFollow(parent, name, st.Mode&0o7777); err != nil {
			return nil, err
		}
		var nst unix.Stat_t
		if err := unix.Fstatat(parent, name, &nst, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return nil, err
		}
		return &nst, nil
	}
	fd, err = unix.Openat(parent, name, flags, 0)
	if err != nil {
		restore()
		return -1, nil, err
	}
	return fd, restore, nil
}

// timestampRule says, for the filesystem of the directory dirFD, whether
// it has multigrain ctimes and otherwise the racy margin: the coarse
// clock's tick, or 2 s where timestamps have whole seconds.
var timestampRules sync.Map // dev → [2]int64{multigrain, margin}

func timestampRule(dirFD int, dev uint64) (bool, int64) {
	if v, ok := timestampRules.Load(dev); ok {
		r := v.([2]int64)
		return r[0] == 1, r[1]
	}
	mg, coarseSecs := probeTimestamps(dirFD)
	var res unix.Timespec
	margin := int64(10 * time.Millisecond)
	if unix.ClockGetres(unix.CLOCK_REALTIME_COARSE, &res) == nil && res.Nano() > 0 {
		margin = 2 * res.Nano()
	}
	if coarseSecs {
		margin = int64(2*time.Second) + margin
	}
	r := [2]int64{0, margin}
	if mg {
		r[0] = 1
	}
	timestampRules.Store(dev, r)
	return mg, margin
}

// probeTimestamps changes an unnamed temporary file (O_TMPFILE) in the
// directory three times, each right after a stat, and reports whether
// each change gave a new ctime (multigrain), and whether the filesystem
// keeps whole seconds only.
func probeTimestamps(dirFD int) (multigrain, coarseSecs bool) {
	fd, err := unix.Openat(dirFD, ".", unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return false, false
	}
	defer unix.Close(fd)
	multigrain = true
	coarseSecs = true
	for i := 0; i < 3; i++ {
		var a, b unix.Stat_t
		if unix.Fstat(fd, &a) != nil {
			return false, false
		}
		if _, err := unix.Write(fd, []byte{'x'}); err != nil {
			return false, false
		}
		if unix.Fstat(fd, &b) != nil {
			return false, false
		}
		if a.Ctim == b.Ctim {
			multigrain = false
		}
		if b.Ctim.Nsec != 0 {
			coarseSecs = false
		}
	}
	return multigrain, coarseSecs
}

// The file format: a header, the entries in walk order (each path as the
// length it shares with the previous one and the rest), and the SHA-256
// of all that.
const (
	indexMagic   = "STRATAIX"
	indexVersion = 1
)

// Save writes idx to path: into a temporary file beside it, renamed over
// it. It is not synced: an index lost or torn by a crash is refused by
// ReadIndex (checksum), and one left from before a commit names the old
// base; either way the caller reads the directory whole.
func (idx *StatIndex) Save(path string) (*IndexInfo, error) {
	b := idx.encode()
	if err := writeIndexFile(path, b); err != nil {
		return nil, err
	}
	in := idx.Info()
	in.Bytes = int64(len(b))
	return &in, nil
}

func (idx *StatIndex) encode() []byte {
	b := make([]byte, 0, 64+len(idx.entries)*40)
	b = append(b, indexMagic...)
	b = binary.LittleEndian.AppendUint32(b, indexVersion)
	var flags uint32
	if idx.Multigrain {
		flags |= 1
	}
	b = binary.LittleEndian.AppendUint32(b, flags)
	b = append(b, idx.Base[:]...)
	b = binary.LittleEndian.AppendUint64(b, idx.Dev)
	b = binary.LittleEndian.AppendUint64(b, uint64(idx.RecordedNs))
	b = binary.LittleEndian.AppendUint64(b, uint64(idx.MarginNs))
	b = binary.AppendUvarint(b, uint64(len(idx.entries)))
	prev := ""
	for i := range idx.entries {
		e := &idx.entries[i]
		n := 0
		for n < len(prev) && n < len(e.path) && prev[n] == e.path[n] {
			n++
		}
		b = binary.AppendUvarint(b, uint64(n))
		b = binary.AppendUvarint(b, uint64(len(e.path)-n))
		b = append(b, e.path[n:]...)
		prev = e.path
		b = binary.AppendUvarint(b, uint64(e.mode))
		b = binary.AppendUvarint(b, uint64(e.nlink))
		b = binary.AppendUvarint(b, uint64(e.uid))
		b = binary.AppendUvarint(b, uint64(e.gid))
		b = binary.AppendUvarint(b, e.ino)
		b = binary.AppendVarint(b, e.size)
		b = binary.AppendVarint(b, e.mtimeNs)
		b = binary.AppendVarint(b, e.ctimeNs)
		b = binary.AppendUvarint(b, uint64(e.desc))
		if e.racy {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
	}
	sum := sha256.Sum256(b)
	return append(b, sum[:]...)
}

// ReadIndex loads the stat index at path. A file that is not a complete
// index of this version fails with an error wrapping store.ErrCorrupt.
func ReadIndex(path string) (*StatIndex, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("stat index: %w", err)
	}
	idx, err := decodeIndex(b)
	if err != nil {
		return nil, fmt.Errorf("stat index %s: %w", path, err)
	}
	return idx, nil
}

func decodeIndex(b []byte) (*StatIndex, error) {
	bad := func(what string) error { return fmt.Errorf("%s: %w", what, store.ErrCorrupt) }
	const head = len(indexMagic) + 4 + 4 + 32 + 8 + 8 + 8
	if len(b) < head+sha256.Size || string(b[:len(indexMagic)]) != indexMagic {
		return nil, bad("not a stat index")
	}
	body, sum := b[:len(b)-sha256.Size], b[len(b)-sha256.Size:]
	if s := sha256.Sum256(body); !bytes.Equal(s[:], sum) {
		return nil, bad("checksum mismatch")
	}
	p := body[len(indexMagic):]
	if v := binary.LittleEndian.Uint32(p); v != indexVersion {
		return nil, fmt.Errorf("version %d, want %d: %w", v, indexVersion, store.ErrCorrupt)
	}
	idx := &StatIndex{}
	idx.Multigrain = binary.LittleEndian.Uint32(p[4:])&1 != 0
	copy(idx.Base[:], p[8:40])
	idx.Dev = binary.LittleEndian.Uint64(p[40:])
	idx.RecordedNs = int64(binary.LittleEndian.Uint64(p[48:]))
	idx.MarginNs = int64(binary.LittleEndian.Uint64(p[56:]))
	p = p[64:]
	d := &varintReader{b: p}
	n := d.uvarint()
	if d.err != nil || n > uint64(len(p)) {
		return nil, bad("entry count")
	}
	idx.entries = make([]ixEntry, 0, n)
	prev := ""
	for i := uint64(0); i < n; i++ {
		shared, rest := d.uvarint(), d.uvarint()
		if d.err != nil || shared > uint64(len(prev)) || rest > uint64(len(d.b)) {
			return nil, bad("entry path")
		}
		e := ixEntry{path: prev[:shared] + string(d.b[:rest])}
		d.b = d.b[rest:]
		prev = e.path
		e.mode = uint32(d.uvarint())
		e.nlink = uint32(d.uvarint())
		e.uid = uint32(d.uvarint())
		e.gid = uint32(d.uvarint())
		e.ino = d.uvarint()
		e.size = d.varint()
		e.mtimeNs = d.varint()
		e.ctimeNs = d.varint()
		e.desc = int(d.uvarint())
		if d.err != nil || len(d.b) < 1 || uint64(e.desc) > n-i-1 {
			return nil, bad("entry")
		}
		e.racy = d.b[0] == 1
		d.b = d.b[1:]
		idx.entries = append(idx.entries, e)
	}
	if len(d.b) != 0 {
		return nil, bad("trailing bytes")
	}
	return idx, nil
}

type varintReader struct {
	b   []byte
	err error
}

func (r *varintReader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errors.New("bad varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *varintReader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errors.New("bad varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

// CopyIndex writes the stat index at src to dst (replaced atomically) as
// the index of a directory on device dev: a Btrfs snapshot of the
// directory src describes holds the same inodes with the same metadata,
// on a device of its own (CloneCache.Snapshot). Only the header's device
// and the checksum change; the entries are not decoded.
func CopyIndex(src, dst string, dev uint64) (*IndexInfo, error) {
	b, err := os.ReadFile(src)
	if err != nil {
		return nil, fmt.Errorf("stat index: %w", err)
	}
	const devAt = len(indexMagic) + 4 + 4 + 32
	if len(b) < devAt+8+sha256.Size || string(b[:len(indexMagic)]) != indexMagic {
		return nil, fmt.Errorf("stat index %s: not a stat index: %w", src, store.ErrCorrupt)
	}
	body := b[:len(b)-sha256.Size]
	if s := sha256.Sum256(body); !bytes.Equal(s[:], b[len(body):]) {
		return nil, fmt.Errorf("stat index %s: checksum mismatch: %w", src, store.ErrCorrupt)
	}
	if v := binary.LittleEndian.Uint32(b[len(indexMagic):]); v != indexVersion {
		return nil, fmt.Errorf("stat index %s: version %d, want %d: %w", src, v, indexVersion, store.ErrCorrupt)
	}
	binary.LittleEndian.PutUint64(b[devAt:], dev)
	sum := sha256.Sum256(body)
	copy(b[len(body):], sum[:])
	if err := writeIndexFile(dst, b); err != nil {
		return nil, err
	}
	n, _ := binary.Uvarint(b[devAt+24:])
	return &IndexInfo{Entries: int(n), Bytes: int64(len(b)), Multigrain: binary.LittleEndian.Uint32(b[len(indexMagic)+4:])&1 != 0}, nil
}

// EmptyIndex is a stat index of the directory dir holding nothing (its
// base the empty tree): a scan against it reports every entry as added,
// and ApplyUpper of that onto the empty tree (store.ZeroID) reads the
// whole directory — what a workspace whose index is lost falls back to.
func EmptyIndex(dir string) (*StatIndex, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: dir, Err: err}
	}
	idx := &StatIndex{Dev: st.Dev, RecordedNs: time.Now().UnixNano()}
	idx.Multigrain, idx.MarginNs = timestampRule(fd, st.Dev)
	return idx, nil
}

// writeIndexFile replaces the index file path with b atomically (a
// temporary file beside it, renamed over it).
func writeIndexFile(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), tmpPrefix+filepath.Base(path)+"-")
	if err != nil {
		return fmt.Errorf("stat index: %w", err)
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("stat index: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("stat index: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("stat index: %w", err)
	}
	return nil
}
