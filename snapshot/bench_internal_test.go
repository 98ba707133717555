package snapshot

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stratafs/strata/store"
)

// BenchmarkMaterializeWorkers measures Materialize of the corpus
// (STRATA_CORPUS) with different numbers of file workers: on a disk where
// file creation serializes in the kernel, more workers can be slower.
func BenchmarkMaterializeWorkers(b *testing.B) {
	corpus := os.Getenv("STRATA_CORPUS")
	if corpus == "" {
		b.Skip("STRATA_CORPUS not set")
	}
	ctx := context.Background()
	s, err := store.Open(b.TempDir(), store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	w, err := s.NewWriter(ctx, "bench")
	if err != nil {
		b.Fatal(err)
	}
	res, err := Import(ctx, s, w, corpus, ImportOptions{})
	if err != nil {
		b.Fatal(err)
	}
	if err := w.Finish(nil); err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1, 2, 4, 8} {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			b.SetBytes(res.Stats.Bytes)
			base := b.TempDir()
			i := 0
			for b.Loop() {
				dst := filepath.Join(base, fmt.Sprint(i))
				i++
				if err := materialize(ctx, storeReader{s}, res.Tree, dst, MaterializeOptions{}, matConfig{workers: n}); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				os.RemoveAll(dst)
				b.StartTimer()
			}
		})
	}
}
