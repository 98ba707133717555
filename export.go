package strata

import (
	"context"
	"os"
	"path/filepath"

	"github.com/stratafs/strata/internal/workspace"
	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
)

// ExportOptions tune Export.
type ExportOptions struct {
	Warn     func(path, msg string)
	Progress func(snapshot.Progress)
	// KeepSpecial writes, for a workspace's branch too, the setuid/setgid
	// bits and device nodes its change has (see Export).
	KeepSpecial bool
}

// ExportResult reports an export.
type ExportResult struct {
	Commit store.ID          `json:"commit"`
	Dir    string            `json:"dir"`
	Stats  store.CommitStats `json:"stats"`
	// Stripped lists what a workspace's change had that was not written:
	// setuid/setgid bits, device nodes.
	Stripped []snapshot.Stripped `json:"stripped,omitempty"`
}

// Export writes the full tree of ref into dir, which must not exist or be
// empty. Ownership is restored when running as root. ref may name a
// workspace (its branch). When it is a workspace's branch (the branch a
// workspace is on, or one made for a workspace), what the workspace's
// change added of setuid/setgid bits and device nodes is not written
// (snapshot.StripSpecial against the commit it was forked from) unless
// opts.KeepSpecial; the rest of the tree is written exactly.
func (r *Repo) Export(ctx context.Context, ref, dir string, opts ExportOptions) (*ExportResult, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	ref, fork, err := r.workspaceRef(ctx, ref)
	if err != nil {
		return nil, err
	}
	var c *store.Commit
	var id store.ID
	var forkTree store.ID
	if err := r.view(ctx, func(tx *store.Tx) error {
		var err error
		if id, err = resolve(tx, ref); err != nil {
			return err
		}
		if c, err = tx.Commit(id); err != nil {
			return err
		}
		if !fork.IsZero() {
			fc, err := tx.Commit(fork)
			if err != nil {
				return err
			}
			forkTree = fc.Tree
		}
		return nil
	}); err != nil {
		return nil, err
	}
	st, err := r.db()
	if err != nil {
		return nil, err
	}
	tree := c.Tree
	var stripped []snapshot.Stripped
	if !fork.IsZero() && !opts.KeepSpecial {
		wr, err := st.NewScratchWriter(ctx, "export") // export only reads the store
		if err != nil {
			return nil, err
		}
		defer wr.Abort()
		if tree, stripped, err = snapshot.StripSpecial(ctx, st, wr, forkTree, tree); err != nil {
			return nil, err
		}
		if err := wr.Flush(); err != nil {
			return nil, err
		}
	}
	err = snapshot.Materialize(ctx, st, tree, abs, snapshot.MaterializeOptions{
		Chown:    os.Geteuid() == 0,
		Warn:     opts.Warn,
		Progress: opts.Progress,
	})
	if err != nil {
		return nil, err
	}
	return &ExportResult{Commit: id, Dir: abs, Stats: c.Stats, Stripped: stripped}, nil
}

// workspaceRef returns the ref that ref names (a workspace's name, with
// any ~N or ^, names its branch: parseTarget), and the commit the
// workspace's change starts at when ref is a workspace's branch — a
// registered workspace's (its fork), or one a workspace was created on
// (the operation log's ws-create) — else ZeroID.
func (r *Repo) workspaceRef(ctx context.Context, ref string) (string, store.ID, error) {
	t, err := r.parseTarget(ctx, "export", ref, false)
	if err != nil {
		return ref, store.ZeroID, err
	}
	if t.WS != nil {
		return t.Ref, t.WS.ForkID(), nil
	}
	base, _, err := splitAncestry(ref)
	if err != nil {
		return ref, store.ZeroID, err
	}
	var fork store.ID
	err = r.view(ctx, func(tx *store.Tx) error {
		wss, err := workspace.List(tx, r.layout)
		if err != nil {
			return err
		}
		for _, w := range wss {
			if w.Branch == base {
				fork = w.ForkID()
				return nil
			}
		}
		ops, err := tx.Ops(base, 0)
		if err != nil {
			return nil
		}
		for _, op := range ops { // newest first: the last creation wins
			if op.Kind == "ws-create" && op.Ref == base {
				fork = op.New
				return nil
			}
		}
		return nil
	})
	return ref, fork, err
}
