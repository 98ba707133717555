package snapshot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/gob"
	"fmt"
	"io"
	"maps"
	"sync"

	"github.com/stratafs/strata/store"
)

// memStore is an in-memory stand-in for the store, implementing the
// interfaces in backend.go. Content is one blob per file; trees are
// gob-encoded and hashed.
type memStore struct {
	mu         sync.Mutex
	blobs      map[store.ID][]byte
	trees      map[store.ID][]byte
	caches     map[string]map[string]store.StatEntry
	cacheSaves int
}

func newMemStore() *memStore {
	return &memStore{
		blobs:  map[store.ID][]byte{},
		trees:  map[store.ID][]byte{},
		caches: map[string]map[string]store.StatEntry{},
	}
}

// memWriter is a store.Writer stand-in with its own statistics.
type memWriter struct {
	m     *memStore
	mu    sync.Mutex
	stats store.WriterStats
}

func (m *memStore) writer() *memWriter { return &memWriter{m: m} }

func (w *memWriter) WriteContent(r io.Reader) (store.ID, int64, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return store.ZeroID, 0, err
	}
	id, err := w.WriteBytes(b)
	return id, int64(len(b)), err
}

func (w *memWriter) WriteContentLike(r io.Reader, _ store.ID) (store.ID, int64, error) {
	return w.WriteContent(r)
}

func (w *memWriter) WriteBytesLike(b []byte, _ store.ID) (store.ID, error) { return w.WriteBytes(b) }

func (w *memWriter) WriteSparse(r io.ReaderAt, size int64, data []store.Extent) (store.ID, int64, error) {
	b := make([]byte, size)
	for _, e := range data {
		if _, err := r.ReadAt(b[e.Off:e.Off+e.Len], e.Off); err != nil {
			return store.ZeroID, 0, err
		}
	}
	id, err := w.WriteBytes(b)
	return id, size, err
}

func (w *memWriter) WriteBytes(b []byte) (store.ID, error) {
	if len(b) == 0 {
		return store.ZeroID, nil
	}
	id := store.ID(sha256.Sum256(append([]byte("blob\x00"), b...)))
	w.m.mu.Lock()
	_, ok := w.m.blobs[id]
	if !ok {
		w.m.blobs[id] = bytes.Clone(b)
	}
	w.m.mu.Unlock()
	w.count(ok, int64(len(b)))
	return id, nil
}

func (w *memWriter) count(existed bool, n int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stats.ContentBytes += n
	if existed {
		w.stats.ReusedObjects++
	} else {
		w.stats.NewObjects++
		w.stats.NewBytes += n
	}
}

func (w *memWriter) Retain(id store.ID) (bool, error) {
	if id.IsZero() {
		return true, nil
	}
	w.m.mu.Lock()
	defer w.m.mu.Unlock()
	_, ok := w.m.blobs[id]
	return ok, nil
}

func (w *memWriter) PutTree(t *store.Tree) (store.ID, error) {
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(t); err != nil {
		return store.ZeroID, err
	}
	id := store.ID(sha256.Sum256(append([]byte("tree\x00"), buf.Bytes()...)))
	w.m.mu.Lock()
	_, ok := w.m.trees[id]
	if !ok {
		w.m.trees[id] = buf.Bytes()
	}
	w.m.mu.Unlock()
	w.mu.Lock()
	if ok {
		w.stats.ReusedObjects++
	} else {
		w.stats.NewObjects++
	}
	w.mu.Unlock()
	return id, nil
}

func (w *memWriter) Flush() error { return nil }

func (w *memWriter) Stats() store.WriterStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stats
}

func (m *memStore) Tree(id store.ID) (*store.Tree, error) {
	m.mu.Lock()
	b, ok := m.trees[id]
	m.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("tree %s: %w", id.Short(), store.ErrNotFound)
	}
	t := &store.Tree{}
	if err := gob.NewDecoder(bytes.NewReader(b)).Decode(t); err != nil {
		return nil, err
	}
	return t, nil
}

// putTree stores a tree as given, without the checks a real store makes:
// tests use it to hand Materialize hostile trees.
func (m *memStore) putTree(t *store.Tree) store.ID {
	id, err := m.writer().PutTree(t)
	if err != nil {
		panic(err)
	}
	return id
}

func (m *memStore) putBlob(b []byte) store.ID {
	id, _ := m.writer().WriteBytes(b)
	return id
}

func (m *memStore) view(ctx context.Context, fn func(tg treeGetter) error) error {
	return fn(m)
}

func (m *memStore) ReadContentTo(ctx context.Context, id store.ID, w io.Writer) (int64, error) {
	if id.IsZero() {
		return 0, nil
	}
	m.mu.Lock()
	b, ok := m.blobs[id]
	m.mu.Unlock()
	if !ok {
		return 0, fmt.Errorf("content %s: %w", id.Short(), store.ErrNotFound)
	}
	var n int64
	for len(b) > 0 { // in chunks, like the store
		c := b[:min(len(b), 48<<10)]
		k, err := w.Write(c)
		n += int64(k)
		if err != nil {
			return n, err
		}
		b = b[len(c):]
	}
	return n, nil
}

func (m *memStore) LoadStatCache(ctx context.Context, root string) (map[string]store.StatEntry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.caches[root]), nil
}

func (m *memStore) SaveStatCache(ctx context.Context, root string, entries map[string]store.StatEntry, recordedNs int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.caches[root] = maps.Clone(entries)
	m.cacheSaves++
	return nil
}

// dropBlob removes content, as gc would.
func (m *memStore) dropBlob(id store.ID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.blobs, id)
}
