package snapshot

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"slices"
	"sort"
	"strings"

	"github.com/stratafs/strata/store"
)

// SkipDir and SkipAll, returned by a Walk callback, skip a directory's
// contents (or, for a non-directory, the rest of its directory) and end
// the walk without error. They are the io/fs values.
var (
	SkipDir = fs.SkipDir
	SkipAll = fs.SkipAll
)

// getTree reads a tree; ZeroID is the empty tree.
func getTree(tg treeGetter, id store.ID) (*store.Tree, error) {
	if id.IsZero() {
		return &store.Tree{}, nil
	}
	t, err := tg.Tree(id)
	if err != nil {
		return nil, fmt.Errorf("tree %s: %w", id.Short(), err)
	}
	return t, nil
}

// walkTree calls fn for every entry under id in walk order.
func walkTree(ctx context.Context, tg treeGetter, id store.ID, fn func(p string, e *store.TreeEntry) error) error {
	err := walkRec(ctx, tg, id, "", fn)
	if err == SkipAll || err == SkipDir {
		return nil
	}
	return err
}

func walkRec(ctx context.Context, tg treeGetter, id store.ID, prefix string, fn func(p string, e *store.TreeEntry) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t, err := getTree(tg, id)
	if err != nil {
		return err
	}
	for i := range t.Entries {
		e := &t.Entries[i]
		p := joinRel(prefix, e.Name)
		err := fn(p, e)
		if err == SkipDir {
			if e.Type == store.TypeDir {
				continue
			}
			return nil // skip the rest of this directory
		}
		if err != nil {
			return err
		}
		if e.Type == store.TypeDir {
			if err := walkRec(ctx, tg, e.Content, p, fn); err != nil {
				return err
			}
		}
	}
	return nil
}

// splitPath splits a slash-separated relative path into names, ignoring
// empty and "." elements. ".." is refused: a tree path never climbs.
func splitPath(p string) ([]string, error) {
	var names []string
	for _, n := range strings.Split(p, "/") {
		switch n {
		case "", ".":
			continue
		case "..":
			return nil, fmt.Errorf("path %q: a \"..\" element: %w", p, store.ErrInvalidName)
		}
		names = append(names, n)
	}
	return names, nil
}

// lookup finds the entry at p under root. The root itself ("" or ".") is
// returned as a directory entry with an empty name, mode 0755 and the root
// tree as content: the root's own metadata is not recorded.
func lookup(tg treeGetter, root store.ID, p string) (*store.TreeEntry, error) {
	names, err := splitPath(p)
	if err != nil {
		return nil, err
	}
	cur := &store.TreeEntry{Type: store.TypeDir, Mode: 0o755, Content: root}
	for i, name := range names {
		if cur.Type != store.TypeDir {
			return nil, fmt.Errorf("%q: %q is a %v, not a directory: %w", p, strings.Join(names[:i], "/"), cur.Type, store.ErrNotFound)
		}
		t, err := getTree(tg, cur.Content)
		if err != nil {
			return nil, err
		}
		j := sort.Search(len(t.Entries), func(j int) bool { return t.Entries[j].Name >= name })
		if j == len(t.Entries) || t.Entries[j].Name != name {
			return nil, fmt.Errorf("%q: %w", p, store.ErrNotFound)
		}
		cur = &t.Entries[j]
	}
	return cur, nil
}

// ChangeOp is what happened to a path between two trees.
type ChangeOp uint8

const (
	// Added: the path exists only in the new tree.
	Added ChangeOp = iota + 1
	// Deleted: the path exists only in the old tree.
	Deleted
	// Modified: the path exists in both and its entry differs: content,
	// type, mode, owner, mtime, xattrs, symlink target, device number or
	// hardlink group. A directory is Modified only when its own metadata
	// differs, not because something under it did.
	Modified
)

// String returns "added", "deleted" or "modified".
func (op ChangeOp) String() string {
	switch op {
	case Added:
		return "added"
	case Deleted:
		return "deleted"
	case Modified:
		return "modified"
	}
	return fmt.Sprintf("op(%d)", uint8(op))
}

// Letter returns git's --name-status letter: A, D or M.
func (op ChangeOp) Letter() string {
	switch op {
	case Added:
		return "A"
	case Deleted:
		return "D"
	case Modified:
		return "M"
	}
	return "?"
}

// MarshalText encodes the op as its String, for JSON output.
func (op ChangeOp) MarshalText() ([]byte, error) { return []byte(op.String()), nil }

