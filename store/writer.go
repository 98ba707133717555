package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Batch bounds: a Writer writes its buffered objects in one transaction
// when they reach either. Smaller batches measured slower (8 MiB: a third
// less throughput), larger ones no faster while holding the write lock
// longer and more memory; docs/store.md has the numbers.
const (
	batchMaxBytes   = 32 << 20
	batchMaxObjects = 8192
)

// precheckMin is the payload size from which a Writer asks the database
// whether an object exists before compressing it: for smaller objects the
// query costs more than the compression it may save.
const precheckMin = 8 << 10

// A Writer adds content, trees and finally a commit to the store under a
// lease: everything it writes or retains is a gc root until Finish or
// Abort, or until its process is dead. It buffers objects and writes them
// in transactions of bounded size. Safe for concurrent use.
//
// The lease is taken with the first transaction that needs it (a full
// batch, Flush, Retain): a Writer whose objects all fit in one batch
// writes them in Finish's transaction, where they become reachable at
// once, and so never needs a lease. A small commit thus costs one
// transaction.
//
// An id a Writer returns names an object that is in the store after the
// next Flush or Finish; until then only this Writer may reference it.
type Writer struct {
	s       *Store
	ctx     context.Context
	purpose string
	me      procIdentity // the lease's holder

	// lease is 0 until a transaction needs it. leaseMu is held from the
	// moment a transaction decides to create it until that transaction
	// ended, so that exactly one lease is created.
	leaseMu sync.Mutex
	lease   int64

	// optimistic: Retain claims nothing under the lease (see Optimistic).
	optimistic bool
	assumed    map[ID]struct{} // under mu: ids Retain accepted unchecked
	cdc        cdc             // always defaultCDC outside measurements in tests

	// op is held shared by every operation and exclusively by Flush,
	// Finish and Abort, which so wait for operations in flight.
	op   sync.RWMutex
	done bool // under op (exclusive to set)

	mu    sync.Mutex
	known map[ID]struct{} // written (buffered or stored) or retained under the lease
	// repair holds damaged ids (set before the first write): putting one
	// rewrites its row from the payload, which hashes to it.
	repair   map[ID]struct{}
	repaired []ID
	external map[ID]struct{} // referenced by trees put here and not known when they were
	// runsUnder maps ids a split directory's previous version covers to
	// that version: the runs the new version shares with it
	// (PutTreeLike, PutTreeSplice), and the entries of its runs that
	// PutTreeSplice re-cut without the caller having seen them.
	runsUnder  map[ID]ID
	batch      []pendingObject
	batchBytes int
	err        error // sticky: a failed batch write poisons the Writer

	flushMu sync.Mutex // serializes batch writes

	// Full batches go to a flusher goroutine, so that hashing and
	// compressing go on while SQLite writes. The channel holds one batch:
	// with one being written that bounds the memory to about three.
	flushOnce sync.Once
	flushCh   chan []pendingObject
	flushWG   sync.WaitGroup // batches handed over and not yet written

	rmu     sync.Mutex
	rq      []*retainReq
	rLeader bool

	newObjects, newBytes, reused, contentBytes atomic.Int64

	scratch *scratch // a scratch Writer's objects (scratch.go), or nil
}

type pendingObject struct {
	id    ID
	kind  Kind
	size  int // payload size
	codec int
	data  []byte // stored form
	// full and fullCodec are the stored form without the delta, for a
	// delta-coded record whose base is gone by the time it is inserted.
	full      []byte
	fullCodec int
	// repair: rewrite the row of this id (it is damaged).
	repair bool
}

// NewWriter starts a Writer; its lease is taken with its first transaction
// (see Writer). purpose says what the Writer is for ("import /src",
// "commit ws/a"), for gc and fsck reports.
func (s *Store) NewWriter(ctx context.Context, purpose string) (*Writer, error) {
	if s.full {
		return nil, fmt.Errorf("new writer: %w", s.fullErr())
	}
	if s.ro {
		return nil, fmt.Errorf("new writer: %w", ErrReadOnly)
	}
	me, err := selfProcess()
	if err != nil {
		return nil, err
	}
	return &Writer{s: s, ctx: ctx, purpose: purpose, me: me, cdc: defaultCDC, known: make(map[ID]struct{})}, nil
}

// Optimistic makes Retain and RetainAll accept every id without claiming
// it under the lease: Finish checks, in its transaction, that each still
// exists, and fails with ErrNotFound if gc took one meanwhile. It is for
// callers whose reused objects are reachable from a gc root for the
// Writer's whole life — a commit of a live workspace reuses what its base
// commit holds — and saves the claim's transaction. A caller that gets
// ErrNotFound from Finish retries with a Writer that is not optimistic.
// Call it before any other method.
func (w *Writer) Optimistic() {
	w.mu.Lock()
	w.optimistic = true
	if w.assumed == nil {
		w.assumed = make(map[ID]struct{})
	}
	w.mu.Unlock()
}

