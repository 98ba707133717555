package snapshot

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/internal/testutil"
	"github.com/stratafs/strata/snapshot/snapshottest"
	"github.com/stratafs/strata/store"
)

// smallChain commits n versions of a small directory, each changing one
// file and adding one, and returns the commits, root first.
func smallChain(t testing.TB, s *store.Store, n int) []store.ID {
	t.Helper()
	src := t.TempDir()
	var commits []store.ID
	for i := 0; i < n; i++ {
		writeFile(t, filepath.Join(src, "dir", "changing"), fmt.Sprint("version ", i))
		writeFile(t, filepath.Join(src, fmt.Sprint("added-", i)), "x")
		var parents []store.ID
		if i > 0 {
			parents = commits[i-1:]
		}
		c, _ := importAs(t, s, src, parents...)
		commits = append(commits, c)
	}
	return commits
}

// cacheNames lists flavour/name of everything in a cache.
func cacheNames(t testing.TB, c *LayerCache) []string {
	t.Helper()
	var out []string
	for _, f := range []string{FlavourUser, FlavourTrusted} {
		es, err := os.ReadDir(filepath.Join(c.Dir(), f))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		must(t, err)
		for _, e := range es {
			out = append(out, f+"/"+e.Name())
		}
	}
	return out
}

func TestLayerOptionsCheck(t *testing.T) {
	for _, tc := range []struct {
		opts LayerOptions
		ok   bool
	}{
		{LayerOptions{Flavour: FlavourUser}, true},
		{LayerOptions{Flavour: FlavourTrusted, MaxDepth: 500}, true},
		{LayerOptions{}, false},
		{LayerOptions{Flavour: "User"}, false},
		{LayerOptions{Flavour: FlavourUser, MaxDepth: 501}, false},
		{LayerOptions{Flavour: FlavourUser, MaxDepth: -1}, false},
	} {
		o := tc.opts
		if err := o.check(); (err == nil) != tc.ok {
			t.Errorf("%+v: %v, want ok=%v", tc.opts, err, tc.ok)
		}
		if tc.ok && tc.opts.MaxDepth == 0 && o.MaxDepth != DefaultMaxDepth {
			t.Errorf("default MaxDepth %d", o.MaxDepth)
		}
	}
}

