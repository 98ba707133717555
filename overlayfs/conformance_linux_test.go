package overlayfs

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/internal/testutil"
)

// The conformance suite makes a change through a real overlay mount,
// unmounts, runs Changes on the upper directory and checks the exact list
// of changes. It then materializes the result, applying the changes to a
// copy of the tree beneath the way a commit would, and compares it with
// what the merged view showed.

var (
	t0 = time.Date(2020, 1, 2, 3, 4, 5, 123456789, time.UTC) // every lower entry's mtime
	t1 = time.Date(2021, 6, 7, 8, 9, 10, 987654321, time.UTC)
)

// envTmpfs makes the conformance child put layers, upper and work on a
// tmpfs (user xattrs on tmpfs: Linux 6.6+).
const envTmpfs = "STRATA_OVERLAYFS_TEST_TMPFS"

type confMode struct {
	root bool // real root: trusted xattrs, redirect_dir=on
}

func (md confMode) prefix() string {
	if md.root {
		return FlavourTrusted.XattrPrefix()
	}
	return FlavourUser.XattrPrefix()
}

// want is the expected projection of one Change.
type want struct {
	path     string
	kind     Kind
	typ      fs.FileMode // Stat.Mode.Type(); ignored for Deleted
	diff     Diff        // Modified only
	opaque   bool
	redirect string
	link     string
	xattrs   map[string]string
	group    string // entries with the same label are one hardlinked inode
	same     *bool  // expected ContentEqual()
}

func (w want) String() string {
	s := fmt.Sprintf("%q %s", w.path, w.kind)
	if w.kind != Deleted {
		s += fmt.Sprintf(" type=%v", w.typ)
	}
	if w.kind == Modified {
		s += " diff=" + w.diff.String()
	}
	if w.opaque {
		s += " opaque"
	}
	if w.redirect != "" {
		s += fmt.Sprintf(" redirect=%q", w.redirect)
	}
	if w.link != "" {
		s += fmt.Sprintf(" link=%q", w.link)
	}
	if len(w.xattrs) > 0 {
		keys := make([]string, 0, len(w.xattrs))
		for k := range w.xattrs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			s += fmt.Sprintf(" %s=%q", k, w.xattrs[k])
		}
	}
	return s
}

func project(c Change) want {
	w := want{path: c.Path, kind: c.Kind, opaque: c.Opaque, redirect: c.RedirectFrom}
	if c.Kind != Deleted {
		w.typ = c.Stat.Mode.Type()
		w.link = c.Stat.Linkname
		if len(c.Xattrs) > 0 {
			w.xattrs = map[string]string{}
			for k, v := range c.Xattrs {
				w.xattrs[k] = string(v)
			}
		}
	}
	if c.Kind == Modified {
		w.diff = c.Diff
	}
	return w
}

type confCase struct {
	name string
	// layers build the lowers, topmost first; nil means one baseLayer.
	layers []func(t *testing.T, dir string, md confMode)
	op     func(t *testing.T, m string, md confMode)
	want   []want
	// root holds the expectations as real root when they differ.
	root []want
	only string // "root" or "rootless"
	// check inspects the upper directory after the change.
	check func(t *testing.T, upper string)
}

func ptr[T any](v T) *T { return &v }

var rootM = want{path: ".", kind: Modified, typ: fs.ModeDir, diff: DiffMtime}

