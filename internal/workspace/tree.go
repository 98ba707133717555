package workspace

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/stratafs/strata/nsexec"
	"github.com/stratafs/strata/overlayfs"
	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
)

// ReadOptions tune Read.
type ReadOptions struct {
	// Warn receives what the tree leaves out (sockets, overlay xattrs).
	Warn func(path, msg string)
	// DeferStatCache leaves the stat cache's update to the caller's
	// Finish (Tree.Result.SaveStatCache).
	DeferStatCache bool
}

// Tree is a workspace's tree as Read found it.
type Tree struct {
	Base   *store.Commit // the workspace's base commit
	Tree   store.ID      // the merged view as a tree
	Result *snapshot.ApplyResult
	// Delta: only what changed since the last commit was read and applied
	// (to Base's tree; the committed-state index held); otherwise every
	// change of the upper, to the mount base's tree.
	Delta bool

	// The upper as it was read, for the committed-state index; nil when
	// the upper is empty or could not be walked.
	state   *upperState
	changes []overlayfs.Change
	prev    *committedIndex // the index read (nil: none valid)
	// plain is a reflink or copy workspace's scan (plain.go).
	plain *snapshot.ScanResult
}

// Read reads the workspace's upper directory into a tree through writer
// wr: the merged view as it is now. The workspace's processes are stopped
// (SIGSTOP) while the upper is read, so that no file is caught half
// written; they continue as soon as the scan is done.
func (o overlay) Read(ctx context.Context, rec *Record, wr *store.Writer, opts ReadOptions) (*Tree, error) {
	st, err := o.m.DB()
	if err != nil {
		return nil, err
	}
	mb := rec.MountBaseID()
	var base, mountBase *store.Commit
	if err := st.View(ctx, func(tx *store.Tx) error {
		var err error
		if base, err = tx.Commit(rec.Base); err != nil {
			return err
		}
		mountBase, err = tx.Commit(mb)
		return err
	}); err != nil {
		return nil, err
	}
	out := &Tree{Base: base}
	if err := NeedSubIDNS(rec); err != nil {
		return nil, err
	}
	if DirEmpty(rec.Upper) {
		out.Tree = mountBase.Tree
		out.Result = &snapshot.ApplyResult{Tree: mountBase.Tree, Stats: mountBase.Stats}
		return out, nil
	}
	ro, err := o.m.readOptionsOf(ctx, rec)
	if err != nil {
		return nil, err
	}
	lowers := ro.lowers
	thaw, err := nsexec.Freeze(rec.Dir)
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
	flavour := Flavour()
	// Since the last commit (the committed-state index): only the
	// entries that changed since and their parents are read; otherwise
	// everything the upper holds over the mount base's stack.
	applyTo, applyStats, ucs := mountBase.Tree, mountBase.Stats, []snapshot.UpperChange(nil)
	state, werr := walkUpper(rec.Upper)
	if werr != nil {
		state = nil
	}
	var changes []overlayfs.Change
	idx := loadCommittedIndex(rec)
	if idx != nil && state != nil {
		need := idx.needed(state)
		changes, err = overlayfs.ChangesWithin(rec.Upper, lowers, flavour, func(rel string) bool { return need[rel] })
		if err != nil {
			return nil, fmt.Errorf("workspace %q: reading changes: %w", rec.Name, err)
		}
		if d, ok := idx.deltaSince(state, changes, rec.Upper, lowers); ok {
			applyTo, applyStats, ucs = base.Tree, base.Stats, scopeChanges(d, ro.scope)
			out.Delta = true
		}
	}
	if !out.Delta {
		if changes, err = overlayfs.Changes(rec.Upper, lowers, flavour); err != nil {
			return nil, fmt.Errorf("workspace %q: reading changes: %w", rec.Name, err)
		}
		ucs = scopeChanges(UpperChanges(changes), ro.scope)
	}
	out.prev = idx
	out.state, out.changes = state, changes
	if out.Delta && len(ucs) == 0 {
		out.Tree = base.Tree
		out.Result = &snapshot.ApplyResult{Tree: base.Tree, Stats: base.Stats}
	} else {
		res, err := snapshot.ApplyUpper(ctx, st, wr, applyTo, ucs, snapshot.ApplyOptions{
			StatCacheRoot:  rec.Upper,
			BaseStats:      &applyStats,
			Warn:           opts.Warn,
			DeferStatCache: opts.DeferStatCache,
			Previous:       base.Tree, // delta bases: the last commit's versions
			Owners:         ro.owners,
		})
		if err != nil {
			return nil, fmt.Errorf("workspace %q: %w", rec.Name, err)
		}
		out.Tree, out.Result = res.Tree, res
	}
	if state != nil {
		// The index about to record these ctimes must not see a later
		// change carry one of them: the processes stay stopped until
		// the clock has moved past (at most a tick).
		waitPastCtimes(state.maxCtime)
	}
	return out, nil
}

// UpperChanges converts the overlay's view of a delta into snapshot's.
func UpperChanges(cs []overlayfs.Change) []snapshot.UpperChange {
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
