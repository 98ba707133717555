package textdiff

import (
	"bytes"
	"math"
)

// Kind says what an Op does.
type Kind uint8

const (
	// Equal lines are the same in both inputs.
	Equal Kind = iota
	// Delete lines are in the old input only.
	Delete
	// Insert lines are in the new input only.
	Insert
)

func (k Kind) String() string {
	switch k {
	case Equal:
		return "equal"
	case Delete:
		return "delete"
	case Insert:
		return "insert"
	}
	return "Kind(?)"
}

// Op is a run of N lines: lines A..A+N of the old input and B..B+N of the new
// one for Equal, lines A..A+N of the old input for Delete (B is where they
// were, in the new input), lines B..B+N of the new input for Insert (A is
// where they go, in the old input). Line numbers are 0-based indexes into
// SplitLines of the input.
type Op struct {
	Kind Kind
	A, B int
	N    int
}

// SplitLines splits b into lines, each ending in '\n' except perhaps the
// last. The lines alias b. Empty input has no lines.
func SplitLines(b []byte) [][]byte {
	if len(b) == 0 {
		return nil
	}
	n := bytes.Count(b, []byte{'\n'})
	if b[len(b)-1] != '\n' {
		n++
	}
	lines := make([][]byte, 0, n)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			lines = append(lines, b)
			break
		}
		lines = append(lines, b[:i+1:i+1])
		b = b[i+1:]
	}
	return lines
}

// Lines returns the line diff from a to b as runs in order: every line of a
// is in exactly one Equal or Delete run, every line of b in exactly one Equal
// or Insert run, and within a change the Delete run comes before the Insert
// run. Identical inputs give a single Equal run (or none when empty).
func Lines(a, b []byte) []Op {
	return diffLines(SplitLines(a), SplitLines(b), true)
}

