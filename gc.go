package strata

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/image"
	"github.com/stratafs/strata/nsexec"
	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
)

// DefaultPrune is how long gc keeps commits that only the operation log
// still names (a deleted branch's head, a commit replaced by a reset).
const DefaultPrune = 24 * time.Hour

// staleAfter is how old a leftover of an interrupted strata (a workspace
// being created, a tmpfs upper without a workspace) must be before gc
// removes it: an operation in flight in another process is younger.
const staleAfter = 10 * time.Minute

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
	unlock, err := r.layerLock(true)
	if err != nil {
		return err
	}
	ev, err := snapshot.NewLayerCache(filepath.Join(r.home, layersDir)).Evict(ctx, st, snapshot.EvictOptions{Keep: keep, OlderThan: time.Minute, MaxDepth: depth})
	unlock()
	if err != nil {
		return fmt.Errorf("gc: layers: %w", err)
	}
	out.LayersFreed, out.LayerBytes = len(ev.Removed), ev.Bytes
	out.StaleRemoved = r.removeStale(wss)
	out.StaleRemoved = append(out.StaleRemoved, image.RemoveStalePushDirs(st.Dir(), staleAfter)...) // killed pushes' blobs
	r.cleanRuns(true)
	return nil
}

// cacheRoots are the commits whose layers gc keeps: branch heads (so that a
// new workspace of main mounts at once) and every workspace's bases.
func (r *Repo) cacheRoots(ctx context.Context) ([]store.ID, []store.Workspace, error) {
	var keep []store.ID
	var wss []store.Workspace
	err := r.view(ctx, func(tx *store.Tx) error {
		refs, err := tx.Refs("")
		if err != nil {
			return err
		}
		for _, ref := range refs {
			keep = append(keep, ref.Commit)
		}
		if wss, err = tx.Workspaces(); err != nil {
			return err
		}
		for i := range wss {
			var x wsExtra
			_ = json.Unmarshal(wss[i].Extra, &x)
			keep = append(keep, wss[i].Base, x.mountBase(&wss[i]))
		}
		return nil
	})
	// Runs in progress have no registry row; their run.json names the base.
	keep = append(keep, r.liveRunBases()...)
	return keep, wss, err
}

// removeStale removes what interrupted strata processes left: workspace
// directories being created (.tmp-*) or no longer registered, and tmpfs
// uppers without a workspace. Only entries older than staleAfter go.
func (r *Repo) removeStale(wss []store.Workspace) []string {
	known := map[string]bool{}
	for _, w := range wss {
		known[w.Name] = true
	}
	var removed []string
	old := func(p string) bool {
		var st unix.Stat_t
		return unix.Lstat(p, &st) == nil && time.Since(time.Unix(st.Ctim.Unix())) > staleAfter
	}
	// Uppers a reset replaced (or made, then was killed before its
	// transaction) that the registry no longer names.
	for i := range wss {
		var x wsExtra
		_ = json.Unmarshal(wss[i].Extra, &x)
		r.relocate(&wss[i], &x)
		dir := filepath.Dir(x.Upper)
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			p := filepath.Join(dir, e.Name())
			n := e.Name()
			if n != "upper" && n != "work" && !strings.HasPrefix(n, "upper.") && !strings.HasPrefix(n, "work.") {
				continue
			}
			if p == x.Upper || p == x.Work || !old(p) {
				continue
			}
			if removeAll(p) == nil {
				removed = append(removed, p)
			}
		}
	}
	for _, root := range []string{filepath.Join(r.home, workspacesDir), r.tmpfsRoot()} {
		ents, err := os.ReadDir(root)
		if err != nil {
			continue
		}
		for _, e := range ents {
			name := e.Name()
			p := filepath.Join(root, name)
			if known[name] || name == runsDir || !old(p) {
				continue
			}
			if !strings.HasPrefix(name, ".tmp-") {
				// An unregistered workspace directory: its keeper, if
				// any, goes first.
				_ = nsexec.StopKeeper(context.Background(), p)
			}
			if removeAll(p) == nil {
				removed = append(removed, p)
			}
		}
	}
	return removed
}

// layerLock takes the store's layer lock: shared while a workspace's stack
// is computed and mounted, exclusive while gc evicts layers. The returned
// function releases it.
func (r *Repo) layerLock(exclusive bool) (func(), error) {
	f, err := os.OpenFile(filepath.Join(r.home, "layers.lock"), os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	for {
		err = unix.Flock(int(f.Fd()), how)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("layer lock: %w", err)
	}
	return func() { f.Close() }, nil
}
