package snapshot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/internal/testutil"
	"github.com/stratafs/strata/snapshot/snapshottest"
	"github.com/stratafs/strata/store"
)

// scanBase is the tree every scan case starts from.
func scanBase(caps snapshottest.Capabilities) []snapshottest.Entry {
	es := []snapshottest.Entry{
		{Path: "README", Kind: snapshottest.File, Data: []byte("line 1\nline 2\n"), MtimeNs: 1_600_000_000_000_000_001},
		{Path: "src/main.go", Kind: snapshottest.File, Data: []byte("package main\n")},
		{Path: "src/lib/a.go", Kind: snapshottest.File, Data: []byte("package lib // a\n")},
		{Path: "src/lib/b.go", Kind: snapshottest.File, Data: []byte("package lib // b\n")},
		{Path: "src/lib/deep/c.go", Kind: snapshottest.File, Data: []byte(strings.Repeat("c", 70000))},
		{Path: "src/lib/link", Kind: snapshottest.Symlink, Target: "a.go"},
		{Path: "node_modules/x/index.js", Kind: snapshottest.File, Data: []byte("module.exports = 1\n")},
		{Path: "node_modules/x/package.json", Kind: snapshottest.File, Data: []byte("{}\n")},
		{Path: "hard/a", Kind: snapshottest.File, Data: []byte("shared inode")},
		{Path: "hard/b", Kind: snapshottest.Hardlink, Target: "hard/a"},
		{Path: "ftod", Kind: snapshottest.File, Data: []byte("file, to be a dir")},
		{Path: "dtof/x", Kind: snapshottest.File, Data: []byte("x")},
		{Path: "symlink", Kind: snapshottest.Symlink, Target: "README"},
		{Path: "fifo", Kind: snapshottest.FIFO},
		{Path: "empty", Kind: snapshottest.Dir},
		{Path: "ro", Kind: snapshottest.Dir, Mode: 0o555},
		{Path: "ro/f", Kind: snapshottest.File, Data: []byte("in a read-only dir"), Mode: 0o444},
		{Path: "name\nwith newline", Kind: snapshottest.File, Data: []byte("odd")},
	}
	if caps.Xattrs {
		es = append(es, snapshottest.Entry{Path: "xattr", Kind: snapshottest.File, Data: []byte("x"), Xattrs: map[string][]byte{"user.a": []byte("1")}})
	}
	return es
}

type scanCase struct {
	name  string
	op    func(t *testing.T, ws string)
	read  int64 // files ApplyUpper must read; -1: not checked
	moved int
	xattr bool // needs user.* xattrs
	// check, when set, replaces the comparison with an import.
	check func(t *testing.T, s *store.Store, base, tree store.ID)
}

