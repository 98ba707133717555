package snapshot

import (
	"bytes"
	"context"
	"fmt"
	"sort"

	"github.com/stratafs/strata/internal/textdiff"
	"github.com/stratafs/strata/store"
)

// Conflict is a path that a three-way merge (or ApplyTo) cannot decide,
// and why.
type Conflict struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// Reasons of merge conflicts. "ours/theirs": the first word is what ours
// did, the second what theirs did.
const (
	ReasonBinary     = "both modified (binary)"
	ReasonTooLarge   = "both modified (too large to merge)"
	ReasonContent    = "content conflict"
	ReasonModDel     = "modified/deleted"
	ReasonDelMod     = "deleted/modified"
	ReasonAddAdd     = "both added with different content"
	ReasonAddAddType = "both added with different types"
	ReasonTypeBoth   = "type changed on both sides"
	ReasonTypeMod    = "type changed/modified"
	ReasonModType    = "modified/type changed"
	ReasonSymlink    = "both modified (symlink target)"
	ReasonSpecial    = "both modified (device number)"
	ReasonMode       = "mode changed differently"
	ReasonOwner      = "owner changed differently"
	ReasonXattrs     = "xattrs changed differently"
)

// MergeResult is the outcome of a three-way merge.
type MergeResult struct {
	// Tree is the merged root tree, or ZeroID when there are conflicts
	// (then nothing was written through the Writer).
	Tree store.ID
	// Conflicts lists the paths that could not be merged, sorted by path.
	Conflicts []Conflict
	// Stats summarize the merged tree (zero with conflicts).
	Stats store.CommitStats
}

// MergeOptions tune MergeWith.
type MergeOptions struct {
	// OursStats, when set, are the statistics of ours (its commit's
	// Stats): the merged tree is counted from them and the merge. Without
	// them every tree of ours is read to count it.
	OursStats *store.CommitStats
	// Warn, if set, receives one call per decision a caller may want to
	// know about (a hardlink group split because its members diverged).
	Warn func(path, msg string)
	// MaxTextSize is the largest file (on any side) merged line by line
	// when both sides changed it; larger ones are a conflict. Zero means
	// DefaultMaxTextSize.
	MaxTextSize int64
}

// DefaultMaxTextSize bounds the files Merge merges line by line: they are
// held in memory, three versions and the result.
const DefaultMaxTextSize = 16 << 20

// Merge merges the changes that ours and theirs (trees, descendants of
// base) made to base: MergeWith without options.
func Merge(ctx context.Context, s *store.Store, w *store.Writer, base, ours, theirs store.ID) (*MergeResult, error) {
	return MergeWith(ctx, s, w, base, ours, theirs, MergeOptions{})
}

// MergeWith merges the changes that ours and theirs made to base, three
// trees (ZeroID is the empty tree), and writes the merged tree through w.
//
// A path changed on one side only takes that side's entry; a path changed
// identically on both sides merges. A regular file whose content both
// sides changed is merged line by line (textdiff.Merge3) unless either
// version is binary; metadata merge per field (mode, owner and xattrs
// changed differently conflict; mtime takes the newer). Anything else
// changed differently on both sides is a Conflict, listed by path. When
// there is a conflict, Tree is ZeroID and nothing is written. Subtrees that
// are equal on two sides are decided by id, unread. See docs/snapshot.md,
// "Merge".
func MergeWith(ctx context.Context, s *store.Store, w *store.Writer, base, ours, theirs store.ID, opts MergeOptions) (*MergeResult, error) {
	return mergeTrees(ctx, storeReader{s}, w, base, ours, theirs, opts)
}

type merger struct {
	ctx       context.Context
	r         objectReader
	tc        *treeCache
	opts      MergeOptions
	conflicts []Conflict
	touched   map[string]bool   // link groups with a member the merge changed
	delta     store.CommitStats // the merged tree minus ours
	texts     []*mergedText
}

// mergedText is a file merged line by line, written once the merge is
// known to be clean.
type mergedText struct {
	e    *store.TreeEntry
	data []byte
}

