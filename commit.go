package strata

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/stratafs/strata/nsexec"
	"github.com/stratafs/strata/overlayfs"
	"github.com/stratafs/strata/snapshot"
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

// tree of a workspace: what its merged view holds now.
type wsTree struct {
	w      *store.Workspace
	x      wsExtra
	base   *store.Commit // the workspace's base commit
	tree   store.ID      // the merged view as a tree
	result *snapshot.ApplyResult
	// The upper as it was read, for the committed-state index; nil when
	// the upper is empty or could not be walked.
	state   *upperState
	changes []overlayfs.Change
	prev    *committedIndex // the index read (nil: none valid)
	delta   bool            // applied only the changes since the last commit, to base
}

// workspaceTree reads a workspace's upper directory into a tree through
// writer wr: the merged view as it is now. The workspace's processes are
// stopped (SIGSTOP) while the upper is read, so that no file is caught half
// written; they continue as soon as the scan is done.
//
// With deferStatCache the stat cache's update is left to the caller's
// Finish (result.SaveStatCache).
func (r *Repo) workspaceTree(ctx context.Context, name string, wr *store.Writer, warn func(path, msg string), deferStatCache bool) (*wsTree, error) {
	w, x, err := r.loadWorkspace(ctx, name)
	if err != nil {
		return nil, err
	}
	st, err := r.db()
	if err != nil {
		return nil, err
	}
	mb := x.mountBase(w)
	var base, mountBase *store.Commit
	if err := st.View(ctx, func(tx *store.Tx) error {
		var err error
		if base, err = tx.Commit(w.Base); err != nil {
			return err
		}
		mountBase, err = tx.Commit(mb)
		return err
	}); err != nil {
		return nil, err
	}
	out := &wsTree{w: w, x: x, base: base}
	if err := needSubIDNS(name, x); err != nil {
		return nil, err
	}
	if dirEmpty(x.Upper) {
		out.tree = mountBase.Tree
		out.result = &snapshot.ApplyResult{Tree: mountBase.Tree, Stats: mountBase.Stats}
		return out, nil
	}
	lowers, err := r.layerStack(ctx, mb)
	if err != nil {
		return nil, err
	}
	thaw, err := nsexec.Freeze(w.Dir)
	if err != nil && wr.Scratch() && (errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.EACCES)) {
		// A read (diff, apply) on a full or read-only filesystem, where
		// the freezer cannot write its lock or marker: read the upper
		// live. A file that changes while it is read is read again
		// (snapshot.ApplyUpper).
		thaw, err = func() {}, nil
	}
	if err != nil {
		return nil, err
	}
	defer thaw()
	flavour := overlayfs.FlavourUser
	if nsexec.RealRoot() {
		flavour = overlayfs.FlavourTrusted
	}
	// Since the last commit (the committed-state index): only the
	// entries that changed since and their parents are read; otherwise
	// everything the upper holds over the mount base's stack.
	applyTo, applyStats, ucs := mountBase.Tree, mountBase.Stats, []snapshot.UpperChange(nil)
	state, werr := walkUpper(x.Upper)
	if werr != nil {
		state = nil
	}
	var changes []overlayfs.Change
	idx := r.loadCommittedIndex(w, x)
	if idx != nil && state != nil {
		need := idx.needed(state)
		changes, err = overlayfs.ChangesWithin(x.Upper, lowers, flavour, func(rel string) bool { return need[rel] })
		if err != nil {
			return nil, fmt.Errorf("workspace %q: reading changes: %w", name, err)
		}
		if d, ok := idx.deltaSince(state, changes, x.Upper, lowers); ok {
			applyTo, applyStats, ucs = base.Tree, base.Stats, d
			out.delta = true
		}
	}
	if !out.delta {
		if changes, err = overlayfs.Changes(x.Upper, lowers, flavour); err != nil {
			return nil, fmt.Errorf("workspace %q: reading changes: %w", name, err)
		}
		ucs = upperChanges(changes)
	}
	out.prev = idx
	out.state, out.changes = state, changes
	if out.delta && len(ucs) == 0 {
		out.tree = base.Tree
		out.result = &snapshot.ApplyResult{Tree: base.Tree, Stats: base.Stats}
	} else {
		res, err := snapshot.ApplyUpper(ctx, st, wr, applyTo, ucs, snapshot.ApplyOptions{
			StatCacheRoot:  x.Upper,
			BaseStats:      &applyStats,
			Warn:           warn,
			DeferStatCache: deferStatCache,
			Previous:       base.Tree, // delta bases: the last commit's versions
		})
		if err != nil {
			return nil, fmt.Errorf("workspace %q: %w", name, err)
		}
		out.tree, out.result = res.Tree, res
	}
	if state != nil {
		// The index about to record these ctimes must not see a later
		// change carry one of them: the processes stay stopped until
		// the clock has moved past (at most a tick).
		waitPastCtimes(state.maxCtime)
	}
	return out, nil
}

