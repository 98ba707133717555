package store

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
	"testing"
)

func TestContentRoundTrip(t *testing.T) {
	s := newStore(t)
	sizes := []struct {
		name string
		n    int
	}{
		{"empty", 0},
		{"one", 1},
		{"below threshold", SmallFileMax - 1},
		{"threshold", SmallFileMax},
		{"above threshold", SmallFileMax + 1},
		{"one max chunk", ChunkMax},
		{"multi MB", 5<<20 + 12345},
	}
	for i, tc := range sizes {
		for _, gen := range []struct {
			name string
			f    func(uint64, int) []byte
		}{{"random", randBytes}, {"text", textBytes}} {
			t.Run(tc.name+"/"+gen.name, func(t *testing.T) {
				b := gen.f(uint64(i+1), tc.n)
				id, _ := writeContent(t, s, b)
				if tc.n == 0 {
					if !id.IsZero() {
						t.Fatalf("empty content id = %s, want ZeroID", id)
					}
				}
				got := readContent(t, s, id)
				if !bytes.Equal(got, b) {
					t.Fatalf("read back %d bytes, differ from the %d written", len(got), len(b))
				}
				var buf bytes.Buffer
				n, err := s.ReadContentTo(context.Background(), id, &buf)
				if err != nil || n != int64(len(b)) || !bytes.Equal(buf.Bytes(), b) {
					t.Fatalf("ReadContentTo = %d, %v", n, err)
				}
				if tc.n > 0 {
					var k Kind
					s.View(context.Background(), func(tx *Tx) error {
						k, err = tx.kindOf(id)
						return err
					})
					want := KindChunk
					if tc.n > SmallFileMax {
						want = KindFile
					}
					if k != want {
						t.Fatalf("content of %d bytes is a %v, want %v", tc.n, k, want)
					}
				}
				// WriteBytes gives the same id.
				w, err := s.NewWriter(context.Background(), "test")
				if err != nil {
					t.Fatal(err)
				}
				id2, err := w.WriteBytes(b)
				if err != nil {
					t.Fatal(err)
				}
				if err := w.Finish(nil); err != nil {
					t.Fatal(err)
				}
				if id2 != id {
					t.Fatalf("WriteBytes id %s != WriteContent id %s", id2.Short(), id.Short())
				}
			})
		}
	}
	mustFsckOK(t, s)
}

// oneByteReader hands out one byte per Read, to exercise cutAll's refill.
type oneByteReader struct{ r io.Reader }

func (o oneByteReader) Read(p []byte) (int, error) {
	if len(p) > 1 {
		p = p[:1]
	}
	return o.r.Read(p)
}

func TestContentShortReads(t *testing.T) {
	s := newStore(t)
	b := randBytes(7, 3*ChunkMax+17)
	want, _ := writeContent(t, s, b)
	w, err := s.NewWriter(context.Background(), "test")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	got, n, err := w.WriteContent(oneByteReader{bytes.NewReader(b)})
	if err != nil || n != int64(len(b)) || got != want {
		t.Fatalf("WriteContent with 1-byte reads = %s, %d, %v; want %s", got.Short(), n, err, want.Short())
	}
}

// usedBytes is the size of the database's pages in use.
func usedBytes(tb testing.TB, s *Store) int64 {
	tb.Helper()
	var pages, free, size int64
	if err := s.db.QueryRow("PRAGMA page_count").Scan(&pages); err != nil {
		tb.Fatal(err)
	}
	s.db.QueryRow("PRAGMA freelist_count").Scan(&free)
	s.db.QueryRow("PRAGMA page_size").Scan(&size)
	return (pages - free) * size
}

// TestOneByteEditGrowth is the hard requirement on chunking: a 1-byte
// in-place edit of a 100 MB random file adds at most 256 KiB to the store,
// counted both as stored object bytes and as database pages in use.
func TestOneByteEditGrowth(t *testing.T) {
	size := 100 << 20
	if testing.Short() {
		size = 20 << 20
	}
	s := newStore(t)
	data := randBytes(2024, size)
	first, st := writeContent(t, s, data)
	t.Logf("%d MB in %d objects", size>>20, st.NewObjects)
	for _, off := range []int{0, size / 2, size/3 + 12345, size - 1} {
		before := usedBytes(t, s)
		edited := bytes.Clone(data)
		edited[off] ^= 0x5a
		id, st := writeContent(t, s, edited)
		grown := usedBytes(t, s) - before
		t.Logf("edit at %d: %d new objects, %d KiB stored, %d KiB of pages", off, st.NewObjects, st.NewBytes>>10, grown>>10)
		if id == first {
			t.Fatalf("edited content has the original's id")
		}
		if st.NewBytes > 256<<10 || grown > 256<<10 {
			t.Errorf("edit at %d added %d bytes of objects and %d bytes of pages, over 256 KiB", off, st.NewBytes, grown)
		}
	}
	if got := readContent(t, s, first); !bytes.Equal(got, data) {
		t.Fatal("original content changed")
	}
}

