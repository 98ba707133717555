package strata

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/internal/textdiff"
	"github.com/stratafs/strata/internal/workspace"
	"github.com/stratafs/strata/internal/workspace/layout"
	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
)

// RebaseOptions tune Rebase.
type RebaseOptions struct {
	// Markers resolves content conflicts of the uncommitted changes by
	// writing git-style conflict markers into the files (<<<<<<< REF,
	// =======, >>>>>>> NAME), for an agent to resolve and commit. Other
	// conflicts still fail the rebase.
	Markers bool
}

// RebaseResult reports a rebase.
type RebaseResult struct {
	Workspace string   `json:"workspace"`
	Onto      string   `json:"onto"`
	OldBase   store.ID `json:"old_base"`
	// Base is the workspace's new base: REF's commit, or a commit on top
	// of it that carries the workspace's own commits.
	Base store.ID `json:"base"`
	// How: "up-to-date" (the workspace already contains REF) or "rebased".
	How string `json:"how"`
	// Markers lists the files that got conflict markers.
	Markers []string `json:"markers,omitempty"`
}

// RebaseConflictError lists what a rebase could not reconcile; nothing was
// changed. It matches ErrConflict.
type RebaseConflictError struct {
	Workspace, Onto string
	Committed       bool // the workspace's commits conflict (markers are not written into commits)
	Conflicts       []snapshot.Conflict
}

func (e *RebaseConflictError) Error() string {
	var b strings.Builder
	what := "uncommitted changes"
	if e.Committed {
		what = "commits"
	}
	fmt.Fprintf(&b, "rebase of workspace %q onto %s: its %s conflict in %d path(s); nothing was changed:", e.Workspace, e.Onto, what, len(e.Conflicts))
	for _, c := range e.Conflicts {
		fmt.Fprintf(&b, "\n  %s: %s", c.Path, c.Reason)
	}
	if !e.Committed {
		b.WriteString("\n(--conflict=markers writes content conflicts into the files for you to resolve)")
	}
	return b.String()
}

func (e *RebaseConflictError) Is(target error) bool { return target == ErrConflict }