func scanCases() []scanCase {
	write := func(t *testing.T, p, s string) {
		t.Helper()
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, []byte(s), 0o644))
	}
	appendTo := func(t *testing.T, p, s string) {
		t.Helper()
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
		must(t, err)
		_, err = f.WriteString(s)
		must(t, err)
		must(t, f.Close())
	}
	return []scanCase{
		{name: "nothing", op: func(t *testing.T, ws string) {}, read: 0},
		{name: "one line appended", op: func(t *testing.T, ws string) {
			appendTo(t, filepath.Join(ws, "src/lib/a.go"), "func A() {}\n")
		}, read: 1},
		{name: "added files and dirs", op: func(t *testing.T, ws string) {
			write(t, filepath.Join(ws, "new/x"), "x")
			write(t, filepath.Join(ws, "new/sub/y"), "y")
			write(t, filepath.Join(ws, "z"), "z")
			must(t, os.Mkdir(filepath.Join(ws, "new/emptydir"), 0o700))
		}, read: 3},
		{name: "deleted", op: func(t *testing.T, ws string) {
			must(t, os.Remove(filepath.Join(ws, "README")))
			must(t, os.RemoveAll(filepath.Join(ws, "node_modules")))
			must(t, os.Remove(filepath.Join(ws, "empty")))
		}, read: 0},
		{name: "directory renamed", op: func(t *testing.T, ws string) {
			must(t, os.Rename(filepath.Join(ws, "src/lib"), filepath.Join(ws, "lib2")))
		}, read: 0, moved: 3},
		{name: "directory renamed, a file in it edited", op: func(t *testing.T, ws string) {
			must(t, os.Rename(filepath.Join(ws, "src"), filepath.Join(ws, "source")))
			appendTo(t, filepath.Join(ws, "source/lib/b.go"), "// more\n")
		}, read: 1, moved: 3},
		{name: "directory renamed over another", op: func(t *testing.T, ws string) {
			must(t, os.RemoveAll(filepath.Join(ws, "node_modules/x")))
			must(t, os.Rename(filepath.Join(ws, "src/lib/deep"), filepath.Join(ws, "node_modules/x")))
		}, read: 0, moved: 1},
		{name: "file renamed", op: func(t *testing.T, ws string) {
			must(t, os.Rename(filepath.Join(ws, "src/main.go"), filepath.Join(ws, "src/cmd.go")))
		}, read: -1},
		{name: "type changes", op: func(t *testing.T, ws string) {
			must(t, os.Remove(filepath.Join(ws, "ftod")))
			write(t, filepath.Join(ws, "ftod/inside"), "now a dir")
			must(t, os.RemoveAll(filepath.Join(ws, "dtof")))
			write(t, filepath.Join(ws, "dtof"), "now a file")
			must(t, os.Remove(filepath.Join(ws, "symlink")))
			must(t, os.Symlink("src/main.go", filepath.Join(ws, "symlink")))
			must(t, os.Remove(filepath.Join(ws, "src/lib/link")))
			write(t, filepath.Join(ws, "src/lib/link"), "a file now")
			must(t, os.Remove(filepath.Join(ws, "fifo")))
			must(t, os.Symlink("nowhere", filepath.Join(ws, "fifo")))
		}, read: 3},
		{name: "metadata only", op: func(t *testing.T, ws string) {
			must(t, os.Chmod(filepath.Join(ws, "README"), 0o600))
			mt := time.Unix(1_700_000_000, 5)
			must(t, os.Chtimes(filepath.Join(ws, "src/main.go"), mt, mt))
			must(t, os.Chmod(filepath.Join(ws, "src"), 0o750))
			must(t, os.Chtimes(filepath.Join(ws, "node_modules"), mt, mt))
		}, read: 2},
		{name: "hardlinks", op: func(t *testing.T, ws string) {
			must(t, os.Link(filepath.Join(ws, "src/main.go"), filepath.Join(ws, "main-link")))
			appendTo(t, filepath.Join(ws, "hard/b"), " changed through b")
		}, read: 2},
		{name: "hardlink member removed", op: func(t *testing.T, ws string) {
			must(t, os.Remove(filepath.Join(ws, "hard/a")))
		}, read: 1},
		{name: "hardlinked file moved with its directory", op: func(t *testing.T, ws string) {
			must(t, os.Rename(filepath.Join(ws, "hard"), filepath.Join(ws, "hard2")))
		}, read: 1},
		{name: "xattrs", xattr: true, op: func(t *testing.T, ws string) {
			must(t, unix.Setxattr(filepath.Join(ws, "xattr"), "user.b", []byte("2"), 0))
			must(t, unix.Removexattr(filepath.Join(ws, "xattr"), "user.a"))
			must(t, unix.Setxattr(filepath.Join(ws, "src"), "user.dir", []byte("d"), 0))
		}, read: 1},
		{name: "sparse file", op: func(t *testing.T, ws string) {
			f, err := os.Create(filepath.Join(ws, "sparse"))
			must(t, err)
			_, err = f.WriteAt([]byte("tail"), 64<<20)
			must(t, err)
			must(t, f.Close())
		}, read: 1},
		{name: "fifo added, odd name edited", op: func(t *testing.T, ws string) {
			must(t, unix.Mkfifo(filepath.Join(ws, "src/pipe"), 0o600))
			appendTo(t, filepath.Join(ws, "name\nwith newline"), "!")
		}, read: 1},
		{name: "inside a read-only dir", op: func(t *testing.T, ws string) {
			must(t, os.Chmod(filepath.Join(ws, "ro"), 0o755))
			must(t, os.Chmod(filepath.Join(ws, "ro/f"), 0o644))
			write(t, filepath.Join(ws, "ro/f"), "changed")
			must(t, os.Chmod(filepath.Join(ws, "ro"), 0o555))
		}, read: 1},
		// Scanned through (the owner gets r-x for a moment); an import
		// could not read it, so the change is checked by hand.
		{name: "a directory nobody can list", op: func(t *testing.T, ws string) {
			must(t, os.Chmod(filepath.Join(ws, "src/lib/deep"), 0o000))
		}, read: 0, check: func(t *testing.T, s *store.Store, base, tree store.ID) {
			cs, err := Diff(context.Background(), s, base, tree)
			must(t, err)
			if len(cs) != 1 || cs[0].Path != "src/lib/deep" || cs[0].New.Mode != 0 || cs[0].Old.Content != cs[0].New.Content {
				t.Errorf("changes %+v", cs)
			}
		}},
	}
}

