package snapshot

import (
	"context"
	"io"

	"github.com/stratafs/strata/store"
)

// Import records the directory dir as trees and content through w and
// returns the root tree; the caller writes the commit with w.Finish.
//
// Every entry under dir is recorded (ignored files included), without
// following symlinks; dir itself may be a symlink to a directory. Mount
// points are descended into. Content of files whose stat is unchanged since
// the last import of the same root is taken from the stat cache without
// reading them. See the package documentation and docs/snapshot.md.
func Import(ctx context.Context, s *store.Store, w *store.Writer, dir string, opts ImportOptions) (*ImportResult, error) {
	return importDir(ctx, s, w, dir, opts, importConfig{})
}

// Materialize writes the full tree into dir, which must not exist or be an
// empty directory: contents, modes (setuid, setgid and sticky too), mtimes
// in nanoseconds (directories after their children), symlinks verbatim,
// hardlinks as hardlinks, user.* xattrs, FIFOs, and devices when privileged
// (else skipped with a warning). Names and targets from the store are
// untrusted: nothing is created outside dir and no symlink is followed.
// On error, what was written is removed (and dir, if Materialize created it).
func Materialize(ctx context.Context, s *store.Store, tree store.ID, dir string, opts MaterializeOptions) error {
	return materialize(ctx, storeReader{s}, tree, dir, opts, matConfig{})
}

// Walk calls fn for every entry of tree in walk order (pre-order, names
// sorted bytewise); p is the slash-separated path relative to the root.
// fn returning SkipDir skips a directory's contents; SkipAll ends the walk.
func Walk(ctx context.Context, s *store.Store, tree store.ID, fn func(p string, e *store.TreeEntry) error) error {
	return s.View(ctx, func(tx *store.Tx) error { return walkTree(ctx, tx, tree, fn) })
}

// Lookup returns the entry at the slash-separated path p in tree, without
// following symlinks; store.ErrNotFound if there is none. The root ("" or
// ".") is a directory entry with an empty name, mode 0755 and tree as its
// content.
func Lookup(ctx context.Context, s *store.Store, tree store.ID, p string) (*store.TreeEntry, error) {
	var e *store.TreeEntry
	err := s.View(ctx, func(tx *store.Tx) error {
		var err error
		e, err = lookup(tx, tree, p)
		return err
	})
	return e, err
}

// Diff compares tree a with tree b; either may be ZeroID, the empty tree.
// Changes are sorted by path; subtrees with equal ids are skipped without
// being read.
func Diff(ctx context.Context, s *store.Store, a, b store.ID) ([]Change, error) {
	var out []Change
	err := s.View(ctx, func(tx *store.Tx) error {
		var err error
		out, err = diffTrees(ctx, tx, a, b)
		return err
	})
	return out, err
}

// storeReader adapts *store.Store to objectReader.
type storeReader struct{ s *store.Store }

func (r storeReader) view(ctx context.Context, fn func(tg treeGetter) error) error {
	return r.s.View(ctx, func(tx *store.Tx) error { return fn(tx) })
}

func (r storeReader) ReadContentTo(ctx context.Context, id store.ID, w io.Writer) (int64, error) {
	return r.s.ReadContentTo(ctx, id, w)
}

var (
	_ objectWriter   = (*store.Writer)(nil)
	_ statCacheStore = (*store.Store)(nil)
	_ treeGetter     = (*store.Tx)(nil)
)
