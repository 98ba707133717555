package strata

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stratafs/strata/internal/workspace"
	"github.com/stratafs/strata/store"
)

// CommitResult reports a commit.
type CommitResult struct {
	Commit    store.ID          `json:"commit"`
	Parent    store.ID          `json:"parent"`
	Branch    string            `json:"branch"`
	Workspace string            `json:"workspace"`
	Stats     store.CommitStats `json:"stats"`
	// Clean is true when the workspace had nothing to commit: no commit
	// was made and Commit is the workspace's base.
	Clean   bool `json:"clean"`
	Changed int  `json:"changed"`
	// Incremental: only what changed since the last commit was read and
	// applied (the committed-state index held); otherwise the whole upper.
	Incremental bool  `json:"incremental"`
	FilesRead   int64 `json:"files_read"`
	NewObjects  int64 `json:"new_objects"`
	NewBytes    int64 `json:"new_bytes"`
	DurationNs  int64 `json:"duration_ns"`
}

// workspaceTree reads workspace name's tree through writer wr: the merged
// view as it is now (workspace.Manager.Read; its processes are stopped
// while it is read).
//
// With deferStatCache the stat cache's update is left to the caller's
// Finish (result.SaveStatCache).
func (r *Repo) workspaceTree(ctx context.Context, name string, wr *store.Writer, warn func(path, msg string), deferStatCache bool) (*workspace.Record, *workspace.Tree, error) {
	rec, err := r.loadWorkspace(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	t, err := r.ws.Read(ctx, rec, wr, workspace.ReadOptions{Warn: warn, DeferStatCache: deferStatCache})
	if err != nil {
		return nil, nil, err
	}
	return rec, t, nil
}

// errReusedGone: an optimistic commit reused an object gc has taken.
var errReusedGone = errors.New("reused object gone")

// CommitOptions tune Commit.
type CommitOptions struct {
	Message string
	// Warn receives what the commit skips (sockets, overlay xattrs).
	Warn func(path, msg string)
}

// Commit stores a workspace's changes as a commit on its branch, moved by
// compare-and-swap: if the branch moved since the workspace's base (another
// workspace or a promote), Commit fails with ErrConflict and the changes
// stay in the workspace. Only changed data becomes new objects. The
// workspace continues, clean, on the new commit.
//
// What the workspace's base commit holds is reachable from a gc root (the
// live workspace) while Commit runs, so Commit reuses it without claiming
// it first (store.Writer.Optimistic): a one-file commit is then one
// durable transaction. Should gc have taken something it reused (content
// the stat cache remembered from a commit that never landed), the final
// transaction notices and Commit starts over claiming everything.
func (r *Repo) Commit(ctx context.Context, name string, opts CommitOptions) (*CommitResult, error) {
	start := time.Now()
	res, err := r.commit(ctx, name, opts, true)
	if errors.Is(err, errReusedGone) {
		res, err = r.commit(ctx, name, opts, false)
	}
	if res != nil {
		res.DurationNs = time.Since(start).Nanoseconds()
	}
	return res, err
}

func (r *Repo) commit(ctx context.Context, name string, opts CommitOptions, optimistic bool) (*CommitResult, error) {
	msg := opts.Message
	st, err := r.db()
	if err != nil {
		return nil, err
	}
	wr, err := st.NewWriter(ctx, "commit "+name)
	if err != nil {
		return nil, err
	}
	defer wr.Abort()
	if optimistic {
		wr.Optimistic()
	}
	w, wt, err := r.workspaceTree(ctx, name, wr, opts.Warn, true)
	if err != nil {
		return nil, err
	}
	out := &CommitResult{
		Parent: w.Base, Branch: w.Branch, Workspace: name,
		Stats: wt.Result.Stats, Changed: wt.Result.Changed, FilesRead: wt.Result.FilesRead,
		Incremental: wt.Delta,
	}
	if wt.Tree == wt.Base.Tree {
		out.Clean, out.Commit = true, w.Base
		out.Stats = wt.Base.Stats
		r.ws.Committed(w, w.Base, wt)
		if save := wt.Result.SaveStatCache; save != nil {
			// Nothing to commit, but what was read is worth remembering.
			return out, wr.Finish(save)
		}
		return out, nil
	}
	if msg == "" {
		msg = "commit " + name
	}
	err = wr.Finish(func(tx *store.Tx) error {
		c := &store.Commit{
			Tree: wt.Tree, Parents: []store.ID{w.Base}, Message: msg,
			TimeNs: time.Now().UnixNano(), Source: wt.Base.Source, Stats: wt.Result.Stats,
		}
		id, err := tx.CommitOnBranch(c, w.Branch, w.Base, store.Op{Kind: "commit", Detail: name})
		if moved := (*store.BranchMovedError)(nil); errors.As(err, &moved) {
			return fmt.Errorf("branch %q moved since workspace %q was based on %s (another commit or a promote); the changes stay in the workspace — `strata rebase %s` moves them onto the branch (or reset it onto the branch to drop them): %w",
				w.Branch, name, w.Base.Short(), name, moved.Err)
		}
		if err != nil {
			return err
		}
		cur, err := workspace.Load(tx, r.layout, name)
		if err != nil {
			return err
		}
		if cur.Base != w.Base {
			return fmt.Errorf("workspace %q was committed by another process meanwhile: %w", name, ErrConflict)
		}
		cur.Base = id
		if err := workspace.Save(tx, cur); err != nil {
			return err
		}
		out.Commit = id
		if save := wt.Result.SaveStatCache; save != nil {
			return save(tx)
		}
		return nil
	})
	if optimistic && errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("%w: %w", errReusedGone, err)
	}
	if err != nil {
		return nil, err
	}
	// The upper as read is now the base: later commits read only what
	// changes since (written after the transaction, so that a crash
	// leaves an index of the old base, which is ignored).
	r.ws.Committed(w, out.Commit, wt)
	ws := wr.Stats()
	out.NewObjects, out.NewBytes = ws.NewObjects, ws.NewBytes
	return out, nil
}