// scanCommit scans ws against the index at idxPath, applies the changes
// to the index's base and commits the tree; it returns the tree and what
// the scan and ApplyUpper did.
func scanCommit(t *testing.T, s *store.Store, ws, idxPath string) (store.ID, *ScanResult, *ApplyResult) {
	t.Helper()
	ctx := context.Background()
	idx, err := ReadIndex(idxPath)
	must(t, err)
	scan, err := ScanWorkspace(ctx, s, ws, idx)
	must(t, err)
	w, err := s.NewWriter(ctx, "scan")
	must(t, err)
	defer w.Abort()
	ar, err := ApplyUpper(ctx, s, w, idx.Base, scan.Changes, ApplyOptions{})
	must(t, err)
	must(t, w.Finish(func(tx *store.Tx) error {
		_, err := tx.PutCommit(&store.Commit{Tree: ar.Tree, TimeNs: time.Now().UnixNano(), Stats: ar.Stats})
		return err
	}))
	return ar.Tree, scan, ar
}

// importTree imports dir (the oracle: what the directory holds as a tree).
func importTree(t *testing.T, s *store.Store, dir string) store.ID {
	t.Helper()
	_, tree := importAs(t, s, dir)
	return tree
}

func requireSameTree(t *testing.T, s *store.Store, want, got store.ID, what string) {
	t.Helper()
	if want == got {
		return
	}
	cs, err := Diff(context.Background(), s, want, got)
	must(t, err)
	var lines []string
	for _, c := range cs {
		lines = append(lines, fmt.Sprintf("%v %q: want %+v, got %+v", c.Op, c.Path, c.Old, c.New))
	}
	t.Fatalf("%s: tree differs from an import of the directory:\n%s", what, strings.Join(lines, "\n"))
}

// TestScanWorkspace: for each kind of change made in a cloned workspace,
// the stat scan's changes applied to the base give exactly the tree an
// import of the directory gives, and ApplyUpper reads only the files whose
// stat changed (none for a renamed directory); after committing and
// re-recording the index, a second change is found alone.
func TestScanWorkspace(t *testing.T) {
	testScanWorkspace(t, t.TempDir())
}

// TestScanWorkspaceUnprivileged is TestScanWorkspace as uid 1000.
func TestScanWorkspaceUnprivileged(t *testing.T) {
	if runAsUser(t) {
		return
	}
	testScanWorkspace(t, t.TempDir())
}

// TestScanWorkspaceXFS is TestScanWorkspace on XFS, with reflinks.
func TestScanWorkspaceXFS(t *testing.T) {
	testScanWorkspace(t, testutil.ReflinkDir(t, "xfs"))
}

