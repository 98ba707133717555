package snapshot

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/stratafs/strata/store"
)

// This file holds what ApplyUpper and Merge share: a cache of the trees
// they read, an editable copy of the directories they change (edir) over
// subtrees they leave alone (kept by id, never read), the canonical
// re-grouping of hardlinks, and the writing of the changed trees.

// treeCache reads trees (checking every name, DESIGN invariant 6) and
// remembers them, and what is under them, by id. Reads go through one
// read view of the store at a time: inView opens one for a batch of reads,
// and get opens one per tree outside a batch.
type treeCache struct {
	ctx  context.Context
	r    objectReader
	memo map[store.ID]*store.Tree
	info map[store.ID]*subInfo
	tg   treeGetter // set inside inView
	// runs: loadDir loads a run index run by run (runs.go); ApplyUpper's
	// cache only, with a Writer that splices.
	runs bool
	// runsLoaded counts the runs loadRun loaded.
	runsLoaded int
	// reads counts the trees read from the store (not from memo).
	reads int
}

// subInfo summarizes everything under a tree.
type subInfo struct {
	stats  store.CommitStats // entries under the tree, not the tree itself
	groups []string          // the link groups of the files under it, sorted, unique
}

func newTreeCache(ctx context.Context, r objectReader) *treeCache {
	return &treeCache{ctx: ctx, r: r, memo: map[store.ID]*store.Tree{}, info: map[store.ID]*subInfo{}}
}

// inView runs fn with a read view of the store open, so that the trees fn
// reads share one transaction. fn must not call a Writer.
func (c *treeCache) inView(fn func() error) error {
	if c.tg != nil {
		return fn()
	}
	return c.r.view(c.ctx, func(tg treeGetter) error {
		c.tg = tg
		defer func() { c.tg = nil }()
		return fn()
	})
}

var emptyTree = &store.Tree{}

// get returns the tree id (ZeroID: the empty tree) found at rel. The
// result is shared: callers must not change it.
func (c *treeCache) get(id store.ID, rel string) (*store.Tree, error) {
	if id.IsZero() {
		return emptyTree, nil
	}
	if t, ok := c.memo[id]; ok {
		return t, nil
	}
	if err := c.ctx.Err(); err != nil {
		return nil, err
	}
	var t *store.Tree
	err := c.inView(func() error {
		var err error
		t, err = c.tg.Tree(id)
		if err != nil {
			return fmt.Errorf("tree %s at %q: %w", id.Short(), rel, err)
		}
		return checkTree(t, id, rel)
	})
	if err != nil {
		return nil, err
	}
	c.reads++
	c.memo[id] = t
	return t, nil
}

// count summarizes the subtree id at rel, reading all of it once.
func (c *treeCache) count(id store.ID, rel string, depth int) (*subInfo, error) {
	if in, ok := c.info[id]; ok {
		return in, nil
	}
	if depth > maxDepth {
		return nil, fmt.Errorf("%q: trees nested deeper than %d: %w", rel, maxDepth, store.ErrCorrupt)
	}
	var in *subInfo
	err := c.inView(func() error {
		t, err := c.get(id, rel)
		if err != nil {
			return err
		}
		in = &subInfo{}
		for i := range t.Entries {
			e := &t.Entries[i]
			addStats(&in.stats, entryStats(e), 1)
			if e.LinkGroup != "" {
				in.groups = append(in.groups, e.LinkGroup)
			}
			if e.Type == store.TypeDir {
				sub, err := c.count(e.Content, joinRel(rel, e.Name), depth+1)
				if err != nil {
					return err
				}
				addStats(&in.stats, sub.stats, 1)
				in.groups = append(in.groups, sub.groups...)
			}
		}
		slices.Sort(in.groups)
		in.groups = slices.Compact(in.groups)
		return nil
	})
	if err != nil {
		return nil, err
	}
	c.info[id] = in
	return in, nil
}

// entryStats counts one entry by itself, as CommitStats counts it.
func entryStats(e *store.TreeEntry) store.CommitStats {
	switch e.Type {
	case store.TypeFile:
		return store.CommitStats{Files: 1, Bytes: e.Size}
	case store.TypeDir:
		return store.CommitStats{Dirs: 1}
	}
	return store.CommitStats{Other: 1}
}

