package textdiff

import "bytes"

// This file is git's xdl_change_compact (xdiff/xdiffi.c) with the indent
// heuristic, on by default since git 2.14 (diff.indentHeuristic). A change
// that could sit at several places, such as an inserted block that repeats
// the lines around it, is slid to where git puts it: aligned with a change
// in the other file if it can be, and otherwise at the split git's
// empirical indentation score likes best (after a blank line, before a
// less indented line). It changes where a hunk's lines are, never how many.

// Weights of the indent heuristic, from xdiffi.c, tuned by git on a corpus
// (https://github.com/mhagger/diff-slider-tools).
const (
	maxIndent                   = 200
	maxBlanks                   = 20
	startOfFilePenalty          = 1
	endOfFilePenalty            = 21
	totalBlankWeight            = -30
	postBlankWeight             = 6
	relativeIndentPenalty       = -4
	relativeIndentBlankPenalty  = 10
	relativeOutdentPenalty      = 24
	relativeOutdentBlankPenalty = 17
	relativeDedentPenalty       = 23
	relativeDedentBlankPenalty  = 17
	indentWeight                = 60
	indentMaxSliding            = 100
)

// compactor slides the change groups of one file; other is the change marks
// of the other file, kept in step (a group here pairs with a group there).
type compactor struct {
	lines [][]byte
	chg   []bool
	other []bool
}

// group is a run [start, end) of changed lines; empty groups sit between
// two unchanged lines (xdiffi.c struct xdlgroup).
type group struct{ start, end int }

func changed(chg []bool, i int) bool { return i >= 0 && i < len(chg) && chg[i] }

func groupInit(chg []bool) group {
	g := group{}
	for changed(chg, g.end) {
		g.end++
	}
	return g
}

func groupNext(chg []bool, g *group) bool {
	if g.end == len(chg) {
		return false
	}
	g.start = g.end + 1
	g.end = g.start
	for changed(chg, g.end) {
		g.end++
	}
	return true
}

func groupPrevious(chg []bool, g *group) bool {
	if g.start == 0 {
		return false
	}
	g.end = g.start - 1
	g.start = g.end
	for changed(chg, g.start-1) {
		g.start--
	}
	return true
}

func (c *compactor) slideDown(g *group) bool {
	if g.end < len(c.lines) && bytes.Equal(c.lines[g.start], c.lines[g.end]) {
		c.chg[g.start] = false
		c.chg[g.end] = true
		g.start++
		g.end++
		for changed(c.chg, g.end) {
			g.end++
		}
		return true
	}
	return false
}

func (c *compactor) slideUp(g *group) bool {
	if g.start > 0 && bytes.Equal(c.lines[g.start-1], c.lines[g.end-1]) {
		g.start--
		g.end--
		c.chg[g.start] = true
		c.chg[g.end] = false
		for changed(c.chg, g.start-1) {
			g.start--
		}
		return true
	}
	return false
}

// compact slides the change groups of lines, marked in chg, as git does,
// with or without the indent heuristic (without it a change that can move
// ends up as far down as it can go). The diff stays valid after every slide,
// so the impossible cases that git reports as BUG just stop here.
func compact(lines [][]byte, chg, other []bool, indentHeuristic bool) {
	c := &compactor{lines: lines, chg: chg, other: other}
	g, og := groupInit(chg), groupInit(other)
	for {
		if g.end != g.start {
			var size, earliestEnd int
			endMatchingOther := -1
			for {
				size = g.end - g.start
				endMatchingOther = -1
				for c.slideUp(&g) {
					if !groupPrevious(other, &og) {
						return
					}
				}
				earliestEnd = g.end
				if og.end > og.start {
					endMatchingOther = g.end
				}
				for c.slideDown(&g) {
					if !groupNext(other, &og) {
						return
					}
					if og.end > og.start {
						endMatchingOther = g.end
					}
				}
				if size == g.end-g.start {
					break
				}
			}
			switch {
			case g.end == earliestEnd:
				// It cannot move.
			case endMatchingOther != -1:
				// Line it up with the last change of the other file it
				// can pair with.
				for og.end == og.start {
					if !c.slideUp(&g) || !groupPrevious(other, &og) {
						return
					}
				}
			case indentHeuristic:
				shift := max(earliestEnd, g.end-size-1, g.end-indentMaxSliding)
				best := -1
				var bestScore splitScore
				for ; shift <= g.end; shift++ {
					var s splitScore
					s.add(c.measure(shift))
					s.add(c.measure(shift - size))
					if best == -1 || s.cmp(bestScore) <= 0 {
						bestScore, best = s, shift
					}
				}
				for g.end > best {
					if !c.slideUp(&g) || !groupPrevious(other, &og) {
						return
					}
				}
			}
		}
		if !groupNext(chg, &g) || !groupNext(other, &og) {
			return
		}
	}
}