// withLease runs fn in a write transaction on the fast pool, with the
// Writer's lease created first in the same transaction if there is none
// yet.
func (w *Writer) withLease(fn func(tx *Tx, lease int64) error) error {
	fast, err := w.s.fastDB()
	if err != nil {
		return err
	}
	w.leaseMu.Lock()
	if lease := w.lease; lease != 0 {
		w.leaseMu.Unlock()
		return w.s.update(w.ctx, fast, func(tx *Tx) error { return fn(tx, lease) })
	}
	defer w.leaseMu.Unlock()
	var id int64
	err = w.s.update(w.ctx, fast, func(tx *Tx) error {
		me := w.me
		r, err := tx.exec(`INSERT INTO leases (pid, start_ticks, boot_id, pid_ns, hostname, created_ns, purpose)
			VALUES (?, ?, ?, ?, ?, ?, ?)`, me.pid, me.startTicks, me.bootID, me.pidNS, me.hostname, time.Now().UnixNano(), w.purpose)
		if err != nil {
			return fmt.Errorf("take lease: %w", err)
		}
		if id, err = r.LastInsertId(); err != nil {
			return mapErr(err)
		}
		return fn(tx, id)
	})
	if err != nil {
		return err
	}
	w.lease = id
	return nil
}

// Stats returns what the Writer did so far.
func (w *Writer) Stats() WriterStats {
	return WriterStats{
		NewObjects:    w.newObjects.Load(),
		NewBytes:      w.newBytes.Load(),
		ReusedObjects: w.reused.Load(),
		ContentBytes:  w.contentBytes.Load(),
	}
}

var errWriterDone = errors.New("writer already finished or aborted")

func (w *Writer) begin() error {
	w.op.RLock()
	if w.done {
		w.op.RUnlock()
		return errWriterDone
	}
	return nil
}

func (w *Writer) end() { w.op.RUnlock() }

// put buffers an object and returns its id. own says the Writer may keep
// p; otherwise p is copied when it must be kept.
func (w *Writer) put(kind Kind, p []byte, own bool) (ID, error) {
	return w.putLike(kind, p, own, ZeroID)
}

// putLike is put that may store a chunk as a delta against the chunk
// base (a previous version of it).
func (w *Writer) putLike(kind Kind, p []byte, own bool, base ID) (ID, error) {
	if len(p) > maxObjectSize {
		return ZeroID, fmt.Errorf("put %v of %d bytes: over the %d limit", kind, len(p), maxObjectSize)
	}
	id := HashObject(kind, p)
	w.mu.Lock()
	if w.err != nil {
		err := w.err
		w.mu.Unlock()
		return ZeroID, err
	}
	if _, ok := w.known[id]; ok {
		w.mu.Unlock()
		w.reused.Add(1)
		return id, nil
	}
	w.known[id] = struct{}{}
	_, repair := w.repair[id]
	w.mu.Unlock()
	if w.scratch != nil {
		return id, w.scratchPut(id, kind, p, own)
	}
	if repair {
		// A damaged object: its payload is here again; store it whole.
		rec := pendingObject{id: id, kind: kind, size: len(p), repair: true}
		rec.codec, rec.data = compress(p)
		if rec.codec == codecNone && !own {
			rec.data = bytes.Clone(p)
		}
		return id, w.enqueue(rec)
	}

	rec := pendingObject{id: id, kind: kind, size: len(p), codec: codecNone}
	exists := false
	if len(p) >= precheckMin {
		var err error
		if exists, err = w.s.hasObject(w.ctx, id); err != nil {
			return ZeroID, w.fail(err)
		}
	}
	if !exists {
		if kind == KindChunk && !base.IsZero() && base != id {
			rec.codec, rec.data, rec.fullCodec, rec.full = w.storeLike(p, base)
			if rec.codec == codecDelta && rec.fullCodec == codecNone && !own {
				rec.full = bytes.Clone(p)
			}
		} else {
			rec.codec, rec.data = compress(p)
		}
	}
	if rec.codec == codecNone {
		// Kept raw: a new object that did not compress, or one that exists
		// and is only to be recorded under the lease; its bytes stay in
		// the batch in case a concurrent gc removes it before then.
		rec.data = p
		if !own {
			rec.data = bytes.Clone(p)
		}
	}
	return id, w.enqueue(rec)
}

func (w *Writer) fail(err error) error {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
	return err
}

func (w *Writer) enqueue(rec pendingObject) error {
	w.mu.Lock()
	w.batch = append(w.batch, rec)
	w.batchBytes += len(rec.data)
	var out []pendingObject
	if w.batchBytes >= batchMaxBytes || len(w.batch) >= batchMaxObjects {
		out, w.batch, w.batchBytes = w.batch, nil, 0
	}
	w.mu.Unlock()
	if out == nil {
		return nil
	}
	w.flushOnce.Do(func() {
		w.flushCh = make(chan []pendingObject, 1)
		go func() {
			for b := range w.flushCh {
				w.writeBatch(b) // a failure is sticky in w.err
				w.flushWG.Done()
			}
		}()
	})
	w.flushWG.Add(1)
	w.flushCh <- out
	w.mu.Lock()
	err := w.err
	w.mu.Unlock()
	return err
}