// addStats adds sign × b to a.
func addStats(a *store.CommitStats, b store.CommitStats, sign int64) {
	a.Files += sign * b.Files
	a.Dirs += sign * b.Dirs
	a.Other += sign * b.Other
	a.Bytes += sign * b.Bytes
}

// --- editable directories ------------------------------------------------

// edir is a directory of a tree being edited: a private copy of its
// entries. A child directory is either loaded too (in subs) or kept as the
// entry's Content id, unread. A directory is rewritten when it is dirty or
// a loaded child was rewritten; otherwise it keeps id.
type edir struct {
	id store.ID // the tree the entries came from (when not fresh)
	// orig is that tree as read (shared with the tree cache: read only),
	// to tell the entries that are still its own when d is written.
	orig *store.Tree
	// origin is the path, in the tree the entries came from, of this
	// directory; fresh directories have none. It lets the link-group
	// walk skip subtrees that cannot hold a group's member.
	origin string
	fresh  bool
	// part is set while d is a large directory loaded run by run
	// (runs.go): entries then holds only the loaded runs' entries, and a
	// name is looked up after treeCache.need.
	part    *partDir
	entries map[string]*store.TreeEntry
	subs    map[string]*edir
	// origins overrides the origin of child directories that come from
	// another place (a directory renamed with redirect_dir).
	origins map[string]string
	dirty   bool
}

func newFreshDir() *edir {
	return &edir{fresh: true, entries: map[string]*store.TreeEntry{}, subs: map[string]*edir{}, dirty: true}
}

// loadDir makes an editable copy of the tree id, found at origin.
func (c *treeCache) loadDir(id store.ID, origin, rel string) (*edir, error) {
	if d, err := c.loadParts(id, origin, rel); d != nil || err != nil {
		return d, err
	}
	t, err := c.get(id, rel)
	if err != nil {
		return nil, err
	}
	d := &edir{id: id, orig: t, origin: origin, entries: make(map[string]*store.TreeEntry, len(t.Entries)), subs: map[string]*edir{}}
	// A copy (the cached tree is shared), in one allocation: a wide
	// directory's entries one by one are thousands of small objects, and
	// in a fresh process each new heap page is a page fault.
	es := slices.Clone(t.Entries)
	for i := range es {
		d.entries[es[i].Name] = &es[i]
	}
	return d, nil
}

// childOrigin returns the origin of the child directory name, and false
// when it has none (a fresh directory's children come from nowhere).
func (d *edir) childOrigin(name string) (string, bool) {
	if o, ok := d.origins[name]; ok {
		return o, true
	}
	if d.fresh {
		return "", false
	}
	return joinRel(d.origin, name), true
}

// setOrigin records that the child directory name comes from origin.
func (d *edir) setOrigin(name, origin string) {
	if d.origins == nil {
		d.origins = map[string]string{}
	}
	d.origins[name] = origin
}

// forget drops what d knows about its child name.
func (d *edir) forget(name string) {
	delete(d.entries, name)
	delete(d.subs, name)
	delete(d.origins, name)
	d.dirty = true
}

// sub returns the loaded child directory name of d (at rel), loading it.
func (c *treeCache) sub(d *edir, name, rel string) (*edir, error) {
	if s, ok := d.subs[name]; ok {
		return s, nil
	}
	if err := c.need(d, name, dirOf(rel)); err != nil {
		return nil, err
	}
	e := d.entries[name]
	if e == nil || e.Type != store.TypeDir {
		return nil, fmt.Errorf("%q: not a directory", rel)
	}
	origin, ok := d.childOrigin(name)
	s, err := c.loadDir(e.Content, origin, rel)
	if err != nil {
		return nil, err
	}
	s.fresh = !ok
	d.subs[name] = s
	return s, nil
}

