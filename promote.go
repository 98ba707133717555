package strata

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/stratafs/strata/internal/workspace"
	"github.com/stratafs/strata/internal/workspace/layout"
	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
)

// PromoteResult reports a promote.
type PromoteResult struct {
	From   string   `json:"from"`
	Into   string   `json:"into"`
	Commit store.ID `json:"commit"`
	// How: "fast-forward", "merge", or "up-to-date".
	How       string              `json:"how"`
	Conflicts []snapshot.Conflict `json:"conflicts,omitempty"`
}

// forkedFrom is the branch that branch was forked from, the default target
// of promote: the one a workspace on it was forked from, else the one
// `branch create --from` named, else DefaultBranch.
func forkedFrom(tx *store.Tx, l layout.Layout, branch string) string {
	if wss, err := workspace.List(tx, l); err == nil {
		for _, w := range wss {
			if w.Branch == branch && w.FromBranch != "" && w.FromBranch != branch {
				return w.FromBranch
			}
		}
	}
	if ops, err := tx.Ops(branch, 0); err == nil {
		for _, op := range ops { // newest first
			if op.Kind != "branch-create" || op.Ref != branch {
				continue
			}
			if op.Detail != branch {
				if _, err := tx.Ref(op.Detail); err == nil {
					return op.Detail
				}
			}
			break
		}
	}
	return DefaultBranch
}

// ConflictError lists the paths a merge could not reconcile. It matches
// ErrConflict.
type ConflictError struct {
	Into      string
	Conflicts []snapshot.Conflict
}

func (e *ConflictError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "merge into %q conflicts in %d path(s); nothing was changed on either branch:", e.Into, len(e.Conflicts))
	for _, c := range e.Conflicts {
		fmt.Fprintf(&b, "\n  %s: %s", c.Path, c.Reason)
	}
	return b.String()
}

func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// Promote merges a workspace's branch (or a branch) into the branch it was
// forked from, or into. A target that has not moved since the fork is
// fast-forwarded; otherwise the trees are merged three ways (changes on one
// side merge, identical changes merge, text files changed on both sides
// get a line-level merge) and the result is a merge commit. Anything else
// is a conflict: *ConflictError, exit 3, and neither branch changes.
// Uncommitted changes of a workspace are not promoted; commit them first.
func (r *Repo) Promote(ctx context.Context, src, into string) (*PromoteResult, error) {
	st, err := r.db()
	if err != nil {
		return nil, err
	}
	from := src
	t, err := r.parseTarget(ctx, "promote", src, false)
	if err != nil {
		return nil, err
	}
	if t.WS != nil && t.Exact {
		from = t.WS.Branch
		if into == "" {
			into = t.WS.FromBranch
		}
	}
	if into == "" {
		if err := st.View(ctx, func(tx *store.Tx) error {
			into = forkedFrom(tx, r.layout, from)
			return nil
		}); err != nil {
			return nil, err
		}
	}
	if from == into {
		return nil, invalidf("promote %s into itself: give --into another branch", from)
	}
	var srcHead, dstHead, base store.ID
	if err := st.View(ctx, func(tx *store.Tx) error {
		var err error
		if srcHead, err = tx.Ref(from); err != nil {
			return fmt.Errorf("promote: branch %q: %w", from, err)
		}
		if dstHead, err = tx.Ref(into); err != nil {
			return fmt.Errorf("promote: into branch %q: %w", into, err)
		}
		base, err = mergeBase(tx, srcHead, dstHead)
		return err
	}); err != nil {
		return nil, err
	}
	out := &PromoteResult{From: from, Into: into}
	switch {
	case base == srcHead:
		out.How, out.Commit = "up-to-date", dstHead
		return out, nil
	case base == dstHead:
		err := r.update(ctx, func(tx *store.Tx) error {
			if err := tx.SetRef(into, dstHead, srcHead); err != nil {
				return fmt.Errorf("branch %q moved during promote: %w", into, err)
			}
			return tx.AppendOp(store.Op{Kind: "promote", Ref: into, Old: dstHead, New: srcHead, Detail: "fast-forward from " + from})
		})
		if err != nil {
			return nil, err
		}
		out.How, out.Commit = "fast-forward", srcHead
		return out, nil
	}
	trees := map[store.ID]*store.Commit{}
	if err := st.View(ctx, func(tx *store.Tx) error {
		for _, id := range []store.ID{base, srcHead, dstHead} {
			if base.IsZero() && id == base {
				continue
			}
			c, err := tx.Commit(id)
			if err != nil {
				return err
			}
			trees[id] = c
		}
		return nil
	}); err != nil {
		return nil, err
	}
	var baseTree store.ID
	if c := trees[base]; c != nil {
		baseTree = c.Tree
	}
	wr, err := st.NewWriter(ctx, "promote "+from+" into "+into)
	if err != nil {
		return nil, err
	}
	defer wr.Abort()
	ours := trees[dstHead]
	mr, err := snapshot.MergeWith(ctx, st, wr, baseTree, ours.Tree, trees[srcHead].Tree, snapshot.MergeOptions{OursStats: &ours.Stats})
	if err != nil {
		return nil, err
	}
	if len(mr.Conflicts) > 0 {
		return nil, &ConflictError{Into: into, Conflicts: mr.Conflicts}
	}
	err = wr.Finish(func(tx *store.Tx) error {
		id, err := tx.CommitOnBranch(&store.Commit{
			Tree: mr.Tree, Parents: []store.ID{dstHead, srcHead},
			Message: fmt.Sprintf("promote %s into %s", from, into),
			TimeNs:  time.Now().UnixNano(), Source: trees[dstHead].Source, Stats: mr.Stats,
		}, into, dstHead, store.Op{Kind: "promote", Detail: "merge " + from})
		if moved := (*store.BranchMovedError)(nil); errors.As(err, &moved) {
			return fmt.Errorf("branch %q moved during promote: %w", into, moved.Err)
		}
		out.Commit = id
		return err
	})
	if err != nil {
		return nil, err
	}
	out.How = "merge"
	return out, nil
}

