package store

// Splicing a large directory: storing a new version of a run index from
// the runs an editor changed, without the others (docs/store.md, "run
// index"). The result is the directory's canonical encoding — the id
// PutTree of the whole edited directory gives — because the cuts after a
// cut depend only on the entries that follow it (runCutter): a run that
// starts where a run of prev started, with prev's entries, is cut as
// prev's was.

import (
	"fmt"
)

// RunEdit is the new content of one run of a run index: every entry the
// directory now has in that run's name range.
type RunEdit struct {
	Run     int         // index into prev's runs
	Entries []TreeEntry // sorted, unique; may be empty (all the run's entries removed)
}

// PutTreeSplice stores the directory prev (a run index, kind 6) with the
// runs named by edits replaced by their Entries, and returns its id:
// exactly the id PutTree would return for the whole edited directory.
//
// Run i's name range is [runs[i].First, runs[i+1].First); run 0's also
// holds every name before runs[0].First, and the last run's has no upper
// bound. Edits sorted by Run and unique, each within its run's range:
// anything else is ErrInvalidArgument, as is a prev that is not a run
// index (a tree or a kind-5 index: use PutTreeLike), and nothing is
// written. No edits stores prev again and returns it.
//
// The runs are re-cut from the first edited run's start, on through the
// following runs (an unedited one is read from the store only when a run
// crosses into it) until, past the last edited run, a run ends where one
// of prev's ended; prev's runs from there on, and those before the first
// edited run, are kept. A directory that now encodes to treeSplitMin
// bytes or less is stored as one tree, from every run (the index's sizes
// say so without reading any). prev must be in the store (a directory
// this Writer wrote is after Flush).
//
// What the result references is covered as with PutTreeLike: the kept
// runs, and the entries of the unedited runs read to re-cut, by prev
// (when this Writer retained or reused prev, Finish checks prev alone);
// the edits' entries as PutTree's — each written or retained by this
// Writer, or checked at Finish (Writer.RetainedUnder(prev, ids) covers
// the unchanged ones).
func (w *Writer) PutTreeSplice(prev ID, edits []RunEdit) (ID, error) {
	if err := w.begin(); err != nil {
		return ZeroID, err
	}
	defer w.end()
	k, p, err := w.s.getObject(w.ctx, prev)
	if err != nil {
		return ZeroID, fmt.Errorf("put tree splice of %s: %w", prev.Short(), err)
	}
	if k != KindRunIndex {
		return ZeroID, fmt.Errorf("put tree splice of %s: a %v, not a run index: %w", prev.Short(), k, ErrInvalidArgument)
	}
	runs, total, err := decodeRunIndex(p)
	if err != nil {
		return ZeroID, fmt.Errorf("put tree splice of %s: %v: %w", prev.Short(), err, ErrCorrupt)
	}
	sp, err := splice(runs, total, edits, w.readRun)
	if err != nil {
		return ZeroID, fmt.Errorf("put tree splice of %s: %w", prev.Short(), err)
	}

	// Decided: nothing below fails on the input.
	for _, e := range edits {
		w.referEntries(e.Entries, ZeroID)
	}
	w.referIDs(sp.read, prev)
	if sp.tree != nil {
		return w.put(KindTree, sp.tree, true)
	}
	shared := make(map[ID]bool, len(runs))
	for _, r := range runs {
		shared[r.Tree] = true
	}
	return w.putRunIndex(sp.runs, sp.payloads, sp.index, prev, shared)
}

// readRun reads the entries of one of prev's runs.
func (w *Writer) readRun(r TreeRun) ([]TreeEntry, error) {
	k, p, err := w.s.getObject(w.ctx, r.Tree)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", r.Tree.Short(), err)
	}
	if k != KindTree {
		return nil, fmt.Errorf("run %s is a %v, not a tree: %w", r.Tree.Short(), k, ErrCorrupt)
	}
	t, err := DecodeTree(p)
	if err != nil {
		return nil, fmt.Errorf("run %s: %v: %w", r.Tree.Short(), err, ErrCorrupt)
	}
	return t.Entries, nil
}

// splicePlan is a spliced directory ready to store.
type splicePlan struct {
	tree     []byte    // the whole directory as one tree, when not split
	runs     []TreeRun // else its runs
	payloads [][]byte  // runs[i]'s payload when cut here, nil when kept from prev
	index    []byte    // the run index over runs
	read     []ID      // the contents of the entries read from prev's runs
}