// TestChunkStats checks the chunk size distribution of FastCDC with the
// chosen parameters on random data: bounds respected, mean near the
// average, normalized chunking keeping most chunks within 2x of it.
func TestChunkStats(t *testing.T) {
	data := randBytes(5, 64<<20)
	var sizes []int
	for off := 0; off < len(data); {
		n := defaultCDC.cut(data[off:])
		if n <= 0 {
			t.Fatal("empty chunk")
		}
		off += n
		sizes = append(sizes, n)
	}
	var sum, near int
	for i, n := range sizes {
		sum += n
		if i < len(sizes)-1 && (n < ChunkMin || n > ChunkMax) {
			t.Fatalf("chunk %d has %d bytes, outside [%d, %d]", i, n, ChunkMin, ChunkMax)
		}
		if n >= ChunkAvg/2 && n <= 2*ChunkAvg {
			near++
		}
	}
	mean := sum / len(sizes)
	t.Logf("%d chunks, mean %d, %.1f%% within [avg/2, 2avg]", len(sizes), mean, 100*float64(near)/float64(len(sizes)))
	if mean < ChunkAvg*3/4 || mean > ChunkAvg*3/2 {
		t.Errorf("mean chunk size %d far from %d", mean, ChunkAvg)
	}
	if near*10 < len(sizes)*8 {
		t.Errorf("only %d of %d chunks within [avg/2, 2avg]", near, len(sizes))
	}
}

// TestContentDedupe: the same content written twice stores nothing new,
// and content shared between files is stored once.
func TestContentDedupe(t *testing.T) {
	s := newStore(t)
	data := randBytes(9, 3<<20)
	id1, st1 := writeContent(t, s, data)
	id2, st2 := writeContent(t, s, data)
	if id1 != id2 || st2.NewObjects != 0 || st2.ReusedObjects == 0 {
		t.Fatalf("rewrite: ids %s %s, stats %+v (first %+v)", id1.Short(), id2.Short(), st2, st1)
	}
	// Appending to the file stores only the tail.
	_, st3 := writeContent(t, s, append(bytes.Clone(data), randBytes(10, 1000)...))
	if st3.NewBytes > 3*ChunkMax {
		t.Errorf("append stored %d bytes", st3.NewBytes)
	}
}

// TestNestedReadsDoNotDeadlock: many goroutines reading content while each
// holds a View (as a materializer walking trees does) must not exhaust
// the connection pool.
func TestNestedReadsDoNotDeadlock(t *testing.T) {
	s := newStore(t)
	c := commitFile(t, s, "main", ZeroID, "f", randBytes(1, 200000))
	content := fileOf(t, s, c)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.View(context.Background(), func(tx *Tx) error {
				if _, err := tx.Ref("main"); err != nil {
					return err
				}
				_, err := s.ReadContentTo(context.Background(), content, io.Discard)
				return err
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
}

// TestWriterConcurrentUse shares one Writer between goroutines that write
// small and large content, retain each other's objects and put trees.
func TestWriterConcurrentUse(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	w, err := s.NewWriter(ctx, "shared")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	const workers, each = 8, 100
	entries := make([][]TreeEntry, workers)
	var wg sync.WaitGroup
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				b := textBytes(uint64(g*each+i), 100+i*37)
				id, err := w.WriteBytes(b)
				if err != nil {
					t.Error(err)
					return
				}
				if ok, err := w.Retain(id); !ok || err != nil {
					t.Errorf("Retain of own object = %v, %v", ok, err)
				}
				entries[g] = append(entries[g], TreeEntry{Name: fmt.Sprintf("s%03d", i), Type: TypeFile, Size: int64(len(b)), Content: id})
			}
			big := randBytes(uint64(g), 300000+g)
			id, n, err := w.WriteContent(bytes.NewReader(big))
			if err != nil {
				t.Error(err)
				return
			}
			entries[g] = append(entries[g], TreeEntry{Name: "z", Type: TypeFile, Size: n, Content: id})
			if g%2 == 0 {
				if err := w.Flush(); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	var root Tree
	for g := range workers {
		sub, err := w.PutTree(&Tree{Entries: entries[g]})
		if err != nil {
			t.Fatal(err)
		}
		root.Entries = append(root.Entries, TreeEntry{Name: fmt.Sprintf("g%d", g), Type: TypeDir, Content: sub})
	}
	rt, err := w.PutTree(&root)
	if err != nil {
		t.Fatal(err)
	}
	err = w.Finish(func(tx *Tx) error {
		c, err := tx.PutCommit(&Commit{Tree: rt})
		if err != nil {
			return err
		}
		return tx.SetRef("main", ZeroID, c)
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteBytes([]byte("late")); err == nil {
		t.Error("WriteBytes after Finish succeeded")
	}
	mustFsckOK(t, s)
	for g := range workers {
		e := entries[g][len(entries[g])-1]
		if got := readContent(t, s, e.Content); !bytes.Equal(got, randBytes(uint64(g), 300000+g)) {
			t.Fatalf("worker %d large file differs", g)
		}
	}
	st := w.Stats()
	if st.ContentBytes == 0 || st.NewObjects == 0 {
		t.Errorf("stats = %+v", st)
	}
}
