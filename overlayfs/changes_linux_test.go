package overlayfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// These tests write upper and lower directories by hand, without a mount,
// for markers the kernel reads but a mount in the conformance suite does
// not produce: xattr whiteouts, redirects written by hand (including
// hostile ones), metacopy files, lower-layer markers.

// ent is one entry to create. In xattr names "$" stands for the flavour's
// prefix ("user.overlay." or "trusted.overlay.").
type ent struct {
	path   string
	kind   byte // 'f' file, 'd' dir, 'l' symlink, 'w' char 0/0 whiteout, 'x' xattr whiteout
	data   string
	xattrs map[string]string
}

func f(p, data string) ent             { return ent{path: p, kind: 'f', data: data} }
func d(p string, xattrs ...string) ent { return ent{path: p, kind: 'd', xattrs: pairs(xattrs)} }
func fx(p, data string, xattrs ...string) ent {
	return ent{path: p, kind: 'f', data: data, xattrs: pairs(xattrs)}
}
func wh(p string) ent  { return ent{path: p, kind: 'w'} }
func xwh(p string) ent { return ent{path: p, kind: 'x'} }
func pairs(kv []string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

func buildTree(t *testing.T, root, prefix string, ents ...ent) {
	t.Helper()
	must(t, os.MkdirAll(root, 0o755))
	must(t, os.Chmod(root, 0o755))
	for _, e := range ents {
		p := root
		if e.path != "." {
			p = filepath.Join(root, e.path)
			must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		}
		switch e.kind {
		case 'f':
			must(t, os.WriteFile(p, []byte(e.data), 0o644))
		case 'd':
			if e.path != "." {
				must(t, os.Mkdir(p, 0o755))
			}
		case 'l':
			must(t, os.Symlink(e.data, p))
		case 'w':
			must(t, unix.Mknod(p, unix.S_IFCHR, 0))
		case 'x':
			must(t, os.WriteFile(p, nil, 0o644))
			must(t, unix.Lsetxattr(p, prefix+"whiteout", nil, 0))
		}
		for k, v := range e.xattrs {
			must(t, unix.Lsetxattr(p, strings.ReplaceAll(k, "$", prefix), []byte(v), 0))
		}
	}
	stampTree(t, root)
}

type deltaCase struct {
	name   string
	lowers [][]ent // topmost first
	upper  []ent
	want   []want
	err    error
}

func deltaCases() []deltaCase {
	return []deltaCase{
		{
			name:   "xattr whiteouts in the upper",
			lowers: [][]ent{{f("a", "a"), f("b", "b"), d("d"), f("d/gone", "g"), f("d/keep", "k")}},
			upper: []ent{d(".", "$opaque", "x"), xwh("a"), xwh("nothing-beneath"),
				d("d", "$opaque", "x"), xwh("d/gone")},
			want: []want{{path: "a", kind: Deleted}, {path: "d/gone", kind: Deleted}},
		},
		{
			// Only zero-size regular files can be xattr whiteouts
			// (ovl_path_check_xwhiteout_xattr).
			name:   "non-empty file with whiteout xattr",
			lowers: [][]ent{{f("a", "a")}},
			upper:  []ent{fx("a", "zz", "$whiteout", "")},
			want:   []want{{path: "a", kind: Modified, diff: DiffSize | DiffContent}},
		},
		{
			name:   "whiteout over nothing",
			lowers: [][]ent{{f("a", "a")}},
			upper:  []ent{wh("b")},
		},
		{
			name:  "no lowers",
			upper: []ent{d("d"), f("d/f", "x"), wh("w")},
			want:  []want{{path: "d", kind: Added, typ: fs.ModeDir}, {path: "d/f", kind: Added}},
		},
		{
			name:   "absolute redirect under an opaque parent",
			lowers: [][]ent{{d("p"), f("p/old", "o"), d("src"), f("src/f", "f"), f("src/g", "g")}},
			upper:  []ent{d("p", "$opaque", "y"), d("p/moved", "$redirect", "/src"), f("p/moved/f", "changed"), wh("src")},
			want: []want{{path: "p", kind: Replaced, typ: fs.ModeDir, opaque: true},
				{path: "p/moved", kind: Added, typ: fs.ModeDir, redirect: "src"},
				{path: "p/moved/f", kind: Modified, diff: DiffSize | DiffContent},
				{path: "src", kind: Deleted}},
		},
		{
			// A relative redirect is looked up in the parent's lower
			// stack, which an opaque parent does not have.
			name:   "relative redirect under an opaque parent",
			lowers: [][]ent{{d("p"), d("p/src"), f("p/src/f", "f")}},
			upper:  []ent{d("p", "$opaque", "y"), d("p/moved", "$redirect", "src"), f("p/moved/f", "f")},
			want: []want{{path: "p", kind: Replaced, typ: fs.ModeDir, opaque: true},
				{path: "p/moved", kind: Added, typ: fs.ModeDir}, {path: "p/moved/f", kind: Added}},
		},
		{
			name:   "relative redirect",
			lowers: [][]ent{{d("p"), d("p/src"), f("p/src/f", "f"), f("p/src/g", "g")}},
			upper:  []ent{d("p"), d("p/moved", "$redirect", "src"), wh("p/src"), wh("p/moved/g")},
			want: []want{{path: "p/moved", kind: Added, typ: fs.ModeDir, redirect: "p/src"},
				{path: "p/moved/g", kind: Deleted}, {path: "p/src", kind: Deleted}},
		},
		{
			name:   "redirect over an existing dir",
			lowers: [][]ent{{d("a"), f("a/f", "f"), d("b"), f("b/old", "o")}},
			upper:  []ent{d("b", "$redirect", "a"), wh("a")},
			want: []want{{path: "a", kind: Deleted},
				{path: "b", kind: Replaced, typ: fs.ModeDir, redirect: "a"}},
		},
		{
			name:   "redirect to its own path",
			lowers: [][]ent{{d("a"), f("a/f", "f")}},
			upper:  []ent{d("a", "$redirect", "a"), f("a/f", "changed")},
			want:   []want{{path: "a/f", kind: Modified, diff: DiffSize | DiffContent}},
		},
		{
			name:   "redirect escaping the root",
			lowers: [][]ent{{d("a")}},
			upper:  []ent{d("a"), d("a/evil", "$redirect", "../../etc")},
			err:    ErrBadRedirect,
		},
		{
			name:   "absolute redirect with dot-dot",
			lowers: [][]ent{{d("a")}},
			upper:  []ent{d("evil", "$redirect", "/a/../../etc")},
			err:    ErrBadRedirect,
		},
		{
			name:   "metacopy upper file",
			lowers: [][]ent{{f("a", "a")}},
			upper:  []ent{fx("a", "", "$metacopy", "")},
			err:    ErrMetacopy,
		},
		{
			name: "whiteouts in a lower layer hide deeper layers",
			lowers: [][]ent{
				{d(".", "$opaque", "x"), wh("a"), xwh("b")},
				{f("a", "a"), f("b", "b"), f("c", "c")},
			},
			upper: []ent{f("a", "new"), wh("b"), wh("c")},
			want:  []want{{path: "a", kind: Added}, {path: "c", kind: Deleted}},
		},
		{
			name: "opaque dir in a lower layer",
			lowers: [][]ent{
				{d("d", "$opaque", "y"), f("d/x", "x")},
				{d("d"), f("d/y", "y")},
			},
			upper: []ent{d("d"), f("d/y", "new"), wh("d/x")},
			want:  []want{{path: "d/x", kind: Deleted}, {path: "d/y", kind: Added}},
		},
		{
			name: "dir over a file in a deeper layer",
			lowers: [][]ent{
				{d("d"), f("d/x", "x")},
				{f("d", "file")},
			},
			upper: []ent{d("d"), f("d/x", "changed")},
			want:  []want{{path: "d/x", kind: Modified, diff: DiffSize | DiffContent}},
		},
		{
			name: "relative redirect in a lower layer",
			lowers: [][]ent{
				{d("renamed", "$redirect", "orig"), wh("orig")},
				{d("orig"), f("orig/f", "f"), f("orig/g", "g")},
			},
			upper: []ent{d("renamed"), f("renamed/f", "changed"), wh("renamed/g")},
			want: []want{{path: "renamed/f", kind: Modified, diff: DiffSize | DiffContent},
				{path: "renamed/g", kind: Deleted}},
		},
		{
			name: "absolute redirect in a lower layer",
			lowers: [][]ent{
				{d("x"), d("x/renamed", "$redirect", "/a/orig"), d("a"), wh("a/orig")},
				{d("a"), d("a/orig"), f("a/orig/f", "f")},
			},
			upper: []ent{d("x"), d("x/renamed"), f("x/renamed/f", "changed")},
			want:  []want{{path: "x/renamed/f", kind: Modified, diff: DiffSize | DiffContent}},
		},
		{
			name:   "user xattrs and escaped overlay xattrs",
			lowers: [][]ent{{fx("a", "a", "user.k", "1")}},
			upper:  []ent{fx("a", "a", "user.k", "2", "user.overlay.overlay.x", "esc")},
			want:   []want{{path: "a", kind: Modified, diff: DiffXattrs, xattrs: map[string]string{"user.k": "2"}}},
		},
	}
}

func TestChangesOffline(t *testing.T) {
	for _, c := range deltaCases() {
		t.Run(c.name, func(t *testing.T) {
			testDelta(t, c, FlavourUser)
		})
	}
}

// TestChangesOfflineTrusted runs the same cases in the root flavour when
// trusted.* xattrs can be written (real root).
func TestChangesOfflineTrusted(t *testing.T) {
	if err := unix.Lsetxattr(t.TempDir(), "trusted.strata.test", []byte("1"), 0); err != nil {
		if os.Geteuid() == 0 {
			t.Fatalf("root cannot set trusted xattrs: %v", err)
		}
		t.Skip("trusted xattrs need real root")
	}
	for _, c := range deltaCases() {
		if c.name == "user xattrs and escaped overlay xattrs" {
			continue // user.overlay.* is an ordinary xattr in this flavour
		}
		t.Run(c.name, func(t *testing.T) {
			testDelta(t, c, FlavourTrusted)
		})
	}
}

func testDelta(t *testing.T, c deltaCase, fl Flavour) {
	t.Helper()
	dir := t.TempDir()
	var lowers []string
	for i, l := range c.lowers {
		p := filepath.Join(dir, fmt.Sprintf("l%d", i))
		buildTree(t, p, fl.XattrPrefix(), l...)
		lowers = append(lowers, p)
	}
	upper := filepath.Join(dir, "upper")
	buildTree(t, upper, fl.XattrPrefix(), c.upper...)

	changes, err := Changes(upper, lowers, fl)
	if c.err != nil {
		if !errors.Is(err, c.err) {
			t.Fatalf("err = %v, want %v", err, c.err)
		}
		t.Logf("error: %v", err)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	var got, exp []string
	for _, ch := range changes {
		got = append(got, project(ch).String())
		if ch.Kind == Deleted && (ch.Lower == nil || ch.LowerPath == "") {
			t.Errorf("%q: deleted without the entry beneath", ch.Path)
		}
	}
	for _, w := range c.want {
		exp = append(exp, w.String())
	}
	if !slices.Equal(got, exp) {
		t.Fatalf("changes:\n\t%s\nwant:\n\t%s", strings.Join(got, "\n\t"), strings.Join(exp, "\n\t"))
	}
}

// TestChangesTrustedIgnoresUserMarkers pins that the flavours do not mix:
// in the root flavour user.overlay.* xattrs are ordinary xattrs.
func TestChangesTrustedIgnoresUserMarkers(t *testing.T) {
	dir := t.TempDir()
	lower, upper := filepath.Join(dir, "l"), filepath.Join(dir, "u")
	buildTree(t, lower, "", d("d"), f("d/f", "f"))
	buildTree(t, upper, "", d("d", "user.overlay.opaque", "y"))
	changes, err := Changes(upper, []string{lower}, FlavourTrusted)
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) != 1 || changes[0].Kind != Modified || changes[0].Diff != DiffXattrs ||
		string(changes[0].Xattrs["user.overlay.opaque"]) != "y" {
		t.Fatalf("changes = %+v", changes)
	}
	// The same upper read in the user flavour: an opaque directory.
	changes, err = Changes(upper, []string{lower}, FlavourUser)
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) != 1 || changes[0].Kind != Replaced || !changes[0].Opaque {
		t.Fatalf("user flavour: changes = %+v", changes)
	}
}

func TestChangesErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Changes(filepath.Join(dir, "missing"), nil, FlavourUser); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing upper: %v", err)
	}
	if _, err := Changes(dir, nil, Flavour(0)); err == nil {
		t.Error("unknown flavour accepted")
	}
}

func TestComparePaths(t *testing.T) {
	paths := []string{"b", "a/b", ".", "a.b", "a", "a/b/c", "a/a", "\xff", "A", "a\nb"}
	slices.SortFunc(paths, ComparePaths)
	want := []string{".", "A", "a", "a/a", "a/b", "a/b/c", "a\nb", "a.b", "b", "\xff"}
	if !slices.Equal(paths, want) {
		t.Errorf("sorted = %q\nwant %q", paths, want)
	}
}

func TestDiffString(t *testing.T) {
	if s := (DiffMode | DiffXattrs).String(); s != "mode|xattrs" {
		t.Errorf("String() = %q", s)
	}
	if s := Diff(0).String(); s != "none" {
		t.Errorf("String() = %q", s)
	}
}

// TestChangesOfflineKernel checks the hand-written cases against the
// kernel: the upper directory mounted as the topmost layer of a read-only
// overlay must show what the changes, applied to the tree beneath,
// produce.
func TestChangesOfflineKernel(t *testing.T) {
	body := func(fl Flavour) func(t *testing.T) {
		return func(t *testing.T) {
			feat := probeOrSkip(t)
			for _, c := range deltaCases() {
				switch {
				case c.err != nil:
					continue
				case strings.Contains(c.name, "escaped"):
					continue // documented: escaped overlay xattrs are not reported
				case fl == FlavourUser && strings.Contains(c.name, "redirect"):
					continue // with userxattr the kernel does not follow redirects
				}
				t.Run(c.name, func(t *testing.T) { kernelDelta(t, c, fl, feat) })
			}
		}
	}
	switch stage() {
	case stageMountNS:
		rootChild(t, body(FlavourTrusted))
	case stageUserNS, stageDropUID:
		rootlessChildren(t, body(FlavourUser))
	default:
		t.Run("rootless", func(t *testing.T) { rootlessChildren(t, body(FlavourUser)) })
		t.Run("root", func(t *testing.T) { rootChild(t, body(FlavourTrusted)) })
	}
}