func mergeTrees(ctx context.Context, r objectReader, w objectWriter, base, ours, theirs store.ID, opts MergeOptions) (*MergeResult, error) {
	if opts.MaxTextSize == 0 {
		opts.MaxTextSize = DefaultMaxTextSize
	}
	m := &merger{ctx: ctx, r: r, tc: newTreeCache(ctx, r), opts: opts, touched: map[string]bool{}}
	res, err := m.run(w, base, ours, theirs)
	if err != nil {
		return nil, fmt.Errorf("merge %s and %s (base %s): %w", ours.Short(), theirs.Short(), base.Short(), err)
	}
	return res, nil
}

func (m *merger) run(w objectWriter, base, ours, theirs store.ID) (*MergeResult, error) {
	x := newTreeWriter(m.ctx, w)
	oursStats := func() (store.CommitStats, error) {
		if m.opts.OursStats != nil {
			return *m.opts.OursStats, nil
		}
		var in *subInfo
		err := m.tc.inView(func() error {
			var err error
			in, err = m.tc.count(ours, "", 0)
			return err
		})
		if err != nil {
			return store.CommitStats{}, err
		}
		return in.stats, nil
	}
	// Whole trees decided by id: theirs changed nothing (or the same),
	// or ours changed nothing.
	if ours == theirs || base == theirs || base == ours {
		tree := ours
		if ours != theirs && base != theirs {
			tree = theirs
			err := m.tc.inView(func() error { return m.diffTrees(ours, theirs, "", 0) })
			if err != nil {
				return nil, err
			}
		}
		st, err := oursStats()
		if err != nil {
			return nil, err
		}
		addStats(&st, m.delta, 1)
		if err := x.retainOne(tree, "tree"); err != nil {
			return nil, err
		}
		return &MergeResult{Tree: tree, Stats: st}, nil
	}

	root, err := m.tc.loadDir(ours, "", "")
	if err != nil {
		return nil, err
	}
	if err := m.mergeDir(root, base, theirs, "", 0); err != nil {
		return nil, err
	}
	if len(m.conflicts) > 0 {
		sort.SliceStable(m.conflicts, func(i, j int) bool { return m.conflicts[i].Path < m.conflicts[j].Path })
		return &MergeResult{Conflicts: m.conflicts}, nil
	}
	err = m.tc.inView(func() error { return m.tc.canonGroups(root, m.touched, nil, m.opts.Warn) })
	if err != nil {
		return nil, err
	}
	st, err := oursStats()
	if err != nil {
		return nil, err
	}
	addStats(&st, m.delta, 1)
	for _, t := range m.texts {
		id, err := w.WriteBytes(t.data)
		if err != nil {
			return nil, fmt.Errorf("write merged content: %w", err)
		}
		t.e.Content = id
		x.own[id] = true
	}
	tree, changed, err := x.write(root, "", 0)
	if err != nil {
		return nil, err
	}
	if !changed {
		if err := x.retainOne(tree, "tree"); err != nil {
			return nil, err
		}
	}
	if err := x.retainReused(); err != nil {
		return nil, err
	}
	if err := w.Flush(); err != nil {
		return nil, fmt.Errorf("flush: %w", err)
	}
	return &MergeResult{Tree: tree, Stats: st}, nil
}

func (m *merger) conflict(p, reason string) {
	m.conflicts = append(m.conflicts, Conflict{Path: p, Reason: reason})
}

// sameEntry reports whether a and b (either may be nil) are the same
// entry: same type, metadata and content.
func sameEntry(a, b *store.TreeEntry) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Content == b.Content && sameMeta(a, b)
}

func findEntry(t *store.Tree, name string) *store.TreeEntry {
	i := sort.Search(len(t.Entries), func(i int) bool { return t.Entries[i].Name >= name })
	if i < len(t.Entries) && t.Entries[i].Name == name {
		return &t.Entries[i]
	}
	return nil
}

