package store

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkWriteContent measures WriteContent throughput (MB/s) on one
// large file of random (incompressible) and text-like content, from
// NewWriter to Finish, into a fresh store each time.
func BenchmarkWriteContent(b *testing.B) {
	const size = 64 << 20
	for _, gen := range []struct {
		name string
		f    func(uint64, int) []byte
	}{{"random", randBytes}, {"text", textBytes}} {
		data := gen.f(1, size)
		for _, workers := range []int{1, 0} {
			name := fmt.Sprintf("%s/workers=%d", gen.name, workers)
			if workers == 0 {
				name = gen.name + "/workers=GOMAXPROCS"
			}
			b.Run(name, func(b *testing.B) {
				contentWorkers = workers
				defer func() { contentWorkers = 0 }()
				b.SetBytes(size)
				for b.Loop() {
					b.StopTimer()
					s, err := Open(b.TempDir(), Options{})
					if err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					w, err := s.NewWriter(context.Background(), "bench")
					if err != nil {
						b.Fatal(err)
					}
					if _, _, err := w.WriteContent(bytes.NewReader(data)); err != nil {
						b.Fatal(err)
					}
					if err := w.Finish(nil); err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					s.Close()
					b.StartTimer()
				}
			})
		}
	}
}

// smallBlobs returns n blobs of 100 B to 8 KiB, sizes skewed small as in
// a source tree, half text-like and half random.
func smallBlobs(n int) [][]byte {
	out := make([][]byte, n)
	sz := randBytes(99, 4*n)
	for i := range out {
		// log-uniform between 100 B and 8 KiB
		u := float64(uint32(sz[4*i])|uint32(sz[4*i+1])<<8|uint32(sz[4*i+2])<<16) / (1 << 24)
		size := int(100 * math.Pow(8192.0/100, u))
		if i%2 == 0 {
			out[i] = textBytes(uint64(i), size)
		} else {
			out[i] = randBytes(uint64(i), size)
		}
	}
	return out
}

