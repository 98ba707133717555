package snapshot

import (
	"context"
	"io"

	"github.com/stratafs/strata/store"
)

// The algorithms of this package run against these narrow interfaces, which
// *store.Store, *store.Writer and *store.Tx satisfy; the exported functions
// adapt the store to them. Tests use an in-memory fake.

// objectWriter is the part of *store.Writer that Import uses.
type objectWriter interface {
	WriteContent(r io.Reader) (store.ID, int64, error)
	WriteBytes(b []byte) (store.ID, error)
	WriteSparse(r io.ReaderAt, size int64, data []store.Extent) (store.ID, int64, error)
	// WriteContentLike and WriteBytesLike store a new version of the
	// content prev, as deltas against it where that is cheaper.
	WriteContentLike(r io.Reader, prev store.ID) (store.ID, int64, error)
	WriteBytesLike(b []byte, prev store.ID) (store.ID, error)
	Retain(id store.ID) (bool, error)
	PutTree(t *store.Tree) (store.ID, error)
	Flush() error
	Stats() store.WriterStats
}

// statCacheStore is the part of *store.Store that keeps stat caches.
type statCacheStore interface {
	LoadStatCache(ctx context.Context, root string) (map[string]store.StatEntry, error)
	SaveStatCache(ctx context.Context, root string, entries map[string]store.StatEntry, recordedNs int64) error
}

// treeGetter reads tree objects (*store.Tx).
type treeGetter interface {
	Tree(id store.ID) (*store.Tree, error)
}

// objectReader is the part of *store.Store that reading trees and content
// needs.
type objectReader interface {
	// view runs fn with a consistent read view of the trees.
	view(ctx context.Context, fn func(tg treeGetter) error) error
	// ReadContentTo streams the content id into w.
	ReadContentTo(ctx context.Context, id store.ID, w io.Writer) (int64, error)
}
