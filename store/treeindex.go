package store

// Large directories (docs/store.md, "run index"). A directory whose tree
// would encode to more than treeSplitMin bytes is stored as a run index
// (KindRunIndex): the ordered list of the ordinary trees (KindTree) that
// hold its entries, each a run of consecutive entries cut where a hash of
// an entry's name says so, with each run's first name and encoded size. Editing one entry of a 4,000-entry directory then
// stores one run of about a hundred entries and a small index, instead
// of the whole listing again (about 150 KiB, and the time to compress
// and write it, at every commit). The cuts depend on the names alone, so
// one directory content has one encoding and one id, and a change moves
// only the cuts next to it.
//
// Readers never see the split: Tx.Tree returns the whole directory. An
// editor may (Tx.TreeRuns): the first names say which run holds a name,
// so it reads and rewrites that run alone (Writer.PutTreeSplice), and the
// sizes say whether the edited directory is still large enough to split
// without reading the others.
//
// The first form, KindTreeIndex, named only each run's tree and entry
// count. It is still read everywhere and never written: its runs are cut
// by the same rule, so a directory it holds is the same runs under a
// run index.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"
)

const (
	// treeSplitMin is the encoded size from which a directory is split:
	// below it one object costs less than an index and its runs.
	treeSplitMin = 64 << 10
	// A run ends after an entry whose name hashes to 0 modulo
	// treeRunAvg, once it has treeRunMin entries, or when it reaches
	// treeRunMaxBytes encoded (so that runs of long names or large
	// xattrs stay small too).
	treeRunAvg      = 128
	treeRunMin      = 16
	treeRunMaxBytes = 16 << 10
)

// entrySize is the size of an entry as EncodeTree encodes it.
func entrySize(e *TreeEntry) int {
	str := func(n int) int { return uvarintLen(uint64(n)) + n }
	n := str(len(e.Name)) + 1 + uvarintLen(uint64(e.Mode)) + uvarintLen(uint64(e.UID)) + uvarintLen(uint64(e.GID)) +
		uvarintLen(uint64(e.MtimeNs)<<1^uint64(e.MtimeNs>>63)) + uvarintLen(uint64(e.Size)) + uvarintLen(e.Rdev) +
		str(len(e.Target)) + str(len(e.LinkGroup)) + uvarintLen(uint64(len(e.Xattrs))) + len(e.Content)
	for _, x := range e.Xattrs {
		n += str(len(x.Name)) + str(len(x.Value))
	}
	return n
}

// uvarintLen is the length of v encoded by binary.AppendUvarint.
func uvarintLen(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }

// treeSize is the size of t's entries encoded as one tree.
func treeSize(entries []TreeEntry) int {
	n := uvarintLen(uint64(len(entries)))
	for i := range entries {
		n += entrySize(&entries[i])
	}
	return n
}

// cutAfter reports whether a run ends after the entry named name: the
// FNV-1a 64 hash of the name is 0 modulo treeRunAvg. (hash/fnv's, inlined:
// its interface value and the name's copy cost an allocation an entry.)
func cutAfter(name string) bool {
	const offset64, prime64 = 14695981039346656037, 1099511628211
	h := uint64(offset64)
	for i := 0; i < len(name); i++ {
		h ^= uint64(name[i])
		h *= prime64
	}
	return h%treeRunAvg == 0
}

// runCutter decides where runs end in a directory's entries fed to it in
// order. Its state is the open run's entry count and encoded size, both
// zero at a run's start: so the cuts after a cut depend only on the
// entries that follow it, which is what lets PutTreeSplice re-cut from
// one run's start.
type runCutter struct{ n, bytes int }

// add adds an entry (its name and encoded size) to the open run and
// reports whether the run ends after it, as the package comment says.
func (c *runCutter) add(name string, size int) bool {
	c.n++
	c.bytes += size
	if (c.n >= treeRunMin && cutAfter(name)) || c.bytes >= treeRunMaxBytes {
		*c = runCutter{}
		return true
	}
	return false
}

// splitEntries returns the runs of a directory's entries (sorted, as a
// tree's are), cut as the package comment says.
func splitEntries(entries []TreeEntry) [][]TreeEntry {
	var runs [][]TreeEntry
	var c runCutter
	start := 0
	for i := range entries {
		if c.add(entries[i].Name, entrySize(&entries[i])) {
			runs = append(runs, entries[start:i+1])
			start = i + 1
		}
	}
	if start < len(entries) {
		runs = append(runs, entries[start:])
	}
	return runs
}