// Rebase moves a workspace — its commits and its uncommitted changes — onto
// ref (default: its branch's head, the way forward when another workspace
// on the same branch committed). It merges three ways, as promote does:
// first the workspace's commits since the merge base (carried as one
// commit on top of ref whose second parent is the old base, so checkpoints
// stay in the log), then its uncommitted changes onto that, which stay
// uncommitted. The branch moves there by CAS; the workspace continues on a
// fresh upper that holds the uncommitted changes, so its processes are
// ended, as by reset.
//
// Rebase decides first: on any conflict it returns *RebaseConflictError
// (exit 3) listing the paths, and nothing has changed — unless
// opts.Markers, where content conflicts of the uncommitted changes become
// git-style markers in the files. Like reset, the switch to the new upper
// is one registry transaction: a failure or a kill leaves the workspace as
// it was or fully rebased.
func (r *Repo) Rebase(ctx context.Context, name, ref string, opts RebaseOptions) (*RebaseResult, error) {
	w, err := r.loadWorkspace(ctx, name)
	if err != nil {
		return nil, err
	}
	if err := workspace.NeedSubIDNS(w); err != nil {
		return nil, err
	}
	if ref == "" {
		ref = w.Branch
	}
	st, err := r.db()
	if err != nil {
		return nil, err
	}
	var onto, branchHead, mb store.ID
	var ontoC, baseC, mbC *store.Commit
	if err := st.View(ctx, func(tx *store.Tx) error {
		var err error
		if onto, err = resolve(tx, ref); err != nil {
			return err
		}
		if branchHead, err = tx.Ref(w.Branch); err != nil {
			return fmt.Errorf("branch %q: %w", w.Branch, err)
		}
		if mb, err = mergeBase(tx, w.Base, onto); err != nil {
			return err
		}
		if ontoC, err = tx.Commit(onto); err != nil {
			return err
		}
		if baseC, err = tx.Commit(w.Base); err != nil {
			return err
		}
		if !mb.IsZero() {
			mbC, err = tx.Commit(mb)
		}
		return err
	}); err != nil {
		return nil, err
	}
	out := &RebaseResult{Workspace: name, Onto: ref, OldBase: w.Base, Base: w.Base}
	if branchHead != w.Base && branchHead != onto {
		return nil, fmt.Errorf("branch %q is at %s, neither the workspace's base %s nor %s: rebase onto %s first; nothing changed: %w",
			w.Branch, branchHead.Short(), w.Base.Short(), onto.Short(), w.Branch, ErrConflict)
	}
	if mb == onto {
		out.How = "up-to-date"
		return out, nil
	}
	var mbTree store.ID
	if mbC != nil {
		mbTree = mbC.Tree
	}

	wr, err := st.NewWriter(ctx, "rebase "+name)
	if err != nil {
		return nil, err
	}
	defer wr.Abort()
	// The workspace as it is now (frozen while read).
	_, wt, err := r.workspaceTree(ctx, name, wr, nil, false)
	if err != nil {
		return nil, err
	}
	// The merges read through the store: what the writer holds goes in
	// first (leased, so gc keeps it until Finish or Abort).
	if err := wr.Flush(); err != nil {
		return nil, err
	}
	// 1. Its commits since the merge base, onto ref.
	newBase, newTree, newStats := onto, ontoC.Tree, ontoC.Stats
	var carry *store.Commit
	if baseC.Tree != mbTree {
		mr, err := snapshot.MergeWith(ctx, st, wr, mbTree, ontoC.Tree, baseC.Tree, snapshot.MergeOptions{OursStats: &ontoC.Stats})
		if err != nil {
			return nil, err
		}
		if len(mr.Conflicts) > 0 {
			return nil, &RebaseConflictError{Workspace: name, Onto: ref, Committed: true, Conflicts: mr.Conflicts}
		}
		if err := wr.Flush(); err != nil {
			return nil, err
		}
		if mr.Tree != ontoC.Tree {
			carry = &store.Commit{
				Tree: mr.Tree, Parents: []store.ID{onto, w.Base},
				Message: fmt.Sprintf("rebase %s onto %s", name, ref),
				TimeNs:  time.Now().UnixNano(), Source: baseC.Source, Stats: mr.Stats,
			}
			newTree, newStats = mr.Tree, mr.Stats
		}
	}
	// 2. Its uncommitted changes onto that.
	final := newTree
	if wt.Tree != baseC.Tree {
		theirs := wt.Tree
		ours := newTree
		mr, err := snapshot.MergeWith(ctx, st, wr, baseC.Tree, ours, theirs, snapshot.MergeOptions{OursStats: &newStats})
		if err != nil {
			return nil, err
		}
		if len(mr.Conflicts) > 0 && opts.Markers {
			o2, t2, marked, err := r.markConflicts(ctx, st, wr, baseC.Tree, ours, theirs, mr.Conflicts, ref, name)
			if err != nil {
				return nil, err
			}
			if len(marked) > 0 {
				if err := wr.Flush(); err != nil {
					return nil, err
				}
				if mr, err = snapshot.MergeWith(ctx, st, wr, baseC.Tree, o2, t2, snapshot.MergeOptions{}); err != nil {
					return nil, err
				}
				out.Markers = marked
			}
		}
		if len(mr.Conflicts) > 0 {
			return nil, &RebaseConflictError{Workspace: name, Onto: ref, Conflicts: mr.Conflicts}
		}
		final = mr.Tree
	}
	if err := wr.Flush(); err != nil {
		return nil, err
	}

	// Decided. The uncommitted changes, as a fresh writable tree over
	// the new base.
	sw, err := r.ws.Reset(ctx, w, newTree, final)
	if err != nil {
		return nil, fmt.Errorf("rebase %q: %w", name, err)
	}
	if err := workspace.Stop(ctx, w.Dir); err != nil {
		sw.Discard()
		return nil, err
	}
	err = wr.Finish(func(tx *store.Tx) error {
		cur, err := workspace.Load(tx, r.layout, name)
		if err != nil {
			return err
		}
		if !w.Unchanged(cur) {
			return fmt.Errorf("workspace %q was committed or reset by another process meanwhile: nothing changed: %w", name, ErrConflict)
		}
		if carry != nil {
			if newBase, err = tx.PutCommit(carry); err != nil {
				return err
			}
		}
		if newBase != branchHead {
			if err := tx.SetRef(cur.Branch, branchHead, newBase); err != nil {
				return fmt.Errorf("branch %q moved meanwhile: nothing changed: %w", cur.Branch, err)
			}
		}
		if err := tx.AppendOp(store.Op{Kind: "rebase", Ref: cur.Branch, Old: branchHead, New: newBase, Detail: name + " onto " + ref}); err != nil {
			return err
		}
		sw.Apply(cur, newBase)
		return workspace.Save(tx, cur)
	})
	if err != nil {
		sw.Discard()
		return nil, err
	}
	sw.Done()
	out.Base, out.How = newBase, "rebased"
	return out, nil
}

