package snapshot

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/internal/testutil"
	"github.com/stratafs/strata/snapshot/snapshottest"
	"github.com/stratafs/strata/store"
)

// openLayerStore opens a real store in a temporary directory.
func openLayerStore(t testing.TB) *store.Store {
	t.Helper()
	s, err := store.Open(filepath.Join(t.TempDir(), "store"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// importAs imports dir with the real store and commits it with parents.
func importAs(t testing.TB, s *store.Store, dir string, parents ...store.ID) (commit, tree store.ID) {
	t.Helper()
	ctx := context.Background()
	w, err := s.NewWriter(ctx, "import "+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	res, err := Import(ctx, s, w, dir, ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = w.Finish(func(tx *store.Tx) error {
		commit, err = tx.PutCommit(&store.Commit{Tree: res.Tree, Parents: parents, TimeNs: time.Now().UnixNano(), Stats: res.Stats})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return commit, res.Tree
}

// putCommit stores a commit of tree (already in the store).
func putCommit(t testing.TB, s *store.Store, tree store.ID, parents ...store.ID) store.ID {
	t.Helper()
	var id store.ID
	err := s.Update(context.Background(), func(tx *store.Tx) error {
		var err error
		id, err = tx.PutCommit(&store.Commit{Tree: tree, Parents: parents, TimeNs: time.Now().UnixNano()})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// The mount child: the test binary re-executed in new namespaces with
// layerMountEnv naming a JSON mountJob. It mounts each case's stack
// read-only, compares the merged view with the materialized tree, and
// prints one LAYERDIFF line per difference, then LAYERDONE.
const layerMountEnv = "STRATA_TEST_LAYER_MOUNT"

type mountCase struct {
	Name   string
	Lowers []string // topmost first
	Want   string   // the commit materialized
	Mnt    string
}

type mountJob struct {
	Flavour string
	Empty   string // an empty directory: a second lower for one-layer stacks
	Cases   []mountCase
}

// TestLayerMountHelper is the mount child; without layerMountEnv it does
// nothing.
func TestLayerMountHelper(t *testing.T) {
	spec := os.Getenv(layerMountEnv)
	if spec == "" {
		return
	}
	os.Exit(layerMountChild(spec))
}

func layerMountChild(spec string) int {
	b, err := os.ReadFile(spec)
	if err != nil {
		fmt.Println("LAYERERR", err)
		return 1
	}
	var job mountJob
	if err := json.Unmarshal(b, &job); err != nil {
		fmt.Println("LAYERERR", err)
		return 1
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		fmt.Println("LAYERERR make / private:", err)
		return 1
	}
	for _, c := range job.Cases {
		lowers := c.Lowers
		if len(lowers) == 1 {
			// overlayfs: "at least 2 lowerdir are needed while upperdir
			// nonexistent".
			lowers = append(lowers, job.Empty)
		}
		// Relative to the first layer's directory: the legacy option
		// string is capped at one page.
		base := filepath.Dir(lowers[0])
		rel := make([]string, len(lowers))
		for i, l := range lowers {
			r, err := filepath.Rel(base, l)
			if err != nil {
				fmt.Println("LAYERERR", err)
				return 1
			}
			rel[i] = r
		}
		if err := os.Chdir(base); err != nil {
			fmt.Println("LAYERERR", err)
			return 1
		}
		data := "lowerdir=" + strings.Join(rel, ":")
		if job.Flavour == FlavourUser {
			data += ",userxattr"
		}
		if err := unix.Mount("overlay", c.Mnt, "overlay", unix.MS_RDONLY, data); err != nil {
			fmt.Printf("LAYERERR %s: mount %s: %v\n", c.Name, data, err)
			return 1
		}
		diffs, err := snapshottest.Differences(c.Want, c.Mnt, snapshottest.MaxDifferences(20))
		if err != nil {
			diffs = append(diffs, "compare: "+err.Error())
		}
		for _, d := range diffs {
			fmt.Printf("LAYERDIFF %s\n", strconv.Quote(c.Name+": "+d))
		}
		if err := unix.Unmount(c.Mnt, 0); err != nil {
			fmt.Printf("LAYERERR %s: unmount: %v\n", c.Name, err)
			return 1
		}
	}
	fmt.Println("LAYERDONE")
	return 0
}

// mountAndCompare runs the mount child for cases: rootless flavour in a
// new user namespace (the caller mapped to root) and mount namespace,
// trusted flavour (real root) in a new mount namespace only.
func mountAndCompare(t *testing.T, flavour string, cases []mountCase) {
	t.Helper()
	tmp := t.TempDir()
	job := mountJob{Flavour: flavour, Empty: filepath.Join(tmp, "empty"), Cases: cases}
	must(t, os.Mkdir(job.Empty, 0o755))
	for i := range job.Cases {
		job.Cases[i].Mnt = filepath.Join(tmp, fmt.Sprint("mnt", i))
		must(t, os.Mkdir(job.Cases[i].Mnt, 0o755))
	}
	b, err := json.Marshal(job)
	must(t, err)
	spec := filepath.Join(tmp, "job.json")
	must(t, os.WriteFile(spec, b, 0o644))
	self, err := os.Executable()
	must(t, err)
	cmd := exec.Command(self, "-test.run=^TestLayerMountHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), layerMountEnv+"="+spec)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}
	if flavour == FlavourUser {
		cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWUSER
		cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}}
		cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}
		cmd.SysProcAttr.GidMappingsEnableSetgroups = false
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EINVAL) {
			testutil.Skip(t, "cannot create the namespaces to mount overlay: "+err.Error())
		}
		t.Fatal(err)
	}
	err = cmd.Wait()
	done := false
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "LAYERDONE":
			done = true
		case strings.HasPrefix(line, "LAYERDIFF "):
			d, qerr := strconv.Unquote(strings.TrimPrefix(line, "LAYERDIFF "))
			if qerr != nil {
				d = line
			}
			t.Errorf("merged view differs: %s", d)
		case strings.HasPrefix(line, "LAYERERR "):
			t.Errorf("mount child: %s", line)
		}
	}
	if !done || err != nil {
		t.Fatalf("mount child: %v\n%s", err, out.String())
	}
}

// chainStep changes the source directory between two commits.
type chainStep struct {
	name string
	do   func(t testing.TB, src string)
}

// layerChain builds a source tree with the hard cases (snapshottest.Nasty,
// without the multi-megabyte files) and a chain of commits through the
// real store, one per step, each with every kind of change between
// commits: and returns the commits, root first.
func layerChain(t testing.TB, s *store.Store) (commits []store.ID, names []string) {
	t.Helper()
	src := filepath.Join(t.TempDir(), "src")
	snapshottest.Writable(t, src)
	caps := snapshottest.Probe(filepath.Dir(src))
	var es []snapshottest.Entry
	for _, e := range snapshottest.Nasty(caps) {
		if len(e.Data) <= 1<<17 {
			es = append(es, e)
		}
	}
	es = append(es,
		snapshottest.Entry{Path: "proj/main.go", Kind: snapshottest.File, Data: []byte("package main\n")},
		snapshottest.Entry{Path: "proj/old.txt", Kind: snapshottest.File, Data: []byte("old")},
		snapshottest.Entry{Path: "tree/a/b/c/file", Kind: snapshottest.File, Data: []byte("deep")},
		snapshottest.Entry{Path: "tree/a/x", Kind: snapshottest.File, Data: []byte("x")},
		snapshottest.Entry{Path: "tree/keep", Kind: snapshottest.File, Data: []byte("keep")},
		snapshottest.Entry{Path: "ftod", Kind: snapshottest.File, Data: []byte("file to dir")},
		snapshottest.Entry{Path: "dtof/x", Kind: snapshottest.File, Data: []byte("x")},
		snapshottest.Entry{Path: "dtof/y/z", Kind: snapshottest.File, Data: []byte("z")},
		snapshottest.Entry{Path: "ftol", Kind: snapshottest.File, Data: []byte("file to symlink")},
		snapshottest.Entry{Path: "redo/old1", Kind: snapshottest.File, Data: []byte("1")},
		snapshottest.Entry{Path: "redo/old2", Kind: snapshottest.File, Data: []byte("2")},
		snapshottest.Entry{Path: "redo/sub/old3", Kind: snapshottest.File, Data: []byte("3")},
		snapshottest.Entry{Path: "meta", Kind: snapshottest.File, Data: []byte("meta")},
	)
	snapshottest.Build(t, src, es)
	p := func(rel string) string { return filepath.Join(src, rel) }
	write := func(t testing.TB, rel, data string) {
		t.Helper()
		must(t, os.MkdirAll(filepath.Dir(p(rel)), 0o755))
		must(t, os.WriteFile(p(rel), []byte(data), 0o644))
	}
	mtime := time.Unix(1_700_000_000, 123_456_789)
	steps := []chainStep{
		{"modify add delete", func(t testing.TB, src string) {
			write(t, "proj/main.go", "package main\n\nfunc main() {}\n")
			write(t, "proj/new.txt", "new")
			must(t, os.Remove(p("proj/old.txt")))
		}},
		{"delete dir with contents", func(t testing.TB, src string) {
			must(t, os.RemoveAll(p("tree/a")))
		}},
		{"file to dir", func(t testing.TB, src string) {
			must(t, os.Remove(p("ftod")))
			write(t, "ftod/x", "x")
			write(t, "ftod/y/z", "z")
		}},
		{"dir to file", func(t testing.TB, src string) {
			must(t, os.RemoveAll(p("dtof")))
			write(t, "dtof", "now a file")
		}},
		{"file to symlink", func(t testing.TB, src string) {
			must(t, os.Remove(p("ftol")))
			must(t, os.Symlink("proj/main.go", p("ftol")))
		}},
		{"dir deleted and re-created", func(t testing.TB, src string) {
			must(t, os.RemoveAll(p("redo")))
			write(t, "redo/new1", "n1")
			write(t, "redo/sub/new3", "n3")
		}},
		{"metadata only", func(t testing.TB, src string) {
			must(t, os.Chmod(p("meta"), 0o600))
			must(t, os.Chtimes(p("proj/main.go"), mtime, mtime))
			must(t, os.Chmod(p("proj"), 0o750))
			must(t, os.Chtimes(p("tree"), mtime, mtime))
		}},
		{"hardlink member written", func(t testing.TB, src string) {
			must(t, os.WriteFile(p("hard/a"), []byte("shared inode, changed"), 0o640))
		}},
		{"hardlink added", func(t testing.TB, src string) {
			must(t, os.Link(p("hard/a"), p("hard/d")))
		}},
		{"hardlink removed", func(t testing.TB, src string) {
			must(t, os.Remove(p("z-other-dir")))
		}},
		{"odd names", func(t testing.TB, src string) {
			write(t, "line\nbreak", "changed")
			write(t, "new\xff\nname", "odd")
			must(t, os.Remove(p("bad-\xff\xfe-utf8")))
		}},
		{"xattrs and empty dirs", func(t testing.TB, src string) {
			must(t, os.Mkdir(p("empty2"), 0o700))
			must(t, os.Remove(p("empty-dir")))
			if caps.Xattrs {
				must(t, unix.Setxattr(p("xattrs/file"), "user.new", []byte("v"), 0))
				must(t, unix.Removexattr(p("xattrs/file"), "user.text"))
				must(t, unix.Setxattr(p("xattrs"), "user.dir2", []byte("d"), 0))
				must(t, unix.Setxattr(p("meta"), "user.m", []byte("m"), 0))
			}
		}},
		{"no change", func(t testing.TB, src string) {}},
		{"inside a read-only dir", func(t testing.TB, src string) {
			must(t, os.Chmod(p("modes/ro-dir"), 0o755))
			must(t, os.Chmod(p("modes/ro-dir/inside"), 0o644))
			write(t, "modes/ro-dir/inside", "changed in a read-only dir")
			must(t, os.Chmod(p("modes/ro-dir/inside"), 0o444))
			must(t, os.Chmod(p("modes/ro-dir"), 0o555))
			deep := "deep"
			for i := 0; i < 40; i++ {
				deep += fmt.Sprintf("/%02d", i)
			}
			write(t, deep+"/leaf", "deeper change")
		}},
		{"fifo to file, symlink to dir", func(t testing.TB, src string) {
			must(t, os.Remove(p("fifo")))
			write(t, "fifo", "was a fifo")
			must(t, os.Remove(p("links/dir")))
			write(t, "links/dir/inside", "was a symlink")
		}},
		{"dir to symlink", func(t testing.TB, src string) {
			must(t, os.RemoveAll(p("with space")))
			must(t, os.Symlink("proj", p("with space")))
		}},
	}
	c, _ := importAs(t, s, src)
	commits, names = append(commits, c), append(names, "root")
	for _, st := range steps {
		st.do(t, src)
		c, _ = importAs(t, s, src, c)
		commits, names = append(commits, c), append(names, st.name)
	}
	return commits, names
}

// checkChain builds the stack of every commit and compares its merged
// view, mounted, with the commit materialized; it returns the stacks.
func checkChain(t *testing.T, s *store.Store, cache *LayerCache, commits []store.ID, names []string, opts LayerOptions) [][]string {
	t.Helper()
	ctx := context.Background()
	wantBase := t.TempDir()
	snapshottest.Writable(t, wantBase)
	snapshottest.Writable(t, cache.Dir())
	var cases []mountCase
	var stacks [][]string
	for i, c := range commits {
		stack, err := cache.Stack(ctx, s, c, opts)
		if err != nil {
			t.Fatalf("stack of %s: %v", names[i], err)
		}
		stacks = append(stacks, stack)
		var tree store.ID
		must(t, s.View(ctx, func(tx *store.Tx) error {
			cm, err := tx.Commit(c)
			if err == nil {
				tree = cm.Tree
			}
			return err
		}))
		want := filepath.Join(wantBase, fmt.Sprint(i))
		if err := Materialize(ctx, s, tree, want, MaterializeOptions{Chown: opts.Chown}); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, mountCase{Name: fmt.Sprintf("commit %d (%s), %d layers", i, names[i], len(stack)), Lowers: stack, Want: want})
	}
	mountAndCompare(t, opts.Flavour, cases)
	return stacks
}

// TestLayerStackUser: for every commit of a chain with every kind of
// change, the merged view of its rootless layer stack, mounted by a real
// overlay in a user namespace, equals the commit materialized; also
// flattened with a small MaxDepth.
func TestLayerStackUser(t *testing.T) {
	testLayerStack(t, LayerOptions{Flavour: FlavourUser})
}

// TestLayerStackUserUnprivileged is TestLayerStackUser as uid 1000.
func TestLayerStackUserUnprivileged(t *testing.T) {
	if runAsUser(t) {
		return
	}
	testLayerStack(t, LayerOptions{Flavour: FlavourUser})
}

// TestLayerStackTrusted: the same for real root, trusted.overlay.* markers
// and owners applied.
func TestLayerStackTrusted(t *testing.T) {
	testutil.AsRoot(t)
	testLayerStack(t, LayerOptions{Flavour: FlavourTrusted, Chown: true})
}

func testLayerStack(t *testing.T, opts LayerOptions) {
	s := openLayerStore(t)
	commits, names := layerChain(t, s)
	var warned []string
	opts.Warn = func(p, msg string) { warned = append(warned, p+": "+msg) }

	t.Run("full depth", func(t *testing.T) {
		cache := NewLayerCache(filepath.Join(t.TempDir(), "layers"))
		stacks := checkChain(t, s, cache, commits, names, opts)
		for i, st := range stacks {
			// One layer per commit but "no change", which adds none.
			want := i + 1
			if i >= 13 {
				want--
			}
			if len(st) != want {
				t.Errorf("commit %d (%s): %d layers, want %d", i, names[i], len(st), want)
			}
		}
		checkLayerShapes(t, cache, opts.Flavour, commits)
	})
	t.Run("flattened", func(t *testing.T) {
		cache := NewLayerCache(filepath.Join(t.TempDir(), "layers"))
		o := opts
		o.MaxDepth = 4
		stacks := checkChain(t, s, cache, commits, names, o)
		fulls := 0
		for i, st := range stacks {
			if len(st) > 4 {
				t.Errorf("commit %d: %d layers, more than MaxDepth 4", i, len(st))
			}
			if strings.HasSuffix(st[len(st)-1], fullSuffix) && len(st) == 1 {
				fulls++
			}
		}
		// Commit 4 is the first whose stack would have 5 layers; its
		// flattened layer serves the next 3 commits; and so on.
		if fulls < 3 {
			t.Errorf("%d flattened stacks, want at least 3: %q", fulls, stacks)
		}
	})
	for _, w := range warned {
		if !strings.Contains(w, "needs privilege") {
			t.Errorf("unexpected warning: %s", w)
		}
	}
}

// checkLayerShapes checks a few layers of the chain of layerChain by
// shape: the delta of a 3-file change is small, a deleted directory is a
// single whiteout, a directory that replaced a file is opaque, a
// re-created one is not.
func checkLayerShapes(t *testing.T, cache *LayerCache, flavour string, commits []store.ID) {
	t.Helper()
	layer := func(i int) string { return cache.path(flavour, commits[i], false) }
	opaque := func(p string) bool {
		v, err := getXattr(xattrSource{path: p}, flavour+".overlay.opaque")
		return err == nil && string(v) == "y"
	}
	isWhiteout := func(p string) bool {
		var st unix.Stat_t
		return unix.Lstat(p, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0
	}
	var got []string
	filepath.WalkDir(layer(1), func(p string, d os.DirEntry, err error) error {
		if rel, _ := filepath.Rel(layer(1), p); rel != "." {
			got = append(got, rel)
		}
		return nil
	})
	want := []string{"proj", "proj/main.go", "proj/new.txt", "proj/old.txt"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("layer of commit 1 holds %q, want %q", got, want)
	}
	if !isWhiteout(filepath.Join(layer(1), "proj/old.txt")) {
		t.Error("deleted file: no whiteout")
	}
	if !isWhiteout(filepath.Join(layer(2), "tree/a")) {
		t.Error("deleted dir: no whiteout")
	}
	if !opaque(filepath.Join(layer(3), "ftod")) {
		t.Error("dir replacing a file is not opaque")
	}
	if opaque(filepath.Join(layer(6), "redo")) || opaque(filepath.Join(layer(6), "redo/sub")) {
		t.Error("re-created dir is opaque")
	}
	for _, n := range []string{"redo/old1", "redo/old2", "redo/sub/old3"} {
		if !isWhiteout(filepath.Join(layer(6), n)) {
			t.Errorf("re-created dir: %s not whited out", n)
		}
	}
	var st unix.Stat_t
	if unix.Lstat(filepath.Join(layer(9), "hard/b"), &st) != nil || st.Nlink != 5 {
		t.Errorf("hardlink added: hard/b in the layer with %d links, want 5 (the whole group)", st.Nlink)
	}
	var a, b unix.Stat_t
	if unix.Lstat(layer(0), &a) != nil || unix.Lstat(layer(1), &b) != nil || a.Mode&0o7777 != 0o755 {
		t.Errorf("layer root mode %#o, want 0755", a.Mode)
	}
}

// layerFromMem writes the layer parent → tree of a memStore.
func layerFromMem(t testing.TB, m *memStore, parent, tree store.ID, opts LayerOptions) (string, error) {
	t.Helper()
	if opts.Flavour == "" {
		opts.Flavour = FlavourUser
	}
	must(t, opts.check())
	dir := filepath.Join(t.TempDir(), "layer")
	snapshottest.Writable(t, filepath.Dir(dir))
	return dir, writeLayer(context.Background(), m, parent, tree, dir, opts, matConfig{})
}

// TestLayerShape checks the overlay format of a delta entry by entry.
func TestLayerShape(t *testing.T) {
	m := newMemStore()
	blob := m.putBlob
	f := func(name, data string, mt int64) store.TreeEntry {
		return store.TreeEntry{Name: name, Type: store.TypeFile, Mode: 0o644, MtimeNs: mt, Size: int64(len(data)), Content: blob([]byte(data))}
	}
	d := func(name string, mt int64, es ...store.TreeEntry) store.TreeEntry {
		return store.TreeEntry{Name: name, Type: store.TypeDir, Mode: 0o755, MtimeNs: mt, Content: m.putTree(&store.Tree{Entries: es})}
	}
	linked := func(e store.TreeEntry, group string) store.TreeEntry { e.LinkGroup = group; return e }
	root := func(es ...store.TreeEntry) store.ID { return m.putTree(&store.Tree{Entries: es}) }
	parent := root(
		f("chardev", "becomes a 0/0 device", 1),
		d("del", 1, f("x", "x", 1), d("sub", 1, f("y", "y", 1))),
		f("ftod", "file", 1),
		d("g", 1, linked(f("a", "grp", 1), "g/a"), linked(f("b", "grp", 1), "g/a")),
		d("keep", 1, d("deeper", 1, f("z", "z", 1)), f("same", "same", 1)),
		linked(f("m", "grp", 1), "g/a"),
		d("meta", 1, f("inside", "unchanged", 1)),
		f("same", "same", 1),
	)
	xs := []store.Xattr{{Name: "user.overlay.opaque", Value: []byte("y")}, {Name: "user.ok", Value: []byte("1")}}
	metaDir := d("meta", 5, f("inside", "unchanged", 1))
	metaDir.Mode = 0o700
	xfile := f("xattrs", "x", 2)
	xfile.Xattrs = xs
	tree := root(
		store.TreeEntry{Name: "chardev", Type: store.TypeCharDev, Mode: 0o600, MtimeNs: 2},
		d("ftod", 2, f("new", "new", 2)),
		d("g", 1, linked(f("a", "grp", 1), "g/a"), linked(f("b", "grp", 1), "g/a"), linked(f("c", "grp", 1), "g/a")),
		d("keep", 3, f("added", "added", 3), d("deeper", 1, f("z", "z", 1)), f("same", "same", 1)),
		linked(f("m", "grp", 1), "g/a"),
		metaDir,
		f("same", "same", 1),
		xfile,
	)
	var w warnings
	dir, err := layerFromMem(t, m, parent, tree, LayerOptions{Warn: w.fn})
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		kind   string // "f", "d", "w" (whiteout), "c"
		opaque bool
	}
	wants := map[string]want{
		"chardev":    {kind: "w"}, // a 0/0 device in the tree cannot be shown: hides the file beneath
		"del":        {kind: "w"},
		"ftod":       {kind: "d", opaque: true},
		"ftod/new":   {kind: "f"},
		"g":          {kind: "d"}, // a new member: the whole group
		"g/a":        {kind: "f"},
		"g/b":        {kind: "f"},
		"g/c":        {kind: "f"},
		"m":          {kind: "f"},
		"keep":       {kind: "d"},
		"keep/added": {kind: "f"},
		"meta":       {kind: "d"}, // metadata only: empty
		"xattrs":     {kind: "f"},
	}
	seen := map[string]bool{}
	filepath.WalkDir(dir, func(p string, de os.DirEntry, err error) error {
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		seen[rel] = true
		wt, ok := wants[rel]
		if !ok {
			t.Errorf("%s: in the layer, should not be", rel)
			return nil
		}
		var st unix.Stat_t
		must(t, unix.Lstat(p, &st))
		kind := map[uint32]string{unix.S_IFREG: "f", unix.S_IFDIR: "d", unix.S_IFCHR: "c"}[st.Mode&unix.S_IFMT]
		if kind == "c" && st.Rdev == 0 {
			kind = "w"
		}
		if kind != wt.kind {
			t.Errorf("%s: %s, want %s", rel, kind, wt.kind)
		}
		_, xerr := getXattr(xattrSource{path: p}, "user.overlay.opaque")
		if (xerr == nil) != wt.opaque {
			t.Errorf("%s: opaque %v, want %v", rel, xerr == nil, wt.opaque)
		}
		return nil
	})
	for p := range wants {
		if !seen[p] {
			t.Errorf("%s: missing from the layer", p)
		}
	}
	var a, c, mm unix.Stat_t
	must(t, unix.Lstat(filepath.Join(dir, "g/a"), &a))
	must(t, unix.Lstat(filepath.Join(dir, "g/c"), &c))
	must(t, unix.Lstat(filepath.Join(dir, "m"), &mm))
	if a.Ino != c.Ino || a.Ino != mm.Ino || a.Nlink != 4 {
		t.Errorf("group not linked in the layer: ino %d %d %d, nlink %d", a.Ino, c.Ino, mm.Ino, a.Nlink)
	}
	var md unix.Stat_t
	must(t, unix.Lstat(filepath.Join(dir, "meta"), &md))
	if md.Mode&0o7777 != 0o700 || timespecNs(md.Mtim) != 5 {
		t.Errorf("meta: mode %#o mtime %d, want 0700 and 5", md.Mode&0o7777, timespecNs(md.Mtim))
	}
	xv, _ := snapshottest.Xattrs(filepath.Join(dir, "xattrs"))
	if _, ok := xv["user.overlay.opaque"]; ok || string(xv["user.ok"]) != "1" {
		t.Errorf("xattrs: %q, want user.ok only", xv)
	}
	if msg, ok := w.get("xattrs"); !ok || !strings.Contains(msg, "user.overlay.opaque") {
		t.Errorf("no warning for the overlay xattr: %q", msg)
	}
	if _, ok := w.get("chardev"); !ok {
		t.Error("no warning for the 0/0 device")
	}
	var r unix.Stat_t
	must(t, unix.Lstat(dir, &r))
	if r.Mode&0o7777 != 0o755 || timespecNs(r.Mtim) != 5 {
		t.Errorf("layer root: mode %#o mtime %d, want 0755 and 5 (newest root entry)", r.Mode&0o7777, timespecNs(r.Mtim))
	}
	if names, _ := os.ReadDir(filepath.Dir(dir)); len(names) != 1 {
		t.Errorf("left beside the layer: %v", names)
	}

	// The full layer (no parent) of the same tree has no whiteouts and no
	// opaque directories.
	full, err := layerFromMem(t, m, store.ZeroID, tree, LayerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	filepath.WalkDir(full, func(p string, de os.DirEntry, err error) error {
		var st unix.Stat_t
		if unix.Lstat(p, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFCHR {
			t.Errorf("full layer: %s is a device", p)
		}
		if _, err := getXattr(xattrSource{path: p}, "user.overlay.opaque"); err == nil {
			t.Errorf("full layer: %s is opaque", p)
		}
		return nil
	})
	if names, _ := os.ReadDir(full); len(names) != 7 {
		t.Errorf("full layer root holds %d entries, want 7", len(names))
	}
	// Same tree: an empty layer.
	empty, err := layerFromMem(t, m, tree, tree, LayerOptions{})
	if names, _ := os.ReadDir(empty); err != nil || len(names) != 0 {
		t.Errorf("layer of an unchanged tree: %v %v", names, err)
	}
}

// TestLayerDeviceWithoutPrivilege: a device that cannot be created (no
// CAP_MKNOD) in place of a file becomes a whiteout, so the old file does
// not show through; a new one is only skipped.
func TestLayerDeviceWithoutPrivilege(t *testing.T) {
	if runAsUser(t) {
		return
	}
	m := newMemStore()
	dev := func(name string) store.TreeEntry {
		return store.TreeEntry{Name: name, Type: store.TypeCharDev, Mode: 0o600, Rdev: unix.Mkdev(1, 3)}
	}
	parent := m.putTree(&store.Tree{Entries: []store.TreeEntry{{Name: "f", Type: store.TypeFile, Mode: 0o644, Size: 1, Content: m.putBlob([]byte("x"))}}})
	tree := m.putTree(&store.Tree{Entries: []store.TreeEntry{dev("f"), dev("new")}})
	var w warnings
	dir, err := layerFromMem(t, m, parent, tree, LayerOptions{Warn: w.fn})
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	must(t, unix.Lstat(filepath.Join(dir, "f"), &st))
	if st.Rdev != 0 || st.Mode&unix.S_IFMT != unix.S_IFCHR {
		t.Errorf("f: mode %#o rdev %d, want a whiteout", st.Mode, st.Rdev)
	}
	if _, err := os.Lstat(filepath.Join(dir, "new")); !os.IsNotExist(err) {
		t.Errorf("new: %v, want skipped", err)
	}
	if _, ok := w.get("new"); !ok {
		t.Error("no warning for new")
	}
}

// TestLayerHostileTree: names from the store are untrusted: a parent tree
// with ".." (which would become a whiteout name) fails the layer, and
// nothing is left.
func TestLayerHostileTree(t *testing.T) {
	m := newMemStore()
	x := m.putBlob([]byte("x"))
	parent := m.putTree(&store.Tree{Entries: []store.TreeEntry{{Name: "..", Type: store.TypeFile, Size: 1, Content: x}}})
	tree := m.putTree(&store.Tree{Entries: []store.TreeEntry{{Name: "a", Type: store.TypeFile, Size: 1, Content: x}}})
	dir, err := layerFromMem(t, m, parent, tree, LayerOptions{})
	if !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("error %v, want ErrCorrupt", err)
	}
	if names, _ := os.ReadDir(filepath.Dir(dir)); len(names) != 0 {
		t.Errorf("left %v", names)
	}
}
