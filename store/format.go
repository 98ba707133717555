package store

// The canonical, versioned encoding of objects. docs/store.md is the
// normative description; this file is its implementation. Every decoder
// here accepts exactly the bytes its encoder produces (decode∘encode is the
// identity and encode∘decode is too), so that one value has one id.

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"math"
	"strings"
	"sync"
)

// Format versions, one per kind. A new encoding of a kind gets a new
// version in its header, so that old and new objects never share an id.
const (
	chunkFormat  = 1
	fileFormat   = 1
	treeFormat   = 1
	commitFormat = 1
	indexFormat  = 1
	runsFormat   = 1
)

// headers are hashed in front of the payload: id = sha256(header || payload).
var headers = [...][]byte{
	KindChunk:     fmt.Appendf(nil, "strata chunk %d\x00", chunkFormat),
	KindFile:      fmt.Appendf(nil, "strata file %d\x00", fileFormat),
	KindTree:      fmt.Appendf(nil, "strata tree %d\x00", treeFormat),
	KindCommit:    fmt.Appendf(nil, "strata commit %d\x00", commitFormat),
	KindTreeIndex: fmt.Appendf(nil, "strata tree index %d\x00", indexFormat),
	KindRunIndex:  fmt.Appendf(nil, "strata run index %d\x00", runsFormat),
}

func validKind(k Kind) bool { return k >= KindChunk && k <= KindRunIndex }

// isDir reports whether an object of kind k is a directory: a tree, or the
// index of a large one (either form).
func isDir(k Kind) bool { return k == KindTree || isIndex(k) }

// isIndex reports whether an object of kind k is a large directory's index.
func isIndex(k Kind) bool { return k == KindTreeIndex || k == KindRunIndex }

var hasherPool = sync.Pool{New: func() any { return sha256.New() }}

// HashObject returns the id of an object of kind k with payload p.
func HashObject(k Kind, p []byte) ID {
	if !validKind(k) {
		panic(fmt.Sprintf("store: HashObject of %v", k))
	}
	h := hasherPool.Get().(hash.Hash)
	h.Reset()
	h.Write(headers[k])
	h.Write(p)
	var id ID
	h.Sum(id[:0])
	hasherPool.Put(h)
	return id
}

// Limits that decoders enforce so that a hostile object cannot make them
// allocate without bound. Encoders enforce them too, so that everything
// that can be written can be read back.
const (
	// MaxFileNodeRefs bounds the fan-out of a FileNode (see content.go).
	MaxFileNodeRefs = 1024
	// maxFileLevel bounds the height of a file's chunk tree. Every node but
	// the last of a level has at least 2 refs, so 2^40 chunks need at most
	// 40 levels.
	maxFileLevel = 40
	// maxObjectSize bounds one object's payload. The largest objects are
	// trees of huge directories, at roughly 70 bytes an entry.
	maxObjectSize = 256 << 20
)

var errNonCanonical = errors.New("non-canonical encoding")

// ValidateName reports whether s is a valid directory entry name.
func ValidateName(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("entry name is empty: %w", ErrInvalidName)
	case s == "." || s == "..":
		return fmt.Errorf("entry name %q: %w", s, ErrInvalidName)
	case strings.IndexByte(s, '/') >= 0:
		return fmt.Errorf("entry name %q contains '/': %w", s, ErrInvalidName)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("entry name %q contains NUL: %w", s, ErrInvalidName)
	}
	return nil
}

// --- encoding primitives -------------------------------------------------

func appendBytes(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBlob(b []byte, s []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// reader decodes the primitives, rejecting truncated input, overlong
// varints and lengths beyond the input. The first error sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf(format, args...)
	}
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("bad varint")
		return 0
	}
	// The minimal encoding never ends in a zero byte (except 0 itself).
	if n > 1 && r.b[n-1] == 0 {
		r.fail("overlong varint: %w", errNonCanonical)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	u := r.uvarint()
	// zigzag, as binary.AppendVarint writes it
	x := int64(u >> 1)
	if u&1 != 0 {
		x = ^x
	}
	return x
}

func (r *reader) uint32() uint32 {
	v := r.uvarint()
	if v > math.MaxUint32 {
		r.fail("value %d out of range", v)
		return 0
	}
	return uint32(v)
}