// BenchmarkSmallObjects compares ways of storing 22k small blobs (100 B to
// 8 KiB): as rows through a Writer (what the store does), as rows of a
// rowid table with a unique index on id and of a WITHOUT ROWID table by
// plain SQL, and packed into ~1 MiB compressed packs with an index row per
// blob. It reports the database size and the time to read 1000 blobs at
// random. docs/store.md records the figures and the decision.
func BenchmarkSmallObjects(b *testing.B) {
	const n = 22000
	blobs := smallBlobs(n)
	ids := make([]ID, n)
	var raw int64
	for i, p := range blobs {
		ids[i] = HashObject(KindChunk, p)
		raw += int64(len(p))
	}
	report := func(b *testing.B, db *sql.DB, read func(id ID) error) {
		b.StopTimer()
		var pages, psz int64
		db.QueryRow("PRAGMA page_count").Scan(&pages)
		db.QueryRow("PRAGMA page_size").Scan(&psz)
		b.ReportMetric(float64(pages*psz)/float64(raw), "size/raw")
		t0 := time.Now()
		for i := range 1000 {
			if err := read(ids[(i*7919)%n]); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(time.Since(t0).Microseconds())/1000, "µs/read")
		b.StartTimer()
	}
	b.Run("writer", func(b *testing.B) {
		b.SetBytes(raw)
		for b.Loop() {
			b.StopTimer()
			s, err := Open(b.TempDir(), Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			w, err := s.NewWriter(context.Background(), "bench")
			if err != nil {
				b.Fatal(err)
			}
			for _, p := range blobs {
				if _, err := w.WriteBytes(p); err != nil {
					b.Fatal(err)
				}
			}
			if err := w.Finish(nil); err != nil {
				b.Fatal(err)
			}
			report(b, s.db, func(id ID) error { _, _, err := s.getObject(context.Background(), id); return err })
			b.StopTimer()
			s.Close()
			b.StartTimer()
		}
	})
	for _, layout := range []struct {
		name, schema string
	}{
		{"rows-rowid", `CREATE TABLE o (rowid INTEGER PRIMARY KEY, id BLOB NOT NULL, kind INTEGER, codec INTEGER, size INTEGER, data BLOB);
			CREATE UNIQUE INDEX o_id ON o(id)`},
		{"rows-without-rowid", `CREATE TABLE o (id BLOB PRIMARY KEY, kind INTEGER, codec INTEGER, size INTEGER, data BLOB) WITHOUT ROWID`},
	} {
		b.Run(layout.name, func(b *testing.B) {
			b.SetBytes(raw)
			for b.Loop() {
				b.StopTimer()
				db := benchDB(b, layout.schema)
				b.StartTimer()
				tx, _ := db.Begin()
				st, _ := tx.Prepare(`INSERT INTO o (id, kind, codec, size, data) VALUES (?, 1, ?, ?, ?)`)
				for i, p := range blobs {
					c, d := compress(p)
					if _, err := st.Exec(ids[i][:], c, len(p), d); err != nil {
						b.Fatal(err)
					}
				}
				if err := tx.Commit(); err != nil {
					b.Fatal(err)
				}
				report(b, db, func(id ID) error {
					var c, sz int64
					var d []byte
					if err := db.QueryRow(`SELECT codec, size, data FROM o WHERE id = ?`, id[:]).Scan(&c, &sz, &d); err != nil {
						return err
					}
					_, err := decodeRecord(id, KindChunk, c, sz, d, nil)
					return err
				})
				b.StopTimer()
				db.Close()
				b.StartTimer()
			}
		})
	}
	b.Run("packed", func(b *testing.B) {
		b.SetBytes(raw)
		for b.Loop() {
			b.StopTimer()
			db := benchDB(b, `CREATE TABLE packs (rowid INTEGER PRIMARY KEY, codec INTEGER, size INTEGER, data BLOB);
				CREATE TABLE o (rowid INTEGER PRIMARY KEY, id BLOB NOT NULL, pack INTEGER, off INTEGER, len INTEGER);
				CREATE UNIQUE INDEX o_id ON o(id)`)
			b.StartTimer()
			tx, _ := db.Begin()
			pst, _ := tx.Prepare(`INSERT INTO packs (codec, size, data) VALUES (?, ?, ?)`)
			ost, _ := tx.Prepare(`INSERT INTO o (id, pack, off, len) VALUES (?, ?, ?, ?)`)
			var pack []byte
			var members []int
			flush := func() {
				c, d := compress(pack)
				r, err := pst.Exec(c, len(pack), d)
				if err != nil {
					b.Fatal(err)
				}
				pid, _ := r.LastInsertId()
				off := 0
				for _, i := range members {
					ost.Exec(ids[i][:], pid, off, len(blobs[i]))
					off += len(blobs[i])
				}
				pack, members = pack[:0], members[:0]
			}
			for i, p := range blobs {
				pack = append(pack, p...)
				members = append(members, i)
				if len(pack) >= 1<<20 {
					flush()
				}
			}
			flush()
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
			report(b, db, func(id ID) error {
				var pid, off, n, c, sz int64
				var d []byte
				if err := db.QueryRow(`SELECT pack, off, len FROM o WHERE id = ?`, id[:]).Scan(&pid, &off, &n); err != nil {
					return err
				}
				if err := db.QueryRow(`SELECT codec, size, data FROM packs WHERE rowid = ?`, pid).Scan(&c, &sz, &d); err != nil {
					return err
				}
				if c == codecZstd {
					var err error
					if d, err = decodeAll(d, make([]byte, 0, sz)); err != nil {
						return err
					}
				}
				if HashObject(KindChunk, d[off:off+n]) != id {
					return ErrCorrupt
				}
				return nil
			})
			b.StopTimer()
			db.Close()
			b.StartTimer()
		}
	})
}

// benchDB opens a database with the store's settings and schema.
func benchDB(b *testing.B, schema string) *sql.DB {
	b.Helper()
	s := &Store{path: filepath.Join(b.TempDir(), DBName), busy: DefaultBusyTimeout}
	if err := s.create(); err != nil {
		b.Fatal(err)
	}
	db, err := sql.Open("sqlite", dsn(s.path, rwParams(DefaultBusyTimeout, "FULL")))
	if err != nil {
		b.Fatal(err)
	}
	for _, q := range strings.Split(schema, ";") {
		if _, err := db.Exec(q); err != nil {
			b.Fatal(err)
		}
	}
	return db
}

// BenchmarkRetain measures Writer.Retain of existing objects (the stat
// cache path of a re-import), called from one goroutine and from 8.
func BenchmarkRetain(b *testing.B) {
	s, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	blobs := smallBlobs(4096)
	w, _ := s.NewWriter(context.Background(), "setup")
	ids := make([]ID, len(blobs))
	for i, p := range blobs {
		ids[i], _ = w.WriteBytes(p)
	}
	if err := w.Finish(nil); err != nil {
		b.Fatal(err)
	}
	for _, par := range []int{1, 8} {
		b.Run(fmt.Sprintf("goroutines=%d", par), func(b *testing.B) {
			w, _ := s.NewWriter(context.Background(), "bench")
			defer w.Abort()
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			for range par {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1) - 1
						if i >= int64(b.N) {
							return
						}
						if ok, err := w.Retain(ids[i%int64(len(ids))]); !ok || err != nil {
							b.Error(ok, err)
							return
						}
						if i%int64(len(ids)) == int64(len(ids))-1 {
							// start over with a fresh known set
							w.mu.Lock()
							w.known = make(map[ID]struct{})
							w.mu.Unlock()
						}
					}
				}()
			}
			wg.Wait()
		})
	}
}