// resolve returns the loaded directory at the slash-separated path p under
// root, loading the directories on the way; errNotDir when a component is
// missing or not a directory.
func (c *treeCache) resolve(root *edir, p string) (*edir, error) {
	d := root
	if p == "" {
		return d, nil
	}
	rel := ""
	for _, name := range strings.Split(p, "/") {
		if err := c.need(d, name, rel); err != nil {
			return nil, err
		}
		rel = joinRel(rel, name)
		e := d.entries[name]
		if e == nil || e.Type != store.TypeDir {
			return nil, fmt.Errorf("%q: %w", rel, errNotDir)
		}
		var err error
		if d, err = c.sub(d, name, rel); err != nil {
			return nil, err
		}
	}
	return d, nil
}

var errNotDir = fmt.Errorf("not a directory in the tree: %w", store.ErrNotFound)

// countDir summarizes the entries under the edited directory d.
func (c *treeCache) countDir(d *edir, rel string, depth int) (*subInfo, error) {
	if len(d.subs) == 0 && !d.dirty && !d.fresh {
		return c.count(d.id, rel, depth)
	}
	if err := c.full(d, rel); err != nil {
		return nil, err
	}
	if depth > maxDepth {
		return nil, fmt.Errorf("%q: trees nested deeper than %d: %w", rel, maxDepth, store.ErrCorrupt)
	}
	in := &subInfo{}
	for name, e := range d.entries {
		addStats(&in.stats, entryStats(e), 1)
		if e.LinkGroup != "" {
			in.groups = append(in.groups, e.LinkGroup)
		}
		if e.Type != store.TypeDir {
			continue
		}
		var sub *subInfo
		var err error
		if s, ok := d.subs[name]; ok {
			sub, err = c.countDir(s, joinRel(rel, name), depth+1)
		} else {
			sub, err = c.count(e.Content, joinRel(rel, name), depth+1)
		}
		if err != nil {
			return nil, err
		}
		addStats(&in.stats, sub.stats, 1)
		in.groups = append(in.groups, sub.groups...)
	}
	slices.Sort(in.groups)
	in.groups = slices.Compact(in.groups)
	return in, nil
}

// sortedNames returns the names of d's entries in tree order (bytewise).
func (d *edir) sortedNames() []string {
	if d.part != nil {
		panic("snapshot: sortedNames of a directory loaded run by run (treeCache.full first)")
	}
	// The names still present of the tree d was loaded from, in its
	// (sorted) order, with the added ones merged in: a wide directory
	// with one entry changed is not sorted again.
	var kept, added []string
	if d.orig != nil {
		kept = make([]string, 0, len(d.entries))
		for i := range d.orig.Entries {
			if _, ok := d.entries[d.orig.Entries[i].Name]; ok {
				kept = append(kept, d.orig.Entries[i].Name)
			}
		}
		if len(kept) == len(d.entries) {
			return kept
		}
	}
	for n := range d.entries {
		if !d.inOrig(n) {
			added = append(added, n)
		}
	}
	sort.Strings(added)
	if len(kept) == 0 {
		return added
	}
	names := make([]string, 0, len(d.entries))
	for len(kept) > 0 && len(added) > 0 {
		if kept[0] < added[0] {
			names, kept = append(names, kept[0]), kept[1:]
		} else {
			names, added = append(names, added[0]), added[1:]
		}
	}
	return append(append(names, kept...), added...)
}

// inOrig reports whether the tree d was loaded from has an entry name.
func (d *edir) inOrig(name string) bool {
	if d.orig == nil {
		return false
	}
	_, found := slices.BinarySearchFunc(d.orig.Entries, name, func(e store.TreeEntry, n string) int { return strings.Compare(e.Name, n) })
	return found
}

// --- paths ---------------------------------------------------------------

// cmpWalk orders slash-separated paths in walk order: component by
// component, so that a directory comes right before what is under it
// ("a/two" before "a-c/x", although "a-c/x" < "a/two" as strings). ""
// (the root) comes first.
func cmpWalk(a, b string) int {
	for {
		if a == b {
			return 0
		}
		if a == "" {
			return -1
		}
		if b == "" {
			return 1
		}
		ca, ra, _ := strings.Cut(a, "/")
		cb, rb, _ := strings.Cut(b, "/")
		if c := strings.Compare(ca, cb); c != 0 {
			return c
		}
		a, b = ra, rb
	}
}

