package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/internal/testutil"
	"github.com/stratafs/strata/snapshot/snapshottest"
	"github.com/stratafs/strata/store"
)

// cloneEnv is a store, its layer cache and a workspace directory, all
// under one directory (one filesystem: FICLONE needs it).
type cloneEnv struct {
	s     *store.Store
	cache *LayerCache
	root  string
}

func newCloneEnv(t testing.TB, root string) *cloneEnv {
	t.Helper()
	s, err := store.Open(filepath.Join(root, "store"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	cache := NewLayerCache(filepath.Join(root, "layers"))
	snapshottest.Writable(t, root)
	return &cloneEnv{s: s, cache: cache, root: root}
}

func (e *cloneEnv) tree(t testing.TB, commit store.ID) store.ID {
	t.Helper()
	var tree store.ID
	must(t, e.s.View(context.Background(), func(tx *store.Tx) error {
		c, err := tx.Commit(commit)
		if err == nil {
			tree = c.Tree
		}
		return err
	}))
	return tree
}

func layerFlavour() LayerOptions {
	if os.Geteuid() == 0 {
		return LayerOptions{Flavour: FlavourTrusted, Chown: true}
	}
	return LayerOptions{Flavour: FlavourUser}
}

// TestCloneChain clones every commit of a chain with every kind of change
// (whiteouts, opaque directories, type changes, hardlink groups written
// across layers, xattrs, odd names, read-only directories) from its layer
// stack — at full depth and flattened every 4 layers — and compares the
// result with Materialize of the commit; the stat index written with it
// finds nothing changed. On the test's filesystem (TMPDIR) the files are
// cloned or copied, whichever it can.
func TestCloneChain(t *testing.T) {
	testCloneChain(t, t.TempDir(), CloneAuto, "")
}

// TestCloneChainCopy is TestCloneChain with copies only.
func TestCloneChainCopy(t *testing.T) {
	testCloneChain(t, t.TempDir(), CloneCopy, string(CloneCopy))
}

// TestCloneChainXFS and TestCloneChainBtrfs clone on real reflink
// filesystems: every file is a FICLONE, no byte is copied.
func TestCloneChainXFS(t *testing.T) {
	testCloneChain(t, testutil.ReflinkDir(t, "xfs"), CloneReflink, string(CloneReflink))
}

func TestCloneChainBtrfs(t *testing.T) {
	testCloneChain(t, testutil.ReflinkDir(t, "btrfs"), CloneReflink, string(CloneReflink))
}

func testCloneChain(t *testing.T, root string, mode CloneMode, wantMethod string) {
	ctx := context.Background()
	env := newCloneEnv(t, root)
	commits, names := layerChain(t, env.s)
	for _, depth := range []int{0, 4} {
		opts := layerFlavour()
		opts.MaxDepth = depth
		for i, c := range commits {
			name := fmt.Sprintf("depth %d, commit %d (%s)", depth, i, names[i])
			tree := env.tree(t, c)
			want := filepath.Join(root, fmt.Sprintf("want-%d-%d", depth, i))
			must(t, Materialize(ctx, env.s, tree, want, MaterializeOptions{Chown: opts.Chown}))
			ws := filepath.Join(root, fmt.Sprintf("ws-%d-%d", depth, i))
			idxPath := ws + ".index"
			res, err := Clone(ctx, env.s, env.cache, c, ws, CloneOptions{Mode: mode, Layers: opts, Index: idxPath})
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			diffs, err := snapshottest.Differences(want, ws, snapshottest.Owner(opts.Chown))
			must(t, err)
			if len(diffs) > 0 {
				t.Fatalf("%s: clone differs from materialize:\n%s", name, strings.Join(diffs, "\n"))
			}
			if res.Tree != tree || res.Files == 0 || res.FromStore != 0 {
				t.Errorf("%s: result %+v", name, res)
			}
			if wantMethod != "" && res.Method != wantMethod {
				t.Errorf("%s: method %q, want %q (%s)", name, res.Method, wantMethod, res.Why)
			}
			if mode == CloneReflink && res.Copied != 0 {
				t.Errorf("%s: %d bytes copied by a reflink clone", name, res.Copied)
			}
			if mode == CloneCopy && res.Cloned != 0 {
				t.Errorf("%s: %d bytes cloned by a copy", name, res.Cloned)
			}
			idx, err := ReadIndex(idxPath)
			must(t, err)
			scan, err := ScanWorkspace(ctx, env.s, ws, idx)
			must(t, err)
			if len(scan.Changes) != 0 {
				t.Errorf("%s: a fresh clone scans as changed: %v", name, scan.Changes)
			}
			if leftovers, _ := filepath.Glob(filepath.Join(root, tmpPrefix+"*")); len(leftovers) != 0 {
				t.Errorf("%s: left %v", name, leftovers)
			}
		}
	}
}

// TestCloneRefusesAndCleansUp: an existing target is refused; a reflink
// clone across filesystems fails before writing; a cancelled clone leaves
// neither the target nor its temporary directory.
func TestCloneRefusesAndCleansUp(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	env := newCloneEnv(t, root)
	src := filepath.Join(t.TempDir(), "src")
	snapshottest.Build(t, src, []snapshottest.Entry{
		{Path: "a/b", Kind: snapshottest.File, Data: []byte("bytes")},
		{Path: "c", Kind: snapshottest.File, Data: []byte(strings.Repeat("x", 100000))},
	})
	c, _ := importAs(t, env.s, src)
	opts := CloneOptions{Layers: layerFlavour()}

	exists := filepath.Join(root, "exists")
	must(t, os.Mkdir(exists, 0o755))
	if _, err := Clone(ctx, env.s, env.cache, c, exists, opts); !errors.Is(err, fs.ErrExist) {
		t.Errorf("existing target: %v, want fs.ErrExist", err)
	}

	// /dev/shm is tmpfs, another filesystem than TMPDIR's here (or the
	// same, when TMPDIR is /dev/shm: then there is nothing to check).
	shm, err := os.MkdirTemp("/dev/shm", "clone-test-")
	if err == nil {
		defer os.RemoveAll(shm)
		var a, b unix.Stat_t
		must(t, unix.Stat(shm, &a))
		must(t, unix.Stat(root, &b))
		if a.Dev != b.Dev && !isBtrfs(root) {
			target := filepath.Join(shm, "ws")
			_, err := Clone(ctx, env.s, env.cache, c, target, CloneOptions{Mode: CloneReflink, Layers: layerFlavour()})
			if !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "different filesystems") {
				t.Errorf("reflink across filesystems: %v", err)
			}
			if ents, _ := os.ReadDir(shm); len(ents) != 0 {
				t.Errorf("reflink across filesystems left %v", ents)
			}
			res, err := Clone(ctx, env.s, env.cache, c, target, CloneOptions{Layers: layerFlavour()})
			must(t, err)
			if res.Method != "copy" || res.SameFS || res.Copied != 100005 || !strings.Contains(res.Why, "different filesystems") {
				t.Errorf("auto across filesystems: %+v", res)
			}
		}
	}

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	target := filepath.Join(root, "cancelled")
	if _, err := Clone(cctx, env.s, env.cache, c, target, opts); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	if _, err := os.Lstat(target); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("cancelled clone left its target: %v", err)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(root, tmpPrefix+"*")); len(leftovers) != 0 {
		t.Errorf("cancelled clone left %v", leftovers)
	}
}

