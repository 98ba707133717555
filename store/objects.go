package store

import (
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

const (
	qGetObject  = `SELECT kind, codec, size, data FROM objects WHERE id = ?`
	qObjectOID  = `SELECT rowid FROM objects WHERE id = ?`
	qObjectKind = `SELECT kind FROM objects WHERE id = ?`
	qPutObject  = `INSERT INTO objects (id, kind, codec, size, data) VALUES (?, ?, ?, ?, ?)`
)

// Get returns an object's kind and payload, decompressed and verified by
// hash. ErrNotFound if there is no such object, ErrCorrupt if it fails
// verification.
func (tx *Tx) Get(id ID) (Kind, []byte, error) { return tx.getRow(id, true) }

// getRow reads one object; verify false does not re-hash it (the inner
// links of a delta chain, whose end is verified).
func (tx *Tx) getRow(id ID, verify bool) (Kind, []byte, error) {
	var kind, codec, size int64
	var data []byte
	err := tx.queryRow(qGetObject, id[:]).Scan(&kind, &codec, &size, &data)
	if errors.Is(err, sql.ErrNoRows) {
		if k, p, ok, err := tx.s.scratches.get(id); ok {
			return k, p, err
		}
		return 0, nil, fmt.Errorf("object %s: %w", id.Short(), ErrNotFound)
	}
	if err != nil {
		return 0, nil, fmt.Errorf("read object %s: %w", id.Short(), mapErr(err))
	}
	p, err := decodeRow(id, Kind(kind), codec, size, data, txBase(tx), verify)
	if err != nil {
		return 0, nil, err
	}
	return Kind(kind), p, nil
}

// Has reports whether the object exists. It does not verify it.
func (tx *Tx) Has(id ID) (bool, error) {
	var oid int64
	err := tx.queryRow(qObjectOID, id[:]).Scan(&oid)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look up object %s: %w", id.Short(), mapErr(err))
	}
	return true, nil
}

// kindOf returns the kind of an existing object without reading it, or
// ErrNotFound.
func (tx *Tx) kindOf(id ID) (Kind, error) {
	var k int64
	err := tx.queryRow(qObjectKind, id[:]).Scan(&k)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("object %s: %w", id.Short(), ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("look up object %s: %w", id.Short(), mapErr(err))
	}
	return Kind(k), nil
}

// Put stores an object and returns its id. An object that exists is not
// written again. The payload is compressed when that pays. Update only.
//
// An object put here and not referenced from a ref, a workspace or a
// Writer's lease by the end of the transaction is garbage to the next gc.
func (tx *Tx) Put(kind Kind, payload []byte) (ID, error) {
	if !validKind(kind) {
		return ZeroID, fmt.Errorf("put object: unknown kind %d", kind)
	}
	if len(payload) > maxObjectSize {
		return ZeroID, fmt.Errorf("put %v of %d bytes: over the %d limit", kind, len(payload), maxObjectSize)
	}
	id := HashObject(kind, payload)
	if _, _, err := tx.put(id, kind, payload, -1, nil); err != nil {
		return ZeroID, err
	}
	return id, nil
}

// put inserts an object unless it exists and returns its rowid and
// whether it was inserted. When codec is -1, put compresses p itself;
// otherwise data is the stored form of p with that codec.
func (tx *Tx) put(id ID, kind Kind, p []byte, codec int, data []byte) (oid int64, inserted bool, err error) {
	if !tx.write {
		return 0, false, fmt.Errorf("put object %s: %w", id.Short(), ErrReadOnly)
	}
	err = tx.queryRow(qObjectOID, id[:]).Scan(&oid)
	if err == nil {
		return oid, false, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return 0, false, fmt.Errorf("look up object %s: %w", id.Short(), mapErr(err))
	}
	if codec < 0 {
		codec, data = compress(p)
	}
	if data == nil {
		data = []byte{} // NOT NULL: an empty payload is a zero-length blob
	}
	r, err := tx.exec(qPutObject, id[:], int64(kind), codec, len(p), data)
	if err != nil {
		return 0, false, fmt.Errorf("store %v %s: %w", kind, id.Short(), err)
	}
	oid, err = r.LastInsertId()
	if err != nil {
		return 0, false, fmt.Errorf("store %v %s: %w", kind, id.Short(), mapErr(err))
	}
	return oid, true, nil
}

// getKind reads an object and checks its kind.
func (tx *Tx) getKind(id ID, want Kind) ([]byte, error) {
	k, p, err := tx.Get(id)
	if err != nil {
		return nil, err
	}
	if k != want {
		return nil, fmt.Errorf("object %s is a %v, not a %v: %w", id.Short(), k, want, ErrNotFound)
	}
	return p, nil
}