// mergeBase finds the nearest common ancestor of a and b (ZeroID when they
// share no history): every ancestor of a, then b's ancestors breadth first
// until one of them is among a's.
func mergeBase(tx *store.Tx, a, b store.ID) (store.ID, error) {
	ofA, err := ancestors(tx, a)
	if err != nil {
		return store.ZeroID, err
	}
	seen := map[store.ID]bool{b: true}
	for q := []store.ID{b}; len(q) > 0; q = q[1:] {
		id := q[0]
		if ofA[id] {
			return id, nil
		}
		c, err := tx.Commit(id)
		if err != nil {
			return store.ZeroID, err
		}
		for _, p := range c.Parents {
			if !seen[p] {
				seen[p] = true
				q = append(q, p)
			}
		}
	}
	return store.ZeroID, nil
}

// ancestors is id and every commit it descends from.
func ancestors(tx *store.Tx, id store.ID) (map[store.ID]bool, error) {
	seen := map[store.ID]bool{id: true}
	for q := []store.ID{id}; len(q) > 0; q = q[1:] {
		c, err := tx.Commit(q[0])
		if err != nil {
			return nil, err
		}
		for _, p := range c.Parents {
			if !seen[p] {
				seen[p] = true
				q = append(q, p)
			}
		}
	}
	return seen, nil
}

// ApplyResult reports an apply.
type ApplyResult struct {
	From    store.ID           `json:"from"`
	To      store.ID           `json:"to"`
	Dir     string             `json:"dir"`
	Written []snapshot.Written `json:"written"`
	// Workspace names the workspace whose change (uncommitted included)
	// was applied; From and To are then its fork and its base.
	Workspace string `json:"workspace,omitempty"`
	// Stripped lists the setuid/setgid bits and device nodes of the
	// change that were not written (unless ApplyOptions.KeepSpecial).
	Stripped []snapshot.Stripped `json:"stripped,omitempty"`
}

// ApplyOptions tune Apply.
type ApplyOptions struct {
	// Force overwrites target files that differ from the base version.
	Force bool
	// KeepSpecial writes setuid/setgid bits and device nodes as the
	// change has them; otherwise files are written without the bits and
	// device nodes not at all (snapshot.SpecialReason), and Stripped says
	// which.
	KeepSpecial bool
}

