package strata

import (
	"context"
	"time"

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
	Store store.GCResult `json:"store"`
}

// GC removes objects that nothing references: not a branch, not a
// workspace, not an operation within the prune window, not an import or
// commit in progress in another process. It is safe while other processes
// use the store.
func (r *Repo) GC(ctx context.Context, opts GCOptions) (*GCResult, error) {
	st, err := r.db()
	if err != nil {
		return nil, err
	}
	res, err := st.GC(ctx, store.GCOptions{Prune: opts.Prune, DryRun: opts.DryRun, Progress: opts.Progress})
	if err != nil {
		return nil, err
	}
	return &GCResult{Store: *res}, nil
}