// Tree reads and decodes a directory: a tree, or a large directory's
// index (either form) and the trees it lists, joined.
func (tx *Tx) Tree(id ID) (*Tree, error) {
	k, p, err := tx.Get(id)
	if err != nil {
		return nil, err
	}
	switch k {
	case KindTree:
		t, err := DecodeTree(p)
		if err != nil {
			return nil, fmt.Errorf("tree %s: %v: %w", id.Short(), err, ErrCorrupt)
		}
		return t, nil
	case KindTreeIndex, KindRunIndex:
		ix, err := decodeIndex(k, p)
		if err != nil {
			return nil, fmt.Errorf("%v %s: %v: %w", k, id.Short(), err, ErrCorrupt)
		}
		got, err := tx.runPayloads(ix.runs)
		if err != nil {
			return nil, err
		}
		t, err := joinRuns(ix, func(run ID) ([]byte, error) {
			if p, ok := got[run]; ok {
				return p, nil
			}
			return tx.getKind(run, KindTree) // not in the table: says why
		})
		if err != nil {
			return nil, fmt.Errorf("%v %s: %w", k, id.Short(), err)
		}
		return t, nil
	}
	return nil, fmt.Errorf("object %s is a %v, not a tree: %w", id.Short(), k, ErrNotFound)
}

// TreeRuns returns the runs of the directory id when it is stored as a
// run index (kind 6), and true; nil, false, nil when it is a tree or a
// kind-5 index; ErrNotFound when missing, ErrCorrupt when it does not
// decode. An editor reads only the runs it needs (Tx.Tree of a run's
// Tree, checked with CheckRun) and stores the result with
// Writer.PutTreeSplice.
func (tx *Tx) TreeRuns(id ID) ([]TreeRun, bool, error) {
	// The kind first: a tree's payload is not read twice when the
	// caller goes on to Tx.Tree.
	k, err := tx.kindOf(id)
	var p []byte
	if errors.Is(err, ErrNotFound) {
		// Perhaps a scratch Writer's object (scratch.go), which Get finds.
		k, p, err = tx.Get(id)
	}
	if err != nil {
		return nil, false, err
	}
	switch k {
	case KindTree, KindTreeIndex:
		return nil, false, nil
	case KindRunIndex:
	default:
		return nil, false, fmt.Errorf("object %s is a %v, not a tree: %w", id.Short(), k, ErrNotFound)
	}
	if p == nil {
		if p, err = tx.getKind(id, KindRunIndex); err != nil {
			return nil, false, err
		}
	}
	runs, _, err := decodeRunIndex(p)
	if err != nil {
		return nil, false, fmt.Errorf("run index %s: %v: %w", id.Short(), err, ErrCorrupt)
	}
	return runs, true, nil
}

// runBatch is how many runs of a split directory one query reads.
const runBatch = 8

// qGetRuns reads runBatch objects (an id may repeat).
var qGetRuns = `SELECT id, kind, codec, size, data FROM objects WHERE id IN (?` + strings.Repeat(", ?", runBatch-1) + `)`

// runPayloads reads the runs of a split directory, runBatch at a time
// (one query each instead of one per run), and returns the payloads of
// those that are trees, verified.
func (tx *Tx) runPayloads(runs []TreeRun) (map[ID][]byte, error) {
	got := make(map[ID][]byte, len(runs))
	args := make([]any, runBatch)
	for start := 0; start < len(runs); start += runBatch {
		for i := range args {
			id := runs[min(start+i, len(runs)-1)].Tree
			args[i] = id[:]
		}
		rows, err := tx.query(qGetRuns, args...)
		if err != nil {
			return nil, fmt.Errorf("read runs: %w", err)
		}
		for rows.Next() {
			var rid, data []byte
			var kind, codec, size int64
			if err := rows.Scan(&rid, &kind, &codec, &size, &data); err != nil {
				rows.Close()
				return nil, fmt.Errorf("read runs: %w", mapErr(err))
			}
			if len(rid) != len(ID{}) || Kind(kind) != KindTree {
				continue // getKind says what is wrong with it
			}
			id := ID(rid)
			p, err := decodeRow(id, KindTree, codec, size, data, txBase(tx), true)
			if err != nil {
				rows.Close()
				return nil, err
			}
			got[id] = p
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("read runs: %w", mapErr(err))
		}
	}
	return got, nil
}

