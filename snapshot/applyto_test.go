package snapshot_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/snapshot/snapshottest"
	"github.com/stratafs/strata/store"
)

// applyToFixture imports base and new listings and materializes base into
// a target directory standing for the user's repository.
type applyToFixture struct {
	s         *store.Store
	base, new store.ID
	target    string
	wantDir   string // new, materialized
	baseDir   string // base, materialized
}

func newApplyToFixture(t *testing.T, base, next listing) *applyToFixture {
	t.Helper()
	ctx := context.Background()
	s := openStore(t)
	f := &applyToFixture{s: s}
	f.base = importListing(t, s, base).Tree
	f.new = importListing(t, s, next).Tree
	tmp := t.TempDir()
	snapshottest.Writable(t, tmp)
	f.target, f.wantDir, f.baseDir = filepath.Join(tmp, "target"), filepath.Join(tmp, "want"), filepath.Join(tmp, "base")
	must(t, snapshot.Materialize(ctx, s, f.base, f.target, snapshot.MaterializeOptions{}))
	must(t, snapshot.Materialize(ctx, s, f.base, f.baseDir, snapshot.MaterializeOptions{}))
	must(t, snapshot.Materialize(ctx, s, f.new, f.wantDir, snapshot.MaterializeOptions{}))
	return f
}

func (f *applyToFixture) apply(t *testing.T, opts snapshot.ApplyToOptions) (*snapshot.ApplyToResult, error) {
	t.Helper()
	return snapshot.ApplyTo(context.Background(), f.s, f.base, f.new, f.target, opts)
}

func applyBase() listing {
	return newListing(
		mf("a", "a\n"), mf("b", "b\n"), mf("mode", "m\n"),
		md("d"), mf("d/x", "x\n"), mf("d/y", "y\n"), md("d/sub"), mf("d/sub/z", "z\n"),
		mf("ftod", "file to dir\n"), md("dtof"), mf("dtof/in", "in\n"),
		snapshottest.Entry{Path: "link", Kind: snapshottest.Symlink, Target: "a"},
		md("keep"), mf("keep/k", "k\n"), md("gone"),
	)
}

func applyNew() listing {
	return applyBase().
		put(mf("a", "a changed\n"), mf("new", "new\n"), withMode(mf("mode", "m\n"), 0o700),
			mf("deep/er/new", "deep\n"), withTime(md("d"), mT0+7)).
		del("b", "d/sub", "ftod", "dtof", "gone").
		put(mf("ftod/inside", "now a dir\n"), mf("dtof", "now a file\n"),
			snapshottest.Entry{Path: "link", Kind: snapshottest.Symlink, Target: "/etc/passwd"},
			snapshottest.Entry{Path: "fifo", Kind: snapshottest.FIFO, Mode: 0o640},
			withMode(md("newempty"), 0o700))
}

func TestApplyTo(t *testing.T) {
	f := newApplyToFixture(t, applyBase(), applyNew())
	dry, err := f.apply(t, snapshot.ApplyToOptions{DryRun: true})
	must(t, err)
	snapshottest.CompareTrees(t, f.baseDir, f.target) // nothing written
	res, err := f.apply(t, snapshot.ApplyToOptions{})
	must(t, err)
	snapshottest.CompareTrees(t, f.wantDir, f.target)
	if !reflect.DeepEqual(dry.Written, res.Written) {
		t.Errorf("dry run %v, run %v", dry.Written, res.Written)
	}
	got := map[string]string{}
	for _, w := range res.Written {
		got[w.Path] = w.Op
	}
	want := map[string]string{
		"a": "modified", "b": "deleted", "new": "created", "mode": "mode", "deep": "created", "deep/er": "created",
		"deep/er/new": "created", "d/sub": "deleted", "d/sub/z": "deleted", "ftod": "modified", "ftod/inside": "created",
		"dtof": "modified", "dtof/in": "deleted", "link": "modified", "fifo": "created", "newempty": "created", "gone": "deleted",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("written %v,\nwant %v", got, want)
	}
	if len(res.Refused) > 0 {
		t.Errorf("refused %v", res.Refused)
	}
	// A second time: everything is already there.
	again, err := f.apply(t, snapshot.ApplyToOptions{})
	must(t, err)
	if len(again.Written) > 0 || len(again.Refused) > 0 {
		t.Errorf("second apply: %+v", again)
	}
	snapshottest.CompareTrees(t, f.wantDir, f.target)
	leftovers, _ := filepath.Glob(filepath.Join(f.target, "*", ".strata-apply-*"))
	if top, _ := filepath.Glob(filepath.Join(f.target, ".strata-apply-*")); len(top)+len(leftovers) > 0 {
		t.Errorf("temporary files left: %v %v", top, leftovers)
	}
}