func testScanWorkspace(t *testing.T, root string) {
	ctx := context.Background()
	env := newCloneEnv(t, root)
	caps := snapshottest.Probe(root)
	src := filepath.Join(root, "src")
	snapshottest.Build(t, src, scanBase(caps))
	base, baseTree := importAs(t, env.s, src)
	lo := LayerOptions{Flavour: FlavourUser}
	if os.Geteuid() == 0 {
		lo = LayerOptions{Flavour: FlavourTrusted, Chown: true}
	}
	for i, c := range scanCases() {
		if c.xattr && !caps.Xattrs {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			ws := filepath.Join(root, fmt.Sprintf("ws%d", i))
			idxPath := ws + ".index"
			res, err := Clone(ctx, env.s, env.cache, base, ws, CloneOptions{Layers: lo, Index: idxPath})
			must(t, err)
			if res.Index == nil || res.Index.Entries < 20 {
				t.Errorf("index %+v", res.Index)
			}
			c.op(t, ws)
			tree, scan, ar := scanCommit(t, env.s, ws, idxPath)
			if c.check != nil {
				c.check(t, env.s, baseTree, tree)
			} else {
				requireSameTree(t, env.s, importTree(t, env.s, ws), tree, c.name)
			}
			if c.read >= 0 && ar.FilesRead != c.read {
				t.Errorf("files read %d, want %d; changes %v", ar.FilesRead, c.read, scan.Changes)
			}
			if scan.Moved != c.moved {
				t.Errorf("moved %d, want %d", scan.Moved, c.moved)
			}
			if c.name == "nothing" && (len(scan.Changes) != 0 || tree != baseTree) {
				t.Errorf("nothing changed, yet %v", scan.Changes)
			}
			if scan.Entries < 20 {
				t.Errorf("stat'd %d entries", scan.Entries)
			}

			// Committed: the index now names the new tree; one more
			// change is all the next scan finds.
			_, err = scan.Index(tree).Save(idxPath)
			must(t, err)
			_, again, ar2 := scanCommit(t, env.s, ws, idxPath)
			if len(again.Changes) != 0 || ar2.FilesRead != 0 {
				t.Errorf("after re-recording, the unchanged directory scans as %v", again.Changes)
			}
			must(t, os.MkdirAll(filepath.Join(ws, "later"), 0o755))
			must(t, os.WriteFile(filepath.Join(ws, "later/file"), []byte("later"), 0o644))
			tree2, scan2, ar3 := scanCommit(t, env.s, ws, idxPath)
			if c.check == nil {
				requireSameTree(t, env.s, importTree(t, env.s, ws), tree2, c.name+", then a second change")
			} else if cs, err := Diff(ctx, env.s, tree, tree2); err != nil || len(cs) != 2 || cs[0].Path != "later" || cs[1].Path != "later/file" {
				t.Errorf("second change: %v %v", cs, err)
			}
			if ar3.FilesRead != 1 || len(scan2.Changes) > 3 {
				t.Errorf("second change: read %d, changes %v", ar3.FilesRead, scan2.Changes)
			}
		})
	}
}

// TestScanRacy: entries the index recorded within its racy window (here:
// all, for an index said to be recorded an hour ago, before every entry's
// ctime, on a filesystem without multigrain timestamps) are reported and
// read again, and the tree stays the same.
func TestScanRacy(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	env := newCloneEnv(t, root)
	src := filepath.Join(root, "src")
	snapshottest.Build(t, src, scanBase(snapshottest.Capabilities{}))
	base, baseTree := importAs(t, env.s, src)
	ws := filepath.Join(root, "ws")
	idxPath := ws + ".index"
	_, err := Clone(ctx, env.s, env.cache, base, ws, CloneOptions{Layers: layerFlavour(), Index: idxPath})
	must(t, err)
	idx, err := ReadIndex(idxPath)
	must(t, err)
	idx.Multigrain = false
	idx.RecordedNs = time.Now().Add(-time.Hour).UnixNano()
	idx.markRacy()
	_, err = idx.Save(idxPath)
	must(t, err)
	tree, scan, ar := scanCommit(t, env.s, ws, idxPath)
	if tree != baseTree {
		t.Errorf("racy entries changed the tree")
	}
	files := 0
	for _, e := range idx.entries {
		if e.mode&syscall.S_IFMT == syscall.S_IFREG {
			files++
		}
	}
	if scan.Racy != len(idx.entries) || len(scan.Changes) != len(idx.entries) || ar.FilesRead != int64(files-1) { // hard/a and hard/b: one inode
		t.Errorf("racy %d, changes %d, read %d; index has %d entries, %d files", scan.Racy, len(scan.Changes), ar.FilesRead, len(idx.entries), files)
	}
}

// TestScanStaleIndex: an index of another device is refused; a damaged one
// does not load.
func TestScanStaleIndex(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	env := newCloneEnv(t, root)
	src := filepath.Join(root, "src")
	snapshottest.Build(t, src, scanBase(snapshottest.Capabilities{}))
	base, _ := importAs(t, env.s, src)
	ws := filepath.Join(root, "ws")
	idxPath := ws + ".index"
	_, err := Clone(ctx, env.s, env.cache, base, ws, CloneOptions{Layers: layerFlavour(), Index: idxPath})
	must(t, err)
	idx, err := ReadIndex(idxPath)
	must(t, err)
	idx.Dev++
	if _, err := ScanWorkspace(ctx, env.s, ws, idx); !errors.Is(err, ErrIndexStale) {
		t.Errorf("another device: %v", err)
	}
	b, err := os.ReadFile(idxPath)
	must(t, err)
	b[len(b)/2] ^= 1
	must(t, os.WriteFile(idxPath, b, 0o644))
	if _, err := ReadIndex(idxPath); !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("damaged index: %v", err)
	}
	must(t, os.WriteFile(idxPath, b[:40], 0o644))
	if _, err := ReadIndex(idxPath); !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("short index: %v", err)
	}
}
