package workspace

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/stratafs/strata/internal/workspace/layout"
	"github.com/stratafs/strata/overlayfs"
)

// TestBuildSpec: a keeper's spec comes from the workspace's record alone
// (and the stack and features it is given): its directories, where it is
// mounted, the binds its source needs, tmpfs and subordinate ids.
func TestBuildSpec(t *testing.T) {
	src := t.TempDir()
	l := layout.New("/s")
	objects := Bind{Source: "/repo/.git/objects", Target: "/alt/objects"}
	m := &Manager{Layout: l, Source: func(source string) (string, []Bind) {
		if source == "git:rev:"+src {
			return src, []Bind{objects}
		}
		return source, nil
	}}
	view := []Bind{{Source: "/home/u/.pyenv", Target: "/home/u/.pyenv"}}
	feat := overlayfs.Features{Overlay: true, UserXattr: true}
	rec := &Record{Name: "a", Dir: l.Workspace("a"), Upper: "/shm/a/upper", Work: "/shm/a/work", Tmpfs: true, SubIDs: true, Source: "git:rev:" + src}
	spec := m.buildSpec(recordMount(rec, []string{"/s/layers/user/c1"}, view), feat)
	if spec.Name != "a" || spec.Dir != "/s/workspaces/a" || spec.Upper != rec.Upper || spec.Work != rec.Work ||
		!spec.Volatile || !spec.SubIDs || spec.Target != src || !slices.Equal(spec.Lowers, []string{"/s/layers/user/c1"}) ||
		!slices.Equal(spec.Binds, []Bind{objects}) || !slices.Equal(spec.View, view) || spec.Features.UserXattr != true {
		t.Errorf("spec %+v", spec)
	}
	// A source that is not an existing absolute directory: the
	// workspace appears at DIR/merged; on disk, no volatile mount.
	for _, source := range []string{"", "relative/dir", filepath.Join(src, "missing")} {
		rec := &Record{Name: "b", Dir: l.Workspace("b"), Upper: "/s/workspaces/b/upper", Work: "/s/workspaces/b/work", Source: source}
		spec := m.buildSpec(recordMount(rec, nil, nil), feat)
		if spec.Target != "/s/workspaces/b/merged" || spec.Volatile || spec.SubIDs || spec.Binds != nil {
			t.Errorf("source %q: spec %+v", source, spec)
		}
	}
	// Without a Source hook the source itself is the mount point.
	m.Source = nil
	rec = &Record{Name: "c", Dir: l.Workspace("c"), Source: src}
	if spec := m.buildSpec(recordMount(rec, nil, nil), feat); spec.Target != src {
		t.Errorf("target %q; want %q", spec.Target, src)
	}
}