// mergeDir merges into d, ours' directory at rel (loaded), the changes
// theirs (tree t) made to base (tree b).
func (m *merger) mergeDir(d *edir, b, t store.ID, rel string, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("%q: trees nested deeper than %d: %w", rel, maxDepth, store.ErrCorrupt)
	}
	if err := m.ctx.Err(); err != nil {
		return err
	}
	tb, err := m.tc.get(b, rel)
	if err != nil {
		return err
	}
	tt, err := m.tc.get(t, rel)
	if err != nil {
		return err
	}
	names := map[string]bool{}
	for n := range d.entries {
		names[n] = true
	}
	for i := range tb.Entries {
		names[tb.Entries[i].Name] = true
	}
	for i := range tt.Entries {
		names[tt.Entries[i].Name] = true
	}
	for _, name := range sortedKeys(names) {
		eb, eo, et := findEntry(tb, name), d.entries[name], findEntry(tt, name)
		if err := m.entry(d, name, joinRel(rel, name), eb, eo, et, depth); err != nil {
			return err
		}
	}
	return nil
}

// entry merges one name of the directory d.
func (m *merger) entry(d *edir, name, p string, eb, eo, et *store.TreeEntry, depth int) error {
	switch {
	case sameEntry(eo, et), sameEntry(eb, et):
		return nil // the same change on both sides, or theirs changed nothing
	case sameEntry(eb, eo):
		return m.take(d, name, p, eo, et)
	}
	// Both sides changed it, differently.
	m.touchEntry(eb)
	m.touchEntry(eo)
	m.touchEntry(et)
	switch {
	case eo == nil || et == nil:
		return m.deleted(d, name, p, eb, eo, et, depth)
	case eo.Type != et.Type:
		switch {
		case eb == nil:
			m.conflict(p, ReasonAddAddType)
		case eo.Type != eb.Type && et.Type != eb.Type:
			m.conflict(p, ReasonTypeBoth)
		case eo.Type != eb.Type:
			m.conflict(p, ReasonTypeMod)
		default:
			m.conflict(p, ReasonModType)
		}
		return nil
	}
	if eb != nil && eb.Type != eo.Type {
		eb = nil // both replaced it with the same type: no common base
	}
	r, reasons := mergeMeta(eb, eo, et)
	switch eo.Type {
	case store.TypeDir:
		for _, why := range reasons {
			m.conflict(p, why)
		}
		sub, err := m.tc.sub(d, name, p)
		if err != nil {
			return err
		}
		bc := store.ZeroID
		if eb != nil {
			bc = eb.Content
		}
		if err := m.mergeDir(sub, bc, et.Content, p, depth+1); err != nil {
			return err
		}
		d.entries[name] = r
		d.dirty = true
		return nil
	case store.TypeFile:
		why, err := m.mergeContent(r, p, eb, eo, et)
		if err != nil {
			return err
		}
		if why != "" {
			reasons = append(reasons, why)
		}
	case store.TypeSymlink:
		if eo.Target != et.Target {
			reasons = append(reasons, ReasonSymlink)
		}
	default:
		if eo.Rdev != et.Rdev {
			reasons = append(reasons, ReasonSpecial)
		}
	}
	for _, why := range reasons {
		m.conflict(p, why)
	}
	addStats(&m.delta, entryStats(eo), -1)
	addStats(&m.delta, entryStats(r), 1)
	d.entries[name] = r
	d.dirty = true
	return nil
}

// take puts theirs' entry et (nil: deleted) at name in d, where ours left
// base's entry eo alone; the statistics and link groups follow the
// difference between eo and et, read only as far as they differ.
func (m *merger) take(d *edir, name, p string, eo, et *store.TreeEntry) error {
	if err := m.tc.inView(func() error { return m.diffEntries(eo, et, p, 0) }); err != nil {
		return err
	}
	if et == nil {
		d.forget(name)
		return nil
	}
	c := *et
	d.entries[name] = &c
	delete(d.subs, name)
	d.dirty = true
	return nil
}

