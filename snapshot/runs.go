package snapshot

import (
	"fmt"
	"slices"
	"sort"

	"github.com/stratafs/strata/store"
)

// Large directories edited run by run (docs/hotpath.md, part 7).
//
// The store keeps a directory too large for one tree as a run index
// (store.KindRunIndex): its entries cut into runs, each run's first name
// and size in the index. A commit that changes one file of a 4,000-entry
// directory then reads the index and the one run that holds the file,
// and stores that run again and a new index (store.Writer.PutTreeSplice)
// — instead of reading, copying, re-encoding and hashing all 4,000
// entries. Such a directory is an edir with part set: entries holds the
// entries of the runs loaded so far (and the names added to them), and
// every look-up of a name goes through treeCache.need, which loads the
// run the name falls in. What needs every entry (a whole-directory
// removal, the link-group walk, counting) makes the directory whole
// first (treeCache.full). Only ApplyUpper edits this way, and only with a
// store that reads run indexes and a Writer that splices them.

// runGetter is what a read view (*store.Tx) has to list a run index.
type runGetter interface {
	TreeRuns(id store.ID) ([]store.TreeRun, bool, error)
}

// treeSplicer is what *store.Writer has to store a run index with some
// runs replaced.
type treeSplicer interface {
	PutTreeSplice(prev store.ID, edits []store.RunEdit) (store.ID, error)
}

// partDir is the state of a large directory loaded run by run.
type partDir struct {
	runs []store.TreeRun
	// loaded[i] is run i as read (shared with the tree cache: read only),
	// nil while it is not loaded.
	loaded []*store.Tree
}

// runOf returns the run whose name range holds name: the last whose first
// name is not after it (run 0 also takes the names before its first).
func (p *partDir) runOf(name string) int {
	i := sort.Search(len(p.runs), func(i int) bool { return p.runs[i].First > name })
	return max(i-1, 0)
}

// loadParts returns the directory id as an edir of which no run is loaded
// yet, or nil when id is not a run index (or the store cannot list one).
func (c *treeCache) loadParts(id store.ID, origin, rel string) (*edir, error) {
	if !c.runs || id.IsZero() {
		return nil, nil
	}
	var runs []store.TreeRun
	var ok bool
	err := c.inView(func() error {
		rg, can := c.tg.(runGetter)
		if !can {
			return nil
		}
		var err error
		runs, ok, err = rg.TreeRuns(id)
		if err != nil {
			return fmt.Errorf("tree %s at %q: %w", id.Short(), rel, err)
		}
		return nil
	})
	if err != nil || !ok {
		return nil, err
	}
	return &edir{
		id: id, origin: origin,
		part:    &partDir{runs: runs, loaded: make([]*store.Tree, len(runs))},
		entries: map[string]*store.TreeEntry{}, subs: map[string]*edir{},
	}, nil
}

// need loads, into the partly loaded directory d (at rel), the run that
// holds name, so that d.entries answers for it. Whole directories need
// nothing.
func (c *treeCache) need(d *edir, name, rel string) error {
	if d.part == nil {
		return nil
	}
	return c.loadRun(d, d.part.runOf(name), rel)
}

// loadRun loads run i of the partly loaded directory d.
func (c *treeCache) loadRun(d *edir, i int, rel string) error {
	if d.part.loaded[i] != nil {
		return nil
	}
	r := d.part.runs[i]
	t, err := c.get(r.Tree, rel)
	if err != nil {
		return err
	}
	if err := store.CheckRun(d.part.runs, i, t); err != nil {
		return fmt.Errorf("%q: run %d of tree %s: %w", rel, i, d.id.Short(), err)
	}
	d.part.loaded[i] = t
	c.runsLoaded++
	// A copy (the cached run is shared), in one allocation.
	es := slices.Clone(t.Entries)
	for j := range es {
		d.entries[es[j].Name] = &es[j]
	}
	return nil
}

// full makes the partly loaded directory d (at rel) whole: every run
// loaded, orig the directory as it was. Whole directories are left alone.
func (c *treeCache) full(d *edir, rel string) error {
	if d.part == nil {
		return nil
	}
	total := 0
	for i, r := range d.part.runs {
		if err := c.loadRun(d, i, rel); err != nil {
			return err
		}
		total += r.Entries
	}
	orig := &store.Tree{Entries: make([]store.TreeEntry, 0, total)}
	for _, t := range d.part.loaded {
		orig.Entries = append(orig.Entries, t.Entries...)
	}
	d.orig, d.part = orig, nil
	return nil
}

// writeParts stores the partly loaded directory d (at rel), whose loaded
// children x.write has already written, through the Writer's splice: the
// runs whose entries changed are stored again, the others kept. It
// returns d's id and whether it changed.
func (x *treeWriter) writeParts(d *edir, rel string) (store.ID, bool, error) {
	sp, ok := x.w.(treeSplicer)
	if !ok {
		// ApplyUpper loads run by run only with a Writer that splices.
		return store.ZeroID, false, fmt.Errorf("%q: the writer cannot store a directory run by run (internal error)", rel)
	}
	p := d.part
	// Every name in entries belongs to a loaded run (need loaded it
	// before the name was looked up or added).
	byRun := map[int][]string{}
	for name := range d.entries {
		i := p.runOf(name)
		if p.loaded[i] == nil {
			return store.ZeroID, false, fmt.Errorf("%q: %q is in run %d, which was never loaded (internal error)", rel, name, i)
		}
		byRun[i] = append(byRun[i], name)
	}
	var edits []store.RunEdit
	var under []store.ID
	for i, t := range p.loaded {
		if t == nil {
			continue
		}
		names := byRun[i]
		slices.Sort(names)
		es, unchanged := x.entries(d, names, t.Entries, rel)
		under = append(under, unchanged...)
		if !slices.EqualFunc(es, t.Entries, func(a, b store.TreeEntry) bool { return sameEntry(&a, &b) }) {
			edits = append(edits, store.RunEdit{Run: i, Entries: es})
		}
	}
	if len(edits) == 0 {
		return d.id, false, nil
	}
	// The runs the splice keeps, and the entries above, are covered by
	// the previous version, which the edit retains.
	x.underPrev(d, rel, under, true)
	id, err := sp.PutTreeSplice(d.id, edits)
	if err != nil {
		return store.ZeroID, false, fmt.Errorf("store tree %q: %w", rel, err)
	}
	x.own[id] = true
	x.trees++
	return id, id != d.id, nil
}

// dirOf is the directory part of the slash-separated path rel.
func dirOf(rel string) string {
	dir, _ := splitRel(rel)
	return dir
}
