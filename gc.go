package strata

import (
	"context"
	"fmt"
	"time"

	"github.com/stratafs/strata/image"
	"github.com/stratafs/strata/internal/workspace"
	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
)

// DefaultPrune is how long gc keeps commits that only the operation log
// still names (a deleted branch's head, a commit replaced by a reset).
const DefaultPrune = 24 * time.Hour

// GCOptions tune GC.
type GCOptions struct {
	Prune    time.Duration // commits named by the log within this window are kept
	DryRun   bool
	Progress func(phase string, done, total int64)
}

// GCResult reports a collection.
type GCResult struct {
	Store        store.GCResult `json:"store"`
	LayersFreed  int            `json:"layers_removed"`
	LayerBytes   int64          `json:"layer_bytes"`
	StaleRemoved []string       `json:"stale_removed,omitempty"`
	// ClonesRemoved lists the clone cache's entries evicted (Btrfs).
	ClonesRemoved []string `json:"clones_removed,omitempty"`
}

// GC removes what nothing references: objects not reachable from a branch,
// a workspace, an operation within the prune window or an import or commit
// in progress in another process; layers that no branch head and no
// workspace needs; leftovers of interrupted strata processes. It is safe
// while other processes use the store.
func (r *Repo) GC(ctx context.Context, opts GCOptions) (*GCResult, error) {
	st, err := r.db()
	if err != nil {
		return nil, err
	}
	if st.Full() && !opts.DryRun {
		// A full filesystem: the database cannot be written until
		// something else frees space, so the files go first — layers
		// nothing needs, leftovers of interrupted processes — and the
		// objects after, if that made room.
		out := &GCResult{}
		if err := r.gcFiles(ctx, st, out); err != nil {
			return nil, err
		}
		if st, err = r.reopen(); err != nil {
			return out, err
		}
		if st.Full() && store.ReclaimWAL(r.home) {
			// The write-ahead log held the space (a write that failed
			// for lack of it): truncated, it may be enough.
			if st, err = r.reopen(); err != nil {
				return out, err
			}
		}
		if st.Full() {
			return out, r.noSpace(fmt.Sprintf("gc removed %d layer(s) (%d bytes) and %d leftover(s), but the database cannot be collected", out.LayersFreed, out.LayerBytes, len(out.StaleRemoved)))
		}
		res, err := st.GC(ctx, store.GCOptions{Prune: opts.Prune, Progress: opts.Progress})
		if err != nil {
			return out, err
		}
		out.Store = *res
		return out, nil
	}
	res, err := st.GC(ctx, store.GCOptions{Prune: opts.Prune, DryRun: opts.DryRun, Progress: opts.Progress})
	if err != nil {
		return nil, err
	}
	out := &GCResult{Store: *res}
	if opts.DryRun {
		return out, nil
	}
	if err := r.gcFiles(ctx, st, out); err != nil {
		return nil, err
	}
	return out, nil
}

// gcFiles evicts the layers nothing needs and removes leftovers of
// interrupted strata processes; it only reads the database.
func (r *Repo) gcFiles(ctx context.Context, st *store.Store, out *GCResult) error {
	keep, wss, err := r.cacheRoots(ctx)
	if err != nil {
		return err
	}
	depth, err := r.MaxLayers()
	if err != nil {
		return err
	}
	// Layers: exclusive against workspaces being started, which hold the
	// lock shared between computing their stack and mounting it.
	unlock, err := r.ws.LayerLock(true)
	if err != nil {
		return err
	}
	ev, err := r.ws.LayerCache().Evict(ctx, st, snapshot.EvictOptions{Keep: keep, OlderThan: time.Minute, MaxDepth: depth, RemoveAll: workspace.RemoveAll})
	unlock()
	if err != nil {
		return fmt.Errorf("gc: layers: %w", err)
	}
	out.LayersFreed, out.LayerBytes = len(ev.Removed), ev.Bytes
	if err := r.gcClones(keep, wss, out); err != nil {
		return err
	}
	out.StaleRemoved = r.ws.RemoveStale(wss)
	out.StaleRemoved = append(out.StaleRemoved, image.RemoveStalePushDirs(st.Dir(), workspace.StaleAfter)...) // killed pushes' blobs
	r.ws.CleanRuns(true)
	return nil
}

// cacheRoots are the commits whose layers gc keeps: branch heads (so that a
// new workspace of main mounts at once) and every workspace's bases.
func (r *Repo) cacheRoots(ctx context.Context) ([]store.ID, []workspace.Record, error) {
	var keep []store.ID
	var wss []workspace.Record
	err := r.view(ctx, func(tx *store.Tx) error {
		refs, err := tx.Refs("")
		if err != nil {
			return err
		}
		for _, ref := range refs {
			keep = append(keep, ref.Commit)
		}
		if wss, err = workspace.List(tx, r.layout); err != nil {
			return err
		}
		for i := range wss {
			if wss[i].NeedsLayers() { // not a reflink or copy workspace's cloned tree
				keep = append(keep, wss[i].Base, wss[i].MountBaseID())
			}
		}
		return nil
	})
	// Runs in progress have no registry row; their run.json names the base.
	keep = append(keep, r.ws.LiveRunBases()...)
	return keep, wss, err
}
