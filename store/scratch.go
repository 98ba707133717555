package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
)

// A scratch Writer (Store.NewScratchWriter) is a Writer for commands that
// only read the store: `strata diff NAME` and `strata apply NAME` build a
// workspace's current view as a tree, which needs the ids of its changed
// files and the trees above them, but must not store them — a read that
// writes fails on a read-only or full store, and leaves the changed files
// behind so that the next commit finds them "already stored". A scratch
// Writer computes the same ids as a Writer (the same chunking, the same
// encodings) and keeps the new objects in memory instead of SQLite; this
// Store's reads (Tx.Get and what builds on it, ReadContentTo, OpenContent)
// find them there while the Writer lives, after the database. Nothing of
// it reaches the database file: no object, no lease, no stat cache.
//
// Memory is bounded for big files: trees and file nodes are kept (they are
// small and cannot be read again), chunks only up to scratchBudget bytes
// in all (32 MiB). Past that a chunk's bytes are dropped and its id kept;
// content whose source file was named (Writer.NoteSource: snapshot does it
// for every file it reads from a workspace's upper directory) is read
// again from that file when it is read, each chunk verified against its
// id, so a file that changed since fails the read instead of showing
// other bytes.
//
// No lease protects what a scratch Writer reuses (Retain only checks that
// an object exists): an object reused from the store that a concurrent
// `gc --prune 0s` takes makes the read fail with ErrNotFound. What a
// workspace's view reuses is its base commit's (a gc root) or its stat
// cache's (content of earlier commits).

// scratchBudget is how many bytes of chunks a scratch Writer keeps in
// memory; a var for tests.
var scratchBudget int64 = 32 << 20

// scratch is a scratch Writer's objects.
type scratch struct {
	mu      sync.RWMutex
	objs    map[ID]scratchObj
	kept    int64 // chunk bytes held
	dropped int64 // chunks whose bytes were dropped
	sources map[ID]string
}

type scratchObj struct {
	kind Kind
	p    []byte // nil for a dropped chunk
	size int    // the payload's size
}

// scratchSet is the live scratch Writers of a Store.
type scratchSet struct {
	mu   sync.RWMutex
	list []*scratch
}

func (ss *scratchSet) add(sc *scratch) {
	ss.mu.Lock()
	ss.list = append(ss.list, sc)
	ss.mu.Unlock()
}

func (ss *scratchSet) remove(sc *scratch) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for i, x := range ss.list {
		if x == sc {
			ss.list = append(ss.list[:i], ss.list[i+1:]...)
			return
		}
	}
}

// droppedError is the read of a chunk a scratch Writer holds only the id
// of; a content reader reads it from the content's source file instead.
type droppedError struct {
	id   ID
	size int
}

func (e *droppedError) Error() string {
	return fmt.Sprintf("chunk %s of a workspace's current view was not kept in memory and has no file to be read from", e.id.Short())
}

func (e *droppedError) Unwrap() error { return ErrNotFound }

// get looks id up in the live scratch Writers. ok is false if none has
// it; a dropped chunk is a *droppedError.
func (ss *scratchSet) get(id ID) (k Kind, p []byte, ok bool, err error) {
	ss.mu.RLock()
	defer ss.mu.RUnlock()
	for _, sc := range ss.list {
		sc.mu.RLock()
		o, found := sc.objs[id]
		sc.mu.RUnlock()
		if !found {
			continue
		}
		if o.p == nil && o.size > 0 {
			return 0, nil, true, &droppedError{id: id, size: o.size}
		}
		return o.kind, o.p, true, nil
	}
	return 0, nil, false, nil
}

// source returns the file content id was read from, or "".
func (ss *scratchSet) source(id ID) string {
	ss.mu.RLock()
	defer ss.mu.RUnlock()
	for _, sc := range ss.list {
		sc.mu.RLock()
		p := sc.sources[id]
		sc.mu.RUnlock()
		if p != "" {
			return p
		}
	}
	return ""
}

// NewScratchWriter starts a scratch Writer (see above): a Writer whose
// objects stay in this process's memory, readable through this Store
// until Abort. It works on a read-only or full store. Finish with a
// function fails (a scratch Writer cannot commit); Abort, or Finish(nil),
// drops what it holds.
func (s *Store) NewScratchWriter(ctx context.Context, purpose string) (*Writer, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sc := &scratch{objs: make(map[ID]scratchObj), sources: make(map[ID]string)}
	s.scratches.add(sc)
	return &Writer{s: s, ctx: ctx, purpose: purpose, cdc: defaultCDC, known: make(map[ID]struct{}), scratch: sc}, nil
}

