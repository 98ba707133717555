package gogit

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/stratafs/strata/store"
	"github.com/stratafs/strata/worktree"
)

// TestMeasureCorpus measures Snapshot of a real repository (its tracked
// files plus its ignored node_modules) against `git worktree add` plus
// `cp -al node_modules`, the cheapest way git gives an agent its own copy.
// It is a measurement, not a timed assertion (docs/worktree.md):
//
//	STRATA_MEASURE=1 STRATA_CORPUS=/var/tmp/strata-cache/corpus go test ./worktree/ -run TestMeasureCorpus -v
//
// STRATA_CORPUS may list several repositories, separated by colons.
func TestMeasureCorpus(t *testing.T) {
	list := os.Getenv("STRATA_CORPUS")
	if list == "" {
		t.Skip("set STRATA_CORPUS to a git working copy with node_modules to measure")
	}
	requireGit(t)
	for _, corpus := range filepath.SplitList(list) {
		t.Run(filepath.Base(corpus), func(t *testing.T) { measure(t, corpus) })
	}
}

func measure(t *testing.T, corpus string) {
	// In make test this checks the corpus once (snapshot, re-snapshot
	// from the cache, git status in the result); the timings, repeated,
	// and the comparison with git worktree + cp are a measurement:
	// STRATA_MEASURE=1.
	full := os.Getenv("STRATA_MEASURE") == "1"
	runs := 1
	if full {
		runs = 5
	}
	ctx := context.Background()
	var first, second []time.Duration
	var res1, res2 *worktree.SnapshotResult
	// snapshots takes one snapshot into a fresh store and one more into
	// the same store, runs times.
	snapshots := func(first, second *[]time.Duration) {
		for i := 0; i < runs; i++ {
			s, err := store.Open(t.TempDir(), store.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for pass := 0; pass < 2; pass++ {
				w, err := s.NewWriter(ctx, "measure")
				if err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				res, err := Snapshot(ctx, s, w, corpus, worktree.SnapshotOptions{})
				if err != nil {
					t.Fatal(err)
				}
				err = w.Finish(func(tx *store.Tx) error {
					c, err := tx.PutCommit(&store.Commit{Tree: res.Tree, TimeNs: 1, Source: "git:" + corpus, Stats: res.Stats})
					if err != nil {
						return err
					}
					old, err := tx.Ref("main")
					if err != nil {
						old = store.ZeroID
					}
					return tx.SetRef("main", old, c)
				})
				if err != nil {
					t.Fatal(err)
				}
				d := time.Since(start)
				if pass == 0 {
					res1 = res
					if first != nil {
						*first = append(*first, d)
					}
				} else {
					res2 = res
					if second != nil {
						*second = append(*second, d)
					}
				}
			}
			s.Close()
		}
	}
	snapshots(&first, &second)
	if full && res1.BlobsRead >= 1000 {
		var one []time.Duration
		blobWorkersOverride = 1
		snapshots(&one, nil)
		blobWorkersOverride = 0
		t.Logf("Snapshot, fresh store, 1 blob reader:    %s", spread(one))
	}
	t.Logf("entries: %d files, %d dirs, %d other, %d bytes; ignored %q",
		res1.Stats.Files, res1.Stats.Dirs, res1.Stats.Other, res1.Stats.Bytes, res1.Ignored)
	t.Logf("Snapshot, fresh store (Finish included): %s (blobs read %d)", spread(first), res1.BlobsRead)
	t.Logf("Snapshot, again (Finish included):       %s (blobs read %d, cached %d)", spread(second), res2.BlobsRead, res2.BlobsCached)

	// git status in the materialized snapshot: the index is trusted.
	s, err := store.Open(t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res := snap(t, s, corpus, worktree.SnapshotOptions{})
	d := materialize(t, s, res.Tree)
	useRealObjects(t, d, res.GitDir)
	start := time.Now()
	if out := git(t, d, "status", "--porcelain"); out != "" {
		t.Errorf("git status in the snapshot:\n%s", out)
	}
	t.Logf("first git status in the materialized snapshot: %s", time.Since(start).Round(time.Millisecond))

	if !full {
		t.Log("STRATA_MEASURE=1 adds repeated timings and git worktree add + cp -al for comparison")
		return
	}
	// git worktree add + cp -al, on a private copy of the repository (it
	// writes .git/worktrees).
	src := filepath.Join(t.TempDir(), "src")
	if out, err := exec.Command("cp", "-a", corpus, src).CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v\n%s", err, out)
	}
	var wts, st []time.Duration
	for i := 0; i < runs; i++ {
		wt := filepath.Join(t.TempDir(), "wt")
		start := time.Now()
		git(t, src, "worktree", "add", "--detach", "-q", wt)
		if _, err := os.Stat(filepath.Join(src, "node_modules")); err == nil {
			if out, err := exec.Command("cp", "-al", filepath.Join(src, "node_modules"), wt+"/").CombinedOutput(); err != nil {
				t.Fatalf("cp -al: %v\n%s", err, out)
			}
		}
		wts = append(wts, time.Since(start))
		start = time.Now()
		git(t, wt, "status", "--porcelain")
		st = append(st, time.Since(start))
		git(t, src, "worktree", "remove", "--force", wt)
	}
	t.Logf("git worktree add + cp -al node_modules:  %s", spread(wts))
	t.Logf("first git status in that worktree:        %s", spread(st))
}

// spread formats the median and range of durations.
func spread(ds []time.Duration) string {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	r := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	return "median " + r(s[len(s)/2]).String() + " (" + r(s[0]).String() + "–" + r(s[len(s)-1]).String() + ")"
}