// deleted merges a name that one side deleted and the other changed. A
// directory deleted on one side and changed inside on the other is
// merged as if the deleting side had emptied it: what the other side
// added stays, what it changed is a conflict, the rest goes; it is
// deleted if nothing stays. Anything else is a conflict.
func (m *merger) deleted(d *edir, name, p string, eb, eo, et *store.TreeEntry, depth int) error {
	kept := eo
	if kept == nil {
		kept = et
	}
	if eb == nil || eb.Type != store.TypeDir || kept.Type != store.TypeDir {
		if eo == nil {
			m.conflict(p, ReasonDelMod)
		} else {
			m.conflict(p, ReasonModDel)
		}
		return nil
	}
	if eo == nil { // ours deleted the directory: start from an empty one
		sub := &edir{origin: p, entries: map[string]*store.TreeEntry{}, subs: map[string]*edir{}, dirty: true}
		if err := m.mergeDir(sub, eb.Content, et.Content, p, depth+1); err != nil {
			return err
		}
		if len(sub.entries) > 0 {
			c := *et
			d.entries[name] = &c
			d.subs[name] = sub
			d.dirty = true
			addStats(&m.delta, entryStats(et), 1)
		}
		return nil
	}
	sub, err := m.tc.sub(d, name, p)
	if err != nil {
		return err
	}
	if err := m.mergeDir(sub, eb.Content, store.ZeroID, p, depth+1); err != nil {
		return err
	}
	if len(sub.entries) == 0 {
		addStats(&m.delta, entryStats(eo), -1)
		d.forget(name)
	}
	return nil
}

// touchEntry notes e's link group as changed by the merge.
func (m *merger) touchEntry(e *store.TreeEntry) {
	if e != nil && e.LinkGroup != "" {
		m.touched[e.LinkGroup] = true
	}
}

// diffEntries adds to the statistics the difference between a and b (at
// p; either may be nil) and notes the link groups of what differs.
// Directories are compared tree by tree, equal subtrees skipped by id;
// what exists on one side only is counted whole.
func (m *merger) diffEntries(a, b *store.TreeEntry, p string, depth int) error {
	if sameEntry(a, b) {
		return nil
	}
	if a != nil && b != nil && a.Type == store.TypeDir && b.Type == store.TypeDir {
		return m.diffTrees(a.Content, b.Content, p, depth+1)
	}
	if err := m.countEntry(a, p, -1, depth); err != nil {
		return err
	}
	return m.countEntry(b, p, 1, depth)
}

// countEntry adds sign × e (nil: nothing) and everything under it to the
// statistics, and notes its link groups.
func (m *merger) countEntry(e *store.TreeEntry, p string, sign int64, depth int) error {
	if e == nil {
		return nil
	}
	m.touchEntry(e)
	addStats(&m.delta, entryStats(e), sign)
	if e.Type != store.TypeDir {
		return nil
	}
	in, err := m.tc.count(e.Content, p, depth+1)
	if err != nil {
		return err
	}
	addStats(&m.delta, in.stats, sign)
	for _, g := range in.groups {
		m.touched[g] = true
	}
	return nil
}

// diffTrees is diffEntries for the entries of trees a and b.
func (m *merger) diffTrees(a, b store.ID, rel string, depth int) error {
	if a == b {
		return nil
	}
	if depth > maxDepth {
		return fmt.Errorf("%q: trees nested deeper than %d: %w", rel, maxDepth, store.ErrCorrupt)
	}
	if err := m.ctx.Err(); err != nil {
		return err
	}
	ta, err := m.tc.get(a, rel)
	if err != nil {
		return err
	}
	tb, err := m.tc.get(b, rel)
	if err != nil {
		return err
	}
	return zipEntries(ta.Entries, tb.Entries, func(ea, eb *store.TreeEntry) error {
		name := ""
		if ea != nil {
			name = ea.Name
		} else {
			name = eb.Name
		}
		if err := m.diffEntries(ea, eb, joinRel(rel, name), depth); err != nil {
			return err
		}
		return nil
	})
}