// drain waits for the batches handed to the flusher and returns the
// Writer's sticky error. The caller holds op exclusively.
func (w *Writer) drain() error {
	w.flushWG.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// stopFlusher ends the flusher goroutine once the Writer is done.
func (w *Writer) stopFlusher() {
	w.flushOnce.Do(func() {})
	if w.flushCh != nil {
		close(w.flushCh)
	}
}

// writeBatch stores a batch in a transaction of its own on the fast
// (synchronous=NORMAL) pool: it needs no durability before Finish.
func (w *Writer) writeBatch(batch []pendingObject) error {
	w.flushMu.Lock()
	defer w.flushMu.Unlock()
	var st WriterStats
	err := w.withLease(func(tx *Tx, lease int64) error {
		st = WriterStats{}
		return w.insertBatch(tx, batch, &st, lease)
	})
	if err != nil {
		return w.fail(fmt.Errorf("write objects: %w", err))
	}
	w.newObjects.Add(st.NewObjects)
	w.newBytes.Add(st.NewBytes)
	w.reused.Add(st.ReusedObjects)
	if len(st.Repaired) > 0 {
		w.mu.Lock()
		w.repaired = append(w.repaired, st.Repaired...)
		w.mu.Unlock()
	}
	return nil
}

// Repair makes the Writer rewrite the objects ids, damaged in the store,
// when content that hashes to them is written again (as an import of a
// directory that still holds it does): their rows are replaced, missing
// ones inserted. Call it before writing anything.
func (w *Writer) Repair(ids []ID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.repair = make(map[ID]struct{}, len(ids))
	for _, id := range ids {
		w.repair[id] = struct{}{}
	}
}

// Repaired returns the damaged objects rewritten so far (after Flush).
func (w *Writer) Repaired() []ID {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]ID(nil), w.repaired...)
}

const (
	qInsertObjectIfNew = `INSERT INTO objects (id, kind, codec, size, data) VALUES (?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`
	qLeaseObject       = `INSERT OR IGNORE INTO lease_objects (lease_id, oid) VALUES (?, ?)`
	qLeaseExists       = `SELECT 1 FROM leases WHERE id = ?`
)

// insertBatch stores the objects of a batch that do not exist yet and
// records every one of them under lease, in tx. An object that exists is
// not rewritten; recording it under the lease in the same transaction in
// which its existence is checked is what keeps a concurrent gc from
// deleting it. lease 0 records nothing: Finish's transaction, which makes
// the objects reachable itself.
func (w *Writer) insertBatch(tx *Tx, batch []pendingObject, st *WriterStats, lease int64) error {
	for i := range batch {
		p := &batch[i]
		data, codec := p.data, p.codec
		var baseOID int64
		if codec == codecDelta {
			// The base must exist in this transaction, and stays alive
			// under the lease with the delta; if gc took it meanwhile,
			// the chunk is stored whole.
			oid, ok, err := baseExists(tx, data)
			if err != nil {
				return fmt.Errorf("look up delta base of %s: %w", p.id.Short(), err)
			}
			if ok {
				baseOID = oid
			} else {
				data, codec = p.full, p.fullCodec
			}
		}
		if data == nil {
			data = []byte{}
		}
		if p.repair {
			r, err := tx.exec(`UPDATE objects SET kind = ?, codec = ?, size = ?, data = ? WHERE id = ?`, int64(p.kind), codec, p.size, data, p.id[:])
			if err != nil {
				return fmt.Errorf("repair %v %s: %w", p.kind, p.id.Short(), err)
			}
			if n, _ := r.RowsAffected(); n == 1 {
				st.Repaired = append(st.Repaired, p.id)
			}
		}
		r, err := tx.exec(qInsertObjectIfNew, p.id[:], int64(p.kind), codec, p.size, data)
		if err != nil {
			return fmt.Errorf("store %v %s: %w", p.kind, p.id.Short(), err)
		}
		var oid int64
		if n, _ := r.RowsAffected(); n == 1 {
			if oid, err = r.LastInsertId(); err != nil {
				return mapErr(err)
			}
			st.NewObjects++
			st.NewBytes += int64(len(data))
			if p.repair { // it was missing
				st.Repaired = append(st.Repaired, p.id)
			}
		} else {
			if err := tx.queryRow(qObjectOID, p.id[:]).Scan(&oid); err != nil {
				return fmt.Errorf("look up object %s: %w", p.id.Short(), mapErr(err))
			}
			st.ReusedObjects++
		}
		if lease == 0 {
			continue
		}
		if baseOID != 0 {
			if _, err := tx.exec(qLeaseObject, lease, baseOID); err != nil {
				return fmt.Errorf("record delta base of %s under lease: %w", p.id.Short(), err)
			}
		}
		if _, err := tx.exec(qLeaseObject, lease, oid); err != nil {
			if isCode(err, sqliteConstraint) {
				return fmt.Errorf("writer lease %d (%s) is gone: gc judged it stale", lease, w.purpose)
			}
			return fmt.Errorf("record object %s under lease: %w", p.id.Short(), err)
		}
	}
	return nil
}