// Reset drops a workspace's uncommitted changes; with ref, it also moves
// the workspace and its branch to ref (compare-and-swap, like git reset
// --hard); ref naming the branch's own head moves only the workspace (the
// way out of a commit refused because the branch moved). Checkpoints are commits: resetting to one is the rollback. The
// workspace's processes are ended first: its upper directory is replaced.
//
// Reset decides before it changes anything: a branch that moved since the
// workspace's base fails it (ErrConflict) with the processes running and
// the upper as it was. The workspace then moves to a fresh upper and work
// directory in one registry transaction that also moves the branch; only
// after it lands is the old upper removed. A failure, or a kill at any
// instant, leaves either the old upper in force or the new one, never an
// emptied upper under the old record (docs/workspaces.md, "Reset").
func (r *Repo) Reset(ctx context.Context, name, ref string) (store.ID, error) {
	w, err := r.loadWorkspace(ctx, name)
	if err != nil {
		return store.ZeroID, err
	}
	target := w.Base
	if ref != "" {
		if target, err = r.Resolve(ctx, ref); err != nil {
			return store.ZeroID, err
		}
	}
	if err := workspace.NeedSubIDNS(w); err != nil {
		return store.ZeroID, err
	}
	if err := r.checkImageReset(ctx, w, target); err != nil {
		return store.ZeroID, err
	}
	// Decide: the branch must still be where the workspace is based, or
	// already at target (a reset onto the branch's head moves only the
	// workspace).
	if target != w.Base {
		if err := r.view(ctx, func(tx *store.Tx) error {
			head, err := tx.Ref(w.Branch)
			if err != nil {
				return fmt.Errorf("branch %q: %w", w.Branch, err)
			}
			if head != w.Base && head != target {
				return fmt.Errorf("branch %q moved since workspace %q was based on %s (it is at %s now): nothing changed, the changes stay in the workspace; commit them elsewhere, or rebase the workspace: %w",
					w.Branch, name, w.Base.Short(), head.Short(), ErrConflict)
			}
			return nil
		}); err != nil {
			return store.ZeroID, err
		}
	}
	// A fresh, empty writable tree over target, beside the current one.
	sw, err := r.ws.Reset(ctx, w, store.ZeroID, store.ZeroID)
	if err != nil {
		return store.ZeroID, fmt.Errorf("reset %q: %w", name, err)
	}
	if err := workspace.Stop(ctx, w.Dir); err != nil {
		sw.Discard()
		return store.ZeroID, err
	}
	err = r.update(ctx, func(tx *store.Tx) error {
		cur, err := workspace.Load(tx, r.layout, name)
		if err != nil {
			return err
		}
		if !w.Unchanged(cur) {
			return fmt.Errorf("workspace %q was committed or reset by another process meanwhile: nothing changed: %w", name, ErrConflict)
		}
		head, err := tx.Ref(cur.Branch)
		if err != nil {
			return fmt.Errorf("branch %q: %w", cur.Branch, err)
		}
		if target != cur.Base && head != target {
			if err := tx.SetRef(cur.Branch, cur.Base, target); err != nil {
				return fmt.Errorf("branch %q moved meanwhile: nothing changed: %w", cur.Branch, err)
			}
			if err := tx.AppendOp(store.Op{Kind: "reset", Ref: cur.Branch, Old: cur.Base, New: target, Detail: name}); err != nil {
				return err
			}
		}
		sw.Apply(cur, target)
		return workspace.Save(tx, cur)
	})
	if err != nil {
		sw.Discard()
		return store.ZeroID, err
	}
	// The registry names the new tree: the old one is garbage now.
	sw.Done()
	return target, nil
}
