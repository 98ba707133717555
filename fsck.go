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
		for _, p := range rep.Problems {
			if p.Kind == store.ProblemCorrupt || p.Kind == store.ProblemMissing {
				rep.Info = append(rep.Info, "a damaged object whose content is still in a directory (an import's source, an export) is rewritten by `strata fsck --repair DIR`")
				break
			}
		}
		// The caches derive from objects: with objects damaged, what
		// they say adds nothing.
		return rep, nil
	}
	probs, err := r.ws.LayerCache().Verify(ctx, st)
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
		dir := r.layout.Workspace(w.Name)
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			rep.Problems = append(rep.Problems, store.Problem{Kind: "workspace", Detail: fmt.Sprintf("workspace %q: its directory %s is missing (remove it with `strata ws rm --force %s`)", w.Name, dir, w.Name), Affected: []string{"workspace:" + w.Name}})
		}
	}
	return rep, nil
}

// RepairResult reports Repair.
type RepairResult struct {
	// Damaged is how many damaged objects fsck found before the repair.
	Damaged int `json:"damaged"`
	// Repaired lists the objects rewritten from the directory.
	Repaired []store.ID `json:"repaired"`
	// After is fsck's report once the repair is done.
	After *store.FsckReport `json:"after"`
}

// Repair rewrites damaged objects (corrupt or missing) whose content is in
// the directory src: it reads every file under src as an import would
// (no stat cache) and, for each object that hashes to a damaged id,
// replaces the damaged row with the verified payload. Nothing else
// changes: no commit is made, no branch moves. The result says what was
// repaired and what fsck still finds.
func (r *Repo) Repair(ctx context.Context, src string, warn func(path, msg string)) (*RepairResult, error) {
	abs, err := filepath.Abs(src)
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("fsck --repair %s: not a directory", src)
	}
	st, err := r.db()
	if err != nil {
		return nil, err
	}
	rep, err := st.Fsck(ctx, nil)
	if err != nil {
		return nil, err
	}
	var ids []store.ID
	for _, p := range rep.Problems {
		if !p.Object.IsZero() && (p.Kind == store.ProblemCorrupt || p.Kind == store.ProblemMissing) {
			ids = append(ids, p.Object)
		}
	}
	res := &RepairResult{Damaged: len(ids)}
	if len(ids) > 0 {
		w, err := st.NewWriter(ctx, "repair from "+abs)
		if err != nil {
			return nil, err
		}
		defer w.Abort()
		w.Repair(ids)
		if _, err := snapshot.Import(ctx, st, w, abs, snapshot.ImportOptions{NoStatCache: true, SkipUnreadable: true, Warn: warn}); err != nil {
			return nil, fmt.Errorf("fsck --repair: read %s: %w", abs, err)
		}
		if err := w.Flush(); err != nil {
			return nil, fmt.Errorf("fsck --repair: %w", err)
		}
		res.Repaired = w.Repaired()
		// What the import wrote besides is garbage once the lease ends.
		if err := w.Abort(); err != nil {
			return nil, err
		}
	}
	if res.After, err = r.Fsck(ctx, nil); err != nil {
		return nil, err
	}
	return res, nil
}
