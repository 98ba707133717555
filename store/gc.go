package store

// Garbage collection: mark and sweep, safe while other processes import
// and commit.
//
//  1. Mark, in a read snapshot: walk from the roots — branches, workspace
//     bases, the objects of live leases, and the commits the operation log
//     names within the Prune window — and list every object the walk did
//     not reach as a candidate. This is the long part and holds no lock.
//  2. Sweep, in IMMEDIATE transactions of bounded length: drop stale
//     leases, re-read the roots, walk from any root not yet marked
//     (stopping at marked objects, whose subtrees are marked already), and
//     delete the candidates that are still unmarked, parents before
//     children.
//
// Why that is enough: objects are immutable, so an object reachable from
// a marked object was marked with it. Only gc deletes objects. A root
// that appears after the snapshot is walked in step 2 under the write
// lock, so nothing it reaches is deleted; objects inserted after the
// snapshot are never candidates. A Writer records what it writes or
// reuses under its lease in the same transaction that checks the object
// exists, so a lease root cannot name an object deleted before the claim.
// Deleting parents first keeps "an object that exists has all its
// descendants" true between sweep transactions, so such a claim, or a
// commit referencing an object that exists, covers a complete subtree.
//
// Disk: the database is created with auto_vacuum=INCREMENTAL. After a
// sweep that leaves much of the file free, gc runs incremental_vacuum to
// return the free pages to the filesystem, and truncates the WAL, so an
// unattended loop of import, run and gc does not grow without bound.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// sweepSlice bounds how long one sweep transaction holds the write lock.
const sweepSlice = 250 * time.Millisecond

type candidate struct {
	rowid int64
	id    ID
	kind  Kind
	codec int64
	bytes int64
}