// markConflicts resolves the content conflicts of a merge (text files both
// sides changed) with git-style markers: it returns ours and theirs with
// each such file replaced by the same marked version, so that merging them
// again takes it as an identical change. Other conflicts are left as they
// are.
func (r *Repo) markConflicts(ctx context.Context, st *store.Store, wr *store.Writer, base, ours, theirs store.ID, conflicts []snapshot.Conflict, oursLabel, theirsLabel string) (store.ID, store.ID, []string, error) {
	tmp, err := os.MkdirTemp(r.home, layout.TempPrefix+"rebase-")
	if err != nil {
		return ours, theirs, nil, err
	}
	defer os.RemoveAll(tmp)
	read := func(tree store.ID, p string) (*store.TreeEntry, []byte, error) {
		e, err := snapshot.Lookup(ctx, st, tree, p)
		if err != nil {
			return nil, nil, err
		}
		var buf bytes.Buffer
		if e.Type == store.TypeFile {
			if _, err := st.ReadContentTo(ctx, e.Content, &buf); err != nil {
				return nil, nil, err
			}
		}
		return e, buf.Bytes(), nil
	}
	var changes []snapshot.UpperChange
	var marked []string
	for i, c := range conflicts {
		if c.Reason != snapshot.ReasonContent {
			continue
		}
		_, b, err := read(base, c.Path)
		if err != nil {
			return ours, theirs, nil, err
		}
		_, o, err := read(ours, c.Path)
		if err != nil {
			return ours, theirs, nil, err
		}
		te, t, err := read(theirs, c.Path)
		if err != nil {
			return ours, theirs, nil, err
		}
		m, _ := textdiff.Merge3(b, o, t)
		m = relabel(m, "<<<<<<< ours", "<<<<<<< "+oursLabel)
		m = relabel(m, ">>>>>>> theirs", ">>>>>>> "+theirsLabel)
		f := filepath.Join(tmp, fmt.Sprint(i))
		if err := os.WriteFile(f, m, 0o600); err != nil {
			return ours, theirs, nil, err
		}
		if err := unix.Chmod(f, uint32(te.Mode&0o7777)); err != nil {
			return ours, theirs, nil, err
		}
		changes = append(changes, snapshot.UpperChange{Path: c.Path, Kind: snapshot.UpperModified, UpperPath: f})
		marked = append(marked, c.Path)
	}
	if len(changes) == 0 {
		return ours, theirs, nil, nil
	}
	o2, err := snapshot.ApplyUpper(ctx, st, wr, ours, changes, snapshot.ApplyOptions{})
	if err != nil {
		return ours, theirs, nil, err
	}
	t2, err := snapshot.ApplyUpper(ctx, st, wr, theirs, changes, snapshot.ApplyOptions{})
	if err != nil {
		return ours, theirs, nil, err
	}
	return o2.Tree, t2.Tree, marked, nil
}

// relabel replaces a conflict marker line.
func relabel(b []byte, from, to string) []byte {
	out := bytes.ReplaceAll(b, []byte("\n"+from+"\n"), []byte("\n"+to+"\n"))
	if bytes.HasPrefix(out, []byte(from+"\n")) {
		out = append([]byte(to+"\n"), out[len(from)+1:]...)
	}
	return out
}