// upperChanges converts the overlay's view of a delta into snapshot's.
func upperChanges(cs []overlayfs.Change) []snapshot.UpperChange {
	out := make([]snapshot.UpperChange, 0, len(cs))
	for i := range cs {
		c := cs[i]
		u := snapshot.UpperChange{
			Path:         c.Path,
			Opaque:       c.Opaque,
			RedirectFrom: c.RedirectFrom,
			UpperPath:    c.UpperPath,
		}
		switch c.Kind {
		case overlayfs.Added:
			u.Kind = snapshot.UpperAdded
		case overlayfs.Modified:
			u.Kind = snapshot.UpperModified
			if c.Stat.Mode.IsRegular() {
				u.ContentEqual = c.ContentEqual
			}
		case overlayfs.Deleted:
			u.Kind = snapshot.UpperDeleted
		case overlayfs.Replaced:
			u.Kind = snapshot.UpperReplaced
		}
		out = append(out, u)
	}
	return out
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
	wt, err := r.workspaceTree(ctx, name, wr, opts.Warn, true)
	if err != nil {
		return nil, err
	}
	w := wt.w
	out := &CommitResult{
		Parent: w.Base, Branch: w.Branch, Workspace: name,
		Stats: wt.result.Stats, Changed: wt.result.Changed, FilesRead: wt.result.FilesRead,
		Incremental: wt.delta,
	}
	if wt.tree == wt.base.Tree {
		out.Clean, out.Commit = true, w.Base
		out.Stats = wt.base.Stats
		r.saveCommittedIndex(w, wt.x, w.Base, wt.state, wt.changes, wt.prev)
		if save := wt.result.SaveStatCache; save != nil {
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
			Tree: wt.tree, Parents: []store.ID{w.Base}, Message: msg,
			TimeNs: time.Now().UnixNano(), Source: wt.base.Source, Stats: wt.result.Stats,
		}
		id, err := tx.CommitOnBranch(c, w.Branch, w.Base, store.Op{Kind: "commit", Detail: name})
		if moved := (*store.BranchMovedError)(nil); errors.As(err, &moved) {
			return fmt.Errorf("branch %q moved since workspace %q was based on %s (another commit or a promote); the changes stay in the workspace — `strata rebase %s` moves them onto the branch (or reset it onto the branch to drop them): %w",
				w.Branch, name, w.Base.Short(), name, moved.Err)
		}
		if err != nil {
			return err
		}
		cur, err := tx.Workspace(name)
		if err != nil {
			return err
		}
		if cur.Base != w.Base {
			return fmt.Errorf("workspace %q was committed by another process meanwhile: %w", name, ErrConflict)
		}
		cur.Base = id
		if err := tx.PutWorkspace(cur); err != nil {
			return err
		}
		out.Commit = id
		if save := wt.result.SaveStatCache; save != nil {
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
	w.Base = out.Commit
	r.saveCommittedIndex(w, wt.x, out.Commit, wt.state, wt.changes, wt.prev)
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
	w, x, err := r.loadWorkspace(ctx, name)
	if err != nil {
		return store.ZeroID, err
	}
	target := w.Base
	if ref != "" {
		if target, err = r.Resolve(ctx, ref); err != nil {
			return store.ZeroID, err
		}
	}
	if err := needSubIDNS(name, x); err != nil {
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
	nu, nw, err := freshUpper(x)
	if err != nil {
		return store.ZeroID, fmt.Errorf("reset %q: %w", name, err)
	}
	dropNew := func() { _ = removeAll(nu); _ = removeAll(nw) }
	if err := nsexec.StopKeeper(ctx, w.Dir); err != nil && !errors.Is(err, nsexec.ErrNotRunning) {
		dropNew()
		return store.ZeroID, err
	}
	err = r.update(ctx, func(tx *store.Tx) error {
		cur, err := tx.Workspace(name)
		if err != nil {
			return err
		}
		var cx wsExtra
		_ = json.Unmarshal(cur.Extra, &cx)
		if cur.Base != w.Base || filepath.Base(cx.Upper) != filepath.Base(x.Upper) {
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
		cx.MountBase = target.String()
		cx.Upper, cx.Work = nu, nw
		cur.Extra, _ = json.Marshal(cx)
		cur.Base = target
		return tx.PutWorkspace(cur)
	})
	if err != nil {
		dropNew()
		return store.ZeroID, err
	}
	// The registry names the new upper: the old one is garbage now.
	_ = removeAll(x.Upper)
	_ = removeAll(x.Work)
	return target, nil
}

// freshUpper makes a new, empty upper and work directory beside a
// workspace's current ones (named upper.<random>, work.<random>).
func freshUpper(x wsExtra) (upper, work string, err error) {
	dir := filepath.Dir(x.Upper)
	suffix := randomHex(6)
	upper, work = filepath.Join(dir, "upper."+suffix), filepath.Join(dir, "work."+suffix)
	// A tmpfs workspace's directory is gone after a reboot.
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", err
	}
	if err := os.Mkdir(upper, 0o700); err != nil {
		return "", "", err
	}
	if err := os.Mkdir(work, 0o700); err != nil {
		_ = os.Remove(upper)
		return "", "", err
	}
	return upper, work, nil
}
