package store

// Delta coding of chunks. A chunk that is a new version of another (the
// same path's content in the parent tree, or the chunk at the same offset
// of a large file's previous version) may be stored as a zstd frame
// compressed with the other chunk's payload as raw dictionary: an edit of
// a line costs about the line instead of the whole compressed chunk. It is
// a storage form (codec), not a kind: the object keeps its id, the hash of
// its payload, and reads verify that hash after reconstruction. Chains are
// bounded (maxDeltaDepth), and the delta is kept only when cheaper than
// the chunk compressed on its own. gc keeps a delta's base alive while
// the delta is (gc.go), fsck decodes every chain (fsck.go).

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"

	"github.com/klauspost/compress/zstd"
)

const (
	// maxDeltaDepth bounds a delta chain: reading a chunk decodes at most
	// this many records, each a row read, a copy and a re-hash (~90 µs for
	// 50 KiB): at 10 a read costs ~3× a full chunk's, at 20 ~5×
	// (TestMeasureDeltas; docs/store.md).
	maxDeltaDepth = 10
	// minDelta is the payload size below which deltas are not tried.
	minDelta    = 1 << 10
	deltaHeader = 1 + 32
)

// The delta record after the header: uvarint prefix, uvarint suffix (the
// bytes p shares with the start and the end of its base), a byte naming
// how the middle is stored, then the middle — the bytes of p between them:
//
//	midRaw   as is (a few lines: compression would not pay)
//	midZstd  one zstd frame
//	midDict  one zstd frame compressed with the base's replaced bytes
//	         (base[prefix:len(base)-suffix]) as raw dictionary: scattered
//	         edits, where the middle is large but mostly the old bytes
//
// An edit of a line is found by the prefix and suffix alone, at the cost
// of two comparisons; only a large middle pays for a zstd dictionary
// encoder (about a megabyte of tables, ~1 ms).
const (
	midRaw  = 0
	midZstd = 1
	midDict = 2
	// midDictMin is the middle size from which the dictionary is tried.
	midDictMin = 4 << 10
)

// encodeDelta returns the delta record of p against base.
func encodeDelta(p, base []byte, baseID ID, depth int) ([]byte, error) {
	return encodeDeltaOpt(p, base, baseID, depth, true)
}

// encodeDeltaOpt is encodeDelta; dict false never tries the dictionary
// (it returns nil when the middle would need it).
func encodeDeltaOpt(p, base []byte, baseID ID, depth int, dict bool) ([]byte, error) {
	pre := commonPrefix(p, base)
	suf := commonSuffix(p[pre:], base[pre:])
	mid := p[pre : len(p)-suf]
	out := make([]byte, deltaHeader, deltaHeader+len(mid)/2+32)
	out[0] = byte(depth)
	copy(out[1:], baseID[:])
	out = binary.AppendUvarint(out, uint64(pre))
	out = binary.AppendUvarint(out, uint64(suf))
	switch {
	case len(mid) < minCompress:
		return append(append(out, midRaw), mid...), nil
	case len(mid) >= midDictMin && len(base)-suf-pre >= midDictMin:
		if !dict {
			return nil, nil
		}
		enc, err := zstd.NewWriter(nil,
			zstd.WithEncoderLevel(zstd.SpeedFastest),
			zstd.WithEncoderConcurrency(1),
			zstd.WithEncoderCRC(false),
			zstd.WithWindowSize(windowFor(len(base)+len(mid))),
			zstd.WithEncoderDictRaw(0, base[pre:len(base)-suf]))
		if err != nil {
			return nil, err
		}
		defer enc.Close()
		return enc.EncodeAll(mid, append(out, midDict)), nil
	default:
		c := encodeAll(mid, nil)
		if len(c) >= len(mid) {
			return append(append(out, midRaw), mid...), nil
		}
		return append(append(out, midZstd), c...), nil
	}
}

// commonPrefix returns the length of the common prefix of a and b.
func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	i := 0
	for i+8 <= n && binary.LittleEndian.Uint64(a[i:]) == binary.LittleEndian.Uint64(b[i:]) {
		i += 8
	}
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

// commonSuffix returns the length of the common suffix of a and b.
func commonSuffix(a, b []byte) int {
	n := min(len(a), len(b))
	i := 0
	for i+8 <= n && binary.LittleEndian.Uint64(a[len(a)-i-8:]) == binary.LittleEndian.Uint64(b[len(b)-i-8:]) {
		i += 8
	}
	for i < n && a[len(a)-1-i] == b[len(b)-1-i] {
		i++
	}
	return i
}

