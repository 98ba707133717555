package snapshot_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stratafs/strata/internal/testutil"
	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/snapshot/snapshottest"
	"github.com/stratafs/strata/store"
)

func openStore(tb testing.TB) *store.Store {
	tb.Helper()
	s, err := store.Open(filepath.Join(tb.TempDir(), "store"), store.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// importCommit imports dir with the real store and commits it on branch
// main, as the root package does.
func importCommit(tb testing.TB, s *store.Store, dir string, opts snapshot.ImportOptions) (*snapshot.ImportResult, store.WriterStats) {
	tb.Helper()
	ctx := context.Background()
	w, err := s.NewWriter(ctx, "import "+dir)
	if err != nil {
		tb.Fatal(err)
	}
	defer w.Abort()
	res, err := snapshot.Import(ctx, s, w, dir, opts)
	if err != nil {
		tb.Fatal(err)
	}
	err = w.Finish(func(tx *store.Tx) error {
		c, err := tx.PutCommit(&store.Commit{Tree: res.Tree, TimeNs: time.Now().UnixNano(), Source: dir, Stats: res.Stats})
		if err != nil {
			return err
		}
		old, err := tx.Ref("main")
		if errors.Is(err, store.ErrNotFound) {
			old, err = store.ZeroID, nil
		}
		if err != nil {
			return err
		}
		return tx.SetRef("main", old, c)
	})
	if err != nil {
		tb.Fatal(err)
	}
	return res, w.Stats()
}

// waitRacy waits until files written now are old enough for the stat cache.
func waitRacy(tb testing.TB) {
	tb.Helper()
	time.Sleep(3*time.Second + 50*time.Millisecond) // racyMargin
}

func TestStoreRoundTrip(t *testing.T) {
	s := openStore(t)
	src, dst := t.TempDir(), filepath.Join(t.TempDir(), "dst")
	caps := snapshottest.Probe(src)
	snapshottest.Build(t, src, snapshottest.Nasty(caps))
	res, _ := importCommit(t, s, src, snapshot.ImportOptions{})
	ctx := context.Background()
	snapshottest.Writable(t, dst)
	if err := snapshot.Materialize(ctx, s, res.Tree, dst, snapshot.MaterializeOptions{Chown: caps.Root}); err != nil {
		t.Fatal(err)
	}
	snapshottest.CompareTrees(t, src, dst)

	e, err := snapshot.Lookup(ctx, s, res.Tree, "hard/sub/c")
	if err != nil || e.LinkGroup != "hard/a" {
		t.Errorf("Lookup hard/sub/c: %+v %v", e, err)
	}
	if _, err := snapshot.Lookup(ctx, s, res.Tree, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Lookup nope: %v", err)
	}
	var n int64
	err = snapshot.Walk(ctx, s, res.Tree, func(p string, e *store.TreeEntry) error {
		n++
		return nil
	})
	if err != nil || n != res.Stats.Files+res.Stats.Dirs+res.Stats.Other {
		t.Errorf("Walk saw %d entries (%v), stats %+v", n, err, res.Stats)
	}
	changes, err := snapshot.Diff(ctx, s, store.ZeroID, res.Tree)
	if err != nil || int64(len(changes)) != n {
		t.Errorf("Diff from empty: %d changes (%v), want %d", len(changes), err, n)
	}
}

// TestStoreReimport: an unchanged tree is not read again and stores no new
// object; one changed file is read and is the only difference.
func TestStoreReimport(t *testing.T) {
	s := openStore(t)
	src := t.TempDir()
	snapshottest.Build(t, src, snapshottest.Nasty(snapshottest.Probe(src)))
	waitRacy(t)
	first, _ := importCommit(t, s, src, snapshot.ImportOptions{})
	second, st := importCommit(t, s, src, snapshot.ImportOptions{})
	if second.FilesRead != 0 || second.CacheHits != first.FilesRead {
		t.Errorf("re-import read %d files, %d cache hits; want 0 and %d", second.FilesRead, second.CacheHits, first.FilesRead)
	}
	// Only the commit (written in Finish's transaction, not counted) is new.
	if st.NewObjects != 0 || st.ContentBytes != 0 || second.Writer.NewObjects != 0 {
		t.Errorf("re-import wrote %+v (import alone: %+v)", st, second.Writer)
	}
	if second.Tree != first.Tree {
		t.Error("re-import gives another tree")
	}

	p := filepath.Join(src, "sizes/5MiB")
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	copy(data[3<<20:], "an edit in the middle of a large file")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	third, st := importCommit(t, s, src, snapshot.ImportOptions{})
	if third.FilesRead != 1 {
		t.Errorf("after one change, read %d files", third.FilesRead)
	}
	// FastCDC: an edit rewrites a chunk or two and the file node tree,
	// not the file.
	if st.NewBytes > 1<<20 {
		t.Errorf("a 37-byte edit stored %d new bytes", st.NewBytes)
	}
	changes, err := snapshot.Diff(context.Background(), s, second.Tree, third.Tree)
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) != 1 || changes[0].Path != "sizes/5MiB" || changes[0].Op != snapshot.Modified {
		t.Errorf("changes %+v; want sizes/5MiB modified", changes)
	}
}

// TestCorpus imports the benchmark corpus (STRATA_CORPUS, built by
// shared/corpus/build.sh), materializes it and compares; it logs timings.
func TestCorpus(t *testing.T) {
	corpus := testutil.Corpus(t)
	s := openStore(t)
	ctx := context.Background()
	start := time.Now()
	res, st := importCommit(t, s, corpus, snapshot.ImportOptions{})
	t.Logf("import: %v, %+v, read %d files, %+v", time.Since(start), res.Stats, res.FilesRead, st)

	dst := filepath.Join(t.TempDir(), "dst")
	start = time.Now()
	if err := snapshot.Materialize(ctx, s, res.Tree, dst, snapshot.MaterializeOptions{Chown: os.Geteuid() == 0}); err != nil {
		t.Fatal(err)
	}
	t.Logf("materialize: %v", time.Since(start))
	snapshottest.CompareTrees(t, corpus, dst)

	var ph phaseTimer
	start = time.Now()
	again, st := importCommit(t, s, corpus, snapshot.ImportOptions{Progress: ph.progress})
	t.Logf("re-import: %v (%s), read %d files, %d cache hits, %+v", time.Since(start), ph.String(), again.FilesRead, again.CacheHits, st)
	if again.Tree != res.Tree {
		t.Error("re-import gives another tree")
	}
}

// phaseTimer records when each progress phase starts.
type phaseTimer struct {
	names []string
	times []time.Time
}

func (p *phaseTimer) progress(pr snapshot.Progress) {
	if len(p.names) == 0 || p.names[len(p.names)-1] != pr.Phase {
		p.names = append(p.names, pr.Phase)
		p.times = append(p.times, time.Now())
	}
}

// String lists each phase with its duration (the last one up to now).
func (p *phaseTimer) String() string {
	var b strings.Builder
	for i, n := range p.names {
		end := time.Now()
		if i+1 < len(p.times) {
			end = p.times[i+1]
		}
		fmt.Fprintf(&b, "%s %v ", n, end.Sub(p.times[i]).Round(time.Millisecond))
	}
	return strings.TrimSpace(b.String())
}

// genTree writes a tree shaped like a small node_modules: dirs of small
// files with some larger ones; about 2,000 files and 25 MB.
func genTree(tb testing.TB, dir string) {
	tb.Helper()
	x := uint64(1)
	rnd := func() uint64 { x ^= x << 13; x ^= x >> 7; x ^= x << 17; return x }
	for d := 0; d < 100; d++ {
		sub := filepath.Join(dir, fmt.Sprintf("pkg%03d", d), "lib")
		if err := os.MkdirAll(sub, 0o755); err != nil {
			tb.Fatal(err)
		}
		for f := 0; f < 20; f++ {
			n := int(rnd() % 8192)
			if f == 0 {
				n = 100_000 + int(rnd()%200_000)
			}
			b := make([]byte, n)
			for i := range b {
				b[i] = "abcdefghij \n{}();"[rnd()%17]
			}
			if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%02d.js", f)), b, 0o644); err != nil {
				tb.Fatal(err)
			}
		}
	}
}