// TestApplyToRefusesUserEdits: a target the user changed is refused, and
// nothing at all is written; Force writes it.
func TestApplyToRefusesUserEdits(t *testing.T) {
	f := newApplyToFixture(t, applyBase(), applyNew())
	must(t, os.WriteFile(filepath.Join(f.target, "a"), []byte("the user's edit\n"), 0o644))  // modified by the change
	must(t, os.WriteFile(filepath.Join(f.target, "new"), []byte("user's own new\n"), 0o644)) // created by the change
	must(t, os.Remove(filepath.Join(f.target, "d/x")))                                       // not in the change: fine
	must(t, os.WriteFile(filepath.Join(f.target, "d/sub/z"), []byte("edited\n"), 0o644))     // deleted by the change
	must(t, os.Chmod(filepath.Join(f.target, "mode"), 0o600))                                // mode changed by the change
	snapshot.Materialize(context.Background(), f.s, f.base, filepath.Join(t.TempDir(), "x"), snapshot.MaterializeOptions{})
	before := filepath.Join(t.TempDir(), "before")
	copyTree(t, f.target, before)

	res, err := f.apply(t, snapshot.ApplyToOptions{})
	if !errors.Is(err, snapshot.ErrRefused) {
		t.Fatalf("error %v, want ErrRefused", err)
	}
	refused := map[string]string{}
	for _, c := range res.Refused {
		refused[c.Path] = c.Reason
	}
	want := map[string]string{"a": snapshot.RefusedModified, "new": snapshot.RefusedExists,
		"d/sub/z": snapshot.RefusedModified, "mode": snapshot.RefusedMode}
	if !reflect.DeepEqual(refused, want) {
		t.Errorf("refused %v, want %v", refused, want)
	}
	if len(res.Written) > 0 {
		t.Errorf("written %v", res.Written)
	}
	snapshottest.CompareTrees(t, before, f.target)

	res, err = f.apply(t, snapshot.ApplyToOptions{Force: true})
	must(t, err)
	if len(res.Refused) != 4 {
		t.Errorf("forced: refused %v, want the 4 paths listed", res.Refused)
	}
	// d/x stays deleted: the change did not touch it.
	snapshottest.CompareTrees(t, f.wantDir, f.target, snapshottest.Ignore(func(rel string) bool { return rel == "d/x" || rel == "d" }))
	if _, err := os.Lstat(filepath.Join(f.target, "d/x")); !os.IsNotExist(err) {
		t.Errorf("d/x: %v", err)
	}
}

// TestApplyToKeepsUserMode: a content change that keeps the mode keeps the
// mode the user gave the file.
func TestApplyToKeepsUserMode(t *testing.T) {
	f := newApplyToFixture(t, applyBase(), applyBase().put(mf("a", "changed\n")))
	must(t, os.Chmod(filepath.Join(f.target, "a"), 0o755))
	_, err := f.apply(t, snapshot.ApplyToOptions{})
	must(t, err)
	fi, err := os.Stat(filepath.Join(f.target, "a"))
	must(t, err)
	if fi.Mode().Perm() != 0o755 || string(mustRead(t, filepath.Join(f.target, "a"))) != "changed\n" {
		t.Errorf("a: mode %v content %q", fi.Mode(), mustRead(t, filepath.Join(f.target, "a")))
	}
}