// TreeRun is one run of a run index (kind 6).
type TreeRun struct {
	First   string // the run's first entry's name
	Entries int    // its entry count
	Size    int    // Σ of its entries' encoded sizes
	Tree    ID     // the tree (kind 3) holding them
}

// Check reports (ErrCorrupt) whether t, read from r.Tree, is the run r
// describes: same first name, entry count and size.
func (r TreeRun) Check(t *Tree) error {
	size := 0
	for i := range t.Entries {
		size += entrySize(&t.Entries[i])
	}
	first := ""
	if len(t.Entries) > 0 {
		first = t.Entries[0].Name
	}
	return r.check(len(t.Entries), first, size)
}

// CheckRun is Check of run i of the index runs, and also that the run
// ends before the next run's first name: what an editor that reads runs
// one by one (instead of joining them, as Tx.Tree does) must check.
func CheckRun(runs []TreeRun, i int, t *Tree) error {
	if err := runs[i].Check(t); err != nil {
		return err
	}
	if n := len(t.Entries); i+1 < len(runs) && n > 0 && t.Entries[n-1].Name >= runs[i+1].First {
		return fmt.Errorf("run %s ends at %q, in the next run's range (from %q): %w", runs[i].Tree.Short(), t.Entries[n-1].Name, runs[i+1].First, ErrCorrupt)
	}
	return nil
}

// check reports whether a run read as n entries from first, of size
// bytes of entries, is the one r describes.
func (r TreeRun) check(n int, first string, size int) error {
	switch {
	case n != r.Entries:
		return fmt.Errorf("run %s holds %d entries, the index says %d: %w", r.Tree.Short(), n, r.Entries, ErrCorrupt)
	case n > 0 && first != r.First:
		return fmt.Errorf("run %s starts at %q, the index says %q: %w", r.Tree.Short(), first, r.First, ErrCorrupt)
	case size != r.Size:
		return fmt.Errorf("run %s holds %d bytes of entries, the index says %d: %w", r.Tree.Short(), size, r.Size, ErrCorrupt)
	}
	return nil
}

// encodeRun encodes one run (sorted, non-empty entries) as a tree and
// returns its payload and its TreeRun.
func encodeRun(entries []TreeEntry) ([]byte, TreeRun, error) {
	p, err := EncodeTree(&Tree{Entries: entries})
	if err != nil {
		return nil, TreeRun{}, err
	}
	// A tree is its count and its entries: the entries' size without
	// adding them up again.
	return p, TreeRun{
		First:   entries[0].Name,
		Entries: len(entries),
		Size:    len(p) - uvarintLen(uint64(len(entries))),
		Tree:    HashObject(KindTree, p),
	}, nil
}

// minRunBytes is the smallest encoded run of a run index: a one-byte
// first name with its length, one-byte entries and size, and the id.
const minRunBytes = 2 + 1 + 1 + 32

// encodeRunIndex encodes a run index: the total entry count, the run
// count, then each run's first name, entry count, size and tree id.
func encodeRunIndex(runs []TreeRun) []byte {
	total, n := 0, 20
	for _, r := range runs {
		total += r.Entries
		n += len(r.First) + 16 + len(r.Tree)
	}
	b := make([]byte, 0, n)
	b = binary.AppendUvarint(b, uint64(total))
	b = binary.AppendUvarint(b, uint64(len(runs)))
	for _, r := range runs {
		b = appendBytes(b, r.First)
		b = binary.AppendUvarint(b, uint64(r.Entries))
		b = binary.AppendUvarint(b, uint64(r.Size))
		b = append(b, r.Tree[:]...)
	}
	return b
}