// indent is xdiffi.c xget_indent: the indentation of line with a tab
// to the next multiple of 8, capped at maxIndent, or -1 for a blank line.
// Space is git's isspace: ' ', '\t', '\n', '\r'.
func indent(line []byte) int {
	n := 0
	for _, c := range line {
		switch c {
		case ' ':
			n++
		case '\t':
			n += 8 - n%8
		case '\n', '\r':
		default:
			return n
		}
		if n >= maxIndent {
			return maxIndent
		}
	}
	return -1
}

// splitMeasure describes a split of the file above line split
// (xdiffi.c struct split_measurement).
type splitMeasure struct {
	endOfFile  bool
	indent     int // of the line after the split, -1 if blank
	preBlank   int // blank lines right above the split
	preIndent  int // of the nearest non-blank line above, -1 if none
	postBlank  int // blank lines after the line after the split
	postIndent int // of the nearest non-blank line after that, -1 if none
}

func (c *compactor) measure(split int) splitMeasure {
	m := splitMeasure{indent: -1, preIndent: -1, postIndent: -1}
	if split >= len(c.lines) {
		m.endOfFile = true
	} else {
		m.indent = indent(c.lines[split])
	}
	for i := split - 1; i >= 0; i-- {
		m.preIndent = indent(c.lines[i])
		if m.preIndent != -1 {
			break
		}
		m.preBlank++
		if m.preBlank == maxBlanks {
			m.preIndent = 0
			break
		}
	}
	for i := split + 1; i < len(c.lines); i++ {
		m.postIndent = indent(c.lines[i])
		if m.postIndent != -1 {
			break
		}
		m.postBlank++
		if m.postBlank == maxBlanks {
			m.postIndent = 0
			break
		}
	}
	return m
}

// splitScore is the badness of a split; smaller is better.
type splitScore struct{ effectiveIndent, penalty int }

// add is xdiffi.c score_add_split.
func (s *splitScore) add(m splitMeasure) {
	if m.preIndent == -1 && m.preBlank == 0 {
		s.penalty += startOfFilePenalty
	}
	if m.endOfFile {
		s.penalty += endOfFilePenalty
	}
	postBlank := 0
	if m.indent == -1 {
		postBlank = 1 + m.postBlank
	}
	totalBlank := m.preBlank + postBlank
	s.penalty += totalBlankWeight * totalBlank
	s.penalty += postBlankWeight * postBlank
	ind := m.indent
	if ind == -1 {
		ind = m.postIndent
	}
	anyBlanks := totalBlank != 0
	s.effectiveIndent += ind
	switch {
	case ind == -1, m.preIndent == -1, ind == m.preIndent:
	case ind > m.preIndent:
		s.penalty += pick(anyBlanks, relativeIndentBlankPenalty, relativeIndentPenalty)
	case m.postIndent != -1 && m.postIndent > ind:
		// Less indented than the line before, more after: likely the
		// start of a block.
		s.penalty += pick(anyBlanks, relativeOutdentBlankPenalty, relativeOutdentPenalty)
	default:
		// Likely the end of a block.
		s.penalty += pick(anyBlanks, relativeDedentBlankPenalty, relativeDedentPenalty)
	}
}

// cmp is xdiffi.c score_cmp.
func (s splitScore) cmp(o splitScore) int {
	c := 0
	if s.effectiveIndent > o.effectiveIndent {
		c = 1
	} else if s.effectiveIndent < o.effectiveIndent {
		c = -1
	}
	return indentWeight*c + (s.penalty - o.penalty)
}

func pick(cond bool, a, b int) int {
	if cond {
		return a
	}
	return b
}