func confCases() []confCase {
	copiedUp := func(names ...string) func(t *testing.T, upper string) {
		return func(t *testing.T, upper string) {
			for _, n := range names {
				if _, err := os.Lstat(filepath.Join(upper, n)); err != nil {
					t.Errorf("%s was not copied up: %v", n, err)
				}
			}
		}
	}
	renamed := []want{rootM, {path: "dir", kind: Deleted}, {path: "dir2", kind: Added, typ: fs.ModeDir, redirect: "dir"}}
	return []confCase{
		{
			name: "whiteout",
			op:   func(t *testing.T, m string, _ confMode) { must(t, os.Remove(m+"/file")) },
			want: []want{rootM, {path: "file", kind: Deleted}},
		},
		{
			name: "nested deletions",
			op: func(t *testing.T, m string, _ confMode) {
				must(t, os.Remove(m+"/dir/a"))
				must(t, os.RemoveAll(m+"/dir/sub"))
			},
			want: []want{
				{path: "dir", kind: Modified, typ: fs.ModeDir, diff: DiffMtime},
				{path: "dir/a", kind: Deleted},
				{path: "dir/sub", kind: Deleted},
			},
		},
		{
			name: "delete tree",
			op:   func(t *testing.T, m string, _ confMode) { must(t, os.RemoveAll(m+"/dir")) },
			want: []want{rootM, {path: "dir", kind: Deleted}},
		},
		{
			name: "opaque dir",
			op: func(t *testing.T, m string, _ confMode) {
				must(t, os.RemoveAll(m+"/dir"))
				must(t, os.Mkdir(m+"/dir", 0o755))
				must(t, os.WriteFile(m+"/dir/new", []byte("n"), 0o644))
			},
			want: []want{rootM, {path: "dir", kind: Replaced, typ: fs.ModeDir, opaque: true}, {path: "dir/new", kind: Added}},
		},
		{
			// Rootless mounts cannot rename a directory that exists
			// beneath: userxattr excludes redirect_dir.
			name: "rename lower dir",
			op: func(t *testing.T, m string, md confMode) {
				err := os.Rename(m+"/dir", m+"/dir2")
				if md.root {
					must(t, err)
				} else if !errors.Is(err, syscall.EXDEV) {
					t.Fatalf("rename: %v, want EXDEV", err)
				}
			},
			want: nil,
			root: renamed,
		},
		{
			// mv(1) falls back to copy and delete on EXDEV.
			name: "mv lower dir",
			op: func(t *testing.T, m string, _ confMode) {
				if out, err := exec.Command("mv", m+"/dir", m+"/dir2").CombinedOutput(); err != nil {
					t.Fatalf("mv: %v: %s", err, out)
				}
			},
			want: []want{rootM, {path: "dir", kind: Deleted}, {path: "dir2", kind: Added, typ: fs.ModeDir},
				{path: "dir2/a", kind: Added}, {path: "dir2/b", kind: Added},
				{path: "dir2/sub", kind: Added, typ: fs.ModeDir}, {path: "dir2/sub/c", kind: Added}},
			root: renamed,
		},
		{
			name: "move lower dir into new dir",
			only: "root",
			op: func(t *testing.T, m string, _ confMode) {
				must(t, os.Mkdir(m+"/n", 0o755))
				must(t, os.Rename(m+"/dir", m+"/n/d"))
			},
			root: []want{rootM, {path: "dir", kind: Deleted}, {path: "n", kind: Added, typ: fs.ModeDir},
				{path: "n/d", kind: Added, typ: fs.ModeDir, redirect: "dir"}},
		},
		{
			name: "rename lower dir and change inside",
			only: "root",
			op: func(t *testing.T, m string, _ confMode) {
				must(t, os.Rename(m+"/dir", m+"/dir2"))
				appendFile(t, m+"/dir2/a", "more")
				must(t, os.Remove(m+"/dir2/b"))
				must(t, os.RemoveAll(m+"/dir2/sub"))
				must(t, os.Mkdir(m+"/dir2/sub", 0o755))
			},
			root: []want{rootM, {path: "dir", kind: Deleted}, {path: "dir2", kind: Added, typ: fs.ModeDir, redirect: "dir"},
				{path: "dir2/a", kind: Modified, diff: DiffSize | DiffContent | DiffMtime},
				{path: "dir2/b", kind: Deleted},
				{path: "dir2/sub", kind: Replaced, typ: fs.ModeDir, opaque: true}},
		},
		{
			name: "rename lower dir away and back",
			only: "root",
			op: func(t *testing.T, m string, _ confMode) {
				must(t, os.Rename(m+"/dir", m+"/x"))
				must(t, os.Rename(m+"/x", m+"/dir"))
			},
			root: []want{rootM},
		},
		{
			name: "file to dir",
			op: func(t *testing.T, m string, _ confMode) {
				must(t, os.Remove(m+"/file"))
				must(t, os.Mkdir(m+"/file", 0o755))
				must(t, os.WriteFile(m+"/file/x", nil, 0o644))
			},
			want: []want{rootM, {path: "file", kind: Replaced, typ: fs.ModeDir, opaque: true}, {path: "file/x", kind: Added}},
		},
		{
			name: "dir to file",
			op: func(t *testing.T, m string, _ confMode) {
				must(t, os.RemoveAll(m+"/dir"))
				must(t, os.WriteFile(m+"/dir", []byte("now a file"), 0o644))
			},
			want: []want{rootM, {path: "dir", kind: Replaced}},
		},
		{
			name: "file to symlink",
			op: func(t *testing.T, m string, _ confMode) {
				must(t, os.Remove(m+"/file"))
				must(t, os.Symlink("dir/a", m+"/file"))
			},
			want: []want{rootM, {path: "file", kind: Replaced, typ: fs.ModeSymlink, link: "dir/a"}},
		},
		{
			name: "hardlink to lower file",
			op:   func(t *testing.T, m string, _ confMode) { must(t, os.Link(m+"/file", m+"/file2")) },
			want: []want{rootM, {path: "file", kind: Modified, diff: DiffNlink, group: "f", same: ptr(true)},
				{path: "file2", kind: Added, group: "f"}},
		},
		{
			name: "new hardlinked files",
			op: func(t *testing.T, m string, _ confMode) {
				must(t, os.WriteFile(m+"/n1", []byte("linked"), 0o644))
				must(t, os.Link(m+"/n1", m+"/n2"))
				must(t, os.Link(m+"/n1", m+"/dir/n3"))
			},
			want: []want{rootM, {path: "dir", kind: Modified, typ: fs.ModeDir, diff: DiffMtime},
				{path: "dir/n3", kind: Added, group: "n"}, {path: "n1", kind: Added, group: "n"}, {path: "n2", kind: Added, group: "n"}},
		},
		{
			name: "hardlink broken by copy-up",
			op:   func(t *testing.T, m string, _ confMode) { appendFile(t, m+"/hl1", "more") },
			want: []want{{path: "hl1", kind: Modified, diff: DiffSize | DiffContent | DiffMtime, same: ptr(false)}},
		},
		{
			name: "symlinks",
			op: func(t *testing.T, m string, _ confMode) {
				must(t, os.Symlink("dir/a", m+"/newlink"))
				must(t, os.Remove(m+"/link"))
				must(t, os.Symlink("dir", m+"/link"))
			},
			want: []want{rootM,
				{path: "link", kind: Modified, typ: fs.ModeSymlink, diff: DiffMtime | DiffSize | DiffLinkname, link: "dir", same: ptr(false)},
				{path: "newlink", kind: Added, typ: fs.ModeSymlink, link: "dir/a"}},
		},
		{
			name: "xattrs set and removed",
			op: func(t *testing.T, m string, _ confMode) {
				must(t, unix.Lsetxattr(m+"/attrs", "user.new", []byte("3"), 0))
				must(t, unix.Lremovexattr(m+"/attrs", "user.gone"))
				must(t, unix.Lsetxattr(m+"/dir/a", "user.k", []byte("v"), 0))
			},
			want: []want{
				{path: "attrs", kind: Modified, diff: DiffXattrs, xattrs: map[string]string{"user.keep": "1", "user.new": "3"}},
				{path: "dir/a", kind: Modified, diff: DiffXattrs, xattrs: map[string]string{"user.k": "v"}, same: ptr(true)},
			},
		},
		{
			name: "chmod only",
			op: func(t *testing.T, m string, _ confMode) {
				must(t, os.Chmod(m+"/file", 0o600))
				must(t, os.Chmod(m+"/dir", 0o700))
				must(t, os.Chmod(m+"/dir/b", 0o4755))
			},
			want: []want{{path: "dir", kind: Modified, typ: fs.ModeDir, diff: DiffMode},
				{path: "dir/b", kind: Modified, diff: DiffMode},
				{path: "file", kind: Modified, diff: DiffMode, same: ptr(true)}},
		},
		{
			name: "chown only",
			only: "root",
			op:   func(t *testing.T, m string, _ confMode) { must(t, os.Lchown(m+"/file", 1234, 5678)) },
			root: []want{{path: "file", kind: Modified, diff: DiffOwner}},
		},
		{
			name: "touch only",
			op: func(t *testing.T, m string, _ confMode) {
				must(t, os.Chtimes(m+"/file", t1, t1))
			},
			want: []want{{path: "file", kind: Modified, diff: DiffMtime, same: ptr(true)}},
		},
		{
			name: "copied up unchanged",
			op: func(t *testing.T, m string, _ confMode) {
				f, err := os.OpenFile(m+"/file", os.O_RDWR, 0)
				must(t, err)
				must(t, f.Close())
				must(t, os.Chmod(m+"/dir/a", 0o600))
				must(t, os.Chmod(m+"/dir/a", 0o644))
				must(t, unix.Lsetxattr(m+"/hl1", "user.tmp", []byte("x"), 0))
				must(t, unix.Lremovexattr(m+"/hl1", "user.tmp"))
			},
			want:  nil,
			check: copiedUp("file", "dir/a", "hl1"),
		},
		{
			name: "same size, mtime restored",
			op: func(t *testing.T, m string, _ confMode) {
				must(t, os.WriteFile(m+"/file", []byte("HELLO\n"), 0o644))
				must(t, os.Chtimes(m+"/file", t0, t0))
			},
			want: []want{{path: "file", kind: Modified, diff: DiffContent, same: ptr(false)}},
		},
		{
			name: "same bytes rewritten, mtime restored",
			op: func(t *testing.T, m string, _ confMode) {
				must(t, os.WriteFile(m+"/file", []byte("hello\n"), 0o644))
				must(t, os.Chtimes(m+"/file", t0, t0))
			},
			want:  nil,
			check: copiedUp("file"),
		},
		{
			name: "empty dirs",
			op: func(t *testing.T, m string, _ confMode) {
				must(t, os.Mkdir(m+"/newempty", 0o755))
				must(t, os.Remove(m+"/empty"))
			},
			want: []want{rootM, {path: "empty", kind: Deleted}, {path: "newempty", kind: Added, typ: fs.ModeDir}},
		},
		{
			name: "delete then re-create",
			op: func(t *testing.T, m string, _ confMode) {
				must(t, os.Remove(m+"/file"))
				must(t, os.WriteFile(m+"/file", []byte("hello\n"), 0o644))
			},
			want: []want{rootM, {path: "file", kind: Modified, diff: DiffMtime, same: ptr(true)}},
		},
		{
			name: "newlines and invalid UTF-8",
			op: func(t *testing.T, m string, _ confMode) {
				must(t, os.WriteFile(m+"/new\nline", []byte("x"), 0o644))
				must(t, os.Mkdir(m+"/\xff\xfe dir", 0o755))
				must(t, os.WriteFile(m+"/\xff\xfe dir/\x80", nil, 0o644))
				must(t, os.Remove(m+"/del\nme"))
			},
			want: []want{rootM, {path: "del\nme", kind: Deleted}, {path: "new\nline", kind: Added},
				{path: "\xff\xfe dir", kind: Added, typ: fs.ModeDir}, {path: "\xff\xfe dir/\x80", kind: Added}},
		},
		{
			name: "fifo and socket",
			op: func(t *testing.T, m string, _ confMode) {
				must(t, unix.Mkfifo(m+"/fifo", 0o644))
				l, err := net.Listen("unix", m+"/sock")
				must(t, err)
				l.(*net.UnixListener).SetUnlinkOnClose(false)
				must(t, l.Close())
			},
			want: []want{rootM, {path: "fifo", kind: Added, typ: fs.ModeNamedPipe}, {path: "sock", kind: Added, typ: fs.ModeSocket}},
		},
		{
			name: "deep modify",
			op:   func(t *testing.T, m string, _ confMode) { appendFile(t, m+"/dir/sub/c", "more") },
			want: []want{{path: "dir/sub/c", kind: Modified, diff: DiffSize | DiffContent | DiffMtime}},
		},
		{
			// The top layer hides "file" with a char 0/0 whiteout and
			// "attrs" with an xattr whiteout, and has an opaque "dir".
			name:   "two layers",
			layers: []func(*testing.T, string, confMode){markerLayer, baseLayer},
			op: func(t *testing.T, m string, _ confMode) {
				if _, err := os.Lstat(m + "/dir/a"); !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("opaque lower dir does not hide: %v", err)
				}
				must(t, os.WriteFile(m+"/file", []byte("again"), 0o644))
				must(t, os.WriteFile(m+"/attrs", []byte("back"), 0o644))
				must(t, os.Remove(m+"/dir/only"))
				must(t, os.WriteFile(m+"/dir/new", nil, 0o644))
			},
			want: []want{rootM, {path: "attrs", kind: Added}, {path: "dir", kind: Modified, typ: fs.ModeDir, diff: DiffMtime},
				{path: "dir/new", kind: Added}, {path: "dir/only", kind: Deleted}, {path: "file", kind: Added}},
		},
		{
			// A layer made from a root upper carries redirects; with
			// userxattr the kernel does not follow them.
			name:   "redirect in a lower layer",
			only:   "root",
			layers: []func(*testing.T, string, confMode){redirectLayer, baseLayer},
			op: func(t *testing.T, m string, _ confMode) {
				appendFile(t, m+"/renamed/a", "more")
				must(t, os.Remove(m+"/renamed/b"))
			},
			root: []want{{path: "renamed", kind: Modified, typ: fs.ModeDir, diff: DiffMtime},
				{path: "renamed/a", kind: Modified, diff: DiffSize | DiffContent | DiffMtime},
				{path: "renamed/b", kind: Deleted}},
		},
	}
}