// Flush writes the buffered objects, after waiting for operations in
// flight on other goroutines.
func (w *Writer) Flush() error {
	w.op.Lock()
	defer w.op.Unlock()
	if w.done {
		return errWriterDone
	}
	if err := w.drain(); err != nil {
		return err
	}
	w.mu.Lock()
	batch := w.batch
	w.batch, w.batchBytes = nil, 0
	w.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	return w.writeBatch(batch)
}

// Finish writes the buffered objects, runs fn (typically PutCommit, SetRef
// and AppendOp) and drops the lease, all in one durable transaction: the
// objects become reachable in the same instant as they stop being leased.
// If Finish fails (fn's error, a lost CAS), nothing of the final
// transaction happened and the Writer stays open: call Finish again or
// Abort. fn may be nil; it must not call Update or this Writer's methods.
// Objects of this Writer that fn leaves unreachable are garbage afterwards.
func (w *Writer) Finish(fn func(tx *Tx) error) error {
	w.op.Lock()
	defer w.op.Unlock()
	if w.scratch != nil {
		return w.scratchFinish(fn)
	}
	if w.done {
		return errWriterDone
	}
	if err := w.drain(); err != nil {
		return err
	}
	w.mu.Lock()
	batch := w.batch
	w.batch, w.batchBytes = nil, 0
	w.mu.Unlock()
	w.flushMu.Lock()
	defer w.flushMu.Unlock()
	var st WriterStats
	w.leaseMu.Lock()
	lease := w.lease
	w.leaseMu.Unlock()
	err := w.s.update(w.ctx, w.s.db, func(tx *Tx) error {
		st = WriterStats{}
		if lease != 0 {
			var one int
			if err := tx.queryRow(qLeaseExists, lease).Scan(&one); err != nil {
				return fmt.Errorf("writer lease %d (%s) is gone, so gc may have taken its objects: %w", lease, w.purpose, mapErr(err))
			}
		}
		if err := w.insertBatch(tx, batch, &st, 0); err != nil {
			return err
		}
		if err := w.checkExternal(tx); err != nil {
			return err
		}
		if fn != nil {
			if err := fn(tx); err != nil {
				return err
			}
		}
		if lease == 0 {
			return nil
		}
		if _, err := tx.exec(`DELETE FROM leases WHERE id = ?`, lease); err != nil {
			return fmt.Errorf("drop lease: %w", err)
		}
		return nil
	})
	if err != nil {
		w.mu.Lock()
		w.batch = append(batch, w.batch...)
		for _, p := range batch {
			w.batchBytes += len(p.data)
		}
		w.mu.Unlock()
		return err
	}
	w.newObjects.Add(st.NewObjects)
	w.newBytes.Add(st.NewBytes)
	w.reused.Add(st.ReusedObjects)
	w.done = true
	w.stopFlusher()
	return nil
}

// checkExternal checks, in the final transaction, that the objects trees
// of this Writer reference without having written or retained them still
// exist. gc keeps every existing object's descendants until the object
// itself is gone (see gc.go), so existing here means a complete subtree,
// which the commit made in the same transaction then keeps.
func (w *Writer) checkExternal(tx *Tx) error {
	for id := range w.external {
		if _, ok := w.known[id]; ok {
			continue
		}
		if _, ok := w.assumed[id]; ok {
			continue // checked below
		}
		if under, ok := w.runsUnder[id]; ok {
			// Under a directory's previous version (one of its runs,
			// or an entry of one): present while that directory is,
			// which is known or checked below.
			_, known := w.known[under]
			_, assumed := w.assumed[under]
			if known || assumed {
				continue
			}
		}
		ok, err := tx.Has(id)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("a tree references object %s, which is not in the store (gc took it; Retain what you reuse): %w", id.Short(), ErrNotFound)
		}
	}
	for id := range w.assumed {
		if _, ok := w.known[id]; ok {
			continue
		}
		ok, err := tx.Has(id)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("object %s, reused without a claim (optimistic writer), is no longer in the store: %w", id.Short(), ErrNotFound)
		}
	}
	return nil
}

// Abort drops the lease; what the Writer wrote becomes garbage for the
// next gc. Aborting a finished Writer does nothing, so `defer w.Abort()`
// is the idiom.
func (w *Writer) Abort() error {
	w.op.Lock()
	defer w.op.Unlock()
	if w.done {
		return nil
	}
	w.done = true
	w.drain()
	w.stopFlusher()
	w.mu.Lock()
	w.batch, w.known, w.external, w.runsUnder = nil, nil, nil, nil
	w.mu.Unlock()
	if w.scratch != nil {
		w.scratchRelease()
	}
	w.leaseMu.Lock()
	lease := w.lease
	w.leaseMu.Unlock()
	if lease == 0 {
		return nil // nothing was written
	}
	fast, err := w.s.fastDB()
	if err != nil {
		return err
	}
	// The caller's context may be what ended the work; dropping the lease
	// must still happen.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(w.ctx), w.s.busy+10*time.Second)
	defer cancel()
	err = w.s.update(ctx, fast, func(tx *Tx) error {
		_, err := tx.exec(`DELETE FROM leases WHERE id = ?`, lease)
		return err
	})
	if err != nil {
		return fmt.Errorf("abort writer: drop lease: %w", err)
	}
	return nil
}

// --- retain ------------------------------------------------------------------