// TestCloneDamagedCache: a layer file of the wrong size or missing is not
// cloned; the file comes from the store (FromStore), and the clone is
// still exact.
func TestCloneDamagedCache(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	env := newCloneEnv(t, root)
	src := filepath.Join(t.TempDir(), "src")
	snapshottest.Build(t, src, []snapshottest.Entry{
		{Path: "short", Kind: snapshottest.File, Data: []byte("the right content")},
		{Path: "gone", Kind: snapshottest.File, Data: []byte("gone from the cache")},
		{Path: "fine", Kind: snapshottest.File, Data: []byte("fine")},
	})
	c, tree := importAs(t, env.s, src)
	lo := layerFlavour()
	stack, err := env.cache.Stack(ctx, env.s, c, lo)
	must(t, err)
	layer := stack[0]
	must(t, os.Chmod(layer, 0o755))
	must(t, os.WriteFile(filepath.Join(layer, "short"), []byte("short"), 0o644))
	must(t, os.Remove(filepath.Join(layer, "gone")))
	ws := filepath.Join(root, "ws")
	res, err := Clone(ctx, env.s, env.cache, c, ws, CloneOptions{Layers: lo})
	must(t, err)
	if res.FromStore != int64(len("the right content")+len("gone from the cache")) || res.Files != 3 {
		t.Errorf("result %+v", res)
	}
	want := filepath.Join(root, "want")
	must(t, Materialize(ctx, env.s, tree, want, MaterializeOptions{Chown: lo.Chown}))
	snapshottest.CompareTrees(t, want, ws, snapshottest.Owner(lo.Chown))
}

// TestCloneSparse: a sparse file keeps its holes, cloned or copied.
func TestCloneSparse(t *testing.T) {
	for _, mode := range []CloneMode{CloneAuto, CloneCopy} {
		t.Run(string(mode), func(t *testing.T) {
			testCloneSparse(t, t.TempDir(), mode)
		})
	}
}

// TestCloneSparseXFS: the same on XFS, by FICLONE.
func TestCloneSparseXFS(t *testing.T) {
	testCloneSparse(t, testutil.ReflinkDir(t, "xfs"), CloneReflink)
}

func testCloneSparse(t *testing.T, root string, mode CloneMode) {
	ctx := context.Background()
	env := newCloneEnv(t, root)
	src := filepath.Join(root, "src")
	must(t, os.Mkdir(src, 0o755))
	f, err := os.Create(filepath.Join(src, "sparse"))
	must(t, err)
	const size = 256 << 20
	_, err = f.WriteAt([]byte("head"), 0)
	must(t, err)
	_, err = f.WriteAt([]byte("middle"), 100<<20)
	must(t, err)
	must(t, f.Truncate(size))
	f.Close()
	c, _ := importAs(t, env.s, src)
	ws := filepath.Join(root, "ws")
	res, err := Clone(ctx, env.s, env.cache, c, ws, CloneOptions{Mode: mode, Layers: layerFlavour()})
	must(t, err)
	var st unix.Stat_t
	must(t, unix.Stat(filepath.Join(ws, "sparse"), &st))
	if st.Size != size || st.Blocks*512 > 4<<20 {
		t.Errorf("clone: size %d, %d bytes allocated; want %d with holes", st.Size, st.Blocks*512, size)
	}
	if res.Copied > 2<<20 {
		t.Errorf("copied %d bytes of a sparse file holding 10", res.Copied)
	}
	b, err := os.ReadFile(filepath.Join(ws, "sparse"))
	must(t, err)
	if string(b[:4]) != "head" || string(b[100<<20:100<<20+6]) != "middle" || len(b) != size {
		t.Errorf("content differs")
	}
	t.Logf("%s: %+v", mode, res)
}
