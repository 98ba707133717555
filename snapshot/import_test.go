package snapshot

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/snapshot/snapshottest"
	"github.com/stratafs/strata/store"
)

func TestRoundTripNasty(t *testing.T) {
	src, dst := t.TempDir(), filepath.Join(t.TempDir(), "out")
	caps := snapshottest.Probe(src)
	snapshottest.Build(t, src, snapshottest.Nasty(caps))
	m := newMemStore()
	var w warnings
	res, _ := importFake(t, m, src, ImportOptions{Warn: w.fn}, testCfg())
	if len(res.Skipped) > 0 {
		t.Errorf("skipped %q", res.Skipped)
	}
	materializeFake(t, m, res.Tree, dst, MaterializeOptions{Chown: caps.Root, Warn: w.fn})
	snapshottest.CompareTrees(t, src, dst)

	got := entries(t, m, res.Tree)
	for _, p := range []string{"hard/a", "hard/b", "hard/sub/c", "z-other-dir"} {
		if g := got[p].LinkGroup; g != "hard/a" {
			t.Errorf("%s: LinkGroup %q, want %q", p, g, "hard/a")
		}
	}
	if e := got["links/odd target"]; e.Type != store.TypeSymlink || e.Target != "a\nb\xff c" || e.Size != int64(len(e.Target)) {
		t.Errorf("odd symlink recorded as %+v", e)
	}
	if e := got["fifo"]; e.Type != store.TypeFIFO || e.Mode != 0o640 {
		t.Errorf("fifo recorded as %+v", e)
	}
	if e := got["modes/setuid"]; e.Mode != 0o4755 {
		t.Errorf("setuid mode %#o", e.Mode)
	}
	if e := got["old"]; e.MtimeNs != -1_234_567_891 {
		t.Errorf("pre-1970 mtime %d", e.MtimeNs)
	}
	if caps.Root {
		if e := got["dev/null"]; e.Type != store.TypeCharDev || e.Rdev != unix.Mkdev(1, 3) {
			t.Errorf("char device recorded as %+v", e)
		}
		if e := got["owned"]; e.UID != 1000 || e.GID != 1000 || e.Mode != 0o6755 {
			t.Errorf("owned recorded as uid %d gid %d mode %#o", e.UID, e.GID, e.Mode)
		}
	}
	var files, dirs int64
	for _, e := range got {
		switch e.Type {
		case store.TypeFile:
			files++
		case store.TypeDir:
			dirs++
		}
	}
	if res.Stats.Files != files || res.Stats.Dirs != dirs {
		t.Errorf("stats %+v, tree has %d files %d dirs", res.Stats, files, dirs)
	}
	if res.FilesRead != files-3 { // one hardlink group of four
		t.Errorf("FilesRead = %d, want %d", res.FilesRead, files-3)
	}

	// Importing the materialized copy gives the same tree: nothing is lost
	// or invented on the way.
	res2, _ := importFake(t, m, dst, ImportOptions{}, testCfg())
	if res2.Tree != res.Tree {
		ch, _ := diffTrees(context.Background(), m, res.Tree, res2.Tree)
		t.Errorf("re-import of the copy differs: %+v", ch)
	}
}