// Commit reads and decodes a commit.
func (tx *Tx) Commit(id ID) (*Commit, error) {
	p, err := tx.getKind(id, KindCommit)
	if err != nil {
		return nil, err
	}
	c, err := DecodeCommit(p)
	if err != nil {
		return nil, fmt.Errorf("commit %s: %v: %w", id.Short(), err, ErrCorrupt)
	}
	return c, nil
}

// FileNode reads and decodes a node of a large file's chunk tree.
func (tx *Tx) FileNode(id ID) (*FileNode, error) {
	p, err := tx.getKind(id, KindFile)
	if err != nil {
		return nil, err
	}
	n, err := DecodeFileNode(p)
	if err != nil {
		return nil, fmt.Errorf("file node %s: %v: %w", id.Short(), err, ErrCorrupt)
	}
	return n, nil
}

// PutTree encodes and stores a directory (as a run index over several
// trees when large: treeindex.go) and returns its id. Entries must be sorted by
// name and unique. Update only.
func (tx *Tx) PutTree(t *Tree) (ID, error) {
	et, err := encodeDirectory(t)
	if err != nil {
		return ZeroID, fmt.Errorf("put tree: %w", err)
	}
	if et.index == nil {
		return tx.Put(KindTree, et.tree)
	}
	for _, p := range et.runs {
		if _, err := tx.Put(KindTree, p); err != nil {
			return ZeroID, err
		}
	}
	return tx.Put(KindRunIndex, et.index)
}

// PutCommit encodes and stores a commit. Its tree and parents must exist.
// Update only.
func (tx *Tx) PutCommit(c *Commit) (ID, error) {
	p, err := EncodeCommit(c)
	if err != nil {
		return ZeroID, fmt.Errorf("put commit: %w", err)
	}
	if k, err := tx.kindOf(c.Tree); err != nil {
		return ZeroID, fmt.Errorf("commit tree: %w", err)
	} else if !isDir(k) {
		return ZeroID, fmt.Errorf("commit tree %s is a %v, not a tree: %w", c.Tree.Short(), k, ErrNotFound)
	}
	for _, par := range c.Parents {
		if err := tx.expectKind(par, KindCommit, "commit parent"); err != nil {
			return ZeroID, err
		}
	}
	return tx.Put(KindCommit, p)
}

func (tx *Tx) expectKind(id ID, want Kind, what string) error {
	k, err := tx.kindOf(id)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if k != want {
		return fmt.Errorf("%s %s is a %v, not a %v: %w", what, id.Short(), k, want, ErrNotFound)
	}
	return nil
}

// ResolvePrefix returns the one object of kind k (0: any kind) whose hex
// id starts with prefix, for abbreviated ids typed by users. The prefix
// must be at least 4 hex digits. ErrNotFound if none matches; an error
// saying so if several do.
func (tx *Tx) ResolvePrefix(prefix string, k Kind) (ID, error) {
	prefix = strings.ToLower(prefix)
	if len(prefix) < 4 || len(prefix) > 64 {
		return ZeroID, fmt.Errorf("object id prefix %q: want 4 to 64 hex digits: %w", prefix, ErrNotFound)
	}
	lo, err1 := hex.DecodeString(prefix + strings.Repeat("0", 64-len(prefix)))
	hi, err2 := hex.DecodeString(prefix + strings.Repeat("f", 64-len(prefix)))
	if err1 != nil || err2 != nil {
		return ZeroID, fmt.Errorf("object id prefix %q is not hex: %w", prefix, ErrNotFound)
	}
	rows, err := tx.query(`SELECT id FROM objects WHERE id BETWEEN ? AND ? AND (? = 0 OR kind = ?) LIMIT 2`, lo, hi, int64(k), int64(k))
	if err != nil {
		return ZeroID, fmt.Errorf("resolve %q: %w", prefix, err)
	}
	defer rows.Close()
	var found []ID
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			return ZeroID, fmt.Errorf("resolve %q: %w", prefix, mapErr(err))
		}
		id, err := scanID(b)
		if err != nil {
			return ZeroID, err
		}
		found = append(found, id)
	}
	if err := rows.Err(); err != nil {
		return ZeroID, fmt.Errorf("resolve %q: %w", prefix, mapErr(err))
	}
	what := "object"
	if k != 0 {
		what = k.String()
	}
	switch len(found) {
	case 0:
		return ZeroID, fmt.Errorf("%s %s: %w", what, prefix, ErrNotFound)
	case 1:
		return found[0], nil
	}
	return ZeroID, fmt.Errorf("%s id prefix %s is ambiguous: use more digits", what, prefix)
}
