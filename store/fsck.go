package store

// Fsck: verify the database, every object, every reference between
// objects and every root, and name what damage makes unreadable.
//
// It is written to survive a damaged database file: every query may fail
// or return nonsense, so each failure becomes a Problem and the check goes
// on with what it can still read. Objects are found three ways (table scan
// forwards, backwards, and the id index) so that one bad page hides as
// little as possible.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"
)

// Problem kinds.
const (
	ProblemDatabase = "database" // SQLite integrity check or an unreadable table
	ProblemCorrupt  = "corrupt"  // an object fails its hash or cannot be decoded
	ProblemMissing  = "missing"  // an object is referenced but not stored
	ProblemBadRef   = "bad-ref"  // a branch or workspace does not point to a stored commit
)

// maxIntegrityMessages bounds what PRAGMA integrity_check reports.
const maxIntegrityMessages = 100

type fsckObject struct {
	rowid int64
	kind  Kind
}

type fsckState struct {
	rep      *FsckReport
	objects  map[ID]fsckObject
	edges    map[ID][]ID  // object → the objects it references
	missing  map[ID][]ID  // missing object → objects referencing it
	damaged  map[ID]int   // object → index of its Problem
	affected map[ID][]int // not used outside computeAffected
}

func (f *fsckState) problem(p Problem) {
	if !p.Object.IsZero() {
		if _, ok := f.damaged[p.Object]; ok {
			return
		}
		f.damaged[p.Object] = len(f.rep.Problems)
	}
	f.rep.Problems = append(f.rep.Problems, p)
}

// Fsck verifies the store: SQLite's integrity check; every object
// re-hashed and decoded; every reference between objects resolved; every
// branch and workspace base a stored commit. Each Problem names, in
// Affected, the branches and workspaces ("workspace:NAME") that reach the
// damaged object. Stale leases are reported in Info. Fsck returns an
// error only when it cannot read the store at all; damage is in the
// report. progress, if set, is called with objects checked and total.
func (s *Store) Fsck(ctx context.Context, progress func(done, total int64)) (*FsckReport, error) {
	if progress == nil {
		progress = func(int64, int64) {}
	}
	f := &fsckState{
		rep:     &FsckReport{},
		objects: make(map[ID]fsckObject),
		edges:   make(map[ID][]ID),
		missing: make(map[ID][]ID),
		damaged: make(map[ID]int),
	}
	err := s.View(ctx, func(tx *Tx) error {
		f.integrity(tx)
		f.enumerate(tx)
		if err := ctx.Err(); err != nil {
			return err
		}
		f.verifyObjects(tx, progress)
		if err := ctx.Err(); err != nil {
			return err
		}
		roots := f.checkRoots(tx)
		f.checkLeases(tx)
		f.computeAffected(roots)
		return ctx.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("fsck: %w", err)
	}
	return f.rep, nil
}

func (f *fsckState) integrity(tx *Tx) {
	rows, err := tx.tx.QueryContext(tx.ctx, fmt.Sprintf("PRAGMA integrity_check(%d)", maxIntegrityMessages))
	if err != nil {
		f.problem(Problem{Kind: ProblemDatabase, Detail: "integrity check: " + mapErr(err).Error()})
		return
	}
	defer rows.Close()
	for rows.Next() {
		var msg string
		if err := rows.Scan(&msg); err != nil {
			f.problem(Problem{Kind: ProblemDatabase, Detail: "integrity check: " + err.Error()})
			return
		}
		if msg != "ok" {
			f.problem(Problem{Kind: ProblemDatabase, Detail: msg})
		}
	}
	if err := rows.Err(); err != nil {
		f.problem(Problem{Kind: ProblemDatabase, Detail: "integrity check: " + mapErr(err).Error()})
	}
}

// enumerate lists the objects through the table forwards and backwards
// and through the id index, so that a damaged page in one of them hides
// only what the others cannot reach either.
func (f *fsckState) enumerate(tx *Tx) {
	scans := []struct{ what, q string }{
		{"objects table", `SELECT rowid, id, kind FROM objects ORDER BY rowid`},
		{"objects table (backwards)", `SELECT rowid, id, kind FROM objects ORDER BY rowid DESC`},
		{"objects index", `SELECT rowid, id, NULL FROM objects INDEXED BY objects_id ORDER BY id`},
	}
	var failed []string
	for _, sc := range scans {
		rows, err := tx.tx.QueryContext(tx.ctx, sc.q)
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s unreadable: %v", sc.what, mapErr(err)))
			continue
		}
		n := 0
		for rows.Next() {
			var rowid int64
			var id []byte
			var kind *int64
			if err := rows.Scan(&rowid, &id, &kind); err != nil {
				failed = append(failed, fmt.Sprintf("%s row %d: %v", sc.what, rowid, err))
				break
			}
			n++
			if len(id) != 32 {
				f.problem(Problem{Kind: ProblemDatabase, Detail: fmt.Sprintf("object row %d has a %d-byte id", rowid, len(id))})
				continue
			}
			oid := ID(id)
			o, seen := f.objects[oid]
			if !seen {
				o.rowid = rowid
			}
			if kind != nil {
				o.kind = Kind(*kind)
			}
			f.objects[oid] = o
		}
		if err := rows.Err(); err != nil {
			failed = append(failed, fmt.Sprintf("%s unreadable after %d rows: %v", sc.what, n, mapErr(err)))
		}
		rows.Close()
	}
	for _, msg := range failed {
		f.problem(Problem{Kind: ProblemDatabase, Detail: msg})
	}
	f.rep.Objects = int64(len(f.objects))
}