// GC removes every object that no root reaches. See the comment at the
// top of gc.go for the roots and why it is safe to run concurrently with
// Writers and other gc runs.
func (s *Store) GC(ctx context.Context, opts GCOptions) (*GCResult, error) {
	if s.full {
		return nil, fmt.Errorf("gc: %w", s.fullErr())
	}
	if s.ro {
		return nil, fmt.Errorf("gc: %w", ErrReadOnly)
	}
	me, err := selfProcess()
	if err != nil {
		return nil, fmt.Errorf("gc: %w", err)
	}
	unlock, err := s.lockFile(ctx, "gc.lock")
	if err != nil {
		return nil, fmt.Errorf("gc: %w", err)
	}
	defer unlock()

	progress := opts.Progress
	if progress == nil {
		progress = func(string, int64, int64) {}
	}
	res := &GCResult{DryRun: opts.DryRun}
	now := time.Now()
	m := &marker{marked: make(map[ID]struct{}), progress: progress}

	// 1. Mark in a snapshot; list candidates.
	var cands []candidate
	err = s.View(ctx, func(tx *Tx) error {
		if err := tx.queryRow(`SELECT count(*) FROM objects`).Scan(&m.total); err != nil {
			return mapErr(err)
		}
		roots, stale, err := tx.gcRoots(now, opts.Prune, me)
		if err != nil {
			return err
		}
		res.StaleLeases = int64(len(stale))
		for _, r := range roots {
			if err := m.walk(tx, r); err != nil {
				return err
			}
		}
		progress("mark", int64(len(m.marked)), m.total)
		if err := m.markDeltaBases(tx); err != nil {
			return err
		}
		rows, err := tx.query(`SELECT rowid, id, kind, codec, length(data) FROM objects`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var c candidate
			var id []byte
			if err := rows.Scan(&c.rowid, &id, &c.kind, &c.codec, &c.bytes); err != nil {
				return mapErr(err)
			}
			if len(id) != 32 {
				return fmt.Errorf("object row %d has a %d-byte id: %w; run fsck", c.rowid, len(id), ErrCorrupt)
			}
			copy(c.id[:], id)
			if _, ok := m.marked[c.id]; !ok {
				cands = append(cands, c)
			}
		}
		if err := rows.Err(); err != nil {
			return mapErr(err)
		}
		rows.Close()
		cands, err = parentsFirst(tx, cands)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("gc: mark: %w", err)
	}
	res.Marked = int64(len(m.marked))

	if opts.DryRun {
		for _, c := range cands {
			res.Removed++
			res.RemovedBytes += c.bytes
		}
		return res, nil
	}

	// 2. Sweep in slices, re-reading the roots in each.
	delStmt := `DELETE FROM objects WHERE rowid = ? AND id = ?`
	i := 0
	first := true
	for first || i < len(cands) {
		var removed, removedBytes, staleDropped, statFreed int64
		next := i
		err := s.update(ctx, s.db, func(tx *Tx) error {
			removed, removedBytes, staleDropped, statFreed, next = 0, 0, 0, 0, i
			roots, stale, err := tx.gcRoots(time.Now(), opts.Prune, me)
			if err != nil {
				return err
			}
			if first {
				for _, l := range stale {
					if _, err := tx.exec(`DELETE FROM leases WHERE id = ?`, l); err != nil {
						return fmt.Errorf("drop stale lease %d: %w", l, err)
					}
					staleDropped++
				}
			}
			for _, r := range roots {
				if err := m.walk(tx, r); err != nil {
					return err
				}
			}
			if err := m.markDeltaBases(tx); err != nil {
				return err
			}
			deadline := time.Now().Add(sweepSlice)
			for ; next < len(cands); next++ {
				if next%256 == 0 && time.Now().After(deadline) {
					break
				}
				c := &cands[next]
				if _, ok := m.marked[c.id]; ok {
					continue
				}
				r, err := tx.exec(delStmt, c.rowid, c.id[:])
				if err != nil {
					return fmt.Errorf("delete object %s: %w", c.id.Short(), err)
				}
				if n, _ := r.RowsAffected(); n == 1 {
					removed++
					removedBytes += c.bytes
				}
			}
			if next == len(cands) && (removed > 0 || res.Removed > 0) {
				// Stat cache entries whose content is gone would only cost
				// the next import a failed Retain each.
				r, err := tx.exec(`DELETE FROM stat_cache WHERE content IS NOT NULL
					AND NOT EXISTS (SELECT 1 FROM objects WHERE objects.id = stat_cache.content)`)
				if err != nil {
					return fmt.Errorf("prune stat cache: %w", err)
				}
				statFreed, _ = r.RowsAffected()
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("gc: sweep: %w", err)
		}
		first = false
		i = next
		res.Removed += removed
		res.RemovedBytes += removedBytes
		res.StaleLeases = max(res.StaleLeases, staleDropped)
		res.StatCacheFreed += statFreed
		progress("sweep", int64(i), int64(len(cands)))
	}
	// Always, even when nothing was removed: a close keeps the WAL
	// (wal.go), and gc is the command that gives space back.
	s.compact(ctx)
	return res, nil
}

// parentsFirst orders candidates so that each comes after every candidate
// that references it. The sweep deletes in this order, in several
// transactions, and between them other processes may Retain or reference
// any object that still exists; deleting parents first keeps the
// invariant they rely on — an object that exists has all its descendants —
// true at every commit. (A marked object never references a candidate,
// so only candidates can be a candidate's parents.)
func parentsFirst(tx *Tx, cands []candidate) ([]candidate, error) {
	index := make(map[ID]int, len(cands))
	for i := range cands {
		index[cands[i].id] = i
	}
	children := make(map[int][]int)
	indeg := make([]int, len(cands))
	for i := range cands {
		c := &cands[i]
		if c.kind == KindChunk {
			if c.codec == codecDelta { // a delta goes before its base
				var base []byte
				if err := tx.queryRow(`SELECT substr(data, 2, 32) FROM objects WHERE rowid = ?`, c.rowid).Scan(&base); err == nil && len(base) == 32 {
					if j, ok := index[ID(base)]; ok && j != i {
						children[i] = append(children[i], j)
						indeg[j]++
					}
				}
			}
			continue
		}
		k, p, err := tx.Get(c.id)
		if err != nil {
			if errors.Is(err, ErrCorrupt) {
				continue // references unknown: it goes early, with no children
			}
			return nil, err
		}
		refs, err := refsOf(k, p)
		if err != nil {
			continue
		}
		for _, r := range refs {
			if j, ok := index[r]; ok && j != i {
				children[i] = append(children[i], j)
				indeg[j]++
			}
		}
	}
	if len(children) == 0 {
		return cands, nil // all leaves; keep rowid order
	}
	order := make([]candidate, 0, len(cands))
	var queue []int
	for i := range cands {
		if indeg[i] == 0 {
			queue = append(queue, i)
		}
	}
	done := make([]bool, len(cands))
	for len(queue) > 0 {
		i := queue[0]
		queue = queue[1:]
		order = append(order, cands[i])
		done[i] = true
		for _, j := range children[i] {
			if indeg[j]--; indeg[j] == 0 {
				queue = append(queue, j)
			}
		}
	}
	// Ids are hashes of contents, so there are no cycles; a damaged
	// database could still show one. Such objects go last.
	for i := range cands {
		if !done[i] {
			order = append(order, cands[i])
		}
	}
	return order, nil
}

// compact returns free pages to the filesystem when they are a large part
// of the file, and truncates the WAL. Best effort: a failure leaves space
// that later inserts reuse.
func (s *Store) compact(ctx context.Context) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return
	}
	defer conn.Close()
	var free, pages int64
	if conn.QueryRowContext(ctx, `PRAGMA freelist_count`).Scan(&free) != nil ||
		conn.QueryRowContext(ctx, `PRAGMA page_count`).Scan(&pages) != nil {
		return
	}
	if free >= 256 && free*8 >= pages {
		if s.lockWrites(ctx) == nil {
			conn.ExecContext(ctx, `PRAGMA incremental_vacuum`)
			s.unlockWrites()
		}
	}
	// TRUNCATE waits for readers of older snapshots; don't wait long.
	conn.ExecContext(ctx, `PRAGMA busy_timeout = 1000`)
	var busy, logPages, ckpt int64
	conn.QueryRowContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &logPages, &ckpt)
	conn.ExecContext(ctx, fmt.Sprintf(`PRAGMA busy_timeout = %d`, s.busy.Milliseconds()))
}