func TestImportLinkGroups(t *testing.T) {
	base := t.TempDir()
	src := filepath.Join(base, "src")
	writeFile(t, filepath.Join(src, "b/one"), "1")
	writeFile(t, filepath.Join(src, "a/two"), "2")
	writeFile(t, filepath.Join(src, "c"), "3")
	// "a-c/x" precedes "a/two" bytewise but follows it in walk order.
	must(t, os.MkdirAll(filepath.Join(src, "a-c"), 0o755))
	must(t, os.Link(filepath.Join(src, "a/two"), filepath.Join(src, "a-c/x")))
	// One member outside the source: the group has one member in the tree.
	must(t, os.Link(filepath.Join(src, "b/one"), filepath.Join(base, "outside")))
	// One member excluded: likewise.
	must(t, os.Link(filepath.Join(src, "c"), filepath.Join(src, "c.excluded")))

	m := newMemStore()
	res, _ := importFake(t, m, src, ImportOptions{Exclude: []string{"*.excluded"}}, testCfg())
	got := entries(t, m, res.Tree)
	want := map[string]string{"a/two": "a/two", "a-c/x": "a/two", "b/one": "", "c": ""}
	for p, g := range want {
		if got[p].LinkGroup != g {
			t.Errorf("%s: LinkGroup %q, want %q", p, got[p].LinkGroup, g)
		}
	}
	if _, ok := got["c.excluded"]; ok {
		t.Error("excluded file recorded")
	}
}

func TestImportSocketSkipped(t *testing.T) {
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "f"), "x")
	// A socket path must fit in sun_path: bind it relative to src.
	wd, _ := os.Getwd()
	must(t, os.Chdir(src))
	l, err := net.Listen("unix", "sock")
	os.Chdir(wd)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var w warnings
	res, _ := importFake(t, newMemStore(), src, ImportOptions{Warn: w.fn}, testCfg())
	if !slices.Equal(res.Skipped, []string{"sock"}) {
		t.Errorf("Skipped = %q, want [sock]", res.Skipped)
	}
	if msg, ok := w.get("sock"); !ok || !strings.Contains(msg, "socket") {
		t.Errorf("warning for sock: %q", msg)
	}
	if res.Stats.Files != 1 || res.Stats.Other != 0 {
		t.Errorf("stats %+v", res.Stats)
	}
}

func TestImportErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	writeFile(t, file, "x")
	for _, tc := range []struct {
		name, path string
		opts       ImportOptions
		want       []string
	}{
		{"missing", filepath.Join(dir, "nope"), ImportOptions{}, []string{"nope", "no such file"}},
		{"not a dir", file, ImportOptions{}, []string{file, "not a directory"}},
		{"bad glob", dir, ImportOptions{Exclude: []string{"[x"}}, []string{"[x", "syntax error"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := importDir(context.Background(), newMemStore(), newMemStore().writer(), tc.path, tc.opts, testCfg())
			if err == nil {
				t.Fatal("no error")
			}
			for _, s := range tc.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
	_, err := importDir(context.Background(), newMemStore(), newMemStore().writer(), filepath.Join(dir, "nope"), ImportOptions{}, testCfg())
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing source: %v is not fs.ErrNotExist", err)
	}
}

func TestImportSymlinkRoot(t *testing.T) {
	base := t.TempDir()
	writeFile(t, filepath.Join(base, "real/f"), "x")
	must(t, os.Symlink("real", filepath.Join(base, "link")))
	m := newMemStore()
	a, _ := importFake(t, m, filepath.Join(base, "real"), ImportOptions{}, testCfg())
	b, _ := importFake(t, m, filepath.Join(base, "link"), ImportOptions{}, testCfg())
	if a.Tree != b.Tree {
		t.Error("a symlink to the source gives another tree")
	}
	if b.CacheHits != 1 {
		t.Errorf("the stat cache is keyed by the resolved root: %d hits, want 1", b.CacheHits)
	}
}

// TestReimport is the stat cache's contract: an unchanged tree is not read
// again and adds no object; one changed file is read and is the only change.
func TestReimport(t *testing.T) {
	src := t.TempDir()
	snapshottest.Build(t, src, snapshottest.Nasty(snapshottest.Probe(src)))
	m := newMemStore()
	first, _ := importFake(t, m, src, ImportOptions{}, testCfg())
	if first.FilesRead == 0 || first.CacheHits != 0 {
		t.Fatalf("first import: read %d, hits %d", first.FilesRead, first.CacheHits)
	}

	second, w := importFake(t, m, src, ImportOptions{}, testCfg())
	if second.FilesRead != 0 {
		t.Errorf("unchanged re-import read %d files", second.FilesRead)
	}
	if second.CacheHits != first.FilesRead {
		t.Errorf("cache hits %d, want %d", second.CacheHits, first.FilesRead)
	}
	if st := w.Stats(); st.NewObjects != 0 || st.ContentBytes != 0 {
		t.Errorf("unchanged re-import wrote %+v", st)
	}
	if second.Tree != first.Tree {
		t.Error("unchanged re-import gives another tree")
	}
	saves := m.cacheSaves
	importFake(t, m, src, ImportOptions{}, testCfg())
	if m.cacheSaves != saves {
		t.Error("an unchanged stat cache was rewritten")
	}

	// Same size, new content: the mtime/ctime tell.
	p := filepath.Join(src, "sizes/65536")
	data, err := os.ReadFile(p)
	must(t, err)
	data[100]++
	must(t, os.WriteFile(p, data, 0o644))
	third, _ := importFake(t, m, src, ImportOptions{}, testCfg())
	if third.FilesRead != 1 {
		t.Errorf("after one change, read %d files", third.FilesRead)
	}
	changes, err := diffTrees(context.Background(), m, second.Tree, third.Tree)
	must(t, err)
	if len(changes) != 1 || changes[0].Path != "sizes/65536" || changes[0].Op != Modified {
		t.Errorf("changes %+v, want only sizes/65536 modified", changes)
	}

	// NoStatCache reads everything.
	all, _ := importFake(t, m, src, ImportOptions{NoStatCache: true}, testCfg())
	if all.FilesRead != first.FilesRead || all.CacheHits != 0 {
		t.Errorf("NoStatCache: read %d hits %d", all.FilesRead, all.CacheHits)
	}
}

// TestReimportRacy pins the racy-git rule: a file whose ctime is within
// racyMargin of the import's start is not trusted next time.
func TestReimportRacy(t *testing.T) {
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "a"), "a")
	writeFile(t, filepath.Join(src, "b"), "b")
	m := newMemStore()
	now := time.Now()
	clock := func(d time.Duration) importConfig {
		return importConfig{now: func() int64 { return now.Add(d).UnixNano() }}
	}
	importFake(t, m, src, ImportOptions{}, clock(0)) // files just written: racy
	if n := len(m.caches[mustAbs(t, src)]); n != 0 {
		t.Errorf("racy files cached: %d entries", n)
	}
	res, _ := importFake(t, m, src, ImportOptions{}, clock(racyMargin-time.Second))
	if res.FilesRead != 2 {
		t.Errorf("still racy: read %d, want 2", res.FilesRead)
	}
	res, _ = importFake(t, m, src, ImportOptions{}, clock(racyMargin+time.Second))
	if res.FilesRead != 2 {
		t.Errorf("read %d, want 2", res.FilesRead)
	}
	res, _ = importFake(t, m, src, ImportOptions{}, clock(racyMargin+2*time.Second))
	if res.FilesRead != 0 || res.CacheHits != 2 {
		t.Errorf("old enough: read %d hits %d, want 0 and 2", res.FilesRead, res.CacheHits)
	}
}

func TestReimportContentGone(t *testing.T) {
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "a"), "aaa")
	writeFile(t, filepath.Join(src, "b"), "bbb")
	m := newMemStore()
	first, _ := importFake(t, m, src, ImportOptions{}, testCfg())
	m.dropBlob(entries(t, m, first.Tree)["a"].Content) // as gc would
	res, _ := importFake(t, m, src, ImportOptions{}, testCfg())
	if res.FilesRead != 1 || res.CacheHits != 1 {
		t.Errorf("read %d hits %d, want 1 and 1", res.FilesRead, res.CacheHits)
	}
	if res.Tree != first.Tree {
		t.Error("tree differs")
	}
}