// mergeMeta merges the metadata of eo and et (same type) over eb (nil: no
// common base, both added) into a copy of eo, and lists the fields that
// both sides changed differently. Content, size, target and device are
// the caller's.
func mergeMeta(eb, eo, et *store.TreeEntry) (*store.TreeEntry, []string) {
	r := *eo
	var reasons []string
	var b store.TreeEntry
	if eb != nil {
		b = *eb
	}
	has := eb != nil
	type owner struct{ uid, gid uint32 }
	if v, ok := pick3(b.Mode, eo.Mode, et.Mode, has); ok {
		r.Mode = v
	} else {
		reasons = append(reasons, ReasonMode)
	}
	if v, ok := pick3(owner{b.UID, b.GID}, owner{eo.UID, eo.GID}, owner{et.UID, et.GID}, has); ok {
		r.UID, r.GID = v.uid, v.gid
	} else {
		reasons = append(reasons, ReasonOwner)
	}
	switch {
	case sameXattrs(eo.Xattrs, et.Xattrs):
	case has && sameXattrs(b.Xattrs, eo.Xattrs):
		r.Xattrs = et.Xattrs
	case has && sameXattrs(b.Xattrs, et.Xattrs):
	default:
		reasons = append(reasons, ReasonXattrs)
	}
	if v, ok := pick3(b.MtimeNs, eo.MtimeNs, et.MtimeNs, has); ok {
		r.MtimeNs = v
	} else {
		r.MtimeNs = max(eo.MtimeNs, et.MtimeNs) // both changed: the newer
	}
	// A link group that both sides changed differently is dropped; the
	// groups are made canonical after the merge (canonGroups).
	r.LinkGroup, _ = pick3(b.LinkGroup, eo.LinkGroup, et.LinkGroup, has)
	return &r, reasons
}

// pick3 merges one field: the value both sides agree on, or the side that
// changed it from the base (when there is one); ok is false when both
// changed it differently, and the value is then the zero value.
func pick3[T comparable](b, o, t T, hasBase bool) (T, bool) {
	switch {
	case o == t:
		return o, true
	case hasBase && b == o:
		return t, true
	case hasBase && b == t:
		return o, true
	}
	var zero T
	return zero, false
}

// mergeContent sets r's content from eo and et, both regular files (eb, if
// not nil, too), merging the lines when both changed it. It returns the
// reason of a conflict, or "".
func (m *merger) mergeContent(r *store.TreeEntry, p string, eb, eo, et *store.TreeEntry) (string, error) {
	switch {
	case eo.Content == et.Content && eo.Size == et.Size:
		return "", nil
	case eb != nil && eb.Content == eo.Content && eb.Size == eo.Size:
		r.Content, r.Size = et.Content, et.Size
		return "", nil
	case eb != nil && eb.Content == et.Content && eb.Size == et.Size:
		return "", nil
	case eb == nil:
		return ReasonAddAdd, nil
	}
	if max(eb.Size, eo.Size, et.Size) > m.opts.MaxTextSize {
		return ReasonTooLarge, nil
	}
	var data [3][]byte
	for i, e := range []*store.TreeEntry{eb, eo, et} {
		var buf bytes.Buffer
		buf.Grow(int(e.Size))
		n, err := m.r.ReadContentTo(m.ctx, e.Content, &buf)
		if err != nil {
			return "", fmt.Errorf("%q: read content %s: %w", p, e.Content.Short(), err)
		}
		if n != e.Size {
			return "", fmt.Errorf("%q: content %s has %d bytes, entry says %d: %w", p, e.Content.Short(), n, e.Size, store.ErrCorrupt)
		}
		data[i] = buf.Bytes()
		if textdiff.IsBinary(data[i]) {
			return ReasonBinary, nil
		}
	}
	merged, conflict := textdiff.Merge3(data[0], data[1], data[2])
	if conflict {
		return ReasonContent, nil
	}
	r.Content, r.Size = store.ZeroID, int64(len(merged))
	if len(merged) > 0 {
		m.texts = append(m.texts, &mergedText{e: r, data: merged})
	}
	return "", nil
}
