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
)

// TestCloneCacheSnapshot (a real Btrfs): the first snapshot of a commit
// builds the cache's entry (a Clone into a subvolume), later ones only
// snapshot it; every snapshot is exactly Materialize's tree, its copied
// stat index finds nothing changed, and a change in one snapshot is found
// by its scan alone — the entry and the other snapshot keep their bytes.
// Evicting the entry leaves the snapshots whole; a snapshot is removed as
// a subvolume.
func TestCloneCacheSnapshot(t *testing.T) {
	ctx := context.Background()
	root := testutil.ReflinkDir(t, "btrfs")
	env := newCloneEnv(t, root)
	commits, names := layerChain(t, env.s)
	cc := NewCloneCache(filepath.Join(root, "clones"))
	lo := layerFlavour()
	opts := CloneOptions{Mode: CloneReflink, Layers: lo}
	if !cc.Usable(filepath.Join(root, "x")) {
		t.Fatal("a Btrfs directory is not usable")
	}
	if cc.Usable(filepath.Join(t.TempDir(), "x")) && !isBtrfs(t.TempDir()) {
		t.Error("TMPDIR is usable")
	}
	for i, c := range commits[len(commits)-2:] {
		name := names[len(names)-2+i]
		tree := env.tree(t, c)
		want := filepath.Join(root, fmt.Sprintf("want-%d", i))
		must(t, Materialize(ctx, env.s, tree, want, MaterializeOptions{Chown: lo.Chown}))
		var dirs []string
		for n := 0; n < 2; n++ {
			dir := filepath.Join(root, fmt.Sprintf("ws-%d-%d", i, n))
			idxPath := dir + ".index"
			res, err := cc.Snapshot(ctx, env.s, env.cache, c, dir, idxPath, opts)
			if err != nil {
				t.Fatalf("%s: snapshot %d: %v", name, n, err)
			}
			if res.Built != (n == 0) || (n == 0 && (res.Clone == nil || res.Clone.Method != "reflink")) {
				t.Errorf("%s: snapshot %d: %+v", name, n, res)
			}
			if !IsSubvolume(dir) {
				t.Errorf("%s: %s is not a subvolume", name, dir)
			}
			diffs, err := snapshottest.Differences(want, dir, snapshottest.Owner(lo.Chown))
			must(t, err)
			if len(diffs) > 0 {
				t.Fatalf("%s: snapshot differs from materialize:\n%s", name, strings.Join(diffs, "\n"))
			}
			idx, err := ReadIndex(idxPath)
			must(t, err)
			if idx.Base != tree || res.Index.Entries != len(idx.entries) {
				t.Errorf("%s: index base %s entries %d, info %+v", name, idx.Base.Short(), len(idx.entries), res.Index)
			}
			scan, err := ScanWorkspace(ctx, env.s, dir, idx)
			must(t, err)
			if len(scan.Changes) != 0 {
				t.Errorf("%s: a fresh snapshot scans as changed: %v", name, scan.Changes)
			}
			dirs = append(dirs, dir)
		}
		// A change in the first snapshot: its scan finds it; the
		// second's and the entry are as they were.
		f := filepath.Join(dirs[0], "new-file")
		must(t, os.WriteFile(f, []byte("new\n"), 0o644))
		for n, dir := range dirs {
			idx, err := ReadIndex(dir + ".index")
			must(t, err)
			scan, err := ScanWorkspace(ctx, env.s, dir, idx)
			must(t, err)
			if got := len(scan.Changes); got != 1-n {
				t.Errorf("%s: snapshot %d: %d changes: %v", name, n, got, scan.Changes)
			}
		}
		entry := cc.entry(lo.Flavour, c)
		if _, err := os.Lstat(filepath.Join(entry, cloneTree, "new-file")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: the write reached the cache's entry: %v", name, err)
		}
	}
	if leftovers, _ := filepath.Glob(filepath.Join(cc.Dir(), "*", tmpPrefix+"*")); len(leftovers) != 0 {
		t.Errorf("left %v", leftovers)
	}

	// Evict: a kept entry stays, the other goes; the snapshots made from
	// it keep their content.
	ev, err := cc.Evict(CloneEvictOptions{Keep: commits[len(commits)-1:]})
	must(t, err)
	if len(ev.Removed) != 1 || !strings.HasSuffix(ev.Removed[0], commits[len(commits)-2].String()) {
		t.Errorf("evict: %v", ev.Removed)
	}
	want := filepath.Join(root, "want-0")
	diffs, err := snapshottest.Differences(want, filepath.Join(root, "ws-0-1"), snapshottest.Owner(lo.Chown))
	must(t, err)
	if len(diffs) > 0 {
		t.Errorf("a snapshot after its entry's eviction:\n%s", strings.Join(diffs, "\n"))
	}
	// Removing a snapshot: destroyed (root, or user_subvol_rm_allowed),
	// else emptied and rmdir'ed.
	for _, d := range []string{"ws-0-0", "ws-0-1"} {
		p := filepath.Join(root, d)
		if err := RemoveSubvolume(p); err != nil {
			t.Errorf("remove %s: %v", d, err)
		}
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s is still there: %v", d, err)
		}
	}
}

// TestCopyIndex: the copy differs only in its device; a damaged source
// is refused.
func TestCopyIndex(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	env := newCloneEnv(t, root)
	src := filepath.Join(t.TempDir(), "src")
	snapshottest.Build(t, src, []snapshottest.Entry{{Path: "a/b", Kind: snapshottest.File, Data: []byte("x")}})
	c, _ := importAs(t, env.s, src)
	ws := filepath.Join(root, "ws")
	_, err := Clone(ctx, env.s, env.cache, c, ws, CloneOptions{Layers: layerFlavour(), Index: ws + ".idx"})
	must(t, err)
	in, err := CopyIndex(ws+".idx", ws+".copy", 12345)
	must(t, err)
	a, err := ReadIndex(ws + ".idx")
	must(t, err)
	b, err := ReadIndex(ws + ".copy")
	must(t, err)
	if b.Dev != 12345 || in.Entries != 2 || len(b.entries) != 2 || b.Base != a.Base || b.RecordedNs != a.RecordedNs {
		t.Errorf("copy: dev %d, info %+v, %+v", b.Dev, in, b)
	}
	var st unix.Stat_t
	must(t, unix.Stat(ws, &st))
	if _, err := ScanWorkspace(ctx, env.s, ws, b); !errors.Is(err, ErrIndexStale) {
		t.Errorf("scan with another device: %v", err)
	}
	raw, _ := os.ReadFile(ws + ".idx")
	raw[len(raw)/2] ^= 1
	must(t, os.WriteFile(ws+".bad", raw, 0o644))
	if _, err := CopyIndex(ws+".bad", ws+".copy2", 1); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Errorf("damaged: %v", err)
	}
}