// isUnder reports whether p is dir or below it ("" is the root).
func isUnder(p, dir string) bool {
	return dir == "" || p == dir || strings.HasPrefix(p, dir+"/")
}

// --- link groups -----------------------------------------------------------

// canonGroups makes the link groups in touched canonical in the tree
// under root: a group whose members (regular files with that LinkGroup)
// are fewer than two, or differ in content or metadata, loses its
// LinkGroup; the others are keyed by their first member in walk order.
// Members for which exclude returns true are not considered (nor
// changed). It reports the changes it made through warn when members
// disagree.
//
// Finding the members reads the trees of the result that can hold one:
// every member of a group keyed K is at K or after it in walk order (the
// key is its first member in the tree the group came from), so subtrees
// whose origin lies wholly before the smallest key are skipped unread; the
// others are read whole. Must run inside inView for the reads to share a
// transaction.
func (c *treeCache) canonGroups(root *edir, touched map[string]bool, exclude func(p string) bool, warn func(p, msg string)) error {
	if len(touched) == 0 {
		return nil
	}
	minKey := ""
	first := true
	for k := range touched {
		if first || cmpWalk(k, minKey) < 0 {
			minKey, first = k, false
		}
	}
	members := map[string][]string{}
	var walkTree func(id store.ID, rel string, depth int) error
	visit := func(e *store.TreeEntry, p string) {
		if e.Type == store.TypeFile && e.LinkGroup != "" && touched[e.LinkGroup] && (exclude == nil || !exclude(p)) {
			members[e.LinkGroup] = append(members[e.LinkGroup], p)
		}
	}
	skip := func(origin string) bool {
		return cmpWalk(origin, minKey) < 0 && !isUnder(minKey, origin)
	}
	walkTree = func(id store.ID, rel string, depth int) error {
		if depth > maxDepth {
			return fmt.Errorf("%q: trees nested deeper than %d: %w", rel, maxDepth, store.ErrCorrupt)
		}
		t, err := c.get(id, rel)
		if err != nil {
			return err
		}
		for i := range t.Entries {
			e := &t.Entries[i]
			p := joinRel(rel, e.Name)
			visit(e, p)
			if e.Type == store.TypeDir {
				if err := walkTree(e.Content, p, depth+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	var walkDir func(d *edir, rel string, depth int) error
	walkDir = func(d *edir, rel string, depth int) error {
		if depth > maxDepth {
			return fmt.Errorf("%q: trees nested deeper than %d: %w", rel, maxDepth, store.ErrCorrupt)
		}
		if err := c.ctx.Err(); err != nil {
			return err
		}
		if err := c.full(d, rel); err != nil {
			return err
		}
		for _, name := range d.sortedNames() {
			e := d.entries[name]
			p := joinRel(rel, name)
			visit(e, p)
			if e.Type != store.TypeDir {
				continue
			}
			if s, ok := d.subs[name]; ok {
				if err := walkDir(s, p, depth+1); err != nil {
					return err
				}
				continue
			}
			if origin, ok := d.childOrigin(name); ok && skip(origin) {
				continue
			}
			// A subtree whose origin is the same path (no rename) and
			// lies wholly before the smallest key cannot hold a member
			// either; one that can is read whole, but only its trees.
			if err := walkTree(e.Content, p, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walkDir(root, "", 0); err != nil {
		return err
	}

	set := func(p, group string) error {
		dir, name := splitRel(p)
		d, err := c.resolve(root, dir)
		if err != nil {
			return err
		}
		if err := c.need(d, name, dir); err != nil {
			return err
		}
		e := d.entries[name]
		if e.LinkGroup != group {
			e.LinkGroup = group
			d.dirty = true
		}
		return nil
	}
	keys := make([]string, 0, len(touched))
	for k := range touched {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ps := members[k]
		if len(ps) == 0 {
			continue
		}
		group := ps[0]
		if len(ps) < 2 {
			group = ""
		} else if !c.sameInode(root, ps) {
			group = ""
			if warn != nil {
				warn(ps[0], fmt.Sprintf("hardlink group %q has members with different content or metadata; recorded as %d separate files", k, len(ps)))
			}
		}
		for _, p := range ps {
			if err := set(p, group); err != nil {
				return err
			}
		}
	}
	return nil
}

// sameInode reports whether the entries at ps (regular files under root)
// could be one inode: same content and metadata.
func (c *treeCache) sameInode(root *edir, ps []string) bool {
	var first *store.TreeEntry
	for _, p := range ps {
		dir, name := splitRel(p)
		d, err := c.resolve(root, dir)
		if err != nil {
			return false
		}
		if c.need(d, name, dir) != nil {
			return false
		}
		e := d.entries[name]
		if first == nil {
			first = e
			continue
		}
		if e.Content != first.Content || e.Size != first.Size || e.Mode != first.Mode ||
			e.UID != first.UID || e.GID != first.GID || e.MtimeNs != first.MtimeNs ||
			!sameXattrs(e.Xattrs, first.Xattrs) {
			return false
		}
	}
	return true
}

func sameXattrs(a, b []store.Xattr) bool {
	return slices.EqualFunc(a, b, func(x, y store.Xattr) bool {
		return x.Name == y.Name && string(x.Value) == string(y.Value)
	})
}

// --- writing -----------------------------------------------------------------

// retainAller is the batch form of Retain that *store.Writer has.
type retainAller interface {
	RetainAll(ids []store.ID) ([]bool, error)
}

// underRetainer is what *store.Writer has to retain the unchanged
// entries of a rewritten directory through its previous tree
// (store.Writer.RetainedUnder).
type underRetainer interface {
	RetainedUnder(parent store.ID, ids []store.ID) error
}

// treeLiker is what *store.Writer has to store a directory as a new
// version of its previous tree (store.Writer.PutTreeLike): a large
// directory's unchanged runs are not stored again.
type treeLiker interface {
	PutTreeLike(t *store.Tree, prev store.ID) (store.ID, error)
}

// treeWriter stores the rewritten directories of an edit bottom-up.
type treeWriter struct {
	ctx context.Context
	w   objectWriter
	// own holds the ids this edit wrote or retained: everything else a
	// written tree references is reused from the source trees and is
	// retained before the edit returns.
	own   map[store.ID]bool
	reuse map[store.ID]string // id → a path that references it
	// under are the entries of rewritten directories that are unchanged
	// from the directory's previous tree: they are retained through that
	// tree (one id) instead of one by one, when the writer can.
	under []underGroup
	trees int // trees written
}

// underGroup is a previous tree and the reused entries it references.
type underGroup struct {
	parent store.ID
	rel    string
	ids    []store.ID
}

func newTreeWriter(ctx context.Context, w objectWriter) *treeWriter {
	return &treeWriter{ctx: ctx, w: w, own: map[store.ID]bool{}, reuse: map[store.ID]string{}}
}

// write stores d and the changed directories under it, and returns d's
// id and whether it differs from the tree d was loaded from.
func (x *treeWriter) write(d *edir, rel string, depth int) (store.ID, bool, error) {
	if depth > maxDepth {
		return store.ZeroID, false, fmt.Errorf("%q: trees nested deeper than %d: %w", rel, maxDepth, store.ErrCorrupt)
	}
	if err := x.ctx.Err(); err != nil {
		return store.ZeroID, false, err
	}
	changed := d.dirty || d.fresh
	for _, name := range sortedKeys(d.subs) {
		s := d.subs[name]
		id, ch, err := x.write(s, joinRel(rel, name), depth+1)
		if err != nil {
			return store.ZeroID, false, err
		}
		if ch {
			d.entries[name].Content = id
			changed = true
		}
	}
	if !changed {
		return d.id, false, nil
	}
	if d.part != nil {
		return x.writeParts(d, rel)
	}
	// Entries still as in d's previous tree are reused through it.
	var orig []store.TreeEntry
	if d.orig != nil && !d.fresh && !d.id.IsZero() {
		orig = d.orig.Entries
	}
	es, under := x.entries(d, d.sortedNames(), orig, rel)
	t := &store.Tree{Entries: es}
	x.underPrev(d, rel, under, false)
	var id store.ID
	var err error
	if tl, ok := x.w.(treeLiker); ok && !d.fresh && !d.id.IsZero() {
		id, err = tl.PutTreeLike(t, d.id)
	} else {
		id, err = x.w.PutTree(t)
	}
	if err != nil {
		return store.ZeroID, false, fmt.Errorf("store tree %q: %w", rel, err)
	}
	x.own[id] = true
	x.trees++
	return id, id != d.id || d.fresh, nil
}

// entries returns the entries of d named by names (sorted, as a tree's
// are), and the contents among them unchanged from orig (the sorted
// entries of the tree they came from, d's previous version or one of its
// runs): those are retained through that version (underPrev), when the
// Writer can. Every other content they reuse is noted in x.reuse.
func (x *treeWriter) entries(d *edir, names []string, orig []store.TreeEntry, rel string) ([]store.TreeEntry, []store.ID) {
	if _, ok := x.w.(underRetainer); !ok {
		orig = nil
	}
	es := make([]store.TreeEntry, len(names))
	var under []store.ID
	for j, name := range names {
		e := d.entries[name]
		es[j] = *e
		for len(orig) > 0 && orig[0].Name < name {
			orig = orig[1:]
		}
		if e.Content.IsZero() || x.own[e.Content] {
			continue
		}
		if len(orig) > 0 && orig[0].Name == name && orig[0].Content == e.Content {
			under = append(under, e.Content)
		} else if _, ok := x.reuse[e.Content]; !ok {
			x.reuse[e.Content] = joinRel(rel, name)
		}
	}
	return es, under
}

// underPrev records that the rewritten directory d (at rel) reuses under
// through its previous version, which is then retained too — also with
// no such entries when always is set (a splice keeps runs of it).
func (x *treeWriter) underPrev(d *edir, rel string, under []store.ID, always bool) {
	if len(under) > 0 {
		x.under = append(x.under, underGroup{parent: d.id, rel: rel, ids: under})
	} else if !always {
		return
	}
	if _, ok := x.reuse[d.id]; !ok && !x.own[d.id] {
		x.reuse[d.id] = rel
	}
}

// retainReused retains, under the Writer's lease, every object that the
// written trees reuse from the source trees: gc must not take them before
// the caller's commit makes them reachable. It is the writer's last step:
// what it retains is not recorded in own.
func (x *treeWriter) retainReused() error {
	ids := make([]store.ID, 0, len(x.reuse))
	for id := range x.reuse {
		if !x.own[id] {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(a, b store.ID) int { return strings.Compare(string(a[:]), string(b[:])) })
	if err := x.retain(ids, func(id store.ID) string { return fmt.Sprintf("%q: object", x.reuse[id]) }); err != nil {
		return err
	}
	// The previous trees are retained now; what they reference is too.
	for _, g := range x.under {
		if err := x.w.(underRetainer).RetainedUnder(g.parent, g.ids); err != nil {
			return fmt.Errorf("%q: retain reused entries: %w", g.rel, err)
		}
	}
	x.under = nil
	return nil
}

// retainOne retains id (a whole tree the edit returns unchanged).
func (x *treeWriter) retainOne(id store.ID, what string) error {
	if id.IsZero() || x.own[id] {
		return nil
	}
	return x.retain([]store.ID{id}, func(store.ID) string { return what })
}

func (x *treeWriter) retain(ids []store.ID, what func(store.ID) string) error {
	if len(ids) == 0 {
		return nil
	}
	var ok []bool
	if ra, isBatch := x.w.(retainAller); isBatch {
		var err error
		if ok, err = ra.RetainAll(ids); err != nil {
			return fmt.Errorf("retain reused objects: %w", err)
		}
	} else {
		ok = make([]bool, len(ids))
		for i, id := range ids {
			var err error
			if ok[i], err = x.w.Retain(id); err != nil {
				return fmt.Errorf("retain reused objects: %w", err)
			}
		}
	}
	for i, id := range ids {
		if !ok[i] {
			return fmt.Errorf("%s %s is no longer in the store: %w", what(id), id.Short(), store.ErrNotFound)
		}
		x.own[id] = true
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