// windowFor returns a zstd window (a power of two, at least the minimum
// zstd accepts) that covers n bytes.
func windowFor(n int) int {
	w := zstd.MinWindowSize
	for w < n && w < zstd.MaxWindowSize {
		w <<= 1
	}
	return w
}

// decodeDelta reconstructs a delta-coded payload of size bytes.
func decodeDelta(id ID, kind Kind, size int64, data []byte, base baseReader) ([]byte, error) {
	if kind != KindChunk || len(data) < deltaHeader || data[0] == 0 || data[0] > maxDeltaDepth {
		return nil, fmt.Errorf("object %s: bad delta record: %w", id.Short(), ErrCorrupt)
	}
	if base == nil {
		return nil, fmt.Errorf("object %s: a delta where none may be: %w", id.Short(), ErrCorrupt)
	}
	bid := ID(data[1:deltaHeader])
	r := reader{b: data[deltaHeader:]}
	pre, suf := r.uvarint(), r.uvarint()
	how := r.byte()
	if r.err != nil {
		return nil, fmt.Errorf("object %s: bad delta record: %v: %w", id.Short(), r.err, ErrCorrupt)
	}
	rest := r.b
	bp, err := base(bid)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil, fmt.Errorf("object %s: delta base %s is missing: %w", id.Short(), bid.Short(), ErrCorrupt)
		}
		return nil, fmt.Errorf("object %s: delta base: %w", id.Short(), err)
	}
	if pre > uint64(len(bp)) || suf > uint64(len(bp))-pre || pre+suf > uint64(size) {
		return nil, fmt.Errorf("object %s: delta does not fit its base %s: %w", id.Short(), bid.Short(), ErrCorrupt)
	}
	midSize := size - int64(pre+suf)
	var mid []byte
	switch how {
	case midRaw:
		mid = rest
	case midZstd:
		if mid, err = decodeAll(rest, make([]byte, 0, midSize)); err != nil {
			return nil, fmt.Errorf("object %s: decode delta against %s: %v: %w", id.Short(), bid.Short(), err, ErrCorrupt)
		}
	case midDict:
		dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(maxObjectSize),
			zstd.WithDecodeAllCapLimit(true), zstd.WithDecoderDictRaw(0, bp[pre:uint64(len(bp))-suf]))
		if err != nil {
			return nil, fmt.Errorf("object %s: delta decoder: %w", id.Short(), err)
		}
		mid, err = dec.DecodeAll(rest, make([]byte, 0, midSize))
		dec.Close()
		if err != nil {
			return nil, fmt.Errorf("object %s: decode delta against %s: %v: %w", id.Short(), bid.Short(), err, ErrCorrupt)
		}
	default:
		return nil, fmt.Errorf("object %s: unknown delta middle %d: %w", id.Short(), how, ErrCorrupt)
	}
	if int64(len(mid)) != midSize {
		return nil, fmt.Errorf("object %s: delta middle of %d bytes, want %d: %w", id.Short(), len(mid), midSize, ErrCorrupt)
	}
	p := make([]byte, 0, size)
	p = append(p, bp[:pre]...)
	p = append(p, mid...)
	p = append(p, bp[uint64(len(bp))-suf:]...)
	return p, nil
}

// deltaDepth returns the chain depth of a stored row: 0 for a full one.
func deltaDepth(codec int64, data []byte) int {
	if codec != codecDelta || len(data) == 0 {
		return 0
	}
	return int(data[0])
}

// txBase reads delta bases inside a transaction.
func txBase(tx *Tx) baseReader {
	return func(id ID) ([]byte, error) {
		k, p, err := tx.getRow(id, false)
		if err == nil && k != KindChunk {
			err = fmt.Errorf("delta base %s is a %v: %w", id.Short(), k, ErrCorrupt)
		}
		return p, err
	}
}

const qObjectDepth = `SELECT codec, substr(data, 1, 1) FROM objects WHERE id = ? AND kind = 1`

// deltaBase returns the chunk to delta against for a new version of base
// — base itself, or the root of its chain when that is full — with its
// payload and chain depth; ok is false when there is none.
func (s *Store) deltaBase(ctx context.Context, base ID) (used ID, p []byte, depth int, ok bool) {
	st, err := s.prepared(ctx, s.db, qObjectDepth)
	if err != nil {
		return ZeroID, nil, 0, false
	}
	var codec int64
	var head []byte
	if err := st.QueryRowContext(ctx, base[:]).Scan(&codec, &head); err != nil {
		return ZeroID, nil, 0, false
	}
	depth = deltaDepth(codec, head)
	if depth >= maxDeltaDepth {
		// The chain is full: delta against its root, the full version it
		// started from, instead (what changed since then is usually
		// still small, and costs less than a full copy).
		if base, ok = s.chainRoot(ctx, base); !ok {
			return ZeroID, nil, 0, false
		}
		depth = 0
	}
	k, p, err := s.getObject(ctx, base)
	if err != nil || k != KindChunk {
		return ZeroID, nil, 0, false
	}
	return base, p, depth, true
}