// TestApplyToSymlinks: nothing is written through a symlink planted in the
// target, Force or not; a symlink of the new tree is written as a
// symlink. A directory stands for /etc, so the test never risks the real
// one.
func TestApplyToSymlinks(t *testing.T) {
	etc := filepath.Join(t.TempDir(), "etc")
	must(t, os.Mkdir(etc, 0o755))
	passwd := filepath.Join(etc, "passwd")
	must(t, os.WriteFile(passwd, []byte("root:x:0:0::/root:/bin/sh\n"), 0o644))
	check := func(t *testing.T) {
		t.Helper()
		if b := mustRead(t, passwd); string(b) != "root:x:0:0::/root:/bin/sh\n" {
			t.Fatalf("the stand-in /etc/passwd was written: %q", b)
		}
		names, _ := os.ReadDir(etc)
		if len(names) != 1 {
			t.Fatalf("something was created in the stand-in /etc: %v", names)
		}
	}

	t.Run("planted parent symlink", func(t *testing.T) {
		base := newListing(mf("a/passwd", "in the repo\n"), mf("other", "o"))
		next := newListing(mf("a/passwd", "changed by the agent\n"), mf("other", "o2"), mf("a/new", "n"))
		f := newApplyToFixture(t, base, next)
		must(t, os.RemoveAll(filepath.Join(f.target, "a")))
		must(t, os.Symlink(etc, filepath.Join(f.target, "a")))
		for _, force := range []bool{false, true} {
			res, err := f.apply(t, snapshot.ApplyToOptions{Force: force})
			if !errors.Is(err, snapshot.ErrRefused) {
				t.Errorf("force %v: error %v, want ErrRefused", force, err)
			}
			found := false
			for _, c := range res.Refused {
				if c.Path == "a/passwd" && c.Reason == snapshot.RefusedSymlink {
					found = true
				}
			}
			if !found {
				t.Errorf("force %v: refused %v, want a/passwd: %s", force, res.Refused, snapshot.RefusedSymlink)
			}
			check(t)
			if b := mustRead(t, filepath.Join(f.target, "other")); string(b) != "o" {
				t.Errorf("force %v: other was written although something was refused", force)
			}
		}
	})
	t.Run("planted file symlink", func(t *testing.T) {
		f := newApplyToFixture(t, newListing(mf("passwd", "repo\n")), newListing(mf("passwd", "agent\n")))
		must(t, os.Remove(filepath.Join(f.target, "passwd")))
		must(t, os.Symlink(passwd, filepath.Join(f.target, "passwd")))
		res, err := f.apply(t, snapshot.ApplyToOptions{})
		if !errors.Is(err, snapshot.ErrRefused) || len(res.Refused) != 1 || !strings.HasPrefix(res.Refused[0].Reason, snapshot.RefusedType) {
			t.Errorf("%v %+v", err, res)
		}
		check(t)
		// Force replaces the symlink itself, atomically; its target is
		// not touched.
		_, err = f.apply(t, snapshot.ApplyToOptions{Force: true})
		must(t, err)
		check(t)
		if fi, err := os.Lstat(filepath.Join(f.target, "passwd")); err != nil || !fi.Mode().IsRegular() {
			t.Errorf("passwd: %v %v", fi, err)
		}
		snapshottest.CompareTrees(t, f.wantDir, f.target)
	})
	t.Run("symlink in the new tree", func(t *testing.T) {
		f := newApplyToFixture(t, newListing(mf("x", "x")),
			newListing(mf("x", "x"), snapshottest.Entry{Path: "l", Kind: snapshottest.Symlink, Target: passwd},
				snapshottest.Entry{Path: "rel", Kind: snapshottest.Symlink, Target: "../../../../../../../" + passwd}))
		_, err := f.apply(t, snapshot.ApplyToOptions{})
		must(t, err)
		check(t)
		if got, err := os.Readlink(filepath.Join(f.target, "l")); err != nil || got != passwd {
			t.Errorf("l: %q %v", got, err)
		}
		snapshottest.CompareTrees(t, f.wantDir, f.target)
	})
	t.Run("symlink in the new tree, then a file below its name", func(t *testing.T) {
		// base has dir "a"; new replaces it with a symlink to the stand-in
		// /etc. The deletions below "a" go into the real directory, and
		// the symlink is created after it is gone.
		f := newApplyToFixture(t, newListing(mf("a/passwd", "repo\n")),
			newListing(snapshottest.Entry{Path: "a", Kind: snapshottest.Symlink, Target: etc}))
		_, err := f.apply(t, snapshot.ApplyToOptions{})
		must(t, err)
		check(t)
		snapshottest.CompareTrees(t, f.wantDir, f.target)
	})
	t.Run("dir root given as a symlink", func(t *testing.T) {
		f := newApplyToFixture(t, newListing(mf("x", "x")), newListing(mf("x", "y")))
		link := filepath.Join(t.TempDir(), "repo")
		must(t, os.Symlink(f.target, link))
		_, err := snapshot.ApplyTo(context.Background(), f.s, f.base, f.new, link, snapshot.ApplyToOptions{})
		must(t, err)
		snapshottest.CompareTrees(t, f.wantDir, f.target)
	})
}

