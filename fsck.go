package strata

import (
	"context"

	"github.com/stratafs/strata/store"
)

// Fsck verifies every object (re-hashing it), every reference and every
// cache. The report lists each problem with the branches and workspaces it
// affects.
func (r *Repo) Fsck(ctx context.Context, progress func(done, total int64)) (*store.FsckReport, error) {
	st, err := r.db()
	if err != nil {
		return nil, err
	}
	return st.Fsck(ctx, progress)
}