type retainReq struct {
	id   ID
	ok   bool
	err  error
	done chan struct{}
}

// Retain protects an existing object (and everything it references) under
// the lease, as if the Writer had written it, and reports whether it
// exists. When it returns false the caller must write the object's
// content itself (re-read the file). ZeroID is always retained.
//
// Retain writes to the database before it returns, since gc must see the
// claim before the caller relies on the object. Concurrent calls share
// one transaction.
func (w *Writer) Retain(id ID) (bool, error) {
	if id.IsZero() {
		return true, nil
	}
	if err := w.begin(); err != nil {
		return false, err
	}
	defer w.end()
	w.mu.Lock()
	_, ok := w.known[id]
	err := w.err
	if err == nil && !ok && w.optimistic {
		w.assumed[id] = struct{}{}
		ok = true
	}
	w.mu.Unlock()
	if err != nil {
		return false, err
	}
	if ok {
		return true, nil
	}

	req := &retainReq{id: id, done: make(chan struct{})}
	w.rmu.Lock()
	w.rq = append(w.rq, req)
	if w.rLeader {
		w.rmu.Unlock()
		<-req.done
		return req.ok, req.err
	}
	w.rLeader = true
	w.rmu.Unlock()
	// Leader: run batches until no request is waiting. Requests that
	// arrive while a batch runs form the next batch.
	for {
		w.rmu.Lock()
		batch := w.rq
		w.rq = nil
		if len(batch) == 0 {
			w.rLeader = false
			w.rmu.Unlock()
			break
		}
		w.rmu.Unlock()
		w.retainBatch(batch)
	}
	return req.ok, req.err
}

// RetainAll is Retain for many ids in one transaction; ok[i] says
// whether ids[i] exists. Callers that know many ids at once (the stat
// cache hits of an import) save a transaction per id.
func (w *Writer) RetainAll(ids []ID) (ok []bool, err error) {
	if err := w.begin(); err != nil {
		return nil, err
	}
	defer w.end()
	ok = make([]bool, len(ids))
	var reqs []*retainReq
	var idx []int
	w.mu.Lock()
	err = w.err
	for i, id := range ids {
		if _, known := w.known[id]; known || id.IsZero() {
			ok[i] = true
			continue
		}
		if w.optimistic {
			w.assumed[id] = struct{}{}
			ok[i] = true
			continue
		}
		reqs = append(reqs, &retainReq{id: id, done: make(chan struct{})})
		idx = append(idx, i)
	}
	w.mu.Unlock()
	if err != nil {
		return nil, err
	}
	for len(reqs) > 0 {
		n := min(len(reqs), batchMaxObjects)
		w.retainBatch(reqs[:n])
		for j, r := range reqs[:n] {
			if r.err != nil {
				return nil, r.err
			}
			ok[idx[j]] = r.ok
		}
		reqs, idx = reqs[n:], idx[n:]
	}
	return ok, nil
}

