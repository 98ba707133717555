package store

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// dbFiles returns the size and modification time of strata.db and its
// WAL, to show that nothing was written.
func dbFiles(tb testing.TB, s *Store) string {
	tb.Helper()
	var b strings.Builder
	for _, suf := range []string{"", "-wal"} {
		fi, err := os.Stat(s.path + suf)
		if errors.Is(err, os.ErrNotExist) {
			b.WriteString(suf + ": none; ")
			continue
		}
		if err != nil {
			tb.Fatal(err)
		}
		b.WriteString(suf + ": " + fi.ModTime().String() + " " + itoa64(fi.Size()) + "; ")
	}
	return b.String()
}

func itoa64(n int64) string {
	var b [20]byte
	i := len(b)
	if n == 0 {
		return "0"
	}
	for ; n > 0; n /= 10 {
		i--
		b[i] = byte('0' + n%10)
	}
	return string(b[i:])
}

func leaseCount(tb testing.TB, s *Store) int {
	tb.Helper()
	var n int
	if err := s.db.QueryRow(`SELECT count(*) FROM leases`).Scan(&n); err != nil {
		tb.Fatal(err)
	}
	return n
}

// TestScratchWriter: a scratch Writer gives the ids a Writer gives for the
// same content and trees (small, large, sparse), keeps them out of the
// database (no object, no lease, the database files untouched), and this
// Store reads them — trees through a transaction, content through
// ReadContentTo — until Abort, after which they are gone.
func TestScratchWriter(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	ref := newStore(t)
	existing, _ := writeContent(t, s, textBytes(1, 5000))

	small := textBytes(2, 3000)
	large := randBytes(3, 700<<10)
	sparse := append(make([]byte, 256<<10), randBytes(4, 100<<10)...)
	sparse = append(sparse, make([]byte, 128<<10)...)
	ext := []Extent{{Off: 256 << 10, Len: 100 << 10}}

	type ids struct{ small, large, sparse, tree ID }
	write := func(w *Writer) ids {
		var out ids
		var err error
		if out.small, err = w.WriteBytes(small); err != nil {
			t.Fatal(err)
		}
		if out.large, _, err = w.WriteContent(bytes.NewReader(large)); err != nil {
			t.Fatal(err)
		}
		if out.sparse, _, err = w.WriteSparse(bytes.NewReader(sparse), int64(len(sparse)), ext); err != nil {
			t.Fatal(err)
		}
		if out.tree, err = w.PutTree(&Tree{Entries: []TreeEntry{
			{Name: "a", Type: TypeFile, Mode: 0o644, Size: int64(len(small)), Content: out.small},
			{Name: "b", Type: TypeFile, Mode: 0o644, Size: int64(len(large)), Content: out.large},
			{Name: "c", Type: TypeFile, Mode: 0o644, Size: int64(len(sparse)), Content: out.sparse},
		}}); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	rw, err := ref.NewWriter(ctx, "reference")
	if err != nil {
		t.Fatal(err)
	}
	want := write(rw)
	rw.Abort()

	before, objs := dbFiles(t, s), objectTotal(t, s)
	w, err := s.NewScratchWriter(ctx, "test diff")
	if err != nil {
		t.Fatal(err)
	}
	if !w.Scratch() {
		t.Fatal("Scratch() is false for a scratch Writer")
	}
	got := write(w)
	if got != want {
		t.Fatalf("scratch ids %+v, want a Writer's %+v", got, want)
	}
	if ok, err := w.Retain(existing); err != nil || !ok {
		t.Fatalf("Retain of an existing object: %v %v", ok, err)
	}
	if ok, err := w.Retain(HashObject(KindChunk, []byte("absent"))); err != nil || ok {
		t.Fatalf("Retain of a missing object: %v %v", ok, err)
	}
	if err := w.Finish(func(tx *Tx) error { return nil }); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Finish with a function: %v, want ErrReadOnly", err)
	}
	if n := objectTotal(t, s); n != objs {
		t.Errorf("the database holds %d objects after the scratch writes, %d before", n, objs)
	}
	if n := leaseCount(t, s); n != 0 {
		t.Errorf("%d leases after the scratch writes", n)
	}
	if after := dbFiles(t, s); after != before {
		t.Errorf("database files changed: %s → %s", before, after)
	}

	// Read back through the Store.
	err = s.View(ctx, func(tx *Tx) error {
		tr, err := tx.Tree(got.tree)
		if err != nil {
			return err
		}
		if len(tr.Entries) != 3 || tr.Entries[1].Content != got.large {
			t.Errorf("tree read back: %+v", tr.Entries)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id   ID
		want []byte
	}{{got.small, small}, {got.large, large}, {got.sparse, sparse}} {
		if b := readContent(t, s, c.id); !bytes.Equal(b, c.want) {
			t.Errorf("content %s read back: %d bytes, want %d equal", c.id.Short(), len(b), len(c.want))
		}
		var buf bytes.Buffer
		if _, err := s.ReadContentTo(ctx, c.id, &buf); err != nil || !bytes.Equal(buf.Bytes(), c.want) {
			t.Errorf("ReadContentTo %s: %v", c.id.Short(), err)
		}
	}

	if err := w.Abort(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.OpenContent(ctx, got.large); !errors.Is(err, ErrNotFound) {
		t.Errorf("content of an aborted scratch Writer: %v, want ErrNotFound", err)
	}
	if after := dbFiles(t, s); after != before {
		t.Errorf("database files changed: %s → %s", before, after)
	}
}

func objectTotal(tb testing.TB, s *Store) int64 {
	tb.Helper()
	m, err := s.ObjectCount(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// TestScratchReadOnlyStore: a scratch Writer works on a store opened
// read-only, where a Writer is refused.
func TestScratchReadOnlyStore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	base, _ := writeContent(t, s, textBytes(7, 20000))
	s.Close()
	ro, err := Open(dir, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if _, err := ro.NewWriter(ctx, "x"); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("NewWriter on a read-only store: %v", err)
	}
	w, err := ro.NewScratchWriter(ctx, "diff")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	b := append(textBytes(7, 20000), "one more line\n"...)
	id, _, err := w.WriteContentLike(bytes.NewReader(b), base)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := w.Retain(base); err != nil || !ok {
		t.Fatalf("Retain on a read-only store: %v %v", ok, err)
	}
	if got := readContent(t, ro, id); !bytes.Equal(got, b) {
		t.Errorf("read back %d bytes, want %d", len(got), len(b))
	}
}

// TestScratchBudget: past its budget a scratch Writer keeps only the ids
// of chunks; content whose source file was named is read from that file
// again, each chunk verified, so a file changed since fails the read
// (never shows other bytes); content with no source fails too.
func TestScratchBudget(t *testing.T) {
	defer func(b int64) { scratchBudget = b }(scratchBudget)
	scratchBudget = 200 << 10
	ctx := context.Background()
	s := newStore(t)
	w, err := s.NewScratchWriter(ctx, "diff")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	src := filepath.Join(t.TempDir(), "big")
	data := randBytes(9, 3<<20)
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	id, _, err := w.WriteContent(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	w.NoteSource(id, src)
	noSrc, _, err := w.WriteContent(bytes.NewReader(randBytes(10, 1<<20)))
	if err != nil {
		t.Fatal(err)
	}
	_, kept, dropped := w.ScratchStats()
	if kept > scratchBudget || dropped == 0 {
		t.Fatalf("kept %d bytes (budget %d), dropped %d chunks", kept, scratchBudget, dropped)
	}
	if got := readContent(t, s, id); !bytes.Equal(got, data) {
		t.Fatalf("content read again from its file: %d bytes, want %d equal", len(got), len(data))
	}
	var sink bytes.Buffer
	if _, err := s.ReadContentTo(ctx, noSrc, &sink); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "not kept in memory") {
		t.Errorf("content with dropped chunks and no source: %v", err)
	}
	// The file changes after it was read: the read fails.
	data[2<<20] ^= 1
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	rc, err := s.OpenContent(ctx, id)
	if err == nil {
		_, err = io.Copy(io.Discard, rc)
		rc.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "changed after it was read") {
		t.Errorf("reading a source that changed: %v", err)
	}
}