// decodeRunIndex decodes a run index, rejecting what encodeDirectory
// would not produce: fewer than two runs, first names invalid or not
// increasing, an empty run, counts that do not add up, a size too small
// for its run's entries or too large for one tree, a directory small
// enough for one tree, a zero id. (That the cuts are where splitEntries
// puts them, and that the firsts and sizes are the runs', is for Tx.Tree
// and fsck to check: it needs the runs.)
func decodeRunIndex(p []byte) ([]TreeRun, int, error) {
	r := reader{b: p}
	total := r.uvarint()
	n := r.count(minRunBytes)
	if r.err == nil && n < 2 {
		r.fail("%d runs: a split directory has at least 2", n)
	}
	runs := make([]TreeRun, 0, n)
	var sum, size uint64
	// The smallest entry after a run's first: a one-byte name.
	other := uint64(entrySize(&TreeEntry{Name: "x"}))
	for i := 0; i < n && r.err == nil; i++ {
		first := r.str()
		c := r.uvarint()
		sz := r.uvarint()
		id := r.id()
		// The smallest entries a run of c entries starting at first can
		// have: first's, then one-byte names.
		least := uint64(entrySize(&TreeEntry{Name: first}))
		switch {
		case r.err != nil:
		case ValidateName(first) != nil:
			r.fail("run %d: first name: %v", i, ValidateName(first))
		case i > 0 && first <= runs[i-1].First:
			r.fail("run %d starts at %q, not after run %d's %q", i, first, i-1, runs[i-1].First)
		case c == 0:
			r.fail("run %d is empty", i)
		case c > total-sum:
			r.fail("run %d: %d entries, over the index's %d", i, c, total)
		case sz < least || (sz-least)/other < c-1:
			r.fail("run %d: %d bytes cannot hold %d entries", i, sz, c)
		case sz > maxObjectSize-uint64(uvarintLen(c)):
			r.fail("run %d: %d bytes, over one tree's limit", i, sz)
		case id.IsZero():
			r.fail("run %d: zero tree id", i)
		}
		sum += c
		size += sz
		runs = append(runs, TreeRun{First: first, Entries: int(c), Size: int(sz), Tree: id})
	}
	if r.err == nil && sum != total {
		r.fail("runs hold %d entries, the index says %d", sum, total)
	}
	if r.err == nil && uint64(uvarintLen(total))+size <= treeSplitMin {
		r.fail("a directory of %d bytes is split: up to %d it is one tree", uint64(uvarintLen(total))+size, treeSplitMin)
	}
	if err := r.end(); err != nil {
		return nil, 0, fmt.Errorf("decode run index: %w", err)
	}
	return runs, int(total), nil
}

// treeRun is one run of a tree index (kind 5, no longer written): how
// many entries it holds, and the tree holding them.
type treeRun struct {
	Entries int
	Tree    ID
}

// decodeTreeIndex decodes a tree index (kind 5), rejecting what its
// encoder would not have produced for a split directory: fewer than two
// runs, an empty run or one with more entries than a tree can hold,
// counts that do not add up.
func decodeTreeIndex(p []byte) ([]treeRun, int, error) {
	r := reader{b: p}
	total := r.uvarint()
	n := r.count(1 + 32)
	if r.err == nil && n < 2 {
		r.fail("%d runs: a split directory has at least 2", n)
	}
	runs := make([]treeRun, 0, n)
	sum := uint64(0)
	for i := 0; i < n && r.err == nil; i++ {
		c := r.uvarint()
		id := r.id()
		switch {
		case r.err != nil:
		case c == 0:
			r.fail("run %d is empty", i)
		case c > total-sum:
			r.fail("run %d: %d entries, over the index's %d", i, c, total)
		case c > maxObjectSize/minEntrySize:
			r.fail("run %d: %d entries, more than a tree can hold", i, c)
		case id.IsZero():
			r.fail("run %d: zero tree id", i)
		}
		sum += c
		runs = append(runs, treeRun{Entries: int(c), Tree: id})
	}
	if r.err == nil && sum != total {
		r.fail("runs hold %d entries, the index says %d", sum, total)
	}
	if err := r.end(); err != nil {
		return nil, 0, fmt.Errorf("decode tree index: %w", err)
	}
	return runs, int(total), nil
}

// dirIndex is a large directory's index of either kind, decoded.
type dirIndex struct {
	kind  Kind // KindTreeIndex or KindRunIndex
	total int
	runs  []TreeRun // First and Size only for a run index
}

// decodeIndex decodes the payload of an index of kind k.
func decodeIndex(k Kind, p []byte) (*dirIndex, error) {
	ix := &dirIndex{kind: k}
	switch k {
	case KindRunIndex:
		runs, total, err := decodeRunIndex(p)
		if err != nil {
			return nil, err
		}
		ix.runs, ix.total = runs, total
	case KindTreeIndex:
		old, total, err := decodeTreeIndex(p)
		if err != nil {
			return nil, err
		}
		ix.runs, ix.total = make([]TreeRun, len(old)), total
		for i, r := range old {
			ix.runs[i] = TreeRun{Entries: r.Entries, Tree: r.Tree}
		}
	default:
		return nil, fmt.Errorf("a %v is not a directory index", k)
	}
	return ix, nil
}

// trees returns the ids of the index's runs.
func (ix *dirIndex) trees() []ID {
	ids := make([]ID, len(ix.runs))
	for i, r := range ix.runs {
		ids[i] = r.Tree
	}
	return ids
}