func appendFile(t *testing.T, p, s string) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	must(t, err)
	_, err = f.WriteString(s)
	must(t, err)
	must(t, f.Close())
}

// baseLayer is the tree most cases change.
func baseLayer(t *testing.T, d string, _ confMode) {
	files := map[string]string{
		"file": "hello\n", "dir/a": "a\n", "dir/b": "b\n", "dir/sub/c": "c\n",
		"attrs": "x\n", "hl1": "hl\n", "del\nme": "nl\n",
	}
	must(t, os.MkdirAll(d+"/dir/sub", 0o755))
	must(t, os.Mkdir(d+"/empty", 0o755))
	for p, s := range files {
		must(t, os.WriteFile(filepath.Join(d, p), []byte(s), 0o644))
	}
	must(t, os.Symlink("file", d+"/link"))
	must(t, os.Link(d+"/hl1", d+"/hl2"))
	must(t, unix.Lsetxattr(d+"/attrs", "user.keep", []byte("1"), 0))
	must(t, unix.Lsetxattr(d+"/attrs", "user.gone", []byte("2"), 0))
}

// markerLayer writes overlay markers by hand, as strata's materializer
// does for a layer: whiteouts of both kinds and an opaque directory.
func markerLayer(t *testing.T, d string, md confMode) {
	must(t, unix.Mknod(d+"/file", unix.S_IFCHR, 0))
	must(t, os.WriteFile(d+"/attrs", nil, 0o644))
	must(t, unix.Lsetxattr(d+"/attrs", md.prefix()+"whiteout", nil, 0))
	// "x": this directory (and, on the layer root, this layer) holds
	// xattr whiteouts, for readdir (Linux 6.7+).
	must(t, unix.Lsetxattr(d, md.prefix()+"opaque", []byte("x"), 0))
	must(t, os.Mkdir(d+"/dir", 0o755))
	must(t, unix.Lsetxattr(d+"/dir", md.prefix()+"opaque", []byte("y"), 0))
	must(t, os.WriteFile(d+"/dir/only", []byte("only"), 0o644))
}

