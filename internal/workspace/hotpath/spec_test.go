package hotpath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stratafs/strata/internal/workspace/layout"
	"github.com/stratafs/strata/nsexec"
	"github.com/stratafs/strata/overlayfs"
)

// specFixture is a workspace directory with a current spec file: its
// layers, upper and work exist, its source directory too.
func specFixture(t *testing.T) (layout.Layout, *SpecFile) {
	t.Helper()
	base := t.TempDir()
	l := layout.New(filepath.Join(base, "home"))
	dir := l.Workspace("w")
	src := filepath.Join(base, "src")
	lower := filepath.Join(l.Layers(), "user", "c1")
	for _, d := range []string{dir, src, lower, filepath.Join(dir, "upper"), filepath.Join(dir, "work"), filepath.Join(base, "objects")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	key, err := overlayfs.CurrentKey()
	if err != nil {
		t.Fatal(err)
	}
	key.UserNS = !nsexec.RealRoot()
	f := &SpecFile{UID: os.Geteuid(), MountDir: src, Spec: nsexec.Spec{
		Name: "w", Dir: dir, Lowers: []string{lower}, Upper: filepath.Join(dir, "upper"), Work: filepath.Join(dir, "work"),
		Target: src, Features: overlayfs.Features{Key: key, Overlay: true},
		Binds: []nsexec.Bind{{Source: filepath.Join(base, "objects"), Target: "/alt"}},
		View:  []nsexec.Bind{{Source: "/opt", Target: "/opt"}},
	}}
	write(t, dir, f)
	return l, f
}

func write(t *testing.T, dir string, f *SpecFile) {
	t.Helper()
	b, err := EncodeSpec(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(layout.KeeperSpecFile(dir), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestSpecFile: a spec file reads back as written; its header says the
// version; a file of another version, with a field this strata does not
// know, or none at all is ErrNoSpec (the front hands over).
func TestSpecFile(t *testing.T) {
	l, f := specFixture(t)
	dir := l.Workspace("w")
	got, err := ReadSpec(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !got.SameMount(f) || got.Spec.View[0] != f.Spec.View[0] || got.Version != SpecVersion {
		t.Errorf("read back %+v\nwrote %+v", got, f)
	}
	if err := Servable(dir); err != nil {
		t.Errorf("servable: %v", err)
	}
	b, _ := os.ReadFile(layout.KeeperSpecFile(dir))
	if !strings.HasPrefix(string(b), fmt.Sprintf("strata keeper spec %d\n{", SpecVersion)) {
		t.Errorf("file starts %q", b[:30])
	}
	for name, content := range map[string]string{
		"another version": strings.Replace(string(b), "strata keeper spec 1\n", "strata keeper spec 2\n", 1),
		"no header":       strings.TrimPrefix(string(b), "strata keeper spec 1\n"),
		"unknown field":   strings.Replace(string(b), `"spec":{`, `"spec":{"nons":true,`, 1),
		"unknown top":     strings.Replace(string(b), `{"version":1,`, `{"version":1,"image":"x",`, 1),
		"version field":   strings.Replace(string(b), `{"version":1,`, `{"version":2,`, 1),
		"torn":            string(b[:len(b)/2]),
	} {
		os.WriteFile(layout.KeeperSpecFile(dir), []byte(content), 0o600)
		if _, err := ReadSpec(dir); !errors.Is(err, ErrNoSpec) {
			t.Errorf("%s: %v; want ErrNoSpec", name, err)
		}
	}
	os.Remove(layout.KeeperSpecFile(dir))
	if _, err := ReadSpec(dir); !errors.Is(err, ErrNoSpec) {
		t.Errorf("no file: %v", err)
	}
	if err := Servable(dir); !errors.Is(err, ErrNoSpec) {
		t.Errorf("no file servable: %v", err)
	}
}

// TestSpecCheck: Check finds what the file cannot say itself — each case
// a way the store or the host moved on since it was written (docs/hotpath.md).
func TestSpecCheck(t *testing.T) {
	for _, tc := range []struct {
		name  string
		apply func(l layout.Layout, f *SpecFile, s *Settings)
		want  string // "" for current
	}{
		{"current", func(layout.Layout, *SpecFile, *Settings) {}, ""},
		{"max_layers changed", func(_ layout.Layout, _ *SpecFile, s *Settings) { s.MaxLayers = 100 }, "max_layers"},
		{"a layer evicted", func(_ layout.Layout, f *SpecFile, _ *Settings) { os.RemoveAll(f.Spec.Lowers[0]) }, "no such file"},
		{"the upper lost (tmpfs, reboot)", func(_ layout.Layout, f *SpecFile, _ *Settings) { os.RemoveAll(f.Spec.Upper) }, "no such file"},
		{"the work lost", func(_ layout.Layout, f *SpecFile, _ *Settings) { os.RemoveAll(f.Spec.Work) }, "no such file"},
		{"a bind's source gone", func(_ layout.Layout, f *SpecFile, _ *Settings) { os.RemoveAll(f.Spec.Binds[0].Source) }, "no such file"},
		{"the source directory gone", func(_ layout.Layout, f *SpecFile, _ *Settings) { os.RemoveAll(f.MountDir) }, "mounted at"},
		{"the source directory appeared", func(l layout.Layout, f *SpecFile, _ *Settings) { f.Spec.Target = layout.MergedDir(l.Workspace("w")) }, "mounted at"},
		{"another kernel", func(_ layout.Layout, f *SpecFile, _ *Settings) { f.Spec.Features.Kernel = "2.6.32" }, "overlay features"},
		{"another user", func(_ layout.Layout, f *SpecFile, _ *Settings) { f.UID++ }, "written by uid"},
		{"the store moved", func(_ layout.Layout, f *SpecFile, _ *Settings) { f.Spec.Dir = "/elsewhere/workspaces/w" }, "not "},
		{"another workspace's", func(_ layout.Layout, f *SpecFile, _ *Settings) { f.Spec.Name = "v" }, "not "},
		{"an image root", func(_ layout.Layout, f *SpecFile, _ *Settings) { f.Spec.Root = &nsexec.Root{} }, "image root"},
		{"no layers", func(_ layout.Layout, f *SpecFile, _ *Settings) { f.Spec.Lowers = nil }, "no layer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, f := specFixture(t)
			var s Settings
			tc.apply(l, f, &s)
			err := f.Check(l, "w", s)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Check: %v", err)
			case tc.want != "" && (!errors.Is(err, ErrStale) || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Check: %v; want ErrStale saying %q", err, tc.want)
			}
		})
	}
	// A subordinate-id workspace needs their namespace to start, which
	// only strata-core enters.
	l, f := specFixture(t)
	f.Spec.SubIDs = true
	if err := f.Check(l, "w", Settings{}); nsexec.NeedSubIDNS() != errors.Is(err, ErrStale) {
		t.Errorf("subids: %v (need their namespace: %t)", err, nsexec.NeedSubIDNS())
	}
}

// TestSameMount: the view is recomputed at every start; anything else
// that differs is another mount.
func TestSameMount(t *testing.T) {
	_, f := specFixture(t)
	g := *f
	g.Spec.View = nil
	if !f.SameMount(&g) {
		t.Error("another view is another mount")
	}
	g.Spec.Upper = "/other/upper"
	if f.SameMount(&g) {
		t.Error("another upper is the same mount")
	}
	if f.SameMount(nil) {
		t.Error("no file is the same mount")
	}
}