const qDeltaHead = `SELECT codec, substr(data, 1, 33) FROM objects WHERE id = ?`

// chainRoot follows the delta chain from id to the full chunk it ends in.
func (s *Store) chainRoot(ctx context.Context, id ID) (ID, bool) {
	st, err := s.prepared(ctx, s.db, qDeltaHead)
	if err != nil {
		return ZeroID, false
	}
	for range maxDeltaDepth + 1 {
		var codec int64
		var head []byte
		if err := st.QueryRowContext(ctx, id[:]).Scan(&codec, &head); err != nil {
			return ZeroID, false
		}
		if codec != codecDelta {
			return id, true
		}
		if len(head) != deltaHeader {
			return ZeroID, false
		}
		id = ID(head[1:deltaHeader])
	}
	return ZeroID, false
}

// chunkAt is a level-0 chunk of a file's content and its offset.
type chunkAt struct {
	off int64
	id  ID
}

// chunkMap lists the chunks of content id (a chunk or a FileNode tree) by
// offset, for picking delta bases of a new version; nil on any error.
func (s *Store) chunkMap(ctx context.Context, id ID) []chunkAt {
	if id.IsZero() {
		return nil
	}
	var out []chunkAt
	var walk func(id ID, off int64, depth int) bool
	walk = func(id ID, off int64, depth int) bool {
		k, p, err := s.getObject(ctx, id)
		if err != nil || depth > maxFileLevel {
			return false
		}
		if k == KindChunk {
			out = append(out, chunkAt{off, id})
			return true
		}
		n, err := DecodeFileNode(p)
		if err != nil {
			return false
		}
		for _, r := range n.Refs {
			if !r.ID.IsZero() {
				if n.Level == 0 {
					out = append(out, chunkAt{off, r.ID})
				} else if !walk(r.ID, off, depth+1) {
					return false
				}
			}
			off += r.Size
		}
		return true
	}
	if !walk(id, 0, 0) {
		return nil
	}
	return out
}

// baseAt returns the chunk of m covering offset off, or ZeroID.
func baseAt(m []chunkAt, off int64) ID {
	i := sort.Search(len(m), func(i int) bool { return m[i].off > off })
	if i == 0 {
		return ZeroID
	}
	return m[i-1].id
}

// storeLike picks the stored form of a new chunk p that is a version of
// base: a delta when cheaper than p compressed on its own, else that. A
// delta of at most an eighth of p (a line edit) is taken without
// compressing p at all: zstd does not shrink text that far, and the
// compression would be most of the cost. The returned full form is what
// insertBatch stores if the base is gone by then (p itself, raw, when p
// was not compressed).
//
// A chunk that does not compress on its own (random or compressed data)
// gets no dictionary delta: a new version of such data rarely shares more
// than its ends, and the dictionary encoder would cost ~1 ms per chunk of
// a large rewritten file.
func (w *Writer) storeLike(p []byte, base ID) (codec int, data []byte, fullCodec int, full []byte) {
	if deltasOn && len(p) >= minDelta {
		if used, bp, depth, ok := w.s.deltaBase(w.ctx, base); ok {
			d, err := encodeDeltaOpt(p, bp, used, depth+1, false)
			if err == nil && d != nil && len(d) <= len(p)/8 {
				return codecDelta, d, codecNone, p
			}
			codec, data = compress(p)
			if err == nil && d == nil && codec != codecNone { // a large middle: try the dictionary
				d, err = encodeDeltaOpt(p, bp, used, depth+1, true)
			}
			if err == nil && d != nil && len(d) < len(data) {
				return codecDelta, d, codec, data
			}
			return codec, data, 0, nil
		}
	}
	codec, data = compress(p)
	return codec, data, 0, nil
}

// baseExists reports whether the base of a delta record is in the store,
// in tx, and returns its rowid.
func baseExists(tx *Tx, data []byte) (int64, bool, error) {
	var oid int64
	err := tx.queryRow(qObjectOID, data[1:deltaHeader]).Scan(&oid)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, mapErr(err)
	}
	return oid, true, nil
}