// verifyObjects reads every object by rowid, re-hashes it, decodes it and
// checks that what it references exists and has the right kind.
func (f *fsckState) verifyObjects(tx *Tx, progress func(done, total int64)) {
	ids := make([]ID, 0, len(f.objects))
	for id := range f.objects {
		ids = append(ids, id)
	}
	// In rowid order: sequential reads of the table.
	sort.Slice(ids, func(i, j int) bool { return f.objects[ids[i]].rowid < f.objects[ids[j]].rowid })
	total := int64(len(ids))
	last := time.Now()
	for i, id := range ids {
		if i%1024 == 0 {
			if tx.ctx.Err() != nil {
				return
			}
			if time.Since(last) > 100*time.Millisecond {
				progress(int64(i), total)
				last = time.Now()
			}
		}
		f.verifyObject(tx, id)
	}
	progress(total, total)
	// Missing objects, in a stable order.
	miss := make([]ID, 0, len(f.missing))
	for id := range f.missing {
		miss = append(miss, id)
	}
	slices.SortFunc(miss, func(a, b ID) int { return compareIDs(a, b) })
	for _, id := range miss {
		by := f.missing[id]
		detail := fmt.Sprintf("referenced by %s", by[0].Short())
		if len(by) > 1 {
			detail += fmt.Sprintf(" and %d more", len(by)-1)
		}
		f.problem(Problem{Object: id, Kind: ProblemMissing, Detail: detail})
	}
}

func compareIDs(a, b ID) int {
	for i := range a {
		if a[i] != b[i] {
			return int(a[i]) - int(b[i])
		}
	}
	return 0
}

func (f *fsckState) verifyObject(tx *Tx, id ID) {
	o := f.objects[id]
	var kind, codec, size int64
	var data []byte
	var rid []byte
	err := tx.queryRow(`SELECT id, kind, codec, size, data FROM objects WHERE rowid = ?`, o.rowid).Scan(&rid, &kind, &codec, &size, &data)
	if err != nil {
		f.problem(Problem{Object: id, Kind: ProblemCorrupt, Detail: "unreadable: " + mapErr(err).Error()})
		return
	}
	if ID(rid) != id || len(rid) != 32 {
		f.problem(Problem{Object: id, Kind: ProblemCorrupt, Detail: fmt.Sprintf("row %d holds another id", o.rowid)})
		return
	}
	o.kind = Kind(kind)
	f.objects[id] = o
	p, err := decodeRecord(id, Kind(kind), codec, size, data, txBase(tx))
	if err != nil {
		f.problem(Problem{Object: id, Kind: ProblemCorrupt, Detail: err.Error()})
		return
	}
	var refs []ID
	var want func(i int) refKinds // kinds a ref may have
	switch Kind(kind) {
	case KindChunk:
		return
	case KindFile:
		n, err := DecodeFileNode(p)
		if err != nil {
			f.problem(Problem{Object: id, Kind: ProblemCorrupt, Detail: err.Error()})
			return
		}
		for _, r := range n.Refs {
			if !r.ID.IsZero() { // a hole
				refs = append(refs, r.ID)
			}
		}
		k := KindChunk
		if n.Level > 0 {
			k = KindFile
		}
		want = func(int) refKinds { return refKinds{k} }
	case KindTree:
		t, err := DecodeTree(p)
		if err != nil {
			f.problem(Problem{Object: id, Kind: ProblemCorrupt, Detail: err.Error()})
			return
		}
		var types []EntryType
		for _, e := range t.Entries {
			if !e.Content.IsZero() {
				refs = append(refs, e.Content)
				types = append(types, e.Type)
			}
		}
		want = func(i int) refKinds {
			switch types[i] {
			case TypeDir:
				return dirKinds
			case TypeFile:
				return refKinds{KindChunk, KindFile}
			}
			return nil // anything
		}
	case KindCommit:
		c, err := DecodeCommit(p)
		if err != nil {
			f.problem(Problem{Object: id, Kind: ProblemCorrupt, Detail: err.Error()})
			return
		}
		refs = append([]ID{c.Tree}, c.Parents...)
		want = func(i int) refKinds {
			if i == 0 {
				return dirKinds
			}
			return refKinds{KindCommit}
		}
	case KindTreeIndex, KindRunIndex:
		ix, err := decodeIndex(Kind(kind), p)
		if err != nil {
			f.problem(Problem{Object: id, Kind: ProblemCorrupt, Detail: err.Error()})
			return
		}
		refs = ix.trees()
		want = func(int) refKinds { return refKinds{KindTree} }
		// Split where the format splits: one directory, one id. Tx.Tree
		// checks each run against the index (count; first name and size
		// in a run index). Runs that cannot be read are reported as
		// missing or corrupt below and on their own.
		if t, err := tx.Tree(id); err == nil {
			if err := canonicalIndex(t, ix, p); err != nil {
				f.problem(Problem{Object: id, Kind: ProblemCorrupt, Detail: Kind(kind).String() + ": " + err.Error()})
			}
		} else if !errors.Is(err, ErrNotFound) {
			f.problem(Problem{Object: id, Kind: ProblemCorrupt, Detail: err.Error()})
		}
	}
	f.edges[id] = refs
	for i, r := range refs {
		ro, ok := f.objects[r]
		if !ok {
			f.missing[r] = append(f.missing[r], id)
			continue
		}
		if ks := want(i); ro.kind != 0 && ks != nil && !slices.Contains(ks, ro.kind) {
			f.problem(Problem{Object: id, Kind: ProblemCorrupt,
				Detail: fmt.Sprintf("references %s, a %v, where it needs a %v", r.Short(), ro.kind, ks[0])})
		}
	}
}