// redirectLayer holds "renamed", a directory renamed from "dir" with
// redirect_dir=on, as an upper directory written by a root mount would.
func redirectLayer(t *testing.T, d string, md confMode) {
	must(t, os.Mkdir(d+"/renamed", 0o755))
	must(t, unix.Lsetxattr(d+"/renamed", md.prefix()+"redirect", []byte("/dir"), 0))
	must(t, unix.Mknod(d+"/dir", unix.S_IFCHR, 0))
}

// stampTree sets every entry's times to t0, children before parents.
func stampTree(t *testing.T, root string) {
	t.Helper()
	var paths []string
	must(t, filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		paths = append(paths, p)
		return err
	}))
	ts := []unix.Timespec{unix.NsecToTimespec(t0.UnixNano()), unix.NsecToTimespec(t0.UnixNano())}
	for _, p := range slices.Backward(paths) {
		must(t, unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW))
	}
}

func TestConformanceRootless(t *testing.T) {
	rootlessChildren(t, func(t *testing.T) { runConformance(t, confMode{}) })
	if stage() == "" {
		t.Run("tmpfs", func(t *testing.T) { runChild(t, stageUserNS, envTmpfs+"=1") })
	}
}

func TestConformanceRoot(t *testing.T) {
	rootChild(t, func(t *testing.T) { runConformance(t, confMode{root: true}) })
}

