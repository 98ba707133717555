package snapshot

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stratafs/strata/internal/testutil"
	"github.com/stratafs/strata/store"
)

// TestCloneCorpus clones the corpus (STRATA_CORPUS) from its layer stack
// on TMPDIR's filesystem, checks that the clone scans as unchanged and
// that a one-line change is found by reading one file, and logs the
// costs. With STRATA_MEASURE=1 it measures, on TMPDIR and on XFS and Btrfs
// (testutil.ReflinkDir), each cost several times: clone from a one-layer
// stack, from an 11-layer stack, from the commit's flattened layer
// (<C>.full, and what building it costs), `cp -a --reflink=always` of the
// clone for comparison, the scan of an unchanged clone and of a one-line
// change (docs/snapshot.md, "Clone" and "Stat index", has the figures).
func TestCloneCorpus(t *testing.T) {
	corpus := testutil.Corpus(t)
	if os.Getenv("STRATA_MEASURE") != "1" {
		measureCloneCorpus(t, corpus, t.TempDir(), 1, false)
		return
	}
	for _, fs := range []string{"tmp", "xfs", "btrfs"} {
		t.Run(fs, func(t *testing.T) {
			root := t.TempDir()
			if fs != "tmp" {
				root = testutil.ReflinkDir(t, fs)
			}
			measureCloneCorpus(t, corpus, root, 3, true)
		})
	}
}