// encodedTree is a directory ready to store: one tree payload, or the
// payloads of its runs and the run index over them.
type encodedTree struct {
	tree  []byte    // the whole directory, when not split
	runs  [][]byte  // the runs' tree payloads, when split
	info  []TreeRun // the runs as the index names them
	index []byte    // the run index payload, when split
}

// encodeDirectory encodes t as one tree, or split when that tree would be
// larger than treeSplitMin bytes.
func encodeDirectory(t *Tree) (*encodedTree, error) {
	var parts [][]TreeEntry
	if treeSize(t.Entries) > treeSplitMin {
		parts = splitEntries(t.Entries)
	}
	if len(parts) < 2 {
		// Small enough for one tree (or, this large, of one run, which
		// takes an entry over treeRunMaxBytes): stored whole.
		p, err := EncodeTree(t)
		if err != nil {
			return nil, err
		}
		return &encodedTree{tree: p}, nil
	}
	et := &encodedTree{runs: make([][]byte, len(parts)), info: make([]TreeRun, len(parts))}
	for i, part := range parts {
		// EncodeTree checks a run's entries; the order across runs is
		// checked here.
		if i > 0 && parts[i-1][len(parts[i-1])-1].Name >= part[0].Name {
			return nil, fmt.Errorf("tree entries not sorted and unique at %q: %w", part[0].Name, ErrInvalidName)
		}
		var err error
		if et.runs[i], et.info[i], err = encodeRun(part); err != nil {
			return nil, err
		}
	}
	et.index = encodeRunIndex(et.info)
	return et, nil
}

// maxJoinPrealloc bounds the entries joinRuns allocates up front: an
// index's total is only a claim until its runs are read.
const maxJoinPrealloc = 1 << 16

// joinRuns decodes the runs of the index ix, whose tree payloads payload
// reads, into the directory, checking that each run holds what the index
// says — its entry count, and for a run index its first name and size —
// and that names stay sorted across runs.
func joinRuns(ix *dirIndex, payload func(ID) ([]byte, error)) (*Tree, error) {
	entries := make([]TreeEntry, 0, min(ix.total, maxJoinPrealloc))
	for i, r := range ix.runs {
		p, err := payload(r.Tree)
		if err != nil {
			return nil, fmt.Errorf("run %d: %w", i, err)
		}
		before := len(entries)
		if entries, err = appendTree(entries, p); err != nil {
			return nil, fmt.Errorf("run %d (%s): %v: %w", i, r.Tree.Short(), err, ErrCorrupt)
		}
		n := len(entries) - before
		switch {
		case ix.kind == KindRunIndex:
			// n ≥ 1: the decoder refuses empty runs. appendTree read
			// exactly p: the entries are p but its count.
			err = r.check(n, entries[before].Name, len(p)-uvarintLen(uint64(n)))
		case n != r.Entries: // a tree index names counts only
			err = fmt.Errorf("run %s holds %d entries, the index says %d: %w", r.Tree.Short(), n, r.Entries, ErrCorrupt)
		}
		if err != nil {
			return nil, fmt.Errorf("run %d: %w", i, err)
		}
		if before > 0 && n > 0 && entries[before-1].Name >= entries[before].Name {
			return nil, fmt.Errorf("run %d starts at %q, not after %q: %w", i, entries[before].Name, entries[before-1].Name, ErrCorrupt)
		}
	}
	return &Tree{Entries: entries}, nil
}

// canonicalIndex reports whether the directory t, read through the index
// ix (payload p), is split where encodeDirectory splits it (fsck). A tree
// index (kind 5) passes when its runs are those a run index would name;
// a run index must be the very index encodeDirectory writes.
func canonicalIndex(t *Tree, ix *dirIndex, p []byte) error {
	et, err := encodeDirectory(t)
	if err != nil {
		return err
	}
	runs := ix.runs
	if et.index == nil {
		return fmt.Errorf("a directory of %d entries small enough for one tree is split in %d: %w", len(t.Entries), len(runs), errNonCanonical)
	}
	want := et.info
	if len(want) != len(runs) {
		return fmt.Errorf("split in %d runs where the format cuts %d: %w", len(runs), len(want), errNonCanonical)
	}
	for i := range want {
		if want[i].Tree != runs[i].Tree || want[i].Entries != runs[i].Entries {
			return fmt.Errorf("run %d is %s (%d entries) where the format cuts %s (%d): %w", i, runs[i].Tree.Short(), runs[i].Entries, want[i].Tree.Short(), want[i].Entries, errNonCanonical)
		}
	}
	if ix.kind == KindRunIndex && !bytes.Equal(et.index, p) {
		return fmt.Errorf("the index's first names or sizes are not its runs': %w", errNonCanonical)
	}
	return nil
}