func runConformance(t *testing.T, md confMode) {
	feat := probeOrSkip(t)
	scratch := t.TempDir()
	if os.Getenv(envTmpfs) == "1" {
		must(t, unix.Mount("tmpfs", scratch, "tmpfs", 0, "mode=0755"))
		t.Cleanup(func() { unix.Unmount(scratch, unix.MNT_DETACH) })
		if feat, _ = Probe(scratch); !feat.UserXattrs {
			testutil.Skip(t, "no user xattrs on tmpfs (Linux 6.6+)")
		}
	}
	t.Logf("mounting with %s on %s", feat.Method(), fsType(scratch))
	for i, c := range confCases() {
		want := c.want
		if md.root && c.root != nil {
			want = c.root
		}
		if c.only == "root" && !md.root || c.only == "rootless" && md.root {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			runCase(t, filepath.Join(scratch, fmt.Sprintf("c%02d", i)), feat, md, c, want)
		})
	}
}

func runCase(t *testing.T, dir string, feat Features, md confMode, c confCase, want []want) {
	layers := c.layers
	if layers == nil {
		layers = []func(*testing.T, string, confMode){baseLayer}
	}
	var lowers []string
	for i, build := range layers {
		l := filepath.Join(dir, fmt.Sprintf("l%d", i))
		must(t, os.MkdirAll(l, 0o755))
		must(t, os.Chmod(l, 0o755))
		build(t, l, md)
		stampTree(t, l)
		lowers = append(lowers, l)
	}
	upper, work, m := filepath.Join(dir, "upper"), filepath.Join(dir, "work"), filepath.Join(dir, "m")
	for _, d := range []string{upper, work, m} {
		must(t, os.Mkdir(d, 0o755))
	}
	// The upper root is the merged root: give it the lower root's
	// attributes, as strata does when it creates a workspace.
	must(t, os.Chmod(upper, 0o755))
	must(t, os.Chtimes(upper, t0, t0))

	cfg := DefaultConfig(lowers, upper, work, feat)
	must(t, Mount(m, cfg, feat))
	mounted := true
	defer func() {
		if mounted {
			Unmount(m, true)
		}
	}()
	c.op(t, m, md)
	merged := captureTree(t, m)
	must(t, Unmount(m, false))
	mounted = false

	changes, err := Changes(upper, lowers, cfg.Flavour())
	if err != nil {
		t.Fatal(err)
	}
	var got, exp []string
	for _, ch := range changes {
		got = append(got, project(ch).String())
	}
	for _, w := range want {
		exp = append(exp, w.String())
	}
	if !slices.Equal(got, exp) {
		t.Fatalf("changes:\n\t%s\nwant:\n\t%s", strings.Join(got, "\n\t"), strings.Join(exp, "\n\t"))
	}
	checkGroupsAndContent(t, changes, want)
	if c.check != nil {
		c.check(t, upper)
	}

	// Materialize: the tree beneath plus the changes must be the merged view.
	orig := lowers[0]
	if len(lowers) > 1 {
		orig = filepath.Join(dir, "ro")
		must(t, os.Mkdir(orig, 0o755))
		ro := cfg
		ro.Upper, ro.Work, ro.Volatile = "", "", false
		must(t, Mount(orig, ro, feat))
		defer Unmount(orig, true)
	}
	result := filepath.Join(dir, "result")
	materialize(t, orig, result, changes)
	if diff := compareTrees(merged, captureTree(t, result)); diff != "" {
		t.Errorf("materialized changes differ from the merged view:\n%s", diff)
	}
}