func (w *Writer) retainBatch(batch []*retainReq) {
	defer func() {
		for _, r := range batch {
			close(r.done)
		}
	}()
	if w.scratch != nil {
		w.scratchRetain(batch)
		return
	}
	err := w.withLease(func(tx *Tx, lease int64) error {
		for _, r := range batch {
			var oid int64
			err := tx.queryRow(qObjectOID, r.id[:]).Scan(&oid)
			if err != nil {
				r.ok = false
				if isNoRows(err) {
					continue
				}
				return fmt.Errorf("look up object %s: %w", r.id.Short(), mapErr(err))
			}
			if _, err := tx.exec(qLeaseObject, lease, oid); err != nil {
				if isCode(err, sqliteConstraint) {
					return fmt.Errorf("writer lease %d (%s) is gone: gc judged it stale", lease, w.purpose)
				}
				return fmt.Errorf("retain object %s: %w", r.id.Short(), err)
			}
			r.ok = true
		}
		return nil
	})
	if err != nil {
		for _, r := range batch {
			r.ok, r.err = false, fmt.Errorf("retain: %w", err)
		}
		return
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

// --- content -----------------------------------------------------------------

// PutTree encodes and buffers a directory (a tree, or the run index and
// runs of a large one: treeindex.go). Its entries' content should have been
// written or retained by this Writer: anything else it references must
// still be in the store when Finish runs, which checks and fails with
// ErrNotFound otherwise.
func (w *Writer) PutTree(t *Tree) (ID, error) { return w.PutTreeLike(t, ZeroID) }

// PutTreeLike is PutTree for a new version of the directory prev (ZeroID:
// none). When both are split (prev as either form of index), the runs the
// new version shares with prev are neither stored nor checked again: prev references them, so when
// prev is retained or reused by this Writer (as the directory a commit
// rewrites is), it covers them as RetainedUnder's parent covers its ids.
// A one-entry change of a 4,000-entry directory then stores one run and
// the index.
func (w *Writer) PutTreeLike(t *Tree, prev ID) (ID, error) {
	if err := w.begin(); err != nil {
		return ZeroID, err
	}
	defer w.end()
	et, err := encodeDirectory(t)
	if err != nil {
		return ZeroID, fmt.Errorf("put tree: %w", err)
	}
	w.referEntries(t.Entries, ZeroID)
	if et.index == nil {
		return w.put(KindTree, et.tree, true)
	}
	return w.putRunIndex(et.info, et.runs, et.index, prev, w.runsOf(prev))
}

// putRunIndex buffers a run index and the runs it names whose payloads
// are given, except those prev shares: a run with no payload (kept from
// prev) or in shared (prev's runs) is not stored again but covered by
// prev (addExternal under prev).
func (w *Writer) putRunIndex(runs []TreeRun, payloads [][]byte, index []byte, prev ID, shared map[ID]bool) (ID, error) {
	for i, r := range runs {
		if payloads[i] == nil || shared[r.Tree] {
			w.referIDs([]ID{r.Tree}, prev)
			continue
		}
		if _, err := w.put(KindTree, payloads[i], true); err != nil {
			return ZeroID, err
		}
	}
	return w.put(KindRunIndex, index, true)
}

// referEntries records the contents entries reference, as referIDs does.
func (w *Writer) referEntries(entries []TreeEntry, under ID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range entries {
		if c := entries[i].Content; !c.IsZero() {
			if _, ok := w.known[c]; !ok {
				w.addExternal(c, under)
			}
		}
	}
}

// referIDs records ids as referenced by what this Writer puts: those it
// did not write or retain are checked at Finish (addExternal; under, when
// not zero, is a directory that covers them).
func (w *Writer) referIDs(ids []ID, under ID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range ids {
		if _, ok := w.known[id]; !ok && !id.IsZero() {
			w.addExternal(id, under)
		}
	}
}

// addExternal records id as referenced and not written by this Writer,
// for Finish to check; under, when not zero, is a directory that
// references it (checkExternal). w.mu must be held.
func (w *Writer) addExternal(id, under ID) {
	if w.external == nil {
		w.external = make(map[ID]struct{})
	}
	w.external[id] = struct{}{}
	if !under.IsZero() {
		if w.runsUnder == nil {
			w.runsUnder = make(map[ID]ID)
		}
		w.runsUnder[id] = under
	}
}

// runsOf returns the runs of the split directory id (either form of
// index), or nil when it is not one (or cannot be read: its runs are
// then stored as new).
func (w *Writer) runsOf(id ID) map[ID]bool {
	if id.IsZero() {
		return nil
	}
	k, p, err := w.s.getObject(w.ctx, id)
	if err != nil || !isIndex(k) {
		return nil
	}
	ix, err := decodeIndex(k, p)
	if err != nil {
		return nil
	}
	m := make(map[ID]bool, len(ix.runs))
	for _, r := range ix.runs {
		m[r.Tree] = true
	}
	return m
}

// WriteBytes stores the content of a file already in memory and returns
// its content id: ZeroID for empty content, the chunk for content up to
// SmallFileMax, the root FileNode for larger content (the same id that
// WriteContent returns for the same bytes).
func (w *Writer) WriteBytes(b []byte) (ID, error) {
	if len(b) > SmallFileMax {
		id, _, err := w.WriteContent(bytes.NewReader(b))
		return id, err
	}
	if err := w.begin(); err != nil {
		return ZeroID, err
	}
	defer w.end()
	w.contentBytes.Add(int64(len(b)))
	if len(b) == 0 {
		return ZeroID, nil
	}
	return w.put(KindChunk, b, false)
}

// WriteBytesLike is WriteBytes for a new version of the content prev
// (ZeroID: none): the chunk may be stored as a delta against prev's.
func (w *Writer) WriteBytesLike(b []byte, prev ID) (ID, error) {
	if !deltasOn {
		prev = ZeroID
	}
	if len(b) > SmallFileMax || prev.IsZero() {
		if len(b) > SmallFileMax {
			id, _, err := w.WriteContentLike(bytes.NewReader(b), prev)
			return id, err
		}
		return w.WriteBytes(b)
	}
	if err := w.begin(); err != nil {
		return ZeroID, err
	}
	defer w.end()
	w.contentBytes.Add(int64(len(b)))
	if len(b) == 0 {
		return ZeroID, nil
	}
	return w.putLike(KindChunk, b, false, prev)
}

// WriteContentLike is WriteContent for a new version of the content prev
// (ZeroID: none): each new chunk may be stored as a delta against the
// chunk of prev at the same offset.
func (w *Writer) WriteContentLike(r io.Reader, prev ID) (ID, int64, error) {
	if prev.IsZero() || !deltasOn {
		return w.WriteContent(r)
	}
	if err := w.begin(); err != nil {
		return ZeroID, 0, err
	}
	defer w.end()
	bp := smallBufPool.Get().(*[]byte)
	defer smallBufPool.Put(bp)
	buf := *bp
	n, err := io.ReadFull(r, buf)
	switch {
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		w.contentBytes.Add(int64(n))
		if n == 0 {
			return ZeroID, 0, nil
		}
		id, err := w.putLike(KindChunk, buf[:n], false, baseAt(w.s.chunkMap(w.ctx, prev), 0))
		return id, int64(n), err
	case err != nil:
		return ZeroID, 0, fmt.Errorf("read content: %w", err)
	}
	m := w.s.chunkMap(w.ctx, prev)
	r = io.MultiReader(bytes.NewReader(buf[:n]), r)
	return w.buildContentLike(func(emit func(chunk []byte, hole int64) bool) (int64, error) {
		return w.cutAll(r, w.cdc, func(chunk []byte) bool { return emit(chunk, 0) })
	}, m)
}

var smallBufPool = sync.Pool{New: func() any { b := make([]byte, SmallFileMax+1); return &b }}

// WriteContent reads r to the end and stores it as file content: whole
// as one chunk up to SmallFileMax, else cut by FastCDC into chunks under
// a tree of FileNodes. Chunks are hashed and compressed on all CPUs. It
// returns the content id and the number of bytes read.
func (w *Writer) WriteContent(r io.Reader) (ID, int64, error) {
	if err := w.begin(); err != nil {
		return ZeroID, 0, err
	}
	defer w.end()
	bp := smallBufPool.Get().(*[]byte)
	defer smallBufPool.Put(bp)
	buf := *bp
	n, err := io.ReadFull(r, buf)
	switch {
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		w.contentBytes.Add(int64(n))
		if n == 0 {
			return ZeroID, 0, nil
		}
		id, err := w.put(KindChunk, buf[:n], false)
		return id, int64(n), err
	case err != nil:
		return ZeroID, 0, fmt.Errorf("read content: %w", err)
	}
	return w.writeLarge(io.MultiReader(bytes.NewReader(buf[:n]), r))
}

// contentWorkers overrides the number of workers of writeLarge when
// positive; for measurements.
var contentWorkers = 0

// chunkJob is one chunk on its way through the workers of writeLarge.
type chunkJob struct {
	data []byte
	hole int64 // a hole of this many bytes instead of data
	base ID    // a previous version's chunk to delta against, or ZeroID
	id   ID
	err  error
	done chan struct{}
}

// writeLarge cuts r into chunks on the calling goroutine, hashes and
// compresses them on up to GOMAXPROCS workers, and feeds their ids in
// order to a fileBuilder.
func (w *Writer) writeLarge(r io.Reader) (ID, int64, error) {
	return w.buildContent(func(emit func(chunk []byte, hole int64) bool) (int64, error) {
		return w.cutAll(r, w.cdc, func(chunk []byte) bool { return emit(chunk, 0) })
	})
}

// buildContent runs produce on the calling goroutine; produce calls emit
// with each chunk (or, with a nil chunk, each hole of that many bytes) in
// order and returns the number of bytes it read. Chunks are hashed and
// compressed on up to GOMAXPROCS workers and their ids fed in order to a
// fileBuilder.
func (w *Writer) buildContent(produce func(emit func(chunk []byte, hole int64) bool) (int64, error)) (ID, int64, error) {
	return w.buildContentLike(produce, nil)
}

// buildContentLike is buildContent whose chunks may be deltas against the
// chunks of prev (a previous version's chunk map) at the same offsets.
func (w *Writer) buildContentLike(produce func(emit func(chunk []byte, hole int64) bool) (int64, error), prev []chunkAt) (ID, int64, error) {
	workers := runtime.GOMAXPROCS(0)
	if contentWorkers > 0 {
		workers = contentWorkers
	}
	jobs := make(chan *chunkJob, workers)
	order := make(chan *chunkJob, 2*workers+2)
	var failed atomic.Bool
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				if !failed.Load() {
					j.id, j.err = w.putLike(KindChunk, j.data, true, j.base)
					if j.err != nil {
						failed.Store(true)
					}
				}
				close(j.done)
			}
		}()
	}
	type built struct {
		id  ID
		err error
	}
	res := make(chan built, 1)
	go func() {
		b := fileBuilder{w: w}
		var err error
		for j := range order {
			<-j.done
			if err == nil {
				err = j.err
			}
			if err == nil && j.err == nil && !failed.Load() {
				if j.hole > 0 {
					err = b.add(0, ChunkRef{Size: j.hole})
				} else {
					err = b.add(0, ChunkRef{ID: j.id, Size: int64(len(j.data))})
				}
			}
		}
		var id ID
		if err == nil && !failed.Load() {
			id, err = b.finish()
		}
		res <- built{id, err}
	}()

	var off int64
	total, rerr := produce(func(chunk []byte, hole int64) bool {
		j := &chunkJob{data: chunk, hole: hole, done: make(chan struct{})}
		if prev != nil && hole == 0 {
			j.base = baseAt(prev, off)
		}
		off += int64(len(chunk)) + hole
		order <- j
		if hole > 0 {
			close(j.done)
		} else {
			jobs <- j
		}
		return !failed.Load()
	})
	close(jobs)
	close(order)
	wg.Wait()
	out := <-res
	w.contentBytes.Add(total)
	if rerr != nil {
		return ZeroID, total, fmt.Errorf("read content: %w", rerr)
	}
	if out.err != nil {
		return ZeroID, total, out.err
	}
	return out.id, total, nil
}

