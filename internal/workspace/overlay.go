package workspace

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/stratafs/strata/internal/workspace/layout"
	"github.com/stratafs/strata/nsexec"
	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
)

// overlay is the default backend: an upper and work directory (in the
// workspace directory, or in the tmpfs directory with --tmpfs) over the
// mount base's layer stack, mounted with kernel OverlayFS by the keeper.
type overlay struct{ m *Manager }

func (o overlay) Prepare(ctx context.Context, rec *Record, tmp string) error {
	if rec.Tmpfs {
		if err := o.m.markTmpfsRoot(); err != nil {
			return fmt.Errorf("workspace %q: tmpfs: %w", rec.Name, err)
		}
		tdir := o.m.Layout.TmpfsWorkspace(rec.Name)
		_ = RemoveAll(tdir) // a leftover of a removed workspace of that name
		rec.Upper, rec.Work = filepath.Join(tdir, layout.Upper), filepath.Join(tdir, layout.Work)
		if err := mkdirs(0o700, rec.Upper, rec.Work); err != nil {
			return fmt.Errorf("workspace %q: tmpfs: %w", rec.Name, err)
		}
	} else {
		if err := mkdirs(0o700, filepath.Join(tmp, layout.Upper), filepath.Join(tmp, layout.Work)); err != nil {
			return err
		}
		rec.Upper, rec.Work = filepath.Join(rec.Dir, layout.Upper), filepath.Join(rec.Dir, layout.Work)
	}
	if rec.Root != nil {
		return prepareRoot(rec, tmp)
	}
	return nil
}

// Populate materializes the layer stack, so that the first exec only
// mounts.
func (o overlay) Populate(ctx context.Context, rec *Record) error {
	if rec.Root != nil {
		return o.m.populateRoot(ctx, rec)
	}
	_, err := o.m.LayerStack(ctx, rec.MountBaseID())
	return err
}

func (o overlay) Start(ctx context.Context, rec *Record) (*Keeper, error) {
	// gc must not evict a layer between computing the stack and mounting
	// it; once mounted, the workspace's bases keep its layers.
	unlock, err := o.m.LayerLock(false)
	if err != nil {
		return nil, err
	}
	defer unlock()
	spec, err := o.m.Spec(ctx, rec)
	if err != nil {
		return nil, err
	}
	// Written before the start: a reset that removes it (InvalidateSpec)
	// while the keeper starts must not find it written again after.
	o.m.saveSpec(rec, spec)
	return nsexec.StartKeeper(ctx, spec)
}

func (o overlay) Committed(rec *Record, base store.ID, t *Tree) {
	if t == nil || t.state == nil {
		return
	}
	// The index is keyed by the mount base as the record will say once
	// base is recorded (records that predate MountBase take Base).
	r := *rec
	r.Base = base
	saveCommittedIndex(&r, base, t.state, t.changes, t.prev)
}

func (o overlay) Reset(ctx context.Context, rec *Record, baseTree, content store.ID) (*Switch, error) {
	dir := filepath.Dir(rec.Upper)
	nu, nw := layout.FreshUpper(dir, RandomHex(6))
	sw := &Switch{Upper: nu, Work: nw, oldUpper: rec.Upper, oldWork: rec.Work}
	// A tmpfs workspace's directory is gone after a reboot.
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if content.IsZero() {
		if err := os.Mkdir(nu, 0o700); err != nil {
			return nil, err
		}
	} else {
		// The content as the upper over baseTree's stack: the writer
		// that makes layers, in the mount's flavour.
		st, err := o.m.DB()
		if err != nil {
			return nil, err
		}
		opts := snapshot.LayerOptions{Flavour: Flavour().String(), Chown: nsexec.RealRoot()}
		if rec.Root != nil && !rec.Root.OnEnv() {
			// The upper of an image root: the image's owners as its
			// keeper's namespace holds them.
			if opts, err = o.m.rootLayerOptions(rec.SubIDs); err != nil {
				return nil, err
			}
		}
		if err := snapshot.WriteDelta(ctx, st, baseTree, content, nu, opts); err != nil {
			_ = RemoveAll(nu)
			return nil, fmt.Errorf("writing the upper: %w", err)
		}
	}
	if err := os.Mkdir(nw, 0o700); err != nil {
		_ = RemoveAll(nu)
		return nil, err
	}
	if rec.Root != nil && baseTree.IsZero() && content.IsZero() {
		// A reset: the environment's writes go with the changes.
		if err := switchRoot(rec, sw); err != nil {
			sw.Discard()
			return nil, err
		}
	}
	return sw, nil
}

func (o overlay) DropChanges(rec *Record) error {
	err := RemoveAll(rec.Upper)
	if err2 := RemoveAll(rec.Work); err == nil {
		err = err2
	}
	if rec.Root.OnEnv() {
		_ = RemoveAll(rec.Root.Upper)
		_ = RemoveAll(rec.Root.Work)
	}
	return err
}

func (o overlay) Remove(rec *Record) error {
	// The registry no longer names it: what remains on disk is garbage.
	if rec.Tmpfs {
		_ = RemoveAll(filepath.Dir(rec.Upper))
	}
	return RemoveAll(rec.Dir)
}

// markTmpfsRoot creates the store's tmpfs directory, naming the store.
func (m *Manager) markTmpfsRoot() error {
	root := m.Layout.Tmpfs()
	marker := filepath.Join(root, layout.TmpfsOwner)
	if _, err := os.Stat(marker); err == nil {
		return nil
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return err
	}
	return WriteFileAtomic(marker, []byte(m.Layout.Home()), false)
}