func (r *reader) int64nn() int64 {
	v := r.uvarint()
	if v > math.MaxInt64 {
		r.fail("value %d out of range", v)
		return 0
	}
	return int64(v)
}

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) < 1 {
		r.fail("truncated")
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) take(n uint64) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.fail("length %d exceeds the %d bytes left", n, len(r.b))
		return nil
	}
	s := r.b[:n]
	r.b = r.b[n:]
	return s
}

func (r *reader) str() string { return string(r.take(r.uvarint())) }

func (r *reader) blob() []byte {
	s := r.take(r.uvarint())
	if len(s) == 0 {
		return nil
	}
	return append([]byte(nil), s...)
}

func (r *reader) id() ID {
	var id ID
	copy(id[:], r.take(32))
	return id
}

// count reads a count of items that take at least min bytes each, so that
// a forged count cannot make the decoder allocate more than the input.
func (r *reader) count(min int) int {
	n := r.uvarint()
	if r.err == nil && n > uint64(len(r.b)/min) {
		r.fail("count %d exceeds what %d bytes can hold", n, len(r.b))
		return 0
	}
	return int(n)
}

func (r *reader) end() error {
	if r.err == nil && len(r.b) != 0 {
		r.fail("%d trailing bytes", len(r.b))
	}
	return r.err
}

// --- tree ------------------------------------------------------------------

// minEntrySize is the smallest encoded TreeEntry: 1-byte name and 32-byte
// content id plus one byte for each of the other fields.
const minEntrySize = 2 + 1 + 8 + 32

func validateEntry(e *TreeEntry) error {
	if err := ValidateName(e.Name); err != nil {
		return err
	}
	if e.Type < TypeFile || e.Type > TypeSocket {
		return fmt.Errorf("entry %q: bad type %d", e.Name, e.Type)
	}
	if e.Mode&^07777 != 0 {
		return fmt.Errorf("entry %q: mode %#o has bits beyond 07777", e.Name, e.Mode)
	}
	if e.Size < 0 {
		return fmt.Errorf("entry %q: negative size", e.Name)
	}
	for i, x := range e.Xattrs {
		if x.Name == "" || strings.IndexByte(x.Name, 0) >= 0 {
			return fmt.Errorf("entry %q: bad xattr name %q", e.Name, x.Name)
		}
		if i > 0 && e.Xattrs[i-1].Name >= x.Name {
			return fmt.Errorf("entry %q: xattrs not sorted and unique at %q", e.Name, x.Name)
		}
	}
	return nil
}

// EncodeTree returns the canonical encoding of t. Entries must be sorted
// by name and unique; see docs/store.md for the layout.
func EncodeTree(t *Tree) ([]byte, error) {
	n := 0
	for i := range t.Entries {
		e := &t.Entries[i]
		if err := validateEntry(e); err != nil {
			return nil, err
		}
		if i > 0 && t.Entries[i-1].Name >= e.Name {
			return nil, fmt.Errorf("tree entries not sorted and unique at %q: %w", e.Name, ErrInvalidName)
		}
		n += minEntrySize + len(e.Name) + len(e.Target) + len(e.LinkGroup) + 24
		for _, x := range e.Xattrs {
			n += len(x.Name) + len(x.Value) + 4
		}
	}
	b := make([]byte, 0, n+4)
	b = binary.AppendUvarint(b, uint64(len(t.Entries)))
	for i := range t.Entries {
		e := &t.Entries[i]
		b = appendBytes(b, e.Name)
		b = append(b, byte(e.Type))
		b = binary.AppendUvarint(b, uint64(e.Mode))
		b = binary.AppendUvarint(b, uint64(e.UID))
		b = binary.AppendUvarint(b, uint64(e.GID))
		b = binary.AppendVarint(b, e.MtimeNs)
		b = binary.AppendUvarint(b, uint64(e.Size))
		b = binary.AppendUvarint(b, e.Rdev)
		b = appendBytes(b, e.Target)
		b = appendBytes(b, e.LinkGroup)
		b = binary.AppendUvarint(b, uint64(len(e.Xattrs)))
		for _, x := range e.Xattrs {
			b = appendBytes(b, x.Name)
			b = appendBlob(b, x.Value)
		}
		b = append(b, e.Content[:]...)
	}
	if len(b) > maxObjectSize {
		return nil, fmt.Errorf("tree of %d entries encodes to %d bytes, over the %d limit", len(t.Entries), len(b), maxObjectSize)
	}
	return b, nil
}