// TestApplyToUntrackedFiles: a directory the change deletes keeps the
// user's untracked files (and so stays, with a warning); a directory that
// a file replaces cannot be removed then, even with Force.
func TestApplyToUntrackedFiles(t *testing.T) {
	base := newListing(mf("d/x", "x"), mf("e/y", "y"))
	next := newListing(mf("e", "e is a file now"))
	f := newApplyToFixture(t, base, next)
	must(t, os.WriteFile(filepath.Join(f.target, "d/untracked"), []byte("mine"), 0o644))
	var warned []string
	res, err := f.apply(t, snapshot.ApplyToOptions{Warn: func(p, msg string) { warned = append(warned, p) }})
	must(t, err)
	if _, err := os.Stat(filepath.Join(f.target, "d/untracked")); err != nil {
		t.Errorf("untracked file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(f.target, "d/x")); !os.IsNotExist(err) {
		t.Errorf("d/x: %v", err)
	}
	if !reflect.DeepEqual(warned, []string{"d"}) {
		t.Errorf("warnings %v, want d", warned)
	}
	for _, w := range res.Written {
		if w.Path == "d" {
			t.Errorf("d reported written: %v", res.Written)
		}
	}

	f = newApplyToFixture(t, base, next)
	must(t, os.WriteFile(filepath.Join(f.target, "e/untracked"), []byte("mine"), 0o644))
	for _, force := range []bool{false, true} {
		res, err := f.apply(t, snapshot.ApplyToOptions{Force: force})
		if !errors.Is(err, snapshot.ErrRefused) || len(res.Refused) != 1 || res.Refused[0].Path != "e" {
			t.Errorf("force %v: %v %+v", force, err, res)
		}
	}
	if _, err := os.Stat(filepath.Join(f.target, "e/untracked")); err != nil {
		t.Errorf("untracked file: %v", err)
	}
}

// TestApplyToMissingParents: a change below a directory the user deleted
// creates it again, with the new tree's metadata.
func TestApplyToMissingParents(t *testing.T) {
	base := newListing(withMode(md("p"), 0o750), mf("p/q/old", "o"), mf("top", "t"))
	next := base.clone().put(mf("p/q/new", "n"))
	f := newApplyToFixture(t, base, next)
	must(t, os.RemoveAll(filepath.Join(f.target, "p")))
	res, err := f.apply(t, snapshot.ApplyToOptions{})
	must(t, err)
	if len(res.Written) != 1 || res.Written[0] != (snapshot.Written{Path: "p/q/new", Op: "created"}) {
		t.Errorf("written %v", res.Written)
	}
	snapshottest.CompareTrees(t, f.wantDir, f.target, snapshottest.Ignore(func(rel string) bool { return rel == "p/q/old" }))
	var st unix.Stat_t
	must(t, unix.Stat(filepath.Join(f.target, "p"), &st))
	if st.Mode&0o777 != 0o750 {
		t.Errorf("p: mode %#o, want 0750", st.Mode&0o777)
	}
}

// copyTree copies a tree with cp -a, for comparing before and after.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	snapshottest.Writable(t, dst)
	if out, err := execCommand("cp", "-a", src, dst); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
}

func execCommand(name string, args ...string) ([]byte, error) {
	return exec.Command(name, args...).CombinedOutput()
}

// TestApplyToDirMode: a directory whose mode the change alters must have
// the base's mode in the target (or already the new one).
func TestApplyToDirMode(t *testing.T) {
	base := newListing(md("d"), mf("d/x", "x"))
	next := newListing(withMode(md("d"), 0o700), mf("d/x", "x"))
	f := newApplyToFixture(t, base, next)
	must(t, os.Chmod(filepath.Join(f.target, "d"), 0o750))
	res, err := f.apply(t, snapshot.ApplyToOptions{})
	if !errors.Is(err, snapshot.ErrRefused) || len(res.Refused) != 1 || res.Refused[0] != (snapshot.Conflict{Path: "d", Reason: snapshot.RefusedMode}) {
		t.Errorf("user's chmod: %v %+v", err, res)
	}
	must(t, os.Chmod(filepath.Join(f.target, "d"), 0o700))
	res, err = f.apply(t, snapshot.ApplyToOptions{})
	must(t, err)
	if len(res.Written) != 0 {
		t.Errorf("already applied: written %v", res.Written)
	}
	snapshottest.CompareTrees(t, f.wantDir, f.target)

	f = newApplyToFixture(t, base, next)
	res, err = f.apply(t, snapshot.ApplyToOptions{})
	must(t, err)
	if len(res.Written) != 1 || res.Written[0] != (snapshot.Written{Path: "d", Op: "mode"}) {
		t.Errorf("written %v", res.Written)
	}
	snapshottest.CompareTrees(t, f.wantDir, f.target)
}
