package store

import (
	"encoding/hex"
	"errors"
	"fmt"
)

// ID is the SHA-256 of an object's canonical encoding (see format.go).
type ID [32]byte

// ZeroID is the absent ID: no commit, no parent, an unborn branch.
var ZeroID ID

// IsZero reports whether id is ZeroID.
func (id ID) IsZero() bool { return id == ZeroID }

// String returns the lower-case hex form (64 characters).
func (id ID) String() string { return hex.EncodeToString(id[:]) }

// Short returns the first 12 hex characters, for human output.
func (id ID) Short() string { return id.String()[:12] }

// MarshalText encodes the ID as hex; ZeroID encodes as the empty string.
func (id ID) MarshalText() ([]byte, error) {
	if id.IsZero() {
		return []byte{}, nil
	}
	return []byte(id.String()), nil
}

// UnmarshalText is the inverse of MarshalText.
func (id *ID) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*id = ZeroID
		return nil
	}
	v, err := ParseID(string(b))
	if err != nil {
		return err
	}
	*id = v
	return nil
}

// ParseID parses the full 64-character hex form.
func ParseID(s string) (ID, error) {
	var id ID
	if len(s) != 64 {
		return id, fmt.Errorf("object id %q: want 64 hex characters", s)
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return id, fmt.Errorf("object id %q: %w", s, err)
	}
	return id, nil
}

// Kind is the type of an object in the store.
type Kind uint8

const (
	// KindChunk is raw bytes: the whole content of a small file, or one
	// content-defined chunk of a large one.
	KindChunk Kind = 1
	// KindFile is the chunk list of a large file: a node of a
	// content-defined tree of chunk references (see FileNode).
	KindFile Kind = 2
	// KindTree is a directory listing (see Tree).
	KindTree Kind = 3
	// KindCommit is a root tree plus history (see Commit).
	KindCommit Kind = 4
	// KindTreeIndex is a directory too large for one tree: the ordered
	// list of the trees holding its entries (treeindex.go). Anything that
	// references a directory may reference one; Tx.Tree reads it whole.
	// Read everywhere, no longer written: KindRunIndex replaced it.
	KindTreeIndex Kind = 5
	// KindRunIndex is a directory too large for one tree, as written
	// since schema version 4: KindTreeIndex's list of runs with each
	// run's first name and encoded size too (TreeRun), so that an editor
	// reads only the run it edits (Tx.TreeRuns, Writer.PutTreeSplice).
	// Anything that references a directory may reference one; Tx.Tree
	// reads it whole.
	KindRunIndex Kind = 6
)

func (k Kind) String() string {
	switch k {
	case KindChunk:
		return "chunk"
	case KindFile:
		return "file"
	case KindTree:
		return "tree"
	case KindCommit:
		return "commit"
	case KindTreeIndex:
		return "tree index"
	case KindRunIndex:
		return "run index"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// EntryType is the type of a directory entry.
type EntryType uint8

const (
	TypeFile     EntryType = 1
	TypeDir      EntryType = 2
	TypeSymlink  EntryType = 3
	TypeFIFO     EntryType = 4
	TypeCharDev  EntryType = 5
	TypeBlockDev EntryType = 6
	TypeSocket   EntryType = 7
)

func (t EntryType) String() string {
	switch t {
	case TypeFile:
		return "file"
	case TypeDir:
		return "dir"
	case TypeSymlink:
		return "symlink"
	case TypeFIFO:
		return "fifo"
	case TypeCharDev:
		return "chardev"
	case TypeBlockDev:
		return "blockdev"
	case TypeSocket:
		return "socket"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Xattr is one extended attribute. Only the user.* namespace is recorded.
type Xattr struct {
	Name  string
	Value []byte
}

// TreeEntry is one entry of a directory. Names and symlink targets are byte
// strings: Go strings hold arbitrary bytes, so newlines and invalid UTF-8
// round-trip.
type TreeEntry struct {
	Name string    // one path element; never empty, ".", ".." or containing '/' or NUL
	Type EntryType //
	Mode uint32    // permission bits including setuid, setgid and sticky (07777)
	UID  uint32
	GID  uint32
	// MtimeNs is the modification time in nanoseconds since the Unix epoch.
	MtimeNs int64
	// Size is the content length of a file, the target length of a symlink,
	// and 0 otherwise.
	Size int64
	// Xattrs are sorted by Name.
	Xattrs []Xattr
	// LinkGroup, when not empty, names the hardlink group of a file: every
	// entry of one commit with the same LinkGroup is one inode. The key is
	// the slash-separated path, relative to the commit's root, of the
	// group's first member in sorted walk order.
	LinkGroup string
	// Target is the verbatim target of a symlink.
	Target string
	// Rdev is the device number of a character or block device.
	Rdev uint64
	// Content is the content of a file (a KindChunk or KindFile object),
	// or the tree of a directory (KindTree). ZeroID for other types, and
	// for an empty file.
	Content ID
}

// Tree is a directory listing, entries sorted by Name (bytewise) and unique.
type Tree struct {
	Entries []TreeEntry
}

// CommitStats summarizes a commit's tree.
type CommitStats struct {
	Files int64 `json:"files"` // regular files (each hardlink counted)
	Dirs  int64 `json:"dirs"`
	Other int64 `json:"other"` // symlinks, fifos, devices, sockets
	Bytes int64 `json:"bytes"` // sum of file sizes
}

// Commit is a root tree plus history.
type Commit struct {
	Tree    ID
	Parents []ID
	Message string
	// TimeNs is the commit time in nanoseconds since the Unix epoch.
	TimeNs int64
	// Source is where the tree came from: the absolute directory of an
	// import, "git:REPO@REV" for a git import, or empty. Workspaces
	// present the tree at Source when it is a directory.
	Source string
	Stats  CommitStats
}

// FileNode is a node of a large file's chunk tree. At Level 0 each ref is a
// KindChunk; at Level n>0 each ref is a KindFile node of level n-1. Node
// boundaries are content-defined (by the refs' IDs), so an edit rewrites
// only the nodes on the path to the changed chunk.
type FileNode struct {
	Level uint8
	Refs  []ChunkRef
}

// ChunkRef is a child of a FileNode: its id and the number of file bytes it
// covers.
type ChunkRef struct {
	ID   ID
	Size int64
}

// Categories of error that callers branch on.
var (
	ErrNotFound = errors.New("not found")
	ErrExists   = errors.New("already exists")
	// ErrConflict: a compare-and-swap lost (the branch moved).
	ErrConflict = errors.New("conflict")
	// ErrCorrupt: an object failed verification or decoding.
	ErrCorrupt     = errors.New("corrupt object")
	ErrInvalidName = errors.New("invalid name")
	// ErrInvalidArgument: a call the API's contract rules out, other than
	// a bad name (a splice of edits that do not fit the directory's
	// runs). It is the caller's bug, not damage; nothing was written.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrReadOnly: the store cannot be written (read-only filesystem or
	// permissions).
	ErrReadOnly = errors.New("store is read-only")
	// ErrNoSpace: the disk is full.
	ErrNoSpace = errors.New("no space left on device")
)
