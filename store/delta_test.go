package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
)

// editLine returns b with line i (of 60-byte lines) replaced.
func editLine(b []byte, i int, s string) []byte {
	out := bytes.Clone(b)
	line := fmt.Sprintf("%-59s\n", s)
	off := (i * 60) % (len(b) - 60)
	off -= off % 60
	copy(out[off:], line)
	return out
}

func deltaRows(t *testing.T, s *Store) (n int, maxDepth int) {
	t.Helper()
	err := s.View(context.Background(), func(tx *Tx) error {
		rows, err := tx.query(`SELECT substr(data, 1, 1) FROM objects WHERE codec = 2`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var d []byte
			if err := rows.Scan(&d); err != nil {
				return err
			}
			n++
			maxDepth = max(maxDepth, int(d[0]))
		}
		return rows.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return n, maxDepth
}

// TestDeltaChunks: a 1-line edit of a small file stored against its
// previous version costs about the line; reads reconstruct and verify it;
// chains stop at maxDeltaDepth; a large file's changed chunk is a delta
// against the chunk at its offset; gc keeps the bases a live delta needs.
func TestDeltaChunks(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	v := textBytes(7, 50<<10)
	var ids []ID
	var grow []int64
	var prev ID
	for i := range 3 * maxDeltaDepth {
		if i > 0 {
			v = editLine(v, i*37, fmt.Sprintf("edit %d", i))
		}
		w, err := s.NewWriter(ctx, "test")
		if err != nil {
			t.Fatal(err)
		}
		id, err := w.WriteBytesLike(v, prev)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Finish(nil); err != nil {
			t.Fatal(err)
		}
		grow = append(grow, w.Stats().NewBytes)
		ids = append(ids, id)
		prev = id
		if got := readContent(t, s, id); !bytes.Equal(got, v) {
			t.Fatalf("version %d reads back different bytes", i)
		}
	}
	n, depth := deltaRows(t, s)
	if n < 2*maxDeltaDepth || depth != maxDeltaDepth {
		t.Errorf("%d delta rows of max depth %d; want most of %d versions, depth %d", n, depth, len(ids), maxDeltaDepth)
	}
	// Each record's depth is the length of its chain.
	for i, id := range ids {
		hops, cur := 0, id
		for ; hops <= maxDeltaDepth+1; hops++ {
			var codec int64
			var head []byte
			if err := s.db.QueryRow(qDeltaHead, cur[:]).Scan(&codec, &head); err != nil {
				t.Fatal(err)
			}
			if codec != codecDelta {
				break
			}
			cur = ID(head[1:deltaHeader])
		}
		var head []byte
		var codec int64
		s.db.QueryRow(qDeltaHead, id[:]).Scan(&codec, &head)
		if got := deltaDepth(codec, head); got != hops {
			t.Errorf("version %d: depth %d, its chain has %d deltas", i, got, hops)
		}
	}
	// A full chain restarts as a delta against its root (the full first
	// version): every later version is a delta.
	var deltaBytes int64
	for _, g := range grow[1:] {
		deltaBytes = max(deltaBytes, g)
	}
	if n != len(ids)-1 {
		t.Errorf("%d delta rows for %d versions after the first", n, len(ids)-1)
	}
	if deltaBytes > 1500 || grow[0] < 4000 {
		t.Errorf("a 1-line edit of a 50 KiB file stored up to %d bytes (the full version %d)", deltaBytes, grow[0])
	}
	t.Logf("full %d bytes, 1-line deltas up to %d bytes: %v", grow[0], deltaBytes, grow)

	// gc: only the last version reachable; its chain's bases stay.
	last := commitFile(t, s, "main", ZeroID, "f", v)
	if fileOf(t, s, last) != ids[len(ids)-1] {
		t.Fatal("commitFile stored another id")
	}
	if _, err := s.GC(ctx, GCOptions{}); err != nil {
		t.Fatal(err)
	}
	mustFsckOK(t, s)
	if got := readContent(t, s, ids[len(ids)-1]); !bytes.Equal(got, v) {
		t.Fatal("the last version after gc reads back different bytes")
	}
	if n2, _ := deltaRows(t, s); n2 == 0 || n2 >= n {
		t.Errorf("gc kept %d of %d delta rows; want the live chain only", n2, n)
	}

	// A large file: the changed chunk is a delta.
	big := textBytes(9, 200<<10)
	w, err := s.NewWriter(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	bid, _, err := w.WriteContentLike(bytes.NewReader(big), ZeroID)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Finish(nil); err != nil {
		t.Fatal(err)
	}
	big2 := editLine(big, 1000, "a changed line in a large file")
	w, err = s.NewWriter(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	bid2, _, err := w.WriteContentLike(bytes.NewReader(big2), bid)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Finish(nil); err != nil {
		t.Fatal(err)
	}
	if g := w.Stats().NewBytes; g > 1500 {
		t.Errorf("a 1-line edit of a 200 KiB file stored %d bytes", g)
	} else {
		t.Logf("1-line edit of a 200 KiB file: %d bytes", g)
	}
	if got := readContent(t, s, bid2); !bytes.Equal(got, big2) {
		t.Fatal("the edited large file reads back different bytes")
	}
	mustFsckOK(t, s)
}

// TestDeltaMiddles: each way of storing the middle round-trips, and a
// damaged record is ErrCorrupt, not a wrong payload.
func TestDeltaMiddles(t *testing.T) {
	base := textBytes(5, 60<<10)
	cases := map[string][]byte{
		"one line":   editLine(base, 100, "x"),
		"insertion":  append(append(bytes.Clone(base[:3000]), textBytes(8, 2000)...), base[3000:]...),
		"scattered":  base,
		"truncation": base[:20000],
		"same":       bytes.Clone(base),
	}
	sc := bytes.Clone(base)
	for i := 0; i < 60; i++ {
		sc = editLine(sc, i*17, fmt.Sprintf("scattered %d", i))
	}
	cases["scattered"] = sc
	var bid ID
	for name, p := range cases {
		d, err := encodeDelta(p, base, bid, 1)
		if err != nil {
			t.Fatal(err)
		}
		id := HashObject(KindChunk, p)
		got, err := decodeDelta(id, KindChunk, int64(len(p)), d, func(ID) ([]byte, error) { return base, nil })
		if err != nil || !bytes.Equal(got, p) {
			t.Errorf("%s: decode: %v (equal %v)", name, err, bytes.Equal(got, p))
		}
		t.Logf("%s: %d bytes for %d", name, len(d), len(p))
		bad := bytes.Clone(d)
		bad[len(bad)-1] ^= 0x40
		if len(d) > deltaHeader+4 {
			if _, err := decodeRecord(id, KindChunk, codecDelta, int64(len(p)), bad, func(ID) ([]byte, error) { return base, nil }); !errors.Is(err, ErrCorrupt) {
				t.Errorf("%s: a damaged delta: %v, want ErrCorrupt", name, err)
			}
		}
	}
}

// TestDeltaBaseCorrupt: a delta whose base is damaged fails to read as
// ErrCorrupt, and fsck reports both.
func TestDeltaBaseCorrupt(t *testing.T) {
	s := newStore(t)
	v1 := textBytes(3, 20<<10)
	c1 := commitFile(t, s, "main", ZeroID, "f", v1)
	base := fileOf(t, s, c1)
	ctx := context.Background()
	w, _ := s.NewWriter(ctx, "test")
	v2 := editLine(v1, 3, "changed")
	id2, err := w.WriteBytesLike(v2, base)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Finish(nil); err != nil {
		t.Fatal(err)
	}
	commitFile(t, s, "other", ZeroID, "f", v2)
	if n, _ := deltaRows(t, s); n != 1 {
		t.Fatalf("%d delta rows, want 1", n)
	}
	err = s.Update(ctx, func(tx *Tx) error {
		_, err := tx.exec(`UPDATE objects SET data = zeroblob(length(data)), codec = 0 WHERE id = ?`, base[:])
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	rc, err := s.OpenContent(ctx, id2)
	if err == nil {
		_, err = rc.Read(make([]byte, 10))
	}
	if !errors.Is(err, ErrCorrupt) {
		t.Errorf("reading a delta over a damaged base: %v, want ErrCorrupt", err)
	}
	rep, err := s.Fsck(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if findProblem(rep, ProblemCorrupt, base) == nil || findProblem(rep, ProblemCorrupt, id2) == nil {
		t.Errorf("fsck: %+v; want the base and the delta corrupt", rep.Problems)
	}
}