func TestImportFileChangesWhileRead(t *testing.T) {
	for _, tc := range []struct {
		name      string
		changes   int // how many reads see a change
		wantWarn  bool
		wantCache bool
	}{
		{"stable", 0, false, true},
		{"once", 1, false, true},
		{"twice", 2, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := t.TempDir()
			p := filepath.Join(src, "log")
			writeFile(t, p, "start\n")
			var w warnings
			cfg := testCfg()
			cfg.afterRead = func(rel string, attempt int) {
				if attempt <= tc.changes {
					f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
					must(t, err)
					f.WriteString("more\n")
					f.Close()
				}
			}
			m := newMemStore()
			res, _ := importFake(t, m, src, ImportOptions{Warn: w.fn}, cfg)
			if _, warned := w.get("log"); warned != tc.wantWarn {
				t.Errorf("warned %v, want %v", warned, tc.wantWarn)
			}
			_, cached := m.caches[mustAbs(t, src)]["log"]
			if cached != tc.wantCache {
				t.Errorf("cached %v, want %v", cached, tc.wantCache)
			}
			e := entries(t, m, res.Tree)["log"]
			var buf strings.Builder
			m.ReadContentTo(context.Background(), e.Content, &buf)
			if int64(buf.Len()) != e.Size {
				t.Errorf("size %d, content %d bytes", e.Size, buf.Len())
			}
			if want := "start\n" + strings.Repeat("more\n", min(1, tc.changes)); buf.String() != want {
				t.Errorf("content %q, want %q", buf.String(), want)
			}
		})
	}
}

func TestImportExclude(t *testing.T) {
	src := t.TempDir()
	for _, p := range []string{
		"keep.txt", "a.tmp", "src/b.tmp", "src/deep/c.tmp", "node_modules/x/y.js",
		"src/node_modules/z.js", "build/out/o", "cache/f", "sub/cache", "logs/2024/x.log",
	} {
		writeFile(t, filepath.Join(src, p), p)
	}
	m := newMemStore()
	res, _ := importFake(t, m, src, ImportOptions{Exclude: []string{
		"node_modules", "/a.tmp", "src/*.tmp", "build/**", "cache/", "logs/**/*.log",
	}}, testCfg())
	var got []string
	for p := range entries(t, m, res.Tree) {
		got = append(got, p)
	}
	slices.Sort(got)
	want := []string{"build", "keep.txt", "logs", "logs/2024", "src", "src/deep", "src/deep/c.tmp", "sub", "sub/cache"}
	if !slices.Equal(got, want) {
		t.Errorf("recorded %q\nwant      %q", got, want)
	}
}

func TestImportProgress(t *testing.T) {
	src := t.TempDir()
	for i := range 50 {
		writeFile(t, filepath.Join(src, "d", string(rune('a'+i%26))+strings.Repeat("x", i)), strings.Repeat("y", i*100))
	}
	var phases []string
	var last = map[string]Progress{}
	_, _ = importFake(t, newMemStore(), src, ImportOptions{Progress: func(p Progress) {
		if len(phases) == 0 || phases[len(phases)-1] != p.Phase {
			phases = append(phases, p.Phase)
		}
		last[p.Phase] = p
	}}, testCfg())
	if !slices.Equal(phases, []string{PhaseWalk, PhaseRead, PhaseWrite}) {
		t.Errorf("phases %q", phases)
	}
	if p := last[PhaseWalk]; p.Entries != 51 {
		t.Errorf("walk: %+v, want 51 entries", p)
	}
	if p := last[PhaseRead]; p.Entries != 50 || p.EntriesTotal != 50 || p.Bytes != p.BytesTotal || p.BytesTotal != 122500 {
		t.Errorf("read: %+v", p)
	}
	if p := last[PhaseWrite]; p.Entries != 2 || p.EntriesTotal != 2 {
		t.Errorf("write: %+v", p)
	}
}