func checkGroupsAndContent(t *testing.T, changes []Change, want []want) {
	t.Helper()
	groups := map[string][]Change{}
	for i, w := range want {
		c := changes[i]
		if w.group != "" {
			groups[w.group] = append(groups[w.group], c)
		}
		if w.same != nil {
			same, err := c.ContentEqual()
			if err != nil || same != *w.same {
				t.Errorf("%q: ContentEqual() = %v, %v; want %v", c.Path, same, err, *w.same)
			}
		}
	}
	for g, cs := range groups {
		for _, c := range cs {
			if c.Stat.Ino != cs[0].Stat.Ino || c.Stat.Dev != cs[0].Stat.Dev || c.Stat.Nlink != uint64(len(cs)) {
				t.Errorf("group %s: %q is ino %d nlink %d, %q is ino %d", g, c.Path, c.Stat.Ino, c.Stat.Nlink, cs[0].Path, cs[0].Stat.Ino)
			}
		}
	}
}

// node is what the comparison of trees looks at.
type node struct {
	typ      fs.FileMode
	perm     fs.FileMode
	uid, gid uint32
	mtime    int64
	content  string
	link     string
	xattrs   string
}

func captureTree(t *testing.T, root string) map[string]node {
	t.Helper()
	tree := map[string]node{}
	var walk func(rel string)
	walk = func(rel string) {
		p := root
		if rel != "." {
			p = root + "/" + rel
		}
		var st unix.Stat_t
		must(t, unix.Lstat(p, &st))
		s := statOf(&st)
		n := node{typ: s.Mode.Type(), perm: s.Mode & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky),
			uid: s.Uid, gid: s.Gid, mtime: s.Mtime.UnixNano()}
		switch {
		case s.Mode.IsRegular():
			b, err := os.ReadFile(p)
			must(t, err)
			n.content = string(b)
		case s.Mode.Type() == fs.ModeSymlink:
			l, err := os.Readlink(p)
			must(t, err)
			n.link = l
		}
		x, err := readXattrSet(p, "user.overlay.")
		must(t, err)
		xs, err := x.user()
		must(t, err)
		keys := make([]string, 0, len(xs))
		for k := range xs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			n.xattrs += fmt.Sprintf("%s=%q;", k, xs[k])
		}
		tree[rel] = n
		if s.Mode.IsDir() {
			ents, err := os.ReadDir(p)
			must(t, err)
			for _, e := range ents {
				if rel == "." {
					walk(e.Name())
				} else {
					walk(rel + "/" + e.Name())
				}
			}
		}
	}
	walk(".")
	return tree
}