// benchSources is the generated tree, plus the corpus when STRATA_CORPUS
// is set.
func benchSources(b *testing.B) map[string]string {
	gen := filepath.Join(b.TempDir(), "gen")
	genTree(b, gen)
	srcs := map[string]string{"gen": gen}
	if c := os.Getenv("STRATA_CORPUS"); c != "" {
		srcs["corpus"] = c
	}
	return srcs
}

func BenchmarkImport(b *testing.B) {
	for name, src := range benchSources(b) {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				s := openStore(b)
				importCommit(b, s, src, snapshot.ImportOptions{})
				b.StopTimer()
				s.Close()
				b.StartTimer()
			}
		})
	}
}

func BenchmarkReimport(b *testing.B) {
	for name, src := range benchSources(b) {
		b.Run(name, func(b *testing.B) {
			if name == "gen" {
				waitRacy(b)
			}
			s := openStore(b)
			importCommit(b, s, src, snapshot.ImportOptions{})
			for b.Loop() {
				res, _ := importCommit(b, s, src, snapshot.ImportOptions{})
				if res.FilesRead != 0 {
					b.Fatalf("re-import read %d files", res.FilesRead)
				}
			}
		})
	}
}

func BenchmarkMaterialize(b *testing.B) {
	for name, src := range benchSources(b) {
		b.Run(name, func(b *testing.B) {
			s := openStore(b)
			res, _ := importCommit(b, s, src, snapshot.ImportOptions{})
			b.SetBytes(res.Stats.Bytes)
			base := b.TempDir()
			i := 0
			for b.Loop() {
				dst := filepath.Join(base, fmt.Sprint(i))
				i++
				if err := snapshot.Materialize(context.Background(), s, res.Tree, dst, snapshot.MaterializeOptions{}); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				os.RemoveAll(dst)
				b.StartTimer()
			}
		})
	}
}