// refKinds are the kinds an object's reference may have (nil: any).
type refKinds []Kind

// dirKinds are a directory's: a tree or a large directory's index.
var dirKinds = refKinds{KindTree, KindRunIndex, KindTreeIndex}

type fsckRoot struct {
	name string // branch name, or "workspace:NAME"
	id   ID
}

func (f *fsckState) checkRoots(tx *Tx) []fsckRoot {
	var roots []fsckRoot
	refs, err := tx.Refs("")
	if err != nil {
		f.problem(Problem{Kind: ProblemDatabase, Detail: "branches: " + err.Error()})
	}
	f.rep.Refs = int64(len(refs))
	for _, r := range refs {
		roots = append(roots, fsckRoot{r.Name, r.Commit})
	}
	ws, err := tx.Workspaces()
	if err != nil {
		f.problem(Problem{Kind: ProblemDatabase, Detail: "workspaces: " + err.Error()})
	}
	for _, w := range ws {
		if !w.Base.IsZero() {
			roots = append(roots, fsckRoot{"workspace:" + w.Name, w.Base})
		}
	}
	for _, r := range roots {
		o, ok := f.objects[r.id]
		switch {
		case !ok:
			f.rep.Problems = append(f.rep.Problems, Problem{Object: r.id, Kind: ProblemBadRef,
				Detail: fmt.Sprintf("%s points to %s, which is not stored", r.name, r.id.Short()), Affected: []string{r.name}})
		case o.kind == 0:
			// Listed by the index but unreadable: reported as corrupt.
		case o.kind != KindCommit:
			f.rep.Problems = append(f.rep.Problems, Problem{Object: r.id, Kind: ProblemBadRef,
				Detail: fmt.Sprintf("%s points to %s, a %v, not a commit", r.name, r.id.Short(), o.kind), Affected: []string{r.name}})
		}
	}
	return roots
}

func (f *fsckState) checkLeases(tx *Tx) {
	ls, err := tx.Leases()
	if err != nil {
		f.rep.Info = append(f.rep.Info, "leases: "+err.Error())
		return
	}
	for _, l := range ls {
		if !l.Live {
			f.rep.StaleLeases++
			f.rep.Info = append(f.rep.Info, fmt.Sprintf("stale lease %d (%s, pid %d on %s): %s; gc removes it", l.ID, l.Purpose, l.PID, l.Hostname, l.Why))
		}
	}
}

// computeAffected fills in Affected for each damaged object: the roots
// from which it can be reached, found by walking references backwards.
func (f *fsckState) computeAffected(roots []fsckRoot) {
	if len(f.damaged) == 0 {
		return
	}
	parents := make(map[ID][]ID)
	for from, tos := range f.edges {
		for _, to := range tos {
			parents[to] = append(parents[to], from)
		}
	}
	byID := make(map[ID][]string)
	for _, r := range roots {
		byID[r.id] = append(byID[r.id], r.name)
	}
	for id, pi := range f.damaged {
		seen := map[ID]bool{id: true}
		queue := []ID{id}
		var names []string
		for len(queue) > 0 {
			x := queue[0]
			queue = queue[1:]
			names = append(names, byID[x]...)
			for _, p := range parents[x] {
				if !seen[p] {
					seen[p] = true
					queue = append(queue, p)
				}
			}
		}
		sort.Strings(names)
		f.rep.Problems[pi].Affected = slices.Compact(names)
	}
}
