package strata

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
)

// Fsck verifies every object (re-hashing it), every reference, and the
// derived caches: the layer cache and the workspaces' directories. The
// report lists each problem with the branches and workspaces it affects.
// Cache problems are repairable (`strata gc` evicts bad layers, which are
// rebuilt on demand); they are reported so that nothing goes unnoticed.
func (r *Repo) Fsck(ctx context.Context, progress func(done, total int64)) (*store.FsckReport, error) {
	st, err := r.db()
	if err != nil {
		return nil, err
	}
	rep, err := st.Fsck(ctx, progress)
	if err != nil {
		return nil, err
	}
	if !rep.OK() {
		// The caches derive from objects: with objects damaged, what
		// they say adds nothing.
		return rep, nil
	}
	probs, err := snapshot.NewLayerCache(filepath.Join(r.home, layersDir)).Verify(ctx, st)
	if err != nil {
		rep.Info = append(rep.Info, "layer cache not verified: "+err.Error())
	}
	for _, p := range probs {
		if p.Kind == snapshot.LayerStaleTemp || p.Kind == snapshot.LayerOrphan {
			rep.Info = append(rep.Info, fmt.Sprintf("layer cache: %s: %s (gc removes it)", p.Path, p.Problem))
			continue
		}
		rep.Problems = append(rep.Problems, store.Problem{Kind: "layer-cache", Detail: fmt.Sprintf("%s: %s (`strata gc` evicts it; it is rebuilt when needed)", p.Path, p.Problem)})
	}
	var wss []store.Workspace
	if err := st.View(ctx, func(tx *store.Tx) error {
		var err error
		wss, err = tx.Workspaces()
		return err
	}); err != nil {
		return nil, err
	}
	for _, w := range wss {
		dir := r.wsDir(w.Name)
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			rep.Problems = append(rep.Problems, store.Problem{Kind: "workspace", Detail: fmt.Sprintf("workspace %q: its directory %s is missing (remove it with `strata ws rm --force %s`)", w.Name, dir, w.Name), Affected: []string{"workspace:" + w.Name}})
		}
	}
	return rep, nil
}