// Change is one path that differs between two trees. Old is nil for Added,
// New is nil for Deleted.
//
// A change of type at one path (file → symlink, dir → file, ...) is one
// Modified change whose Old and New have different Types; when either side
// is a directory, everything under it is reported too (Deleted under the
// old directory, Added under the new one), so that every path that exists
// on only one side appears in the diff.
type Change struct {
	Path string           `json:"path"`
	Op   ChangeOp         `json:"op"`
	Old  *store.TreeEntry `json:"old,omitempty"`
	New  *store.TreeEntry `json:"new,omitempty"`
}

// diffTrees compares trees a and b (either may be ZeroID, the empty tree).
// The result is sorted by path, bytewise, so a directory precedes what is
// under it.
func diffTrees(ctx context.Context, tg treeGetter, a, b store.ID) ([]Change, error) {
	var out []Change
	if err := diffRec(ctx, tg, a, b, "", &out); err != nil {
		return nil, err
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

func diffRec(ctx context.Context, tg treeGetter, a, b store.ID, prefix string, out *[]Change) error {
	if a == b {
		return nil // identical subtrees are skipped whole
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	ta, err := getTree(tg, a)
	if err != nil {
		return err
	}
	tb, err := getTree(tg, b)
	if err != nil {
		return err
	}
	return zipEntries(ta.Entries, tb.Entries, func(ea, eb *store.TreeEntry) error {
		var p string
		if ea != nil {
			p = joinRel(prefix, ea.Name)
		} else {
			p = joinRel(prefix, eb.Name)
		}
		switch {
		case eb == nil:
			*out = append(*out, Change{Path: p, Op: Deleted, Old: ea})
			if err := diffSide(ctx, tg, ea, p, Deleted, out); err != nil {
				return err
			}
		case ea == nil:
			*out = append(*out, Change{Path: p, Op: Added, New: eb})
			if err := diffSide(ctx, tg, eb, p, Added, out); err != nil {
				return err
			}
		case ea.Type != eb.Type:
			*out = append(*out, Change{Path: p, Op: Modified, Old: ea, New: eb})
			if err := diffSide(ctx, tg, ea, p, Deleted, out); err != nil {
				return err
			}
			if err := diffSide(ctx, tg, eb, p, Added, out); err != nil {
				return err
			}
		case ea.Type == store.TypeDir:
			if !sameMeta(ea, eb) {
				*out = append(*out, Change{Path: p, Op: Modified, Old: ea, New: eb})
			}
			if err := diffRec(ctx, tg, ea.Content, eb.Content, p, out); err != nil {
				return err
			}
		case !sameMeta(ea, eb) || ea.Content != eb.Content:
			*out = append(*out, Change{Path: p, Op: Modified, Old: ea, New: eb})
		}
		return nil
	})
}

// diffSide reports everything under e (if a directory) with op.
func diffSide(ctx context.Context, tg treeGetter, e *store.TreeEntry, p string, op ChangeOp, out *[]Change) error {
	if e.Type != store.TypeDir {
		return nil
	}
	return walkRec(ctx, tg, e.Content, p, func(q string, c *store.TreeEntry) error {
		ch := Change{Path: q, Op: op}
		if op == Deleted {
			ch.Old = c
		} else {
			ch.New = c
		}
		*out = append(*out, ch)
		return nil
	})
}

// sameMeta compares everything but Content.
func sameMeta(a, b *store.TreeEntry) bool {
	return a.Name == b.Name && a.Type == b.Type && a.Mode == b.Mode &&
		a.UID == b.UID && a.GID == b.GID && a.MtimeNs == b.MtimeNs &&
		a.Size == b.Size && a.LinkGroup == b.LinkGroup && a.Target == b.Target &&
		a.Rdev == b.Rdev &&
		slices.EqualFunc(a.Xattrs, b.Xattrs, func(x, y store.Xattr) bool {
			return x.Name == y.Name && bytes.Equal(x.Value, y.Value)
		})
}

// zipEntries walks two name-sorted entry lists side by side and calls fn
// once per name: with both entries, or with nil for the side that lacks
// it. It stops at fn's first error.
func zipEntries(a, b []store.TreeEntry, fn func(ea, eb *store.TreeEntry) error) error {
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		var ea, eb *store.TreeEntry
		switch {
		case j == len(b) || (i < len(a) && a[i].Name < b[j].Name):
			ea = &a[i]
			i++
		case i == len(a) || b[j].Name < a[i].Name:
			eb = &b[j]
			j++
		default:
			ea, eb = &a[i], &b[j]
			i++
			j++
		}
		if err := fn(ea, eb); err != nil {
			return err
		}
	}
	return nil
}
