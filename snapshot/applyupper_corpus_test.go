package snapshot_test

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stratafs/strata/internal/testutil"
	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
)

// TestApplyUpperCorpus measures ApplyUpper on the corpus (STRATA_CORPUS):
// a one-file change four levels deep, with and without the base's
// statistics, and the deletion of a large directory. The upper
// directories are made by hand (what a workspace would leave).
func TestApplyUpperCorpus(t *testing.T) {
	corpus := testutil.Corpus(t)
	ctx := context.Background()
	s := openStore(t)
	start := time.Now()
	_, base := importWithParents(t, s, corpus)
	t.Logf("import: %v, %+v", time.Since(start).Round(time.Millisecond), base.Stats)

	var target string
	var bigDir string
	var bigCount, count int
	var cur string
	must(t, snapshot.Walk(ctx, s, base.Tree, func(p string, e *store.TreeEntry) error {
		if target == "" && e.Type == store.TypeFile && e.Size > 0 && strings.Count(p, "/") >= 4 {
			target = p
		}
		// The largest directory directly under node_modules.
		if strings.Count(p, "/") == 1 && strings.HasPrefix(p, "node_modules/") {
			if count > bigCount {
				bigDir, bigCount = cur, count
			}
			cur, count = p, 0
		}
		count++
		return nil
	}))
	t.Logf("1-file change at %s; deleted directory %s (%d entries)", target, bigDir, bigCount)

	upper := filepath.Join(t.TempDir(), "upper")
	must(t, os.MkdirAll(filepath.Join(upper, filepath.Dir(target)), 0o755))
	must(t, os.WriteFile(filepath.Join(upper, target), []byte("edited\n"), 0o644))
	oneFile := []snapshot.UpperChange{{Path: target, Kind: snapshot.UpperModified, UpperPath: filepath.Join(upper, target)}}
	delUpper := filepath.Join(t.TempDir(), "upper")
	must(t, os.MkdirAll(delUpper, 0o755))
	deletion := []snapshot.UpperChange{{Path: bigDir, Kind: snapshot.UpperDeleted, UpperPath: filepath.Join(delUpper, bigDir)}}

	measure := func(what string, changes []snapshot.UpperChange, opts snapshot.ApplyOptions) {
		var times, finish []time.Duration
		var res *snapshot.ApplyResult
		for i := 0; i < 7; i++ {
			w, err := s.NewWriter(ctx, "measure")
			must(t, err)
			start := time.Now()
			res, err = snapshot.ApplyUpper(ctx, s, w, base.Tree, changes, opts)
			must(t, err)
			times = append(times, time.Since(start))
			start = time.Now()
			must(t, w.Finish(func(tx *store.Tx) error {
				_, err := tx.PutCommit(&store.Commit{Tree: res.Tree, TimeNs: time.Now().UnixNano(), Stats: res.Stats})
				return err
			}))
			finish = append(finish, time.Since(start))
		}
		sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
		sort.Slice(finish, func(i, j int) bool { return finish[i] < finish[j] })
		t.Logf("%-40s ApplyUpper min %6.2f ms, median %6.2f ms; Finish (commit) median %6.2f ms; files read %d; stats %+v",
			what, ms(times[0]), ms(times[len(times)/2]), ms(finish[len(finish)/2]), res.FilesRead, res.Stats)
	}
	measure("1 file, BaseStats given", oneFile, snapshot.ApplyOptions{BaseStats: &base.Stats})
	// The stat cache keeps files older than 3 s (the racy rule).
	time.Sleep(3100 * time.Millisecond)
	measure("1 file, BaseStats given, stat cache", oneFile, snapshot.ApplyOptions{BaseStats: &base.Stats, StatCacheRoot: upper})
	measure("1 file, no BaseStats (counts the tree)", oneFile, snapshot.ApplyOptions{})
	measure("delete "+bigDir, deletion, snapshot.ApplyOptions{BaseStats: &base.Stats})
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