// DecodeTree decodes a tree payload, rejecting anything EncodeTree would
// not produce.
func DecodeTree(p []byte) (*Tree, error) {
	entries, err := appendTree(nil, p)
	if err != nil {
		return nil, err
	}
	return &Tree{Entries: entries}, nil
}

// appendTree decodes the tree payload p onto entries (which must end
// before p's first name, as the runs of a split directory do).
func appendTree(entries []TreeEntry, p []byte) ([]TreeEntry, error) {
	r := reader{b: p}
	n := r.count(minEntrySize)
	if entries == nil {
		entries = make([]TreeEntry, 0, n)
	}
	t := &Tree{Entries: entries}
	first := len(entries)
	for i := 0; i < n && r.err == nil; i++ {
		var e TreeEntry
		e.Name = r.str()
		e.Type = EntryType(r.byte())
		e.Mode = r.uint32()
		e.UID = r.uint32()
		e.GID = r.uint32()
		e.MtimeNs = r.varint()
		e.Size = r.int64nn()
		e.Rdev = r.uvarint()
		e.Target = r.str()
		e.LinkGroup = r.str()
		if nx := r.count(2); nx > 0 {
			e.Xattrs = make([]Xattr, nx)
			for j := range e.Xattrs {
				e.Xattrs[j].Name = r.str()
				e.Xattrs[j].Value = r.blob()
			}
		}
		e.Content = r.id()
		if r.err != nil {
			break
		}
		if err := validateEntry(&e); err != nil {
			return nil, fmt.Errorf("decode tree: %w", err)
		}
		if k := len(t.Entries); k > first && t.Entries[k-1].Name >= e.Name {
			return nil, fmt.Errorf("decode tree: entries not sorted and unique at %q: %w", e.Name, errNonCanonical)
		}
		t.Entries = append(t.Entries, e)
	}
	if err := r.end(); err != nil {
		return nil, fmt.Errorf("decode tree: %w", err)
	}
	return t.Entries, nil
}

// --- commit ----------------------------------------------------------------

func validateCommit(c *Commit) error {
	if c.Tree.IsZero() {
		return errors.New("commit without a tree")
	}
	for i, p := range c.Parents {
		if p.IsZero() {
			return errors.New("commit with a zero parent")
		}
		for _, q := range c.Parents[:i] {
			if p == q {
				return fmt.Errorf("commit lists parent %s twice", p.Short())
			}
		}
	}
	s := c.Stats
	if s.Files < 0 || s.Dirs < 0 || s.Other < 0 || s.Bytes < 0 {
		return errors.New("commit with negative stats")
	}
	return nil
}

// EncodeCommit returns the canonical encoding of c.
func EncodeCommit(c *Commit) ([]byte, error) {
	if err := validateCommit(c); err != nil {
		return nil, err
	}
	b := make([]byte, 0, 32*(1+len(c.Parents))+len(c.Message)+len(c.Source)+64)
	b = append(b, c.Tree[:]...)
	b = binary.AppendUvarint(b, uint64(len(c.Parents)))
	for _, p := range c.Parents {
		b = append(b, p[:]...)
	}
	b = binary.AppendVarint(b, c.TimeNs)
	b = appendBytes(b, c.Message)
	b = appendBytes(b, c.Source)
	b = binary.AppendUvarint(b, uint64(c.Stats.Files))
	b = binary.AppendUvarint(b, uint64(c.Stats.Dirs))
	b = binary.AppendUvarint(b, uint64(c.Stats.Other))
	b = binary.AppendUvarint(b, uint64(c.Stats.Bytes))
	if len(b) > maxObjectSize {
		return nil, fmt.Errorf("commit encodes to %d bytes, over the %d limit", len(b), maxObjectSize)
	}
	return b, nil
}

