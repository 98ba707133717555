package textdiff

import (
	"bytes"
	"strconv"
)

// DefaultContext is the number of unchanged lines git shows around a change
// (diff.context, -U).
const DefaultContext = 3

// noNewline follows a hunk line that has no '\n' (xdiff's xdl_emit_record).
const noNewline = "\\ No newline at end of file\n"

// maxSection is the longest section heading git puts after a hunk header:
// the size of xemit.c's struct func_line buffer.
const maxSection = 80

// Hunk is one hunk of a unified diff.
type Hunk struct {
	// OldStart and OldLines give the lines of the old input the hunk
	// covers: OldLines lines from line OldStart, counted from 1. When
	// OldLines is 0, OldStart is the line after which the hunk's lines go
	// (0 for the top of the file), as in every unified diff.
	OldStart, OldLines int
	// NewStart and NewLines are the same for the new input.
	NewStart, NewLines int
	// Section is git's default "function name" heading: the nearest line
	// of the old input above the hunk that starts with a letter, '_' or
	// '$', cut to 80 bytes and trimmed of trailing space (xemit.c def_ff).
	// As in git, the search stops where the previous hunk's began, and a
	// hunk that finds nothing repeats the previous heading; "" for none.
	Section string
	// Body holds the hunk's lines: " " context, "-" deleted, "+" inserted,
	// each followed by "\ No newline at end of file" when it lacks '\n'.
	Body []byte
}

// Header returns the hunk's "@@ -l,s +l,s @@" line with its newline. Like
// git, it omits a count of 1.
func (h Hunk) Header() string {
	b := make([]byte, 0, 32+len(h.Section))
	b = append(b, "@@ -"...)
	b = appendRange(b, h.OldStart, h.OldLines)
	b = append(b, " +"...)
	b = appendRange(b, h.NewStart, h.NewLines)
	b = append(b, " @@"...)
	if h.Section != "" {
		b = append(b, ' ')
		b = append(b, h.Section...)
	}
	b = append(b, '\n')
	return string(b)
}

// appendRange is xdl_emit_hunk_hdr's "start[,count]".
func appendRange(b []byte, start, count int) []byte {
	b = strconv.AppendInt(b, int64(start), 10)
	if count != 1 {
		b = append(b, ',')
		b = strconv.AppendInt(b, int64(count), 10)
	}
	return b
}

// Hunks returns the hunks of the diff from a to b with context lines of
// context around each change (negative means 0). Equal inputs have none.
func Hunks(a, b []byte, context int) []Hunk {
	al, bl := SplitLines(a), SplitLines(b)
	return hunks(al, bl, diffLines(al, bl, true), context)
}

// Unified returns the hunks of the diff from a to b, headers and bodies, as
// they appear in a patch after the "---" and "+++" lines.
func Unified(a, b []byte, context int) []byte {
	var buf bytes.Buffer
	for _, h := range Hunks(a, b, context) {
		buf.WriteString(h.Header())
		buf.Write(h.Body)
	}
	return buf.Bytes()
}

// change is one change of a diff: a[i1:i1+n1] replaced by b[i2:i2+n2].
type change struct{ i1, n1, i2, n2 int }

// changes groups the runs of ops into changes.
func changes(ops []Op) []change {
	var cs []change
	for k := 0; k < len(ops); k++ {
		op := ops[k]
		switch op.Kind {
		case Delete:
			c := change{i1: op.A, n1: op.N, i2: op.B}
			if k+1 < len(ops) && ops[k+1].Kind == Insert {
				k++
				c.n2 = ops[k].N
			}
			cs = append(cs, c)
		case Insert:
			cs = append(cs, change{i1: op.A, i2: op.B, n2: op.N})
		}
	}
	return cs
}

// hunks lays out the changes of ops as xdiff's xdl_emit_diff does: a hunk
// takes every next change at most 2×context unchanged lines away
// (xdl_get_hunk), and its header names the nearest section line above the
// hunk, searched back no further than the previous hunk's search.
func hunks(a, b [][]byte, ops []Op, context int) []Hunk {
	context = max(context, 0)
	cs := changes(ops)
	var out []Hunk
	section := ""
	sectionPrev := -1
	for first := 0; first < len(cs); {
		last := first
		for last+1 < len(cs) && cs[last+1].i1-(cs[last].i1+cs[last].n1) <= 2*context {
			last++
		}
		xch, xche := cs[first], cs[last]
		s1 := max(xch.i1-context, 0)
		s2 := max(xch.i2-context, 0)
		lctx := min(context, len(a)-(xche.i1+xche.n1), len(b)-(xche.i2+xche.n2))
		e1 := xche.i1 + xche.n1 + lctx
		e2 := xche.i2 + xche.n2 + lctx

		// xemit.c get_func_line(xe, xecfg, &func_line, s1 - 1,
		// funclineprev): when nothing is found the heading of the
		// previous hunk stays.
		for l := s1 - 1; l > sectionPrev && l >= 0; l-- {
			if s, ok := sectionOf(a[l]); ok {
				section = s
				break
			}
		}
		sectionPrev = s1 - 1

		h := Hunk{OldStart: s1 + 1, OldLines: e1 - s1, NewStart: s2 + 1, NewLines: e2 - s2, Section: section}
		if h.OldLines == 0 {
			h.OldStart--
		}
		if h.NewLines == 0 {
			h.NewStart--
		}
		var body []byte
		for ; s2 < xch.i2; s2++ {
			body = appendLine(body, ' ', b[s2])
		}
		for k := first; k <= last; k++ {
			c := cs[k]
			if k > first {
				p := cs[k-1]
				for j := p.i2 + p.n2; j < c.i2; j++ {
					body = appendLine(body, ' ', b[j])
				}
			}
			for i := c.i1; i < c.i1+c.n1; i++ {
				body = appendLine(body, '-', a[i])
			}
			for j := c.i2; j < c.i2+c.n2; j++ {
				body = appendLine(body, '+', b[j])
			}
		}
		for j := xche.i2 + xche.n2; j < e2; j++ {
			body = appendLine(body, ' ', b[j])
		}
		h.Body = body
		out = append(out, h)
		first = last + 1
	}
	return out
}

// appendLine appends one hunk line.
func appendLine(body []byte, prefix byte, line []byte) []byte {
	body = append(body, prefix)
	body = append(body, line...)
	if len(line) == 0 || line[len(line)-1] != '\n' {
		body = append(body, '\n')
		body = append(body, noNewline...)
	}
	return body
}

// sectionOf is xemit.c's def_ff, git's section heading when no diff driver
// sets a funcname pattern. isalpha and isspace are git's ASCII-only
// sane_ctype versions, where space is ' ', '\t', '\n' and '\r'.
func sectionOf(line []byte) (string, bool) {
	if len(line) == 0 {
		return "", false
	}
	c := line[0]
	if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_' || c == '$') {
		return "", false
	}
	if len(line) > maxSection {
		line = line[:maxSection]
	}
	for len(line) > 0 {
		switch line[len(line)-1] {
		case ' ', '\t', '\n', '\r':
			line = line[:len(line)-1]
			continue
		}
		break
	}
	return string(line), true
}