// Apply writes the change base..REF into a real directory, dir (the user's
// repository): a workspace's change since it was forked, uncommitted
// changes included; a branch made for a workspace, since the fork; A..B;
// or REF^..REF. It refuses (ErrConflict, nothing written) when a target
// file differs from the base version, unless force; it never follows a
// symlink out of dir, and replaces each file atomically. Setuid/setgid
// bits and device nodes of the change are not written unless
// opts.KeepSpecial (a sandboxed agent must not plant a setuid binary in
// the user's directory); the result lists them.
func (r *Repo) Apply(ctx context.Context, arg, dir string, opts ApplyOptions) (*ApplyResult, error) {
	force := opts.Force
	st, err := r.db()
	if err != nil {
		return nil, err
	}
	var fromTree, toTree, fromID, toID store.ID
	var wsName string
	t, err := r.parseTarget(ctx, "apply", arg, true)
	if err != nil {
		return nil, err
	}
	switch {
	case t.Range:
		if fromTree, fromID, err = r.commitTree(ctx, t.From); err != nil {
			return nil, err
		}
		if toTree, toID, err = r.commitTree(ctx, t.To); err != nil {
			return nil, err
		}
	case t.WS != nil && t.Exact:
		wr, err := st.NewScratchWriter(ctx, "apply "+arg) // apply only reads the store
		if err != nil {
			return nil, err
		}
		defer wr.Abort()
		w, wt, err := r.workspaceTree(ctx, arg, wr, nil, false)
		if err != nil {
			return nil, err
		}
		if err := wr.Flush(); err != nil { // the tree is read back below
			return nil, err
		}
		fork, _ := store.ParseID(w.Fork)
		if fromTree, fromID, err = r.commitTree(ctx, fork.String()); err != nil {
			return nil, err
		}
		toTree, toID, wsName = wt.Tree, w.Base, arg
	default:
		if toTree, toID, err = r.commitTree(ctx, t.Ref); err != nil {
			return nil, err
		}
		fromID, err = r.forkPoint(ctx, t.Ref, toID)
		if err != nil {
			return nil, err
		}
		if !fromID.IsZero() {
			if fromTree, _, err = r.commitTree(ctx, fromID.String()); err != nil {
				return nil, err
			}
		}
	}
	// The target's .git is the user's own: a workspace's .git (imported,
	// or the synthetic one of import --git) never overwrites it.
	wr, err := st.NewScratchWriter(ctx, "apply")
	if err != nil {
		return nil, err
	}
	defer wr.Abort()
	if fromTree, err = withoutGitDir(ctx, st, wr, fromTree); err != nil {
		return nil, err
	}
	if toTree, err = withoutGitDir(ctx, st, wr, toTree); err != nil {
		return nil, err
	}
	if err := wr.Flush(); err != nil {
		return nil, err
	}
	var stripped []snapshot.Stripped
	if !opts.KeepSpecial {
		if toTree, stripped, err = snapshot.StripSpecial(ctx, st, wr, fromTree, toTree); err != nil {
			return nil, err
		}
		if err := wr.Flush(); err != nil {
			return nil, err
		}
	}
	res, err := snapshot.ApplyTo(ctx, st, fromTree, toTree, dir, snapshot.ApplyToOptions{Force: force})
	if errors.Is(err, snapshot.ErrRefused) && res != nil {
		return nil, &ApplyRefusedError{Dir: dir, Refused: res.Refused, Forced: force}
	}
	if err != nil {
		return nil, err
	}
	return &ApplyResult{From: fromID, To: toID, Dir: dir, Written: res.Written, Stripped: stripped, Workspace: wsName}, nil
}

// forkPoint is where ref's change starts: for a branch made for a
// workspace (ws/NAME), the commit it was forked from when the op log still
// knows it; otherwise ref's first parent.
func (r *Repo) forkPoint(ctx context.Context, ref string, id store.ID) (store.ID, error) {
	var from store.ID
	err := r.view(ctx, func(tx *store.Tx) error {
		ops, err := tx.Ops(ref, 0)
		if err == nil {
			for _, op := range ops {
				if op.Kind == "branch-create" && op.Ref == ref {
					from = op.New
				}
			}
		}
		if !from.IsZero() {
			return nil
		}
		c, err := tx.Commit(id)
		if err != nil {
			return err
		}
		if len(c.Parents) > 0 {
			from = c.Parents[0]
		}
		return nil
	})
	return from, err
}

// ApplyRefusedError lists the target files that differ from the base
// version. It matches ErrConflict.
type ApplyRefusedError struct {
	Dir     string
	Refused []snapshot.Conflict
	Forced  bool // refused even with --force: writing would leave the target
}

func (e *ApplyRefusedError) Error() string {
	var b strings.Builder
	if e.Forced {
		fmt.Fprintf(&b, "apply to %s refused even with --force: writing would follow a symlink or replace something the change does not own; nothing was written:", e.Dir)
	} else {
		fmt.Fprintf(&b, "apply to %s refused: %d path(s) differ from the base version (changed by someone else); nothing was written (use --force to overwrite):", e.Dir, len(e.Refused))
	}
	for _, c := range e.Refused {
		fmt.Fprintf(&b, "\n  %s: %s", c.Path, c.Reason)
	}
	return b.String()
}

func (e *ApplyRefusedError) Is(target error) bool { return target == ErrConflict }

// withoutGitDir returns tree without its top-level .git entry (the same
// tree when it has none).
func withoutGitDir(ctx context.Context, st *store.Store, w *store.Writer, tree store.ID) (store.ID, error) {
	if tree.IsZero() {
		return tree, nil
	}
	var t *store.Tree
	if err := st.View(ctx, func(tx *store.Tx) error {
		var err error
		t, err = tx.Tree(tree)
		return err
	}); err != nil {
		return store.ZeroID, err
	}
	for i, e := range t.Entries {
		if e.Name == ".git" {
			t.Entries = append(t.Entries[:i:i], t.Entries[i+1:]...)
			return w.PutTree(t)
		}
	}
	return tree, nil
}
