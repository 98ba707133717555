package strata

import (
	"context"
	"os"
	"path/filepath"

	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
)

// ExportOptions tune Export.
type ExportOptions struct {
	Warn     func(path, msg string)
	Progress func(snapshot.Progress)
}

// ExportResult reports an export.
type ExportResult struct {
	Commit store.ID          `json:"commit"`
	Dir    string            `json:"dir"`
	Stats  store.CommitStats `json:"stats"`
}

// Export writes the full tree of ref into dir, which must not exist or be
// empty. Ownership is restored when running as root.
func (r *Repo) Export(ctx context.Context, ref, dir string, opts ExportOptions) (*ExportResult, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	var c *store.Commit
	var id store.ID
	if err := r.view(ctx, func(tx *store.Tx) error {
		var err error
		if id, err = resolve(tx, ref); err != nil {
			return err
		}
		c, err = tx.Commit(id)
		return err
	}); err != nil {
		return nil, err
	}
	st, err := r.db()
	if err != nil {
		return nil, err
	}
	err = snapshot.Materialize(ctx, st, c.Tree, abs, snapshot.MaterializeOptions{
		Chown:    os.Geteuid() == 0,
		Warn:     opts.Warn,
		Progress: opts.Progress,
	})
	if err != nil {
		return nil, err
	}
	return &ExportResult{Commit: id, Dir: abs, Stats: c.Stats}, nil
}