// DecodeCommit decodes a commit payload, rejecting anything EncodeCommit
// would not produce.
func DecodeCommit(p []byte) (*Commit, error) {
	r := reader{b: p}
	c := &Commit{Tree: r.id()}
	if n := r.count(32); n > 0 {
		c.Parents = make([]ID, n)
		for i := range c.Parents {
			c.Parents[i] = r.id()
		}
	}
	c.TimeNs = r.varint()
	c.Message = r.str()
	c.Source = r.str()
	c.Stats.Files = r.int64nn()
	c.Stats.Dirs = r.int64nn()
	c.Stats.Other = r.int64nn()
	c.Stats.Bytes = r.int64nn()
	if err := r.end(); err != nil {
		return nil, fmt.Errorf("decode commit: %w", err)
	}
	if err := validateCommit(c); err != nil {
		return nil, fmt.Errorf("decode commit: %w", err)
	}
	return c, nil
}

// --- file node -------------------------------------------------------------

// Size returns the number of file bytes the node covers.
func (n *FileNode) Size() int64 {
	var s int64
	for _, r := range n.Refs {
		s += r.Size
	}
	return s
}

func validateFileNode(n *FileNode) error {
	if n.Level > maxFileLevel {
		return fmt.Errorf("file node level %d over %d", n.Level, maxFileLevel)
	}
	if len(n.Refs) == 0 || len(n.Refs) > MaxFileNodeRefs {
		return fmt.Errorf("file node with %d refs (want 1..%d)", len(n.Refs), MaxFileNodeRefs)
	}
	var total int64
	for _, r := range n.Refs {
		if r.ID.IsZero() && n.Level > 0 {
			// A zero ref of a level-0 node is a hole: Size zero bytes
			// with no chunk (sparse files).
			return errors.New("file node with a zero ref above level 0")
		}
		if r.Size <= 0 {
			return fmt.Errorf("file node ref %s with size %d", r.ID.Short(), r.Size)
		}
		if total > math.MaxInt64-r.Size {
			return errors.New("file node size overflows")
		}
		total += r.Size
	}
	return nil
}

// EncodeFileNode returns the canonical encoding of n.
func EncodeFileNode(n *FileNode) ([]byte, error) {
	if err := validateFileNode(n); err != nil {
		return nil, err
	}
	b := make([]byte, 0, 3+len(n.Refs)*(32+4))
	b = append(b, n.Level)
	b = binary.AppendUvarint(b, uint64(len(n.Refs)))
	for _, r := range n.Refs {
		b = append(b, r.ID[:]...)
		b = binary.AppendUvarint(b, uint64(r.Size))
	}
	return b, nil
}

// DecodeFileNode decodes a file node payload, rejecting anything
// EncodeFileNode would not produce.
func DecodeFileNode(p []byte) (*FileNode, error) {
	r := reader{b: p}
	n := &FileNode{Level: r.byte()}
	if c := r.count(33); c > 0 {
		n.Refs = make([]ChunkRef, c)
		for i := range n.Refs {
			n.Refs[i].ID = r.id()
			n.Refs[i].Size = r.int64nn()
		}
	}
	if err := r.end(); err != nil {
		return nil, fmt.Errorf("decode file node: %w", err)
	}
	if err := validateFileNode(n); err != nil {
		return nil, fmt.Errorf("decode file node: %w", err)
	}
	return n, nil
}

// refsOf returns the ids an object's payload references, for gc and fsck.
// Chunks reference nothing.
func refsOf(k Kind, p []byte) ([]ID, error) {
	switch k {
	case KindChunk:
		return nil, nil
	case KindFile:
		n, err := DecodeFileNode(p)
		if err != nil {
			return nil, err
		}
		ids := make([]ID, 0, len(n.Refs))
		for _, r := range n.Refs {
			if !r.ID.IsZero() { // a hole references nothing
				ids = append(ids, r.ID)
			}
		}
		return ids, nil
	case KindTree:
		t, err := DecodeTree(p)
		if err != nil {
			return nil, err
		}
		ids := make([]ID, 0, len(t.Entries))
		for i := range t.Entries {
			if c := t.Entries[i].Content; !c.IsZero() {
				ids = append(ids, c)
			}
		}
		return ids, nil
	case KindCommit:
		c, err := DecodeCommit(p)
		if err != nil {
			return nil, err
		}
		return append([]ID{c.Tree}, c.Parents...), nil
	case KindTreeIndex, KindRunIndex:
		ix, err := decodeIndex(k, p)
		if err != nil {
			return nil, err
		}
		return ix.trees(), nil
	}
	return nil, fmt.Errorf("unknown object kind %d", k)
}
