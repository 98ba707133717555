package strata

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/stratafs/strata/internal/workspace"
	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
)

// Backends: how a workspace's (or a run's) writable tree is made. Every
// verb works on every backend (README, "Backends"; docs/workspaces.md).
const (
	// BackendOverlay: an upper directory over the base's layer stack,
	// mounted with kernel OverlayFS in a user namespace. Creating one is
	// O(1); it needs user namespaces (or root).
	BackendOverlay = workspace.BackendOverlay
	// BackendReflink: the base's whole tree cloned from the layer cache
	// (FICLONE on XFS with reflink=1 or Btrfs; a Btrfs snapshot once the
	// base is in the clone cache). Native reads, directory renames work,
	// and it runs without user namespaces where they are denied.
	BackendReflink = workspace.BackendReflink
	// BackendCopy: the base's tree copied, on any filesystem; every
	// workspace costs the tree's size.
	BackendCopy = workspace.BackendCopy
	// BackendAuto: overlay where user namespaces work, else reflink
	// where the store's filesystem clones files, else copy (with a
	// warning naming its cost).
	BackendAuto = workspace.BackendAuto
)

// chooseBackend resolves the backend a workspace or run asks for: ""
// takes the store's default (auto when it has none); auto is decided by
// the lifecycle (workspace.Manager.ChooseBackend). base is the base
// commit's size, for auto's warning when it falls back to copying.
func (r *Repo) chooseBackend(ctx context.Context, asked string, base store.CommitStats, warn func(string)) (string, error) {
	if err := workspace.CheckBackend(asked); err != nil {
		return "", err
	}
	if asked == "" {
		s, err := r.Settings()
		if err != nil {
			return "", err
		}
		asked = s.Backend
	}
	if asked == "" {
		asked = BackendAuto
	}
	c, err := r.ws.ChooseBackend(ctx, asked, base.Files, base.Bytes)
	if err != nil {
		return "", err
	}
	if c.Warning != "" && warn != nil {
		warn(c.Warning)
	}
	return c.Backend, nil
}

// BackendChoice says which backend auto would choose here, and why
// (`strata doctor`).
func (r *Repo) BackendChoice(ctx context.Context) (workspace.Choice, error) {
	return r.ws.ChooseBackend(ctx, BackendAuto, 0, 0)
}

// DefaultBackend is the store's default backend ("" when unset: auto).
func (r *Repo) DefaultBackend() (string, error) {
	s, err := r.Settings()
	return s.Backend, err
}

// SetDefaultBackend changes the store's default backend (`strata init
// --backend`): overlay, reflink, copy or auto. Workspaces made before
// keep theirs.
func (r *Repo) SetDefaultBackend(b string) error {
	if b == "" {
		return invalidf("--backend: want overlay, reflink, copy or auto")
	}
	if err := workspace.CheckBackend(b); err != nil {
		return err
	}
	s, err := r.Settings()
	if err != nil {
		return err
	}
	if b == BackendAuto {
		b = "" // the default
	}
	if s.Backend == b {
		return nil
	}
	s.Backend = b
	buf, _ := json.MarshalIndent(s, "", "  ")
	if err := workspace.WriteFileAtomic(r.layout.Settings(), append(buf, '\n'), true); err != nil {
		return fmt.Errorf("backend: %w", err)
	}
	r.settings = s
	return nil
}

// ready makes workspace name ready for a command (its keeper runs, or
// its tree is there for a command without namespaces: noNS).
func (r *Repo) ready(ctx context.Context, name string) (noNS bool, err error) {
	if err := ValidateWorkspaceName(name); err != nil {
		return false, err
	}
	return r.ws.Ready(ctx, name)
}

// gcClones evicts the clone cache's entries (Btrfs subvolumes of bases'
// trees) that neither a branch head nor a workspace's base keeps, once
// unused for a minute, under the exclusive layer lock (a workspace being
// made from an entry holds it shared). A reflink workspace made from an
// entry does not need it: a snapshot shares blocks, not the entry.
func (r *Repo) gcClones(keep []store.ID, wss []workspace.Record, out *GCResult) error {
	for i := range wss {
		keep = append(keep, wss[i].Base)
	}
	unlock, err := r.ws.LayerLock(true)
	if err != nil {
		return err
	}
	defer unlock()
	ev, err := r.ws.CloneCache().Evict(snapshot.CloneEvictOptions{Keep: keep, OlderThan: time.Minute, MaxKept: maxClones})
	if err != nil {
		return fmt.Errorf("gc: clone cache: %w", err)
	}
	out.ClonesRemoved = ev.Removed
	return nil
}

// maxClones bounds the clone cache's kept entries: each holds a tree's
// inodes (its blocks are shared), about 0.1 s of gc to remove rootless.
const maxClones = 16

// warnf passes msg to a run's path warning (a message about no path).
func warnf(warn func(path, msg string), msg string) {
	if warn != nil {
		warn("", msg)
	}
}

// rootBackend is the backend of an image-rooted workspace or run: the
// image's layers and the project's are one overlay stack, which has no
// reflink or copy form, so only overlay (or auto, or the store's
// default) is accepted.
func rootBackend(asked string) (string, error) {
	if err := workspace.CheckBackend(asked); err != nil {
		return "", err
	}
	switch asked {
	case "", BackendAuto, BackendOverlay:
		return BackendOverlay, nil
	}
	return "", invalidf("--backend %s: an image-rooted workspace or run is an overlay stack (the image's layers under the project's); use --backend overlay, or leave --backend out", asked)
}