// Scratch reports whether w is a scratch Writer: one whose objects do not
// reach the database, so that nothing may be recorded about them there
// (a stat cache naming them would send the next commit to objects that
// do not exist).
func (w *Writer) Scratch() bool { return w.scratch != nil }

// NoteSource tells a scratch Writer that content id was read from the
// file at path (a workspace's upper file), so that chunks of it dropped
// from memory can be read from there again. Other Writers ignore it.
func (w *Writer) NoteSource(id ID, path string) {
	sc := w.scratch
	if sc == nil || id.IsZero() || path == "" {
		return
	}
	sc.mu.Lock()
	sc.sources[id] = path
	sc.mu.Unlock()
}

// put keeps an object of a scratch Writer; own says p may be kept as it
// is. Past the budget a chunk keeps only its id and size.
func (w *Writer) scratchPut(id ID, kind Kind, p []byte, own bool) error {
	sc := w.scratch
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if _, ok := sc.objs[id]; ok {
		return nil
	}
	o := scratchObj{kind: kind, size: len(p)}
	if kind != KindChunk || sc.kept+int64(len(p)) <= scratchBudget {
		o.p = p
		if !own {
			o.p = append([]byte(nil), p...)
		}
		if o.p == nil {
			o.p = []byte{}
		}
		if kind == KindChunk {
			sc.kept += int64(len(p))
		}
	} else {
		sc.dropped++
	}
	sc.objs[id] = o
	w.newObjects.Add(1)
	w.newBytes.Add(int64(len(p)))
	return nil
}

// scratchRetain answers Retain for a scratch Writer: whether the object
// exists, without claiming it (a lease would be a write).
func (w *Writer) scratchRetain(batch []*retainReq) {
	for _, r := range batch {
		r.ok, r.err = w.s.hasObject(w.ctx, r.id)
		if r.err != nil {
			r.err = fmt.Errorf("retain: %w", r.err)
		}
	}
	w.mu.Lock()
	for _, r := range batch {
		if r.ok {
			w.known[r.id] = struct{}{}
			w.reused.Add(1)
		}
	}
	w.mu.Unlock()
}

// scratchFinish is Finish of a scratch Writer: it cannot commit; Finish
// with no function only drops what it holds. The caller holds op.
func (w *Writer) scratchFinish(fn func(tx *Tx) error) error {
	if w.done {
		return errWriterDone
	}
	if fn != nil {
		return fmt.Errorf("finish %s: a scratch writer keeps its objects in memory and cannot commit: %w", w.purpose, ErrReadOnly)
	}
	w.done = true
	w.scratchRelease()
	return nil
}

// scratchRelease drops a scratch Writer's objects and takes them out of
// the Store's reads.
func (w *Writer) scratchRelease() {
	w.s.scratches.remove(w.scratch)
	sc := w.scratch
	sc.mu.Lock()
	sc.objs, sc.sources, sc.kept = nil, nil, 0
	sc.mu.Unlock()
}

// ScratchStats reports what a scratch Writer holds: objects, chunk bytes
// kept in memory, chunks dropped (to be read again from their files).
func (w *Writer) ScratchStats() (objects int, kept, dropped int64) {
	sc := w.scratch
	if sc == nil {
		return 0, 0, 0
	}
	sc.mu.RLock()
	defer sc.mu.RUnlock()
	return len(sc.objs), sc.kept, sc.dropped
}

// srcFile reads dropped chunks of one content from its source file.
type srcFile struct {
	path string
	once sync.Once
	f    *os.File
	err  error
}

func (s *srcFile) close() {
	if s != nil && s.f != nil {
		s.f.Close()
	}
}

// chunk reads the size bytes at off and checks that they are chunk id.
func (s *srcFile) chunk(id ID, off int64, size int) ([]byte, error) {
	s.once.Do(func() {
		fd, err := syscall.Open(s.path, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0)
		if err != nil {
			s.err = &os.PathError{Op: "open", Path: s.path, Err: err}
			return
		}
		s.f = os.NewFile(uintptr(fd), s.path)
	})
	if s.err != nil {
		return nil, fmt.Errorf("reading a workspace's file again: %w", s.err)
	}
	b := make([]byte, size)
	n, err := s.f.ReadAt(b, off)
	if n == size {
		err = nil
	}
	if err == nil && HashObject(KindChunk, b) != id {
		err = errChanged
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %d bytes at %d: %w (it changed after it was read; run the command again)", s.path, size, off, err)
	}
	return b, nil
}

var errChanged = errors.New("not what was read before")