// gcRoots returns the ids gc starts from and the ids of stale leases.
func (tx *Tx) gcRoots(now time.Time, prune time.Duration, me procIdentity) (roots []ID, stale []int64, err error) {
	add := func(q string, args ...any) error {
		rows, err := tx.query(q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var b []byte
			if err := rows.Scan(&b); err != nil {
				return mapErr(err)
			}
			id, err := scanID(b)
			if err != nil {
				return err
			}
			if !id.IsZero() {
				roots = append(roots, id)
			}
		}
		return mapErr(rows.Err())
	}
	if err := add(`SELECT commit_id FROM refs`); err != nil {
		return nil, nil, fmt.Errorf("read branches: %w", err)
	}
	if err := add(`SELECT base FROM workspaces WHERE base IS NOT NULL`); err != nil {
		return nil, nil, fmt.Errorf("read workspaces: %w", err)
	}
	if prune > 0 {
		since := now.Add(-prune).UnixNano()
		if err := add(`SELECT old FROM ops WHERE time_ns >= ? AND old IS NOT NULL
			UNION SELECT new FROM ops WHERE time_ns >= ? AND new IS NOT NULL`, since, since); err != nil {
			return nil, nil, fmt.Errorf("read operation log: %w", err)
		}
	}
	leases, err := tx.leases()
	if err != nil {
		return nil, nil, err
	}
	for i := range leases {
		l := &leases[i]
		if live, _ := leaseState(l, me, now); !live {
			stale = append(stale, l.ID)
			continue
		}
		if err := add(`SELECT o.id FROM lease_objects lo JOIN objects o ON o.rowid = lo.oid WHERE lo.lease_id = ?`, l.ID); err != nil {
			return nil, nil, fmt.Errorf("read lease %d: %w", l.ID, err)
		}
	}
	return roots, stale, nil
}