// BenchmarkGC measures a collection of a store holding 10k reachable and
// 10k garbage small files in trees of 100 entries, plus a 20 MB large
// file of each.
func BenchmarkGC(b *testing.B) {
	const n = 10000
	blobs := smallBlobs(2 * n)
	big := [2][]byte{randBytes(1, 20<<20), randBytes(2, 20<<20)}
	setup := func(b *testing.B) *Store {
		s, err := Open(b.TempDir(), Options{})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		for half := range 2 {
			w, _ := s.NewWriter(ctx, "setup")
			var root Tree
			for d := range n / 100 {
				var sub Tree
				for i := range 100 {
					p := blobs[half*n+d*100+i]
					id, err := w.WriteBytes(p)
					if err != nil {
						b.Fatal(err)
					}
					sub.Entries = append(sub.Entries, TreeEntry{Name: fmt.Sprintf("f%03d", i), Type: TypeFile, Size: int64(len(p)), Content: id})
				}
				tid, _ := w.PutTree(&sub)
				root.Entries = append(root.Entries, TreeEntry{Name: fmt.Sprintf("d%03d", d), Type: TypeDir, Content: tid})
			}
			bid, _, _ := w.WriteContent(bytes.NewReader(big[half]))
			root.Entries = append(root.Entries, TreeEntry{Name: "zbig", Type: TypeFile, Size: int64(len(big[half])), Content: bid})
			rid, _ := w.PutTree(&root)
			if half == 1 {
				w.Flush()
				w.Abort() // garbage
				continue
			}
			err := w.Finish(func(tx *Tx) error {
				c, err := tx.PutCommit(&Commit{Tree: rid})
				if err != nil {
					return err
				}
				return tx.SetRef("main", ZeroID, c)
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		return s
	}
	for b.Loop() {
		b.StopTimer()
		s := setup(b)
		b.StartTimer()
		r, err := s.GC(context.Background(), GCOptions{})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if r.Removed < n {
			b.Fatalf("removed %d", r.Removed)
		}
		b.ReportMetric(float64(r.Marked), "marked")
		b.ReportMetric(float64(r.Removed), "removed")
		s.Close()
		b.StartTimer()
	}
}

// BenchmarkOpen measures Open, reading a branch, and Close of an
// existing store: the fixed cost of every CLI call.
func BenchmarkOpen(b *testing.B) {
	dir := b.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		b.Fatal(err)
	}
	commitFile(b, s, "main", ZeroID, "f", []byte("x"))
	s.Close()
	for b.Loop() {
		s, err := Open(dir, Options{})
		if err != nil {
			b.Fatal(err)
		}
		s.View(context.Background(), func(tx *Tx) error { _, err := tx.Ref("main"); return err })
		s.Close()
	}
}

// BenchmarkReadContent measures ReadContentTo of one 64 MB file.
func BenchmarkReadContent(b *testing.B) {
	for _, gen := range []struct {
		name string
		f    func(uint64, int) []byte
	}{{"random", randBytes}, {"text", textBytes}} {
		b.Run(gen.name, func(b *testing.B) {
			s, err := Open(b.TempDir(), Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			data := gen.f(1, 64<<20)
			id, _ := writeContent(b, s, data)
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if _, err := s.ReadContentTo(context.Background(), id, io.Discard); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
