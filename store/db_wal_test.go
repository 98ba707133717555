package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkOpenWriteClose is a CLI call that writes: Open, one durable
// transaction (a branch moves), Close — what ws create, commit and branch
// pay besides their own work. It is where re-creating the -wal and -shm
// files and the checkpoint of the last connection's close showed.
func BenchmarkOpenWriteClose(b *testing.B) {
	dir := b.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		b.Fatal(err)
	}
	c := commitFile(b, s, "main", ZeroID, "f", []byte("x"))
	s.Close()
	i := 0
	for b.Loop() {
		s, err := Open(dir, Options{})
		if err != nil {
			b.Fatal(err)
		}
		i++
		if err := s.Update(context.Background(), func(tx *Tx) error {
			return tx.SetRef(fmt.Sprint("b", i), ZeroID, c)
		}); err != nil {
			b.Fatal(err)
		}
		s.Close()
	}
}

// BenchmarkOpenWALFrames is what a process's first open pays for the WAL
// a previous process left: SQLite rebuilds the wal-index from every frame
// (the first connection of a process truncates -shm). The frames are 7 KB
// rows, one 8 KiB page each.
func BenchmarkOpenWALFrames(b *testing.B) {
	for _, n := range []int{0, 16, 128, 900} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			defer func(v int64) { walCloseCheckpoint = v }(walCloseCheckpoint)
			walCloseCheckpoint = 1 << 40 // keep the WAL this benchmark builds
			dir := b.TempDir()
			s, err := Open(dir, Options{})
			if err != nil {
				b.Fatal(err)
			}
			c := commitFile(b, s, "main", ZeroID, "f", []byte("x"))
			s.truncateWAL(s.db)
			conn, err := s.db.Conn(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			for _, q := range []string{"PRAGMA wal_autocheckpoint = 0", "CREATE TABLE pad(x BLOB)"} {
				if _, err := conn.ExecContext(context.Background(), q); err != nil {
					b.Fatal(err)
				}
			}
			for i := 0; i < n; i++ {
				if _, err := conn.ExecContext(context.Background(), "INSERT INTO pad VALUES(randomblob(7000))"); err != nil {
					b.Fatal(err)
				}
			}
			conn.Close()
			s.Close()
			for b.Loop() {
				s, err := Open(dir, Options{})
				if err != nil {
					b.Fatal(err)
				}
				if err := s.View(context.Background(), func(tx *Tx) error {
					_, err := tx.Has(c)
					return err
				}); err != nil {
					b.Fatal(err)
				}
				s.Close()
			}
		})
	}
}

// BenchmarkWriteCloseTrunc is a run of CLI calls that write a little each
// (two transactions, as a commit's), under close policies: never truncate
// the WAL (each open recovers a growing WAL, up to SQLite's automatic
// checkpoint), truncate at every close, and at 128 KiB or 512 KiB.
func BenchmarkWriteCloseTrunc(b *testing.B) {
	for _, lim := range []int64{1 << 40, 0, 128 << 10, 512 << 10} {
		b.Run(fmt.Sprint(lim), func(b *testing.B) {
			defer func(v int64) { walCloseCheckpoint = v }(walCloseCheckpoint)
			walCloseCheckpoint = lim
			dir := b.TempDir()
			s, err := Open(dir, Options{})
			if err != nil {
				b.Fatal(err)
			}
			c := commitFile(b, s, "main", ZeroID, "f", []byte("x"))
			s.Close()
			i := 0
			for b.Loop() {
				s, err := Open(dir, Options{})
				if err != nil {
					b.Fatal(err)
				}
				i++
				name := fmt.Sprint("b", i%50)
				if err := s.Update(context.Background(), func(tx *Tx) error { return tx.SetRef(name, ZeroID, c) }); err != nil {
					b.Fatal(err)
				}
				if err := s.Update(context.Background(), func(tx *Tx) error { return tx.SetRef(name, c, ZeroID) }); err != nil {
					b.Fatal(err)
				}
				s.Close()
			}
		})
	}
}