// diffLines is Lines on split input. indentHeuristic is git's
// diff.indentHeuristic, on for git diff but not for git merge-file.
func diffLines(a, b [][]byte, indentHeuristic bool) []Op {
	// Common prefix and suffix first: the usual edit touches a few lines of
	// a large file, and this makes it linear.
	pre := 0
	for pre < len(a) && pre < len(b) && bytes.Equal(a[pre], b[pre]) {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && bytes.Equal(a[len(a)-1-suf], b[len(b)-1-suf]) {
		suf++
	}
	ca := make([]bool, len(a)) // ca[i]: line i of a is deleted
	cb := make([]bool, len(b)) // cb[j]: line j of b is inserted
	markChanges(a[pre:len(a)-suf], b[pre:len(b)-suf], ca[pre:len(ca)-suf], cb[pre:len(cb)-suf])
	// Like xdiff, slide changes over the whole files, trimmed ends
	// included.
	compact(a, ca, cb, indentHeuristic)
	compact(b, cb, ca, indentHeuristic)
	return buildOps(ca, cb)
}

// buildOps turns change marks into runs, as xdiff's xdl_build_script does.
// The unmarked lines of a and b must pair up in order.
func buildOps(ca, cb []bool) []Op {
	var ops []Op
	add := func(k Kind, a, b, n int) {
		if n == 0 {
			return
		}
		if l := len(ops) - 1; l >= 0 && ops[l].Kind == k {
			ops[l].N += n
			return
		}
		ops = append(ops, Op{Kind: k, A: a, B: b, N: n})
	}
	i, j := 0, 0
	for i < len(ca) || j < len(cb) {
		i0, j0 := i, j
		for i < len(ca) && j < len(cb) && !ca[i] && !cb[j] {
			i++
			j++
		}
		add(Equal, i0, j0, i-i0)
		i0, j0 = i, j
		for i < len(ca) && ca[i] {
			i++
		}
		for j < len(cb) && cb[j] {
			j++
		}
		add(Delete, i0, j0, i-i0)
		add(Insert, i, j0, j-j0)
		if i0 == i && j0 == j {
			// Unpaired unchanged lines: a bug in markChanges. Mark the
			// rest changed rather than loop or lose lines.
			add(Delete, i, j, len(ca)-i)
			add(Insert, len(ca), j, len(cb)-j)
			break
		}
	}
	return ops
}

// markChanges marks in ca and cb the lines of a and b that a (near-)minimal
// diff deletes and inserts.
func markChanges(a, b [][]byte, ca, cb []bool) {
	if len(a) == 0 || len(b) == 0 {
		for i := range ca {
			ca[i] = true
		}
		for j := range cb {
			cb[j] = true
		}
		return
	}
	// Intern lines to small integers so the search compares ints.
	ids := make(map[string]int32, len(a)+len(b))
	var count [2][]int32 // occurrences of each id in a and in b
	intern := func(lines [][]byte, side int) []int32 {
		out := make([]int32, len(lines))
		for i, l := range lines {
			id, ok := ids[string(l)]
			if !ok {
				id = int32(len(ids))
				ids[string(l)] = id
				count[0] = append(count[0], 0)
				count[1] = append(count[1], 0)
			}
			count[side][id]++
			out[i] = id
		}
		return out
	}
	ha, hb := intern(a, 0), intern(b, 1)

	// A line that does not occur in the other input is in no common
	// subsequence: mark it changed and leave it out of the search. This is
	// the part of xdiff's xdl_cleanup_records that keeps the diff minimal,
	// and it makes unrelated inputs cost O(N+M).
	ra, ia := keep(ha, ca, count[1])
	rb, ib := keep(hb, cb, count[0])

	m := &myers{a: ra, b: rb}
	m.ca = make([]bool, len(ra))
	m.cb = make([]bool, len(rb))
	n := len(ra) + len(rb) + 3
	m.off = len(rb) + 1
	m.vf = make([]int, n)
	m.vb = make([]int, n)
	// xdiff's xdl_do_diff: mxcost = max(sqrt(ndiags), XDL_MAX_COST_MIN=256).
	m.maxCost = max(int(math.Sqrt(float64(n))), 256)
	m.compare(0, len(ra), 0, len(rb), false)
	for i, c := range m.ca {
		if c {
			ca[ia[i]] = true
		}
	}
	for j, c := range m.cb {
		if c {
			cb[ib[j]] = true
		}
	}
}

// keep returns the ids of lines that occur in the other input, with their
// indexes, and marks the others changed.
func keep(h []int32, changed []bool, other []int32) ([]int32, []int) {
	r := make([]int32, 0, len(h))
	idx := make([]int, 0, len(h))
	for i, id := range h {
		if other[id] == 0 {
			changed[i] = true
			continue
		}
		r = append(r, id)
		idx = append(idx, i)
	}
	return r, idx
}

// myers is the state of one linear-space Myers search (xdiff's
// xdl_recs_cmp and xdl_split, after GNU diff's diffseq.h).
type myers struct {
	a, b    []int32
	ca, cb  []bool
	vf, vb  []int // furthest x reached per diagonal k = x-y, at index k+off
	off     int
	maxCost int
}

// compare marks the changes between a[a0:a1] and b[b0:b1]. needMin disables
// the cost cap for a part known to be cheap.
func (m *myers) compare(a0, a1, b0, b1 int, needMin bool) {
	for a0 < a1 && b0 < b1 && m.a[a0] == m.b[b0] {
		a0++
		b0++
	}
	for a0 < a1 && b0 < b1 && m.a[a1-1] == m.b[b1-1] {
		a1--
		b1--
	}
	if a0 == a1 || b0 == b1 {
		for i := a0; i < a1; i++ {
			m.ca[i] = true
		}
		for j := b0; j < b1; j++ {
			m.cb[j] = true
		}
		return
	}
	x, y, minLo, minHi := m.split(a0, a1, b0, b1, needMin)
	if x < a0 || x > a1 || y < b0 || y > b1 || (x == a0 && y == b0) || (x == a1 && y == b1) {
		// No progress possible from this split (it should not happen);
		// replace the whole box rather than recurse forever.
		for i := a0; i < a1; i++ {
			m.ca[i] = true
		}
		for j := b0; j < b1; j++ {
			m.cb[j] = true
		}
		return
	}
	m.compare(a0, x, b0, y, minLo)
	m.compare(x, a1, y, b1, minHi)
}

// split finds a point (x, y) on a shortest edit path through the box
// a[a0:a1] × b[b0:b1] (the middle snake), or, once the cost cap is reached,
// the point furthest from its corner reached by either search. minLo and
// minHi say whether the parts before and after the point must be searched
// without the cap.
func (m *myers) split(a0, a1, b0, b1 int, needMin bool) (x, y int, minLo, minHi bool) {
	const maxInt = math.MaxInt
	vf, vb, off := m.vf, m.vb, m.off
	dmin, dmax := a0-b1, a1-b0
	fmid, bmid := a0-b0, a1-b1
	odd := (fmid-bmid)&1 != 0
	fmin, fmax := fmid, fmid
	bmin, bmax := bmid, bmid
	vf[fmid+off] = a0
	vb[bmid+off] = a1
	for ec := 1; ; ec++ {
		// Extend the forward diagonal range by one on each side, or shrink
		// it where it hits the box; the sentinel outside makes the
		// choice below pick the inside neighbour.
		if fmin > dmin {
			fmin--
			vf[fmin-1+off] = -1
		} else {
			fmin++
		}
		if fmax < dmax {
			fmax++
			vf[fmax+1+off] = -1
		} else {
			fmax--
		}
		for k := fmax; k >= fmin; k -= 2 {
			var i int
			if vf[k-1+off] >= vf[k+1+off] {
				i = vf[k-1+off] + 1
			} else {
				i = vf[k+1+off]
			}
			j := i - k
			for i < a1 && j < b1 && m.a[i] == m.b[j] {
				i++
				j++
			}
			vf[k+off] = i
			if odd && bmin <= k && k <= bmax && vb[k+off] <= i {
				return i, j, true, true
			}
		}

		if bmin > dmin {
			bmin--
			vb[bmin-1+off] = maxInt
		} else {
			bmin++
		}
		if bmax < dmax {
			bmax++
			vb[bmax+1+off] = maxInt
		} else {
			bmax--
		}
		for k := bmax; k >= bmin; k -= 2 {
			var i int
			if vb[k-1+off] < vb[k+1+off] {
				i = vb[k-1+off]
			} else {
				i = vb[k+1+off] - 1
			}
			j := i - k
			for i > a0 && j > b0 && m.a[i-1] == m.b[j-1] {
				i--
				j--
			}
			vb[k+off] = i
			if !odd && fmin <= k && k <= fmax && i <= vf[k+off] {
				return i, j, true, true
			}
		}

		if needMin || ec < m.maxCost {
			continue
		}
		// Enough: take the furthest-reaching point of either search,
		// measured by x+y, as xdiff does.
		fbest, fbestX := -1, -1
		for k := fmax; k >= fmin; k -= 2 {
			i := min(vf[k+off], a1)
			j := i - k
			if j > b1 {
				i, j = b1+k, b1
			}
			if i+j > fbest {
				fbest, fbestX = i+j, i
			}
		}
		bbest, bbestX := maxInt, maxInt
		for k := bmax; k >= bmin; k -= 2 {
			i := max(a0, vb[k+off])
			j := i - k
			if j < b0 {
				i, j = b0+k, b0
			}
			if i+j < bbest {
				bbest, bbestX = i+j, i
			}
		}
		if (a1+b1)-bbest < fbest-(a0+b0) {
			return fbestX, fbest - fbestX, true, false
		}
		return bbestX, bbest - bbestX, false, true
	}
}
