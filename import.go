package strata

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
)

// DefaultBranch is the branch import writes to when none is named.
const DefaultBranch = "main"

// ImportOptions tune Import.
type ImportOptions struct {
	Branch         string // default DefaultBranch
	Message        string // default "import DIR"
	Exclude        []string
	SkipUnreadable bool
	// NoStatCache reads every file even when the stat cache says it is
	// unchanged.
	NoStatCache bool
	Warn        func(path, msg string)
	Progress    func(snapshot.Progress)
}

// ImportResult reports an import.
type ImportResult struct {
	Commit store.ID          `json:"commit"`
	Parent store.ID          `json:"parent,omitempty"`
	Branch string            `json:"branch"`
	Tree   store.ID          `json:"tree"`
	Source string            `json:"source"`
	Stats  store.CommitStats `json:"stats"`
	// Unchanged is true when the tree equals the branch head's tree: no
	// commit was made and Commit is the existing head.
	Unchanged  bool     `json:"unchanged"`
	FilesRead  int64    `json:"files_read"`
	CacheHits  int64    `json:"cache_hits"`
	NewObjects int64    `json:"new_objects"`
	NewBytes   int64    `json:"new_bytes"`
	Skipped    []string `json:"skipped,omitempty"`
	DurationNs int64    `json:"duration_ns"`
}

// Import snapshots everything under dir, ignored files included, as a commit
// on opts.Branch. The branch is created if missing and moved by
// compare-and-swap otherwise: if another process moves it during the import,
// Import fails with ErrConflict and the branch is left as the other process
// set it.
func (r *Repo) Import(ctx context.Context, dir string, opts ImportOptions) (*ImportResult, error) {
	start := time.Now()
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("import %s: not a directory", abs)
	}
	branch := opts.Branch
	if branch == "" {
		branch = DefaultBranch
	}
	if err := store.ValidateBranchName(branch); err != nil {
		return nil, err
	}
	msg := opts.Message
	if msg == "" {
		msg = "import " + abs
	}
	var parent store.ID
	if err := r.view(ctx, func(tx *store.Tx) error {
		id, err := tx.Ref(branch)
		if err != nil && !isNotFound(err) {
			return err
		}
		parent = id
		return nil
	}); err != nil {
		return nil, err
	}

	st, err := r.db()
	if err != nil {
		return nil, err
	}
	w, err := st.NewWriter(ctx, "import "+abs)
	if err != nil {
		return nil, err
	}
	defer w.Abort() // after Finish, a no-op
	res, err := snapshot.Import(ctx, st, w, abs, snapshot.ImportOptions{
		Exclude:        opts.Exclude,
		SkipUnreadable: opts.SkipUnreadable,
		NoStatCache:    opts.NoStatCache,
		Warn:           opts.Warn,
		Progress:       opts.Progress,
	})
	if err != nil {
		return nil, err
	}
	out := &ImportResult{
		Parent:    parent,
		Branch:    branch,
		Tree:      res.Tree,
		Source:    abs,
		Stats:     res.Stats,
		FilesRead: res.FilesRead,
		CacheHits: res.CacheHits,
		Skipped:   res.Skipped,
	}
	err = w.Finish(func(tx *store.Tx) error {
		if !parent.IsZero() {
			pc, err := tx.Commit(parent)
			if err != nil {
				return err
			}
			if pc.Tree == res.Tree {
				// Nothing changed; still insist the branch did not move.
				cur, err := tx.Ref(branch)
				if err != nil && !isNotFound(err) {
					return err
				}
				if cur != parent {
					return fmt.Errorf("branch %q moved during import: %w", branch, ErrConflict)
				}
				out.Unchanged = true
				out.Commit = parent
				return nil
			}
		}
		c := &store.Commit{
			Tree:    res.Tree,
			Message: msg,
			TimeNs:  time.Now().UnixNano(),
			Source:  abs,
			Stats:   res.Stats,
		}
		if !parent.IsZero() {
			c.Parents = []store.ID{parent}
		}
		id, err := tx.CommitOnBranch(c, branch, parent, store.Op{Kind: "import", Detail: abs})
		if moved := (*store.BranchMovedError)(nil); errors.As(err, &moved) {
			return fmt.Errorf("branch %q moved during import: %w", branch, moved.Err)
		}
		out.Commit = id
		return err
	})
	if err != nil {
		return nil, err
	}
	ws := w.Stats()
	out.NewObjects, out.NewBytes = ws.NewObjects, ws.NewBytes
	out.DurationNs = time.Since(start).Nanoseconds()
	return out, nil
}