// TestImportUnreadable runs as uid 1000 (re-executing itself through
// setpriv when root: root reads everything).
func TestImportUnreadable(t *testing.T) {
	if runAsUser(t) {
		return
	}
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "ok"), "fine")
	writeFile(t, filepath.Join(src, "secret"), "no")
	writeFile(t, filepath.Join(src, "closed/inside"), "no")
	writeFile(t, filepath.Join(src, "noexec/inside"), "no")
	must(t, os.Chmod(filepath.Join(src, "secret"), 0))
	must(t, os.Chmod(filepath.Join(src, "closed"), 0))
	must(t, os.Chmod(filepath.Join(src, "noexec"), 0o644))
	t.Cleanup(func() {
		os.Chmod(filepath.Join(src, "closed"), 0o755)
		os.Chmod(filepath.Join(src, "noexec"), 0o755)
	})

	_, err := importDir(context.Background(), newMemStore(), newMemStore().writer(), src, ImportOptions{}, testCfg())
	if err == nil || !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), src) {
		t.Errorf("without SkipUnreadable: %v; want a permission error naming the path", err)
	}

	var w warnings
	m := newMemStore()
	res, _ := importFake(t, m, src, ImportOptions{SkipUnreadable: true, Warn: w.fn}, testCfg())
	slices.Sort(res.Skipped)
	if want := []string{"closed", "noexec/inside", "secret"}; !slices.Equal(res.Skipped, want) {
		t.Errorf("Skipped %q, want %q", res.Skipped, want)
	}
	for _, p := range res.Skipped {
		if _, ok := w.get(p); !ok {
			t.Errorf("no warning for %s", p)
		}
	}
	got := entries(t, m, res.Tree)
	if _, ok := got["ok"]; !ok || len(got) != 2 {
		t.Errorf("recorded %v; want ok and noexec", got)
	}

	// Materialize as an unprivileged user: devices are skipped with a
	// warning, the rest is written.
	tree := m.putTree(&store.Tree{Entries: []store.TreeEntry{
		{Name: "fifo", Type: store.TypeFIFO, Mode: 0o600},
		{Name: "null", Type: store.TypeCharDev, Mode: 0o666, Rdev: unix.Mkdev(1, 3)},
	}})
	var mw warnings
	dst := filepath.Join(t.TempDir(), "out")
	materializeFake(t, m, tree, dst, MaterializeOptions{Warn: mw.fn})
	if _, ok := mw.get("null"); !ok {
		t.Error("no warning for the device")
	}
	if _, err := os.Lstat(filepath.Join(dst, "fifo")); err != nil {
		t.Error(err)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func mustAbs(t testing.TB, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	must(t, err)
	a, err = filepath.EvalSymlinks(a)
	must(t, err)
	return a
}

// TestFdReaderInterrupted: an import's file reads stop at the next read
// once its context is done, inside a large file rather than after it
// (issue 19: SIGINT must stop strata within 100 ms).
func TestFdReaderInterrupted(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big")
	must(t, os.WriteFile(p, make([]byte, 1<<20), 0o644))
	fd, err := unix.Open(p, unix.O_RDONLY, 0)
	must(t, err)
	defer unix.Close(fd)
	ctx, cancel := context.WithCancel(context.Background())
	r := &fdReader{fd: fd, prog: &progress{}, ctx: ctx}
	buf := make([]byte, 64<<10)
	if n, err := r.Read(buf); n != len(buf) || err != nil {
		t.Fatalf("first read: %d, %v", n, err)
	}
	cancel()
	if n, err := r.Read(buf); n != 0 || !errors.Is(err, context.Canceled) {
		t.Errorf("read after cancel: %d, %v; want 0, context.Canceled", n, err)
	}
	if off, _ := unix.Seek(fd, 0, 1); off != int64(len(buf)) {
		t.Errorf("offset %d after cancel, want %d: it read on", off, len(buf))
	}
}