func kernelDelta(t *testing.T, c deltaCase, fl Flavour, feat Features) {
	dir := t.TempDir()
	var lowers []string
	for i, l := range c.lowers {
		p := filepath.Join(dir, fmt.Sprintf("l%d", i))
		buildTree(t, p, fl.XattrPrefix(), l...)
		lowers = append(lowers, p)
	}
	upper := filepath.Join(dir, "upper")
	buildTree(t, upper, fl.XattrPrefix(), c.upper...)
	changes, err := Changes(upper, lowers, fl)
	if err != nil {
		t.Fatal(err)
	}

	empty := filepath.Join(dir, "empty")
	must(t, os.Mkdir(empty, 0o755))
	roMount := func(name string, layers []string) string {
		m := filepath.Join(dir, name)
		must(t, os.Mkdir(m, 0o755))
		if len(layers) < 2 {
			layers = append(layers, empty) // a read-only overlay needs two
		}
		cfg := Config{Lowers: layers, UserXattr: fl == FlavourUser}
		must(t, Mount(m, cfg, feat))
		t.Cleanup(func() { Unmount(m, true) })
		return m
	}
	merged := captureTree(t, roMount("merged", append([]string{upper}, lowers...)))
	orig := empty
	if len(lowers) > 0 {
		orig = roMount("beneath", lowers)
	}
	result := filepath.Join(dir, "result")
	materialize(t, orig, result, changes)
	// The overlay root shows the topmost layer's root: the upper's.
	got := captureTree(t, result)
	got["."] = merged["."]
	if diff := compareTrees(merged, got); diff != "" {
		t.Errorf("kernel view and materialized changes differ:\n%s", diff)
	}
}

