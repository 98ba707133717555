package workspace

import (
	"context"
	"os"

	"github.com/stratafs/strata/internal/workspace/hotpath"
	"github.com/stratafs/strata/nsexec"
	"github.com/stratafs/strata/overlayfs"
)

// mount is what a keeper or a one-shot run mounts: the one input of the
// nsexec spec, for both.
type mount struct {
	Name     string   // the process title's name
	Dir      string   // the state directory (keeper files)
	Lowers   []string // the layer stack, topmost first
	Upper    string
	Work     string
	Source   string // the base's Source: where the workspace appears
	Volatile bool   // a tmpfs upper: mount with volatile
	SubIDs   bool
	View     []Bind // the keeper's view binds (none for a one-shot run)
}

// buildSpec is the one builder of nsexec.Spec: for keepers (Spec) and for
// one-shot runs (Run.Command). feat are the overlay features this process
// mounts with (Manager.Features).
func (m *Manager) buildSpec(mt mount, feat overlayfs.Features) nsexec.Spec {
	dir, binds := m.source(mt.Source)
	return nsexec.Spec{
		View:     mt.View,
		Name:     mt.Name,
		Dir:      mt.Dir,
		Lowers:   mt.Lowers,
		Upper:    mt.Upper,
		Work:     mt.Work,
		Target:   mountTarget(mt.Dir, dir),
		Features: feat,
		Volatile: mt.Volatile,
		Binds:    binds,
		SubIDs:   mt.SubIDs,
	}
}

// mountTarget is where a workspace appears inside its namespace
// (hotpath.MountTarget, which the front checks a spec file's target
// with).
func mountTarget(dir, source string) string { return hotpath.MountTarget(dir, source) }

// Spec builds what a keeper needs to serve workspace rec (overlay): its
// layer stack, upper and work, and the view of the store's defaults and
// this process's PATH. The caller holds the layer lock shared (LayerLock)
// until the keeper has mounted the stack.
func (m *Manager) Spec(ctx context.Context, rec *Record) (nsexec.Spec, error) {
	if rec.Root != nil {
		return m.rootSpec(ctx, rec)
	}
	lowers, err := m.LayerStack(ctx, rec.MountBaseID())
	if err != nil {
		return nsexec.Spec{}, err
	}
	feat, err := m.Features(ctx)
	if err != nil {
		return nsexec.Spec{}, err
	}
	for _, d := range []string{rec.Upper, rec.Work} {
		// A tmpfs workspace loses its upper at reboot; start empty again.
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nsexec.Spec{}, err
		}
	}
	if DirEmpty(rec.Upper) && len(lowers) > 0 {
		// The merged root shows the upper root's attributes: give it the
		// top layer's, or the workspace root would differ from the commit
		// (mode 0700, a new mtime) and read as a change.
		if err := CopyDirAttrs(lowers[0], rec.Upper); err != nil {
			return nsexec.Spec{}, err
		}
	}
	// The keeper's view holds the store's defaults and the toolchains of
	// this process's PATH, which a sandboxed exec usually asks for too
	// (a command that asks for more gets a view of its own).
	vp, err := m.viewBinds(os.Environ(), nil)
	if err != nil {
		return nsexec.Spec{}, err
	}
	return m.buildSpec(recordMount(rec, lowers, vp.Binds), feat), nil
}

// recordMount is what workspace rec mounts over lowers.
func recordMount(rec *Record, lowers []string, view []Bind) mount {
	return mount{
		Name: rec.Name, Dir: rec.Dir, Lowers: lowers, Upper: rec.Upper, Work: rec.Work,
		Source: rec.Source, Volatile: rec.Tmpfs, SubIDs: rec.SubIDs, View: view,
	}
}