func measureCloneCorpus(t *testing.T, corpus, root string, runs int, deep bool) {
	ctx := context.Background()
	env := newCloneEnv(t, root)
	lo := layerFlavour()
	start := time.Now()
	base, baseTree := importAs(t, env.s, corpus)
	t.Logf("%s: import %v", fsName(root), since(start))

	start = time.Now()
	_, err := env.cache.Stack(ctx, env.s, base, lo)
	must(t, err)
	t.Logf("full layer of the base (what every backend pays once per base): %v", since(start))

	var target string
	must(t, Walk(ctx, env.s, baseTree, func(p string, e *store.TreeEntry) error {
		if target == "" && e.Type == store.TypeFile && e.Size > 100 && strings.Count(p, "/") >= 4 && !strings.Contains(p, "\n") {
			target = p
		}
		return nil
	}))

	// The deep case: ten commits each changing one file, an 11-layer
	// stack, and the tip's flattened layer.
	tip, tree := base, baseTree
	var stack11 []string
	if deep {
		upper := filepath.Join(root, "upper")
		for i := 0; i < 10; i++ {
			must(t, os.MkdirAll(filepath.Dir(filepath.Join(upper, target)), 0o755))
			must(t, os.WriteFile(filepath.Join(upper, target), []byte(fmt.Sprintf("version %d\n", i)), 0o644))
			w, err := env.s.NewWriter(ctx, "chain")
			must(t, err)
			ar, err := ApplyUpper(ctx, env.s, w, tree, []UpperChange{{Path: target, Kind: UpperModified, UpperPath: filepath.Join(upper, target)}}, ApplyOptions{})
			must(t, err)
			must(t, w.Finish(func(tx *store.Tx) error {
				tip, err = tx.PutCommit(&store.Commit{Tree: ar.Tree, Parents: []store.ID{tip}, TimeNs: time.Now().UnixNano(), Stats: ar.Stats})
				return err
			}))
			tree = ar.Tree
		}
		start = time.Now()
		stack11, err = env.cache.Stack(ctx, env.s, tip, lo)
		must(t, err)
		t.Logf("ten 1-file delta layers on top: %v", since(start))
		start = time.Now()
		must(t, env.cache.ensure(ctx, env.s, layerRef{commit: tip, full: true, tree: tree}, env.cache.path(lo.Flavour, tip, true), lo))
		t.Logf("the tip's flattened layer <C>.full: %v (a full materialization, once per base)", since(start))
	}

	// Interleaved runs, so that the machine's load falls on each alike.
	type series struct {
		what  string
		times []time.Duration
		res   *CloneResult
	}
	one, eleven, full, cp := &series{what: "one-layer stack"}, &series{what: "11-layer stack"}, &series{what: "the flattened layer <C>.full"}, &series{what: "cp -a --reflink=auto of a clone (peer)"}
	n := 0
	cloneOnce := func(s *series, commit store.ID, cfg cloneConfig) string {
		n++
		ws := filepath.Join(root, fmt.Sprintf("ws%d", n))
		start := time.Now()
		res, err := clone(ctx, env.s, env.cache, commit, ws, CloneOptions{Layers: lo, Index: ws + ".index"}, cfg)
		must(t, err)
		s.times = append(s.times, time.Since(start))
		s.res = res
		return ws
	}
	var ws string
	for i := 0; i < runs; i++ {
		ws = cloneOnce(one, base, cloneConfig{})
		if !deep {
			continue
		}
		cloneOnce(eleven, tip, cloneConfig{lowers: stack11})
		last := cloneOnce(full, tip, cloneConfig{full: true})
		dst := filepath.Join(root, fmt.Sprintf("cp%d", i))
		start := time.Now()
		if out, err := exec.Command("cp", "-a", "--reflink=auto", last, dst).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v\n%s", err, out)
		}
		cp.times = append(cp.times, time.Since(start))
	}
	for _, s := range []*series{one, eleven, full, cp} {
		if len(s.times) == 0 {
			continue
		}
		if s.res == nil {
			t.Logf("%-40s %s", s.what, stats(s.times))
			continue
		}
		r := s.res
		t.Logf("%-40s %s; %s, %d layers, %d files, cloned %d MB, copied %d MB, from the store %d B; index %d entries, %d B, multigrain %v, %d racy",
			"clone, "+s.what+":", stats(s.times), r.Method, r.Layers, r.Files, r.Cloned>>20, r.Copied>>20, r.FromStore, r.Index.Entries, r.Index.Bytes, r.Index.Multigrain, r.Index.Racy)
	}

	// The scan of the unchanged clone, then of a one-line change, beside
	// find(1) stat'ing every entry (the floor).
	idx, err := ReadIndex(ws + ".index")
	must(t, err)
	var scanTimes, findTimes, applyTimes []time.Duration
	var scan *ScanResult
	find := func() {
		start := time.Now()
		if out, err := exec.Command("find", ws, "-printf", "%i %s %T@ %C@ %m\n").Output(); err != nil || len(out) == 0 {
			t.Fatalf("find: %v", err)
		}
		findTimes = append(findTimes, time.Since(start))
	}
	for i := 0; i < max(runs, 3); i++ {
		start := time.Now()
		scan, err = ScanWorkspace(ctx, env.s, ws, idx)
		must(t, err)
		scanTimes = append(scanTimes, time.Since(start))
		find()
	}
	if len(scan.Changes) != 0 {
		t.Fatalf("the fresh clone scans as changed: %d changes", len(scan.Changes))
	}
	t.Logf("scan, unchanged: %s; %d entries stat'd; find -printf (lstat of each): %s", stats(scanTimes), scan.Entries, stats(findTimes))
	f, err := os.OpenFile(filepath.Join(ws, target), os.O_WRONLY|os.O_APPEND, 0)
	must(t, err)
	_, err = f.WriteString("// one more line\n")
	must(t, err)
	must(t, f.Close())
	scanTimes, findTimes = scanTimes[:0], findTimes[:0]
	var ar *ApplyResult
	for i := 0; i < max(runs, 3); i++ {
		start := time.Now()
		scan, err = ScanWorkspace(ctx, env.s, ws, idx)
		must(t, err)
		scanTimes = append(scanTimes, time.Since(start))
		w, err := env.s.NewWriter(ctx, "measure")
		must(t, err)
		start = time.Now()
		ar, err = ApplyUpper(ctx, env.s, w, idx.Base, scan.Changes, ApplyOptions{BaseStats: &store.CommitStats{}})
		must(t, err)
		applyTimes = append(applyTimes, time.Since(start))
		w.Abort()
		find()
	}
	if len(scan.Changes) != 1 || ar.FilesRead != 1 {
		t.Fatalf("one-line change in %s: %d changes, %d files read", target, len(scan.Changes), ar.FilesRead)
	}
	t.Logf("scan, one line appended to %s: %s, then ApplyUpper %s; %d change, %d file read; find: %s",
		target, stats(scanTimes), stats(applyTimes), len(scan.Changes), ar.FilesRead, stats(findTimes))
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }

// stats formats durations as "min X, median Y (n runs)".
func stats(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	return fmt.Sprintf("min %v, median %v (%d runs)", s[0].Round(100*time.Microsecond), s[len(s)/2].Round(100*time.Microsecond), len(s))
}