// FuzzChanges builds an upper directory from fuzz input (names, whiteouts,
// and overlay xattrs with arbitrary values, as a sandboxed command could
// write them) over a fixed lower, and checks that Changes only ever
// returns clean paths inside the upper and the lower, in order, or a
// redirect error.
func FuzzChanges(fz *testing.F) {
	for _, s := range []string{
		"da\x00fa/f\x01x",
		"wb\x00xc\x00ra/m\x01/c/d",
		"rq\x01../../etc\x00oa\x01y",
		"oa\x01x\x00xa/f\x00ra/n\x01f",
		"ln\x01/etc/passwd\x00d\xff\n\x00f\xff\n/\x80",
	} {
		fz.Add([]byte(s))
	}
	fz.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		lower, upper := filepath.Join(dir, "lower"), filepath.Join(dir, "upper")
		buildTree(t, lower, FlavourUser.XattrPrefix(), d("a"), f("a/f", "f"), f("b", "b"), d("c"), d("c/d"), f("c/d/e", "e"))
		must(t, os.Mkdir(upper, 0o755))
		for _, rec := range strings.Split(string(data), "\x00") {
			if rec == "" {
				continue
			}
			op, rest := rec[0], rec[1:]
			p, val, _ := strings.Cut(rest, "\x01")
			var comps []string
			for c := range strings.SplitSeq(p, "/") {
				if c != "" && c != "." && c != ".." && len(c) < 200 {
					comps = append(comps, c)
				}
			}
			if len(comps) == 0 || len(comps) > 8 {
				continue
			}
			full := filepath.Join(append([]string{upper}, comps...)...)
			_ = os.MkdirAll(filepath.Dir(full), 0o755)
			switch op {
			case 'f':
				_ = os.WriteFile(full, []byte(val), 0o644)
			case 'd':
				_ = os.Mkdir(full, 0o755)
			case 'w':
				_ = unix.Mknod(full, unix.S_IFCHR, 0)
			case 'x':
				_ = os.WriteFile(full, nil, 0o644)
				_ = unix.Lsetxattr(full, "user.overlay.whiteout", nil, 0)
			case 'o':
				_ = os.Mkdir(full, 0o755)
				_ = unix.Lsetxattr(full, "user.overlay.opaque", []byte(val), 0)
			case 'r':
				_ = os.Mkdir(full, 0o755)
				_ = unix.Lsetxattr(full, "user.overlay.redirect", []byte(val), 0)
			case 'l':
				_ = os.Symlink(val, full)
			}
		}
		changes, err := Changes(upper, []string{lower}, FlavourUser)
		if err != nil {
			if !errors.Is(err, ErrBadRedirect) {
				t.Fatalf("Changes: %v", err)
			}
			return
		}
		inside := func(p, root string) bool { return p == root || strings.HasPrefix(p, root+"/") }
		for i, c := range changes {
			if c.Path != "." && !validRel(c.Path) {
				t.Fatalf("path %q", c.Path)
			}
			if c.RedirectFrom != "" && !validRel(c.RedirectFrom) {
				t.Fatalf("%q: redirect %q", c.Path, c.RedirectFrom)
			}
			if !inside(c.UpperPath, upper) || c.LowerPath != "" && !inside(c.LowerPath, lower) {
				t.Fatalf("%q: upper %q, lower %q outside the layers", c.Path, c.UpperPath, c.LowerPath)
			}
			if i > 0 && ComparePaths(changes[i-1].Path, c.Path) >= 0 {
				t.Fatalf("not sorted: %q before %q", changes[i-1].Path, c.Path)
			}
		}
	})
}
