package store

// Large directories (docs/store.md, "Large directories"). A directory
// whose tree would encode to more than treeSplitMin bytes is stored as a
// tree index: the ordered list of the ordinary trees (KindTree) that hold
// its entries, each a run of consecutive entries cut where a hash of an
// entry's name says so. Editing one entry of a 4,000-entry directory then
// stores one run of about a hundred entries and a small index, instead
// of the whole listing again (about 150 KiB, and the time to compress
// and write it, at every commit). The cuts depend on the names alone, so
// one directory content has one encoding and one id, and a change moves
// only the cuts next to it.
//
// Readers never see the split: Tx.Tree returns the whole directory.

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
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

// cutAfter reports whether a run ends after the entry named name.
func cutAfter(name string) bool {
	h := fnv.New64a()
	h.Write([]byte(name))
	return h.Sum64()%treeRunAvg == 0
}

// splitEntries returns the runs of a directory's entries (sorted, as a
// tree's are), cut as the package comment says.
func splitEntries(entries []TreeEntry) [][]TreeEntry {
	var runs [][]TreeEntry
	start, bytes := 0, 0
	for i := range entries {
		bytes += entrySize(&entries[i])
		n := i + 1 - start
		if (n >= treeRunMin && cutAfter(entries[i].Name)) || bytes >= treeRunMaxBytes {
			runs = append(runs, entries[start:i+1])
			start, bytes = i+1, 0
		}
	}
	if start < len(entries) {
		runs = append(runs, entries[start:])
	}
	return runs
}

// treeRun is one run of a tree index: how many entries it holds, and the
// tree holding them.
type treeRun struct {
	Entries int
	Tree    ID
}

// encodeTreeIndex encodes an index: the total entry count, the run count,
// then each run's entry count and tree id.
func encodeTreeIndex(runs []treeRun) []byte {
	total := 0
	for _, r := range runs {
		total += r.Entries
	}
	b := make([]byte, 0, 20+len(runs)*(4+32))
	b = binary.AppendUvarint(b, uint64(total))
	b = binary.AppendUvarint(b, uint64(len(runs)))
	for _, r := range runs {
		b = binary.AppendUvarint(b, uint64(r.Entries))
		b = append(b, r.Tree[:]...)
	}
	return b
}

// decodeTreeIndex decodes an index, rejecting what encodeTreeIndex would
// not produce for a split directory: fewer than two runs, an empty run,
// counts that do not add up. (That the cuts are where splitEntries puts
// them is fsck's to check: it needs every run's entries.)
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

// encodedTree is a directory ready to store: one tree payload, or the
// payloads of its runs and the index over them.
type encodedTree struct {
	tree   []byte   // the whole directory, when not split
	runs   [][]byte // the runs' tree payloads, when split
	runIDs []ID     // their ids
	index  []byte   // the index payload, when split
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
	et := &encodedTree{runs: make([][]byte, len(parts)), runIDs: make([]ID, len(parts))}
	index := make([]treeRun, len(parts))
	for i, part := range parts {
		// EncodeTree checks a run's entries; the order across runs is
		// checked here.
		if i > 0 && parts[i-1][len(parts[i-1])-1].Name >= part[0].Name {
			return nil, fmt.Errorf("tree entries not sorted and unique at %q: %w", part[0].Name, ErrInvalidName)
		}
		p, err := EncodeTree(&Tree{Entries: part})
		if err != nil {
			return nil, err
		}
		et.runs[i], et.runIDs[i] = p, HashObject(KindTree, p)
		index[i] = treeRun{Entries: len(part), Tree: et.runIDs[i]}
	}
	et.index = encodeTreeIndex(index)
	return et, nil
}

// joinRuns decodes the runs of an index, whose tree payloads payload
// reads, into the directory, checking that each run holds the entries the
// index says and that names stay sorted across runs.
func joinRuns(runs []treeRun, total int, payload func(ID) ([]byte, error)) (*Tree, error) {
	entries := make([]TreeEntry, 0, total)
	for i, r := range runs {
		p, err := payload(r.Tree)
		if err != nil {
			return nil, fmt.Errorf("run %d: %w", i, err)
		}
		before := len(entries)
		if entries, err = appendTree(entries, p); err != nil {
			return nil, fmt.Errorf("run %d (%s): %v: %w", i, r.Tree.Short(), err, ErrCorrupt)
		}
		n := len(entries) - before
		if n != r.Entries {
			return nil, fmt.Errorf("run %d (%s) holds %d entries, the index says %d: %w", i, r.Tree.Short(), n, r.Entries, ErrCorrupt)
		}
		if before > 0 && n > 0 && entries[before-1].Name >= entries[before].Name {
			return nil, fmt.Errorf("run %d starts at %q, not after %q: %w", i, entries[before].Name, entries[before-1].Name, ErrCorrupt)
		}
	}
	return &Tree{Entries: entries}, nil
}

// canonicalIndex reports whether the directory t, read through an index
// with runs, is split where encodeDirectory splits it (fsck).
func canonicalIndex(t *Tree, runs []treeRun) error {
	et, err := encodeDirectory(t)
	if err != nil {
		return err
	}
	if et.index == nil {
		return fmt.Errorf("a directory of %d entries small enough for one tree is split in %d: %w", len(t.Entries), len(runs), errNonCanonical)
	}
	want, _, err := decodeTreeIndex(et.index)
	if err != nil {
		return err
	}
	if len(want) != len(runs) {
		return fmt.Errorf("split in %d runs where the format cuts %d: %w", len(runs), len(want), errNonCanonical)
	}
	for i := range want {
		if want[i] != runs[i] {
			return fmt.Errorf("run %d is %s (%d entries) where the format cuts %s (%d): %w", i, runs[i].Tree.Short(), runs[i].Entries, want[i].Tree.Short(), want[i].Entries, errNonCanonical)
		}
	}
	return nil
}