// TestLayerStackConcurrent: goroutines building the same stack, through
// one cache and through separate caches on the same directory (as
// separate processes would), all get the same complete layers, and no
// temporary directory is left.
func TestLayerStackConcurrent(t *testing.T) {
	s := openLayerStore(t)
	commits, _ := layerChain(t, s)
	head := commits[len(commits)-1]
	ctx := context.Background()
	opts := LayerOptions{Flavour: FlavourUser}

	ref := NewLayerCache(filepath.Join(t.TempDir(), "ref"))
	snapshottest.Writable(t, ref.Dir())
	want, err := ref.Stack(ctx, s, head, opts)
	must(t, err)

	dir := filepath.Join(t.TempDir(), "layers")
	snapshottest.Writable(t, dir)
	shared := NewLayerCache(dir)
	const n = 6
	stacks := make([][]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		c := shared
		if i%2 == 1 {
			c = NewLayerCache(dir)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			stacks[i], errs[i] = c.Stack(ctx, s, head, opts)
		}()
	}
	wg.Wait()
	for i := 0; i < n; i++ {
		if errs[i] != nil {
			t.Fatalf("goroutine %d: %v", i, errs[i])
		}
		if !slices.Equal(stacks[i], stacks[0]) {
			t.Errorf("goroutine %d: stack %q, goroutine 0: %q", i, stacks[i], stacks[0])
		}
	}
	if len(stacks[0]) != len(want) {
		t.Fatalf("%d layers, want %d", len(stacks[0]), len(want))
	}
	for _, name := range cacheNames(t, shared) {
		if strings.Contains(name, tmpPrefix) {
			t.Errorf("left %s", name)
		}
	}
	// Whiteouts carry their creation time; everything else must match.
	for i := range want {
		isWhiteout := func(rel string) bool {
			var st unix.Stat_t
			return unix.Lstat(filepath.Join(want[i], rel), &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0
		}
		snapshottest.CompareTrees(t, want[i], stacks[0][i], snapshottest.Ignore(isWhiteout))
	}
}

// TestLayerEvict: Evict keeps the layers kept stacks use, spares recent
// ones, removes the rest and reports the bytes; a bad keep removes nothing.
func TestLayerEvict(t *testing.T) {
	s := openLayerStore(t)
	commits := smallChain(t, s, 8)
	ctx := context.Background()
	cache := NewLayerCache(filepath.Join(t.TempDir(), "layers"))
	opts := LayerOptions{Flavour: FlavourUser, MaxDepth: 3}
	for _, c := range commits {
		if _, err := cache.Stack(ctx, s, c, opts); err != nil {
			t.Fatal(err)
		}
	}
	head := commits[7]
	all := cacheNames(t, cache)
	// 0:[L0] 1:[L1 L0] 2:[L2 L1 L0] 3:[3.full] 4:[L4 3.full] 5:[L5 L4 3.full]
	// 6:[6.full] 7:[L7 6.full]
	if len(all) != 8 {
		t.Fatalf("cache holds %q, want 6 deltas and 2 flattened layers", all)
	}

	res, err := cache.Evict(ctx, s, EvictOptions{Keep: []store.ID{head}, MaxDepth: 3, OlderThan: time.Hour})
	must(t, err)
	if len(res.Removed) != 0 || res.Kept != 8 {
		t.Errorf("young layers: removed %q, kept %d", res.Removed, res.Kept)
	}

	// Keep the head: the layers of the 3 commits below and at it stay.
	res, err = cache.Evict(ctx, s, EvictOptions{Keep: []store.ID{head}, MaxDepth: 3})
	must(t, err)
	name := func(i int, full bool) string {
		n := FlavourUser + "/" + commits[i].String()
		if full {
			n += fullSuffix
		}
		return n
	}
	kept := []string{name(5, false), name(6, true), name(7, false)}
	slices.Sort(kept)
	if got := cacheNames(t, cache); !slices.Equal(got, kept) {
		t.Errorf("after Evict keeping the head: %q, want %q", got, kept)
	}
	if len(res.Removed) != 5 || res.Kept != 3 || res.Bytes <= 0 {
		t.Errorf("result %+v", res)
	}
	stack, err := cache.Stack(ctx, s, head, opts)
	must(t, err)
	if got := cacheNames(t, cache); !slices.Equal(got, kept) || len(stack) != 2 {
		t.Errorf("the head's stack %q needed new layers: %q", stack, got)
	}

	// A kept commit that is not in the store: nothing removed.
	if _, err := cache.Evict(ctx, s, EvictOptions{Keep: []store.ID{{1, 2, 3}}}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("bad keep: %v, want ErrNotFound", err)
	}
	if got := cacheNames(t, cache); !slices.Equal(got, kept) {
		t.Errorf("a failed Evict removed layers: %q", got)
	}

	res, err = cache.Evict(ctx, s, EvictOptions{})
	must(t, err)
	if got := cacheNames(t, cache); len(got) != 0 || len(res.Removed) != 3 {
		t.Errorf("keeping nothing: left %q, removed %q", got, res.Removed)
	}
}

// TestLayerStackMergeCommit: a merge commit's layer is its delta from its
// first parent, and its stack follows first parents.
func TestLayerStackMergeCommit(t *testing.T) {
	s := openLayerStore(t)
	commits := smallChain(t, s, 3)
	ctx := context.Background()
	var tree2 store.ID
	must(t, s.View(ctx, func(tx *store.Tx) error {
		cm, err := tx.Commit(commits[2])
		tree2 = cm.Tree
		return err
	}))
	merge := putCommit(t, s, tree2, commits[0], commits[2])
	cache := NewLayerCache(filepath.Join(t.TempDir(), "layers"))
	stack, err := cache.Stack(ctx, s, merge, LayerOptions{Flavour: FlavourUser})
	must(t, err)
	want := []string{cache.path(FlavourUser, merge, false), cache.path(FlavourUser, commits[0], false)}
	if !slices.Equal(stack, want) {
		t.Fatalf("stack %q, want %q", stack, want)
	}
	for _, n := range []string{"added-1", "added-2", "dir/changing"} {
		if _, err := os.Lstat(filepath.Join(stack[0], n)); err != nil {
			t.Errorf("merge layer: %v", err)
		}
	}
}

// TestLayerEvictLiveWriter: the temporary directory of a build in
// progress (its lock held) is neither removed by Evict nor reported by
// Verify; the build then completes.
func TestLayerEvictLiveWriter(t *testing.T) {
	s := openLayerStore(t)
	commits := smallChain(t, s, 1)
	ctx := context.Background()
	cache := NewLayerCache(filepath.Join(t.TempDir(), "layers"))
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	cache.cfg.beforeCreate = func(int, string) {
		once.Do(func() { close(started) })
		<-release
	}
	done := make(chan error, 1)
	go func() {
		_, err := cache.Stack(ctx, s, commits[0], LayerOptions{Flavour: FlavourUser})
		done <- err
	}()
	<-started
	res, err := cache.Evict(ctx, s, EvictOptions{})
	must(t, err)
	if len(res.Removed) != 0 {
		t.Errorf("Evict removed %q from a live build", res.Removed)
	}
	probs, err := cache.Verify(ctx, s)
	must(t, err)
	if len(probs) != 0 {
		t.Errorf("Verify during a build: %+v", probs)
	}
	close(release)
	must(t, <-done)
	if got := cacheNames(t, cache); len(got) != 1 || strings.Contains(got[0], tmpPrefix) {
		t.Errorf("after the build: %q", got)
	}
}

// The crash child: builds a layer and blocks in the middle, to be killed.
const layerCrashEnv = "STRATA_TEST_LAYER_CRASH"

// TestLayerCrashHelper is the crash child; without layerCrashEnv it does
// nothing.
func TestLayerCrashHelper(t *testing.T) {
	spec := os.Getenv(layerCrashEnv)
	if spec == "" {
		return
	}
	storeDir, rest, _ := strings.Cut(spec, "|")
	cacheDir, commitHex, _ := strings.Cut(rest, "|")
	s, err := store.Open(storeDir, store.Options{})
	if err != nil {
		fmt.Println("LAYERERR", err)
		os.Exit(1)
	}
	id, err := store.ParseID(commitHex)
	if err != nil {
		fmt.Println("LAYERERR", err)
		os.Exit(1)
	}
	cache := NewLayerCache(cacheDir)
	var once sync.Once
	cache.cfg.beforeCreate = func(int, string) {
		once.Do(func() { fmt.Println("LAYERREADY") })
		select {}
	}
	cache.Stack(context.Background(), s, id, LayerOptions{Flavour: FlavourUser})
	os.Exit(1)
}

// TestLayerCrashedBuild: a process killed while it builds a layer leaves
// a temporary directory; Verify reports it and Evict removes it.
func TestLayerCrashedBuild(t *testing.T) {
	storeDir := filepath.Join(t.TempDir(), "store")
	s, err := store.Open(storeDir, store.Options{})
	must(t, err)
	defer s.Close()
	commits := smallChain(t, s, 1)
	cacheDir := filepath.Join(t.TempDir(), "layers")
	self, err := os.Executable()
	must(t, err)
	cmd := exec.Command(self, "-test.run=^TestLayerCrashHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), layerCrashEnv+"="+storeDir+"|"+cacheDir+"|"+commits[0].String())
	out, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	sc := bufio.NewScanner(out)
	ready := false
	for sc.Scan() {
		if sc.Text() == "LAYERREADY" {
			ready = true
			break
		}
		t.Log(sc.Text())
	}
	cmd.Process.Kill()
	cmd.Wait()
	if !ready {
		t.Fatal("the child did not start building")
	}
	cache := NewLayerCache(cacheDir)
	got := cacheNames(t, cache)
	if len(got) != 1 || !strings.HasPrefix(got[0], FlavourUser+"/"+tmpPrefix) {
		t.Fatalf("after the crash: %q, want one temporary directory", got)
	}
	ctx := context.Background()
	probs, err := cache.Verify(ctx, s)
	must(t, err)
	if len(probs) != 1 || probs[0].Kind != LayerStaleTemp {
		t.Errorf("Verify: %+v, want one stale temporary directory", probs)
	}
	res, err := cache.Evict(ctx, s, EvictOptions{Keep: commits})
	must(t, err)
	if !slices.Equal(res.Removed, got) {
		t.Errorf("Evict removed %q, want %q", res.Removed, got)
	}
	if got := cacheNames(t, cache); len(got) != 0 {
		t.Errorf("left %q", got)
	}
}

// TestLayerVerify: orphans, stray entries and bad modes are reported.
func TestLayerVerify(t *testing.T) {
	s := openLayerStore(t)
	commits := smallChain(t, s, 2)
	ctx := context.Background()
	cache := NewLayerCache(filepath.Join(t.TempDir(), "layers"))
	if probs, err := cache.Verify(ctx, s); err != nil || len(probs) != 0 {
		t.Errorf("no cache yet: %+v %v", probs, err)
	}
	if _, err := cache.Stack(ctx, s, commits[1], LayerOptions{Flavour: FlavourUser}); err != nil {
		t.Fatal(err)
	}
	if probs, err := cache.Verify(ctx, s); err != nil || len(probs) != 0 {
		t.Errorf("clean cache: %+v %v", probs, err)
	}
	user := filepath.Join(cache.Dir(), FlavourUser)
	orphan := store.ID{0xab}
	must(t, os.Mkdir(filepath.Join(user, orphan.String()), 0o755))
	must(t, os.Mkdir(filepath.Join(user, orphan.String()+fullSuffix), 0o755))
	writeFile(t, filepath.Join(user, "junk"), "x")
	must(t, os.Chmod(filepath.Join(user, commits[0].String()), 0o700))
	must(t, os.Mkdir(filepath.Join(cache.Dir(), "other"), 0o755))
	probs, err := cache.Verify(ctx, s)
	must(t, err)
	var got []string
	for _, p := range probs {
		got = append(got, p.Kind+" "+p.Path)
	}
	want := []string{
		LayerBadEntry + " other",
		LayerOrphan + " user/" + orphan.String(),
		LayerOrphan + " user/" + orphan.String() + fullSuffix,
		LayerBadEntry + " user/" + commits[0].String(),
		LayerBadEntry + " user/junk",
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("Verify:\n got %q\nwant %q", got, want)
	}
	// Evict removes the orphans (no kept stack needs them), not the junk.
	must(t, os.Chmod(filepath.Join(user, commits[0].String()), 0o755))
	res, err := cache.Evict(ctx, s, EvictOptions{Keep: commits[1:]})
	must(t, err)
	if len(res.Removed) != 2 {
		t.Errorf("Evict removed %q, want the 2 orphans", res.Removed)
	}
}

// TestWriteDelta: the exported function writes the delta between two
// trees of the real store into a new directory, and refuses an existing
// one.
func TestWriteDelta(t *testing.T) {
	s := openLayerStore(t)
	commits := smallChain(t, s, 2)
	ctx := context.Background()
	var trees []store.ID
	must(t, s.View(ctx, func(tx *store.Tx) error {
		for _, c := range commits {
			cm, err := tx.Commit(c)
			if err != nil {
				return err
			}
			trees = append(trees, cm.Tree)
		}
		return nil
	}))
	base := t.TempDir()
	dir := filepath.Join(base, "delta")
	opts := LayerOptions{Flavour: FlavourUser}
	must(t, WriteDelta(ctx, s, trees[0], trees[1], dir, opts))
	b, err := os.ReadFile(filepath.Join(dir, "dir", "changing"))
	if string(b) != "version 1" || err != nil {
		t.Errorf("dir/changing: %q %v", b, err)
	}
	es, _ := os.ReadDir(dir)
	if len(es) != 2 { // dir, added-1
		t.Errorf("delta root holds %d entries, want 2", len(es))
	}
	if err := WriteDelta(ctx, s, trees[0], trees[1], dir, opts); !errors.Is(err, fs.ErrExist) {
		t.Errorf("existing dir: %v, want ErrExist", err)
	}
	if es, _ := os.ReadDir(base); len(es) != 1 {
		t.Errorf("left beside the layer: %v", es)
	}
	// Layer: commit 1's own layer is the same delta.
	cache := NewLayerCache(filepath.Join(t.TempDir(), "layers"))
	l, err := cache.Layer(ctx, s, commits[1], opts)
	must(t, err)
	snapshottest.CompareTrees(t, dir, l)
}

// TestLayerCorpus measures layers of the corpus (STRATA_CORPUS): the full
// layer, a one-file delta, and a delta that adds a hardlink group (which
// reads every directory of the tree to find the group's members).
func TestLayerCorpus(t *testing.T) {
	corpus := testutil.Corpus(t)
	ctx := context.Background()
	s := openLayerStore(t)
	c1, tree1 := importAs(t, s, corpus)
	// A file at depth ≥ 4, to edit.
	var target string
	var entry store.TreeEntry
	must(t, Walk(ctx, s, tree1, func(p string, e *store.TreeEntry) error {
		if e.Type == store.TypeFile && e.Size > 0 && strings.Count(p, "/") >= 4 {
			target, entry = p, *e
			return SkipAll
		}
		return nil
	}))
	w, err := s.NewWriter(ctx, "edit")
	must(t, err)
	defer w.Abort()
	content, err := w.WriteBytes([]byte("edited\n"))
	must(t, err)
	entry.Content, entry.Size = content, 7
	dirPath, _ := splitRel(target)
	tree2 := editTree(t, s, w, tree1, dirPath, entry)
	link := store.TreeEntry{Name: "strata-link-a", Type: store.TypeFile, Mode: 0o644, Size: 7, Content: content, LinkGroup: dirPath + "/strata-link-a"}
	tree3 := editTree(t, s, w, tree2, dirPath, link)
	link.Name = "strata-link-b"
	tree3 = editTree(t, s, w, tree3, dirPath, link)
	var c2 store.ID
	must(t, w.Finish(func(tx *store.Tx) error {
		c2, err = tx.PutCommit(&store.Commit{Tree: tree2, Parents: []store.ID{c1}, TimeNs: 1})
		return err
	}))

	base := t.TempDir()
	snapshottest.Writable(t, base)
	opts := LayerOptions{Flavour: FlavourUser, Warn: func(p, msg string) { t.Logf("warning: %s: %s", p, msg) }}
	measure := func(what string, parent, tree store.ID) string {
		dir := filepath.Join(base, what)
		var written time.Time // the last progress call: everything written
		o := opts
		o.Progress = func(Progress) { written = time.Now() }
		start := time.Now()
		must(t, WriteDelta(ctx, s, parent, tree, dir, o))
		end := time.Now()
		var n int
		filepath.WalkDir(dir, func(string, os.DirEntry, error) error { n++; return nil })
		t.Logf("%-28s %8.1f ms  (syncfs and rename %.1f ms; %d entries in the layer, TMPDIR=%s)", what,
			float64(end.Sub(start).Microseconds())/1000, float64(end.Sub(written).Microseconds())/1000, n-1, os.TempDir())
		return dir
	}
	// Flush what the import left dirty, so that the syncfs of the first
	// layer does not pay for it.
	unix.Sync()
	start := time.Now()
	must(t, Materialize(ctx, s, tree1, filepath.Join(base, "materialized"), MaterializeOptions{}))
	t.Logf("%-28s %8.1f ms  (for comparison: no syncfs)", "Materialize", float64(time.Since(start).Microseconds())/1000)
	unix.Sync()
	measure("full layer", store.ZeroID, tree1)
	measure("1-file delta", tree1, tree2)
	measure("hardlink-group delta", tree2, tree3)

	cache := NewLayerCache(filepath.Join(base, "layers"))
	unix.Sync()
	start = time.Now()
	stack, err := cache.Stack(ctx, s, c1, opts)
	must(t, err)
	t.Logf("%-28s %8.1f ms  (%d layers)", "Stack(root commit)", float64(time.Since(start).Microseconds())/1000, len(stack))
	start = time.Now()
	stack, err = cache.Stack(ctx, s, c2, opts)
	must(t, err)
	t.Logf("%-28s %8.1f ms  (%d layers)", "Stack(child), parent cached", float64(time.Since(start).Microseconds())/1000, len(stack))
	start = time.Now()
	stack, err = cache.Stack(ctx, s, c2, opts)
	must(t, err)
	t.Logf("%-28s %8.1f ms  (%d layers)", "Stack(child), all cached", float64(time.Since(start).Microseconds())/1000, len(stack))
}

// editTree puts e into the directory at dirPath of root (replacing an
// entry of the same name) and returns the new root.
func editTree(t testing.TB, s *store.Store, w *store.Writer, root store.ID, dirPath string, e store.TreeEntry) store.ID {
	t.Helper()
	names := strings.Split(dirPath, "/")
	trees := make([]*store.Tree, 0, len(names)+1)
	must(t, w.Flush()) // trees it wrote are readable only once flushed
	must(t, s.View(context.Background(), func(tx *store.Tx) error {
		cur := root
		for i := 0; ; i++ {
			tr, err := tx.Tree(cur)
			if err != nil {
				return err
			}
			trees = append(trees, tr)
			if i == len(names) {
				return nil
			}
			j := slices.IndexFunc(tr.Entries, func(x store.TreeEntry) bool { return x.Name == names[i] })
			if j < 0 {
				return fmt.Errorf("%s: %w", names[i], store.ErrNotFound)
			}
			cur = tr.Entries[j].Content
		}
	}))
	put := func(tr *store.Tree, e store.TreeEntry) store.ID {
		es := slices.Clone(tr.Entries)
		j, found := slices.BinarySearchFunc(es, e.Name, func(x store.TreeEntry, n string) int { return strings.Compare(x.Name, n) })
		if found {
			es[j] = e
		} else {
			es = slices.Insert(es, j, e)
		}
		id, err := w.PutTree(&store.Tree{Entries: es})
		must(t, err)
		return id
	}
	id := put(trees[len(names)], e)
	for i := len(names) - 1; i >= 0; i-- {
		j := slices.IndexFunc(trees[i].Entries, func(x store.TreeEntry) bool { return x.Name == names[i] })
		d := trees[i].Entries[j]
		d.Content = id
		id = put(trees[i], d)
	}
	return id
}
