package textdiff

import "bytes"

// Conflict markers, as git merge-file writes them with labels "ours" and
// "theirs" (xmerge.c fill_conflict_hunk).
const (
	markerOurs   = "<<<<<<< ours"
	markerSep    = "======="
	markerTheirs = ">>>>>>> theirs"
)

// Merge3 merges the changes that ours and theirs made to base, line by line,
// deciding as git merge-file does (xdiff/xmerge.c xdl_merge, after diffs
// slid as git slides them):
//
//   - A change made by one side only is taken.
//   - Changes by both sides that yield the same lines are taken once.
//   - Changes by both sides that overlap or touch are a conflict unless they
//     yield the same lines. "Touch" is git's rule, not diff3's: two changes
//     conflict unless at least one unchanged base line separates them
//     (xmerge.c: a change is independent only if it ends strictly before the
//     other begins), so an edit of line 3 by one side and of line 4 by the
//     other conflicts, and so do two insertions at the same place.
//
// On conflict merged holds every clean region plus, for each conflict, the
// lines both sides agree on at its start and end around "<<<<<<< ours",
// ours' lines, "=======", theirs' lines and ">>>>>>> theirs", each marker on
// a line of its own, and conflict is true. That text is for a person to
// read: git splits and joins conflict regions further (xdl_refine_conflicts,
// xdl_simplify_non_conflicts), so its markers can differ. Otherwise merged
// is the merge; in the tests it is byte for byte what git merge-file prints.
func Merge3(base, ours, theirs []byte) (merged []byte, conflict bool) {
	bl, ol, tl := SplitLines(base), SplitLines(ours), SplitLines(theirs)
	// git merge-file diffs without the indent heuristic (its xpparam
	// flags are 0), so changes slide down as far as they can; that
	// decides whether two changes touch.
	co := changes(diffLines(bl, ol, false))
	ct := changes(diffLines(bl, tl, false))

	out := make([]byte, 0, max(len(ours), len(theirs)))
	pos := 0             // next base line to emit
	dOurs := 0           // ours line = base line + dOurs outside changes seen so far
	dTheirs := 0         // likewise for theirs
	nextO, nextT := 0, 0 // next change of ours and of theirs
	for nextO < len(co) || nextT < len(ct) {
		// A group starts with the change that starts first and takes
		// every change of the other side that touches one of its members.
		gs, endOurs, endTheirs := 0, -1, -1
		first := true
		o0, t0 := nextO, nextT
		for {
			takeOurs := nextO < len(co) && (nextT >= len(ct) || co[nextO].i1 <= ct[nextT].i1)
			var c change
			if takeOurs {
				c = co[nextO]
			} else if nextT < len(ct) {
				c = ct[nextT]
			} else {
				break
			}
			if !first {
				// Joins when it touches a member of the other side.
				other := endTheirs
				if !takeOurs {
					other = endOurs
				}
				if c.i1 > other {
					break
				}
			}
			if first {
				gs = c.i1
				first = false
			}
			if takeOurs {
				endOurs = max(endOurs, c.i1+c.n1)
				nextO++
			} else {
				endTheirs = max(endTheirs, c.i1+c.n1)
				nextT++
			}
		}
		ge := max(endOurs, endTheirs)

		out = appendLines(out, bl[pos:gs])
		oStart, tStart := gs+dOurs, gs+dTheirs
		for _, c := range co[o0:nextO] {
			dOurs += c.n2 - c.n1
		}
		for _, c := range ct[t0:nextT] {
			dTheirs += c.n2 - c.n1
		}
		oSide := ol[oStart : ge+dOurs]
		tSide := tl[tStart : ge+dTheirs]
		switch {
		case o0 == nextO:
			out = appendLines(out, tSide)
		case t0 == nextT, equalLines(oSide, tSide):
			out = appendLines(out, oSide)
		default:
			conflict = true
			out = appendConflict(out, oSide, tSide)
		}
		pos = ge
	}
	out = appendLines(out, bl[pos:])
	return out, conflict
}

// appendConflict writes a conflict between ours and theirs, shrunk to the
// lines where they differ, the way git's zealous level moves common lines
// out of the markers (xmerge.c xdl_refine_conflicts, reduced to a common
// prefix and suffix).
func appendConflict(out []byte, ours, theirs [][]byte) []byte {
	pre := 0
	for pre < len(ours) && pre < len(theirs) && bytes.Equal(ours[pre], theirs[pre]) {
		pre++
	}
	suf := 0
	for suf < len(ours)-pre && suf < len(theirs)-pre &&
		bytes.Equal(ours[len(ours)-1-suf], theirs[len(theirs)-1-suf]) {
		suf++
	}
	out = appendLines(out, ours[:pre])
	out = appendMarker(out, markerOurs)
	out = appendLines(out, ours[pre:len(ours)-suf])
	out = appendMarker(out, markerSep)
	out = appendLines(out, theirs[pre:len(theirs)-suf])
	out = appendMarker(out, markerTheirs)
	return appendLines(out, ours[len(ours)-suf:])
}

// appendMarker starts a new line if needed (a side's last line may lack its
// newline) and writes marker on it.
func appendMarker(out []byte, marker string) []byte {
	if len(out) > 0 && out[len(out)-1] != '\n' {
		out = append(out, '\n')
	}
	out = append(out, marker...)
	return append(out, '\n')
}

func appendLines(out []byte, lines [][]byte) []byte {
	for _, l := range lines {
		out = append(out, l...)
	}
	return out
}

func equalLines(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}