// marker is the mark set of a gc run and the walk that extends it.
type marker struct {
	marked   map[ID]struct{}
	total    int64
	missing  int64
	progress func(string, int64, int64)
}

// qMarkObject reads an object's kind and, except for chunks, which
// reference nothing, its stored form.
const qMarkObject = `SELECT kind, codec, size, CASE WHEN kind = 1 THEN NULL ELSE data END FROM objects WHERE id = ?`

// markDeltaBases marks the base of every marked delta-coded chunk, until
// no base is left unmarked (chains are at most maxDeltaDepth long). Bases
// are chunks: they reference nothing further.
func (m *marker) markDeltaBases(tx *Tx) error {
	for pass := 0; pass <= maxDeltaDepth+1; pass++ {
		rows, err := tx.query(`SELECT id, substr(data, 2, 32) FROM objects WHERE codec = 2`)
		if err != nil {
			return err
		}
		added := 0
		for rows.Next() {
			var id, base []byte
			if err := rows.Scan(&id, &base); err != nil {
				rows.Close()
				return mapErr(err)
			}
			if len(id) != 32 || len(base) != 32 {
				continue // fsck reports it
			}
			if _, ok := m.marked[ID(id)]; !ok {
				continue
			}
			if _, ok := m.marked[ID(base)]; !ok {
				m.marked[ID(base)] = struct{}{}
				added++
			}
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return mapErr(err)
		}
		if added == 0 {
			return nil
		}
	}
	return nil
}

// walk marks root and everything it reaches that is not marked yet. An
// object that cannot be read or decoded stops gc: what it references is
// unknown, and sweeping could delete it.
func (m *marker) walk(tx *Tx, root ID) error {
	stack := []ID{root}
	for len(stack) > 0 {
		id := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if _, ok := m.marked[id]; ok {
			continue
		}
		var kind, codec, size int64
		var data []byte
		err := tx.queryRow(qMarkObject, id[:]).Scan(&kind, &codec, &size, &data)
		if errors.Is(err, sql.ErrNoRows) {
			m.missing++ // damage that fsck reports; nothing to mark
			continue
		}
		if err != nil {
			return fmt.Errorf("read object %s: %w", id.Short(), mapErr(err))
		}
		m.marked[id] = struct{}{}
		if len(m.marked)%4096 == 0 {
			m.progress("mark", int64(len(m.marked)), m.total)
		}
		if Kind(kind) == KindChunk {
			continue
		}
		p, err := decodeRecord(id, Kind(kind), codec, size, data, nil)
		if err != nil {
			return fmt.Errorf("%w; run strata fsck", err)
		}
		if Kind(kind) == KindFile {
			n, err := DecodeFileNode(p)
			if err != nil {
				return fmt.Errorf("file node %s: %v: %w; run strata fsck", id.Short(), err, ErrCorrupt)
			}
			for _, r := range n.Refs {
				if r.ID.IsZero() {
					continue // a hole
				}
				if n.Level == 0 {
					// Chunks: mark without a lookup. Marking an id that
					// does not exist has no effect.
					m.marked[r.ID] = struct{}{}
				} else {
					stack = append(stack, r.ID)
				}
			}
			continue
		}
		refs, err := refsOf(Kind(kind), p)
		if err != nil {
			return fmt.Errorf("%v %s: %v: %w; run strata fsck", Kind(kind), id.Short(), err, ErrCorrupt)
		}
		for _, r := range refs {
			if _, ok := m.marked[r]; !ok {
				stack = append(stack, r)
			}
		}
	}
	return nil
}

// lockFile takes an exclusive flock on a file in the store directory,
// waiting until ctx is done. It serializes gc runs, which would otherwise
// repeat each other's work.
func (s *Store) lockFile(ctx context.Context, name string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(s.dir, name), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, mapErr(err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if err != syscall.EWOULDBLOCK {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", name, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
