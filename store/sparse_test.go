package store

import (
	"bytes"
	"context"
	"testing"
)

// holeRecorder is a HoleWriter that records what it was given.
type holeRecorder struct {
	buf   bytes.Buffer
	holes []Extent
}

func (h *holeRecorder) Write(p []byte) (int, error) { return h.buf.Write(p) }
func (h *holeRecorder) WriteHole(n int64) error {
	h.holes = append(h.holes, Extent{Off: int64(h.buf.Len()), Len: n})
	h.buf.Write(make([]byte, n))
	return nil
}

// TestSparseContent stores content with holes: the holes cost no chunks,
// reads give zeros, a HoleWriter is told where the holes are, fsck
// accepts hole refs and gc keeps the data chunks.
func TestSparseContent(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	const size = 8 << 20
	full := make([]byte, size)
	d1 := randBytes(1, 100<<10)
	d2 := randBytes(2, 300<<10)
	copy(full[1<<20:], d1)
	copy(full[5<<20:], d2)
	data := []Extent{{1 << 20, int64(len(d1))}, {5 << 20, int64(len(d2))}}

	w, err := s.NewWriter(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	id, n, err := w.WriteSparse(bytes.NewReader(full), size, data)
	if err != nil {
		t.Fatal(err)
	}
	if n != size {
		t.Fatalf("WriteSparse covered %d bytes, want %d", n, size)
	}
	tree, err := w.PutTree(&Tree{Entries: []TreeEntry{{Name: "f", Type: TypeFile, Mode: 0o644, Size: size, Content: id}}})
	if err != nil {
		t.Fatal(err)
	}
	err = w.Finish(func(tx *Tx) error {
		cid, err := tx.PutCommit(&Commit{Tree: tree, Message: "sparse", TimeNs: 1, Stats: CommitStats{Files: 1, Bytes: size}})
		if err != nil {
			return err
		}
		return tx.SetRef("main", ZeroID, cid)
	})
	if err != nil {
		t.Fatal(err)
	}
	st := w.Stats()
	if st.NewBytes > 1<<20 {
		t.Errorf("stored %d bytes for 400 KiB of random data in an 8 MiB sparse file", st.NewBytes)
	}
	if got := readContent(t, s, id); !bytes.Equal(got, full) {
		t.Fatal("sparse content reads back different bytes")
	}
	var h holeRecorder
	if _, err := s.ReadContentTo(ctx, id, &h); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(h.buf.Bytes(), full) {
		t.Fatal("sparse content written to a HoleWriter differs")
	}
	want := []Extent{{0, 1 << 20}, {1<<20 + int64(len(d1)), 4<<20 - int64(len(d1))}, {5<<20 + int64(len(d2)), 3<<20 - int64(len(d2))}}
	if len(h.holes) != len(want) {
		t.Fatalf("holes %v, want %v", h.holes, want)
	}
	for i := range want {
		if h.holes[i] != want[i] {
			t.Fatalf("holes %v, want %v", h.holes, want)
		}
	}
	if _, err := s.GC(ctx, GCOptions{}); err != nil {
		t.Fatal(err)
	}
	mustFsckOK(t, s)
	if got := readContent(t, s, id); !bytes.Equal(got, full) {
		t.Fatal("sparse content differs after gc")
	}

	// All hole, and bad extents.
	w2, err := s.NewWriter(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Abort()
	hid, _, err := w2.WriteSparse(bytes.NewReader(nil), 1<<30, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w2.Flush(); err != nil {
		t.Fatal(err)
	}
	var h2 holeRecorder
	h2.buf.Grow(0)
	if n, err := s.ReadContentTo(ctx, hid, countingHoles{&h2.holes}); err != nil || n != 1<<30 {
		t.Fatalf("all-hole content: %d bytes, %v", n, err)
	}
	if len(h2.holes) != 1 || h2.holes[0].Len != 1<<30 {
		t.Fatalf("all-hole content: holes %v", h2.holes)
	}
	if _, _, err := w2.WriteSparse(bytes.NewReader(full), size, []Extent{{10, 5}, {12, 5}}); err == nil {
		t.Fatal("WriteSparse accepted overlapping extents")
	}
}

// countingHoles records holes and discards data.
type countingHoles struct{ holes *[]Extent }

func (c countingHoles) Write(p []byte) (int, error) { return len(p), nil }
func (c countingHoles) WriteHole(n int64) error {
	*c.holes = append(*c.holes, Extent{Len: n})
	return nil
}