// Extent is a region of a file: Len bytes from Off.
type Extent struct {
	Off, Len int64
}

// WriteSparse stores the size bytes of r as file content whose data lies
// only in the extents data (sorted, disjoint, within size): everything
// else is a hole, stored as a hole ref of a level-0 file node instead of
// chunks of zeros, and FastCDC cuts each data extent on its own; a chunk
// of a data extent that is all zeros is stored as a hole too (filesystems
// allocate in blocks, overlayfs copies up in 1 MiB pieces). The
// content is always a FileNode tree, so its id differs from that of the
// same bytes stored dense. It returns the content id and the number of
// bytes it covers.
func (w *Writer) WriteSparse(r io.ReaderAt, size int64, data []Extent) (ID, int64, error) {
	var pos int64
	for _, e := range data {
		if e.Off < pos || e.Len <= 0 || e.Off+e.Len > size {
			return ZeroID, 0, fmt.Errorf("write sparse: extent [%d,+%d) out of order or outside %d bytes", e.Off, e.Len, size)
		}
		pos = e.Off + e.Len
	}
	if size == 0 {
		return ZeroID, 0, nil
	}
	if err := w.begin(); err != nil {
		return ZeroID, 0, err
	}
	defer w.end()
	id, n, err := w.buildContent(func(emit func(chunk []byte, hole int64) bool) (int64, error) {
		var pos, read int64
		for _, e := range data {
			if e.Off > pos && !emit(nil, e.Off-pos) {
				return read, nil
			}
			m, err := w.cutAll(io.NewSectionReader(r, e.Off, e.Len), w.cdc, func(chunk []byte) bool {
				if allZero(chunk) { // a zero run the filesystem allocated anyway
					return emit(nil, int64(len(chunk)))
				}
				return emit(chunk, 0)
			})
			read += m
			if err != nil {
				return read, err
			}
			if m != e.Len {
				return read, fmt.Errorf("data extent [%d,+%d): read %d bytes: %w", e.Off, e.Len, m, io.ErrUnexpectedEOF)
			}
			pos = e.Off + e.Len
		}
		if size > pos {
			emit(nil, size-pos)
		}
		return read, nil
	})
	if err != nil {
		return ZeroID, 0, err
	}
	_ = n
	return id, size, nil
}