// splice plans the directory of total entries split in runs, with edits
// applied (PutTreeSplice), reading unedited runs through read.
func splice(runs []TreeRun, total int, edits []RunEdit, read func(TreeRun) ([]TreeEntry, error)) (*splicePlan, error) {
	if err := checkEdits(runs, edits); err != nil {
		return nil, err
	}
	sp := &splicePlan{}
	// readAt reads run i, checked against the index and its range.
	readAt := func(i int) ([]TreeEntry, error) {
		es, err := read(runs[i])
		if err != nil {
			return nil, err
		}
		if err := CheckRun(runs, i, &Tree{Entries: es}); err != nil {
			return nil, err
		}
		for j := range es {
			if c := es[j].Content; !c.IsZero() {
				sp.read = append(sp.read, c)
			}
		}
		return es, nil
	}

	// The edited directory's size, from the index's sizes and the edits.
	size := 0
	for _, r := range runs {
		size += r.Size
	}
	for _, e := range edits {
		total += len(e.Entries) - runs[e.Run].Entries
		size -= runs[e.Run].Size
		for i := range e.Entries {
			size += entrySize(&e.Entries[i])
		}
	}
	if uvarintLen(uint64(total))+size <= treeSplitMin {
		// One tree, as encodeDirectory stores a directory this small.
		all := make([]TreeEntry, 0, total)
		ei := 0
		for i := range runs {
			if ei < len(edits) && edits[ei].Run == i {
				all = append(all, edits[ei].Entries...)
				ei++
				continue
			}
			es, err := readAt(i)
			if err != nil {
				return nil, err
			}
			all = append(all, es...)
		}
		p, err := EncodeTree(&Tree{Entries: all})
		if err != nil {
			return nil, err
		}
		sp.tree = p
		return sp, nil
	}

	first, last := len(runs), -1 // no edits: every run kept
	if len(edits) > 0 {
		first, last = edits[0].Run, edits[len(edits)-1].Run
	}
	// The cuts up to the first edited run's start are prev's.
	sp.runs = append(make([]TreeRun, 0, len(runs)+4), runs[:first]...)
	sp.payloads = make([][]byte, first, cap(sp.runs))
	var cut runCutter
	var cur []TreeEntry // the open run
	emit := func() error {
		p, r, err := encodeRun(cur)
		if err != nil {
			return err
		}
		sp.runs = append(sp.runs, r)
		sp.payloads = append(sp.payloads, p)
		cur = cur[:0] // EncodeTree copied what it needs
		return nil
	}
	i, ei := first, 0
recut:
	for ; i < len(runs); i++ {
		var es []TreeEntry
		switch {
		case ei < len(edits) && edits[ei].Run == i:
			es = edits[ei].Entries
			ei++
		case len(cur) == 0:
			// A run starts where prev's run i starts, with its
			// entries: cut as it was.
			if i > last {
				break recut // and so is every run after it
			}
			sp.runs = append(sp.runs, runs[i])
			sp.payloads = append(sp.payloads, nil)
			continue
		default:
			var err error
			if es, err = readAt(i); err != nil {
				return nil, err
			}
		}
		for j := range es {
			cur = append(cur, es[j])
			if cut.add(es[j].Name, entrySize(&es[j])) {
				if err := emit(); err != nil {
					return nil, err
				}
			}
		}
	}
	if len(cur) > 0 { // the directory's last run
		if err := emit(); err != nil {
			return nil, err
		}
	}
	for ; i < len(runs); i++ {
		sp.runs = append(sp.runs, runs[i])
		sp.payloads = append(sp.payloads, nil)
	}
	if len(sp.runs) < 2 {
		// One run for the whole directory (an entry over
		// treeRunMaxBytes at its end): stored whole, as encodeDirectory
		// does. That run was cut here, so its payload is that tree.
		if len(sp.runs) == 0 || sp.payloads[0] == nil {
			return nil, fmt.Errorf("a spliced directory of %d runs: %w", len(sp.runs), ErrCorrupt)
		}
		sp.tree, sp.runs, sp.payloads = sp.payloads[0], nil, nil
		return sp, nil
	}
	sp.index = encodeRunIndex(sp.runs)
	return sp, nil
}

// checkEdits checks edits against the runs they edit (PutTreeSplice's
// contract): ErrInvalidArgument when they do not fit.
func checkEdits(runs []TreeRun, edits []RunEdit) error {
	for k, e := range edits {
		if e.Run < 0 || e.Run >= len(runs) {
			return fmt.Errorf("edit of run %d: the directory has %d runs: %w", e.Run, len(runs), ErrInvalidArgument)
		}
		if k > 0 && e.Run <= edits[k-1].Run {
			return fmt.Errorf("edit of run %d after one of run %d: edits are sorted by run, one a run: %w", e.Run, edits[k-1].Run, ErrInvalidArgument)
		}
		es := e.Entries
		for j := 1; j < len(es); j++ {
			if es[j-1].Name >= es[j].Name {
				return fmt.Errorf("edit of run %d: entries not sorted and unique at %q: %w", e.Run, es[j].Name, ErrInvalidArgument)
			}
		}
		if len(es) == 0 {
			continue
		}
		if e.Run > 0 && es[0].Name < runs[e.Run].First {
			return fmt.Errorf("edit of run %d: entry %q is before the run's first name %q: %w", e.Run, es[0].Name, runs[e.Run].First, ErrInvalidArgument)
		}
		if e.Run+1 < len(runs) && es[len(es)-1].Name >= runs[e.Run+1].First {
			return fmt.Errorf("edit of run %d: entry %q is in run %d's range (from %q): %w", e.Run, es[len(es)-1].Name, e.Run+1, runs[e.Run+1].First, ErrInvalidArgument)
		}
	}
	return nil
}