func compareTrees(want, got map[string]node) string {
	var b strings.Builder
	var paths []string
	for p := range want {
		paths = append(paths, p)
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	for _, p := range paths {
		w, okw := want[p]
		g, okg := got[p]
		switch {
		case !okg:
			fmt.Fprintf(&b, "\tmissing %q\n", p)
		case !okw:
			fmt.Fprintf(&b, "\textra %q\n", p)
		case w != g:
			fmt.Fprintf(&b, "\t%q: merged %+v\n\t%q: result %+v\n", p, w, p, g)
		}
	}
	return b.String()
}

// materialize copies the tree at orig to result and applies changes the
// way a commit would.
func materialize(t *testing.T, orig, result string, changes []Change) {
	t.Helper()
	dirTimes := map[string]time.Time{}
	copyTree(t, orig, result, ".", dirTimes)
	links := map[[2]uint64]string{}
	forget := func(p string) {
		for k := range dirTimes {
			if k == p || strings.HasPrefix(k, p+"/") {
				delete(dirTimes, k)
			}
		}
	}
	for _, c := range changes {
		dst := result
		if c.Path != "." {
			dst = result + "/" + c.Path
		}
		switch c.Kind {
		case Deleted:
			must(t, os.RemoveAll(dst))
			forget(c.Path)
			continue
		case Replaced:
			must(t, os.RemoveAll(dst))
			forget(c.Path)
		case Modified:
			if !c.Stat.Mode.IsDir() {
				must(t, os.Remove(dst))
			}
		}
		switch {
		case c.Stat.Mode.IsDir():
			if c.Kind != Modified {
				if c.RedirectFrom != "" {
					copyTree(t, orig+"/"+c.RedirectFrom, dst, c.Path, dirTimes)
				} else {
					must(t, os.Mkdir(dst, 0o700))
				}
			}
			setMeta(t, dst, c.Stat, c.Xattrs)
			dirTimes[c.Path] = c.Stat.Mtime
		case c.Stat.Nlink > 1 && links[[2]uint64{c.Stat.Dev, c.Stat.Ino}] != "":
			must(t, os.Link(links[[2]uint64{c.Stat.Dev, c.Stat.Ino}], dst))
		default:
			createLike(t, dst, c.UpperPath, c.Stat)
			setMeta(t, dst, c.Stat, c.Xattrs)
			if c.Stat.Nlink > 1 {
				links[[2]uint64{c.Stat.Dev, c.Stat.Ino}] = dst
			}
		}
	}
	// Directory times last, deepest first: entries changed below them.
	var dirs []string
	for p := range dirTimes {
		dirs = append(dirs, p)
	}
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	for _, p := range dirs {
		dst := result
		if p != "." {
			dst = result + "/" + p
		}
		setTimes(t, dst, dirTimes[p])
	}
}

func copyTree(t *testing.T, src, dst, rel string, dirTimes map[string]time.Time) {
	t.Helper()
	var st unix.Stat_t
	must(t, unix.Lstat(src, &st))
	s := statOf(&st)
	if s.Mode.Type() == fs.ModeSymlink {
		l, err := os.Readlink(src)
		must(t, err)
		s.Linkname = l
	}
	x, err := readXattrSet(src, "user.overlay.")
	must(t, err)
	xs, err := x.user()
	must(t, err)
	if !s.Mode.IsDir() {
		createLike(t, dst, src, s)
		setMeta(t, dst, s, xs)
		return
	}
	must(t, os.Mkdir(dst, 0o700))
	ents, err := os.ReadDir(src)
	must(t, err)
	for _, e := range ents {
		child := e.Name()
		if rel != "." {
			child = rel + "/" + child
		}
		copyTree(t, src+"/"+e.Name(), dst+"/"+e.Name(), child, dirTimes)
	}
	setMeta(t, dst, s, xs)
	dirTimes[rel] = s.Mtime
}

func createLike(t *testing.T, dst, src string, s Stat) {
	t.Helper()
	switch s.Mode.Type() {
	case 0:
		b, err := os.ReadFile(src)
		must(t, err)
		must(t, os.WriteFile(dst, b, 0o600))
	case fs.ModeSymlink:
		must(t, os.Symlink(s.Linkname, dst))
	case fs.ModeNamedPipe:
		must(t, unix.Mkfifo(dst, 0o600))
	case fs.ModeSocket:
		must(t, unix.Mknod(dst, unix.S_IFSOCK|0o600, 0))
	default:
		t.Fatalf("%s: cannot create %v", dst, s.Mode)
	}
}

func setMeta(t *testing.T, p string, s Stat, xattrs map[string][]byte) {
	t.Helper()
	must(t, os.Lchown(p, int(s.Uid), int(s.Gid)))
	if s.Mode.Type() != fs.ModeSymlink {
		must(t, os.Chmod(p, s.Mode))
		x, err := readXattrSet(p, "user.overlay.")
		must(t, err)
		old, err := x.user()
		must(t, err)
		for k := range old {
			if _, ok := xattrs[k]; !ok {
				must(t, unix.Lremovexattr(p, k))
			}
		}
		for k, v := range xattrs {
			must(t, unix.Lsetxattr(p, k, v, 0))
		}
	}
	setTimes(t, p, s.Mtime)
}

func setTimes(t *testing.T, p string, mtime time.Time) {
	t.Helper()
	ts := []unix.Timespec{unix.NsecToTimespec(mtime.UnixNano()), unix.NsecToTimespec(mtime.UnixNano())}
	must(t, unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW))
}