// cutAll reads r to the end and calls emit with each chunk in order, in a
// slice of its own. It stops early when emit returns false.
func (w *Writer) cutAll(r io.Reader, c cdc, emit func([]byte) bool) (int64, error) {
	buf := make([]byte, 4*c.max)
	var total int64
	have := 0
	eof := false
	for {
		for !eof && have < len(buf) {
			n, err := r.Read(buf[have:])
			have += n
			total += int64(n)
			if err == io.EOF {
				eof = true
			} else if err != nil {
				return total, err
			}
		}
		start := 0
		for have-start >= c.max || (eof && have > start) {
			n := c.cut(buf[start:have])
			if !emit(bytes.Clone(buf[start : start+n])) {
				return total, nil
			}
			start += n
		}
		if eof {
			return total, nil
		}
		have = copy(buf, buf[start:have])
	}
}

// Content-defined tree of FileNodes. A node ends after a ref whose id
// meets nodeBoundary (1 in 128: an average fan-out of 128 refs, ~4.5 KiB
// nodes) once it has minNodeRefs refs, or at MaxFileNodeRefs. Since
// boundaries depend only on the ids, an edit rewrites only the nodes on
// the path from the changed chunks to the root, not the whole list.
const minNodeRefs = 2

func nodeBoundary(id ID) bool { return id[31]&0x7f == 0 }

type fileBuilder struct {
	w      *Writer
	levels [][]ChunkRef
}

func (b *fileBuilder) add(level int, ref ChunkRef) error {
	if level == len(b.levels) {
		b.levels = append(b.levels, nil)
	}
	b.levels[level] = append(b.levels[level], ref)
	n := len(b.levels[level])
	if n >= MaxFileNodeRefs || (n >= minNodeRefs && nodeBoundary(ref.ID)) {
		return b.emit(level)
	}
	return nil
}

func (b *fileBuilder) emit(level int) error {
	node := FileNode{Level: uint8(level), Refs: b.levels[level]}
	p, err := EncodeFileNode(&node)
	if err != nil {
		return fmt.Errorf("encode file node: %w", err)
	}
	id, err := b.w.put(KindFile, p, true)
	if err != nil {
		return err
	}
	b.levels[level] = nil
	return b.add(level+1, ChunkRef{ID: id, Size: node.Size()})
}

// finish closes the open node of every level and returns the root: the
// single ref left at the top level, or the level-0 node if there is only
// one (the root of a file is always a FileNode).
func (b *fileBuilder) finish() (ID, error) {
	for l := 0; l < len(b.levels); l++ {
		refs := b.levels[l]
		if l > 0 && l == len(b.levels)-1 && len(refs) == 1 {
			return refs[0].ID, nil
		}
		if len(refs) > 0 {
			if err := b.emit(l); err != nil {
				return ZeroID, err
			}
		}
	}
	return ZeroID, errors.New("file builder: no chunks")
}

// allZero reports whether b holds only zero bytes.
func allZero(b []byte) bool {
	for len(b) >= 8 {
		if binary.LittleEndian.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