// TestWALKeptAtClose: closing the last connection leaves a small
// strata.db-wal (with the transaction in it: no checkpoint) and -shm in
// place; the next open, read-write or read-only, sees the transaction; a
// WAL larger than walCloseCheckpoint is checkpointed and truncated by
// Close.
func TestWALKeptAtClose(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	commitFile(t, s, "first", ZeroID, "f", []byte("x"))
	s.Close() // a new store's WAL holds its schema: more than walCloseCheckpoint
	if s, err = Open(dir, Options{}); err != nil {
		t.Fatal(err)
	}
	c := commitFile(t, s, "main", ZeroID, "f", []byte("x"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wal := filepath.Join(dir, DBName+"-wal")
	fi, err := os.Stat(wal)
	if err != nil || fi.Size() == 0 {
		t.Fatalf("after Close: %s: %v (size %d); want the WAL kept, not checkpointed", wal, err, sizeOf(fi))
	}
	if _, err := os.Stat(filepath.Join(dir, DBName+"-shm")); err != nil {
		t.Fatalf("after Close: %v", err)
	}
	for _, ro := range []bool{false, true} {
		s, err := Open(dir, Options{ReadOnly: ro})
		if err != nil {
			t.Fatal(err)
		}
		var got ID
		err = s.View(context.Background(), func(tx *Tx) error { got, err = tx.Ref("main"); return err })
		s.Close()
		if err != nil || got != c {
			t.Fatalf("reopened (read-only %v): main = %s, %v; want %s", ro, got.Short(), err, c.Short())
		}
	}
	// A WAL grown past walCloseCheckpoint: Close checkpoints it into
	// strata.db and truncates it, so that the next process's open has
	// nothing to recover.
	defer func(v int64) { walCloseCheckpoint = v }(walCloseCheckpoint)
	walCloseCheckpoint = 64 << 10
	s, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	big := randBytes(7, 1<<20)
	commitFile(t, s, "big", ZeroID, "big", big)
	fi, _ = os.Stat(wal)
	if sizeOf(fi) <= walCloseCheckpoint {
		t.Fatalf("WAL %d bytes after a %d-byte commit", sizeOf(fi), len(big))
	}
	db := filepath.Join(dir, DBName)
	before, _ := os.Stat(db)
	s.Close()
	after, _ := os.Stat(db)
	if sizeOf(after)-sizeOf(before) < int64(len(big))/2 {
		t.Fatalf("Close of a %d-byte WAL: strata.db %d → %d bytes; want the WAL checkpointed into it", sizeOf(fi), sizeOf(before), sizeOf(after))
	}
	if fi, err := os.Stat(wal); err != nil || fi.Size() != 0 {
		t.Fatalf("after Close of a %d-byte WAL: %s is %d bytes (%v); want it kept, truncated", len(big), wal, sizeOf(fi), err)
	}
}

// TestCloseDoesNotWaitForReaders: a Close that would truncate the WAL
// while another connection reads does not wait for it (the busy timeout
// is a minute): it leaves the WAL, and a later Close truncates it.
func TestCloseDoesNotWaitForReaders(t *testing.T) {
	dir := t.TempDir()
	reader, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	commitFile(t, reader, "main", ZeroID, "f", []byte("x"))
	wal := filepath.Join(dir, DBName+"-wal")
	err = reader.View(context.Background(), func(tx *Tx) error {
		if _, err := tx.Ref("main"); err != nil { // the read snapshot starts here
			return err
		}
		w, err := Open(dir, Options{})
		if err != nil {
			return err
		}
		commitFile(t, w, "big", ZeroID, "big", randBytes(8, 1<<20))
		done := make(chan error, 1)
		go func() { done <- w.Close() }()
		select {
		case err := <-done:
			if err != nil {
				return err
			}
		case <-time.After(30 * time.Second):
			t.Fatal("Close waited for a reader")
		}
		if fi, err := os.Stat(wal); err != nil || fi.Size() == 0 {
			t.Errorf("Close truncated the WAL under a reader's snapshot (size %d, %v)", sizeOf(fi), err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := reader.Close(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(wal); err != nil || fi.Size() != 0 {
		t.Fatalf("the last Close, with no reader left: WAL %d bytes (%v); want it truncated", sizeOf(fi), err)
	}
}

func sizeOf(fi os.FileInfo) int64 {
	if fi == nil {
		return -1
	}
	return fi.Size()
}

// TestFullWithWAL: on a full filesystem a store whose close left its WAL
// opens (the -shm need not grow) but read-only, as Full, with what the WAL
// holds readable and writes refused as ErrNoSpace before they start.
func TestFullWithWAL(t *testing.T) {
	requireMount(t)
	dir := t.TempDir()
	mount(t, "-t", "tmpfs", "-o", "size=4m", "tmpfs", dir)
	unmountAtCleanup(t, dir)
	// A WAL left by a close while space was ample (below walLowSpace a
	// close truncates it: TestLowSpaceCloseTruncatesWAL).
	defer func(v int64) { walLowSpace = v }(walLowSpace)
	walLowSpace = 0
	defer func(v int64) { walCloseCheckpoint = v }(walCloseCheckpoint)
	walCloseCheckpoint = 1 << 40
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := commitFile(t, s, "main", ZeroID, "f", []byte("in the WAL"))
	s.Close()
	if fi, err := os.Stat(filepath.Join(dir, DBName+"-wal")); err != nil || fi.Size() == 0 {
		t.Fatalf("no WAL after close: %v", err)
	}
	f, err := os.Create(filepath.Join(dir, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			break
		}
	}
	f.Close()
	if !FSFull(dir) {
		t.Fatal("not full")
	}
	s, err = Open(dir, Options{ReadOnlyWhenFull: true})
	if err != nil {
		t.Fatalf("open on a full filesystem: %v", err)
	}
	defer s.Close()
	if !s.Full() || !s.ReadOnly() {
		t.Errorf("Full %v, ReadOnly %v; want both", s.Full(), s.ReadOnly())
	}
	var got ID
	err = s.View(context.Background(), func(tx *Tx) error { got, err = tx.Ref("main"); return err })
	if err != nil || got != c {
		t.Errorf("main = %s, %v; want %s (from the WAL)", got.Short(), err, c.Short())
	}
	if _, err := s.NewWriter(context.Background(), "x"); !errors.Is(err, ErrNoSpace) {
		t.Errorf("NewWriter on a full store: %v; want ErrNoSpace", err)
	}
}

// TestLowSpaceCloseTruncatesWAL pins a deadlock the kept WAL made: on a
// small filesystem a store whose every close kept its WAL lived in the
// WAL (strata.db a page), a write that then ran out of space left its
// frames there too, and once the filesystem was full no checkpoint could
// copy the WAL into strata.db — gc could never give the space back. Short
// of space, a close checkpoints and truncates the WAL; gc's ReclaimWAL
// does the same for a WAL a killed process left.
func TestLowSpaceCloseTruncatesWAL(t *testing.T) {
	requireMount(t)
	dir := t.TempDir()
	mount(t, "-t", "tmpfs", "-o", "size=8m", "tmpfs", dir)
	unmountAtCleanup(t, dir)
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	commitFile(t, s, "main", ZeroID, "f", []byte("in strata.db after the close"))
	s.Close()
	if fi, err := os.Stat(filepath.Join(dir, DBName+"-wal")); err == nil && fi.Size() != 0 {
		t.Errorf("a close with %d MiB free kept a %d-byte WAL", 8, fi.Size())
	}

	// A WAL a killed process left on a now-full filesystem: gc's
	// ReclaimWAL truncates it.
	walLowSpace = 0
	defer func() { walLowSpace = 64 << 20 }()
	s, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	commitFile(t, s, "main2", ZeroID, "g", []byte("left in the WAL"))
	s.Close()
	if fi, err := os.Stat(filepath.Join(dir, DBName+"-wal")); err != nil || fi.Size() == 0 {
		t.Fatalf("no WAL to reclaim: %v", err)
	}
	if !ReclaimWAL(dir) {
		t.Fatal("ReclaimWAL did not empty the WAL")
	}
	s, err = Open(dir, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.View(context.Background(), func(tx *Tx) error {
		for _, b := range []string{"main", "main2"} {
			if _, err := tx.Ref(b); err != nil {
				return fmt.Errorf("branch %s after ReclaimWAL: %w", b, err)
			}
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}
