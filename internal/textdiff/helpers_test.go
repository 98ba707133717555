package textdiff

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"pgregory.net/rapid"
)

// checkOps verifies that ops is a diff from a to b: the runs are in order,
// cover both inputs exactly once, Equal runs are equal, and no two adjacent
// runs have the same kind. It returns b rebuilt from a's lines for Equal
// runs and b's for Insert runs.
func checkOps(a, b []byte, ops []Op) ([]byte, error) {
	al, bl := SplitLines(a), SplitLines(b)
	i, j := 0, 0
	var out []byte
	for k, op := range ops {
		if op.N <= 0 {
			return nil, fmt.Errorf("op %d %+v: empty run", k, op)
		}
		if k > 0 && ops[k-1].Kind == op.Kind {
			return nil, fmt.Errorf("op %d %+v: same kind as the one before", k, op)
		}
		if k > 0 && ops[k-1].Kind == Insert && op.Kind == Delete {
			return nil, fmt.Errorf("op %d %+v: delete after insert", k, op)
		}
		if op.A != i || op.B != j {
			return nil, fmt.Errorf("op %d %+v: expected at a=%d b=%d", k, op, i, j)
		}
		switch op.Kind {
		case Equal:
			if i+op.N > len(al) || j+op.N > len(bl) {
				return nil, fmt.Errorf("op %d %+v: past the end", k, op)
			}
			for n := 0; n < op.N; n++ {
				if !bytes.Equal(al[i+n], bl[j+n]) {
					return nil, fmt.Errorf("op %d %+v: line %q != %q", k, op, al[i+n], bl[j+n])
				}
				out = append(out, al[i+n]...)
			}
			i += op.N
			j += op.N
		case Delete:
			if i+op.N > len(al) {
				return nil, fmt.Errorf("op %d %+v: past the end of a", k, op)
			}
			i += op.N
		case Insert:
			if j+op.N > len(bl) {
				return nil, fmt.Errorf("op %d %+v: past the end of b", k, op)
			}
			for n := 0; n < op.N; n++ {
				out = append(out, bl[j+n]...)
			}
			j += op.N
		default:
			return nil, fmt.Errorf("op %d: kind %d", k, op.Kind)
		}
	}
	if i != len(al) || j != len(bl) {
		return nil, fmt.Errorf("ops end at a=%d b=%d, want %d %d", i, j, len(al), len(bl))
	}
	return out, nil
}

// editCost is the number of deleted plus inserted lines.
func editCost(ops []Op) int {
	n := 0
	for _, op := range ops {
		if op.Kind != Equal {
			n += op.N
		}
	}
	return n
}

// minCost is the minimal edit cost from a to b by dynamic programming.
func minCost(a, b []byte) int {
	al, bl := SplitLines(a), SplitLines(b)
	prev := make([]int, len(bl)+1)
	cur := make([]int, len(bl)+1)
	for i := 1; i <= len(al); i++ {
		for j := 1; j <= len(bl); j++ {
			if bytes.Equal(al[i-1], bl[j-1]) {
				cur[j] = prev[j-1] + 1
			} else {
				cur[j] = max(prev[j], cur[j-1])
			}
		}
		prev, cur = cur, prev
	}
	return len(al) + len(bl) - 2*prev[len(bl)]
}

// applyUnified applies hunks in the format Unified writes to a, strictly:
// context and deleted lines must match, counts must agree with headers and
// hunks must be in order. It is the round trip check for Hunks.
func applyUnified(a, hunks []byte) ([]byte, error) {
	al := SplitLines(a)
	lines := SplitLines(hunks)
	var out []byte
	pos := 0 // next line of a to copy
	for k := 0; k < len(lines); {
		hdr := string(lines[k])
		k++
		var os, ol, ns, nl int
		if err := parseHeader(hdr, &os, &ol, &ns, &nl); err != nil {
			return nil, err
		}
		start := os - 1
		if ol == 0 {
			start = os
		}
		if start < pos || start > len(al) {
			return nil, fmt.Errorf("hunk %q out of order (at %d)", hdr, pos)
		}
		for _, l := range al[pos:start] {
			out = append(out, l...)
		}
		pos = start
		gotOld, gotNew := 0, 0
		for k < len(lines) && len(lines[k]) > 0 && lines[k][0] != '@' {
			l := lines[k]
			k++
			body := l[1:]
			if k < len(lines) && string(lines[k]) == noNewline {
				k++
				body = body[:len(body)-1]
			}
			switch l[0] {
			case ' ', '-':
				if pos >= len(al) || !bytes.Equal(al[pos], body) {
					return nil, fmt.Errorf("hunk %q: line %d is not %q", hdr, pos+1, body)
				}
				pos++
				gotOld++
				if l[0] == ' ' {
					out = append(out, body...)
					gotNew++
				}
			case '+':
				out = append(out, body...)
				gotNew++
			default:
				return nil, fmt.Errorf("hunk %q: bad line %q", hdr, l)
			}
		}
		if gotOld != ol || gotNew != nl {
			return nil, fmt.Errorf("hunk %q: has %d old and %d new lines", hdr, gotOld, gotNew)
		}
	}
	for _, l := range al[pos:] {
		out = append(out, l...)
	}
	return out, nil
}

// parseHeader parses "@@ -s[,n] +s[,n] @@...".
func parseHeader(h string, os, ol, ns, nl *int) error {
	f := strings.Fields(h)
	if len(f) < 4 || f[0] != "@@" || f[3] != "@@" || f[1][0] != '-' || f[2][0] != '+' {
		return fmt.Errorf("bad hunk header %q", h)
	}
	parse := func(s string, start, n *int) error {
		*n = 1
		if i := strings.IndexByte(s, ','); i >= 0 {
			c, err := strconv.Atoi(s[i+1:])
			if err != nil {
				return err
			}
			if c == 1 {
				return fmt.Errorf("count 1 not omitted in %q", h)
			}
			*n = c
			s = s[:i]
		}
		v, err := strconv.Atoi(s)
		*start = v
		return err
	}
	if err := parse(f[1][1:], os, ol); err != nil {
		return err
	}
	return parse(f[2][1:], ns, nl)
}

// textGen generates text from few distinct lines, so that diffs are
// ambiguous, with or without a final newline and sometimes with CRLF.
func textGen(maxLines int) *rapid.Generator[[]byte] {
	return rapid.Custom(func(t *rapid.T) []byte {
		lines := rapid.SliceOfN(rapid.SampledFrom([]string{"a", "b", "c", "", "a\r", "{", "}"}), 0, maxLines).Draw(t, "lines")
		var b []byte
		for _, l := range lines {
			b = append(b, l...)
			b = append(b, '\n')
		}
		if len(b) > 0 && rapid.Bool().Draw(t, "chop") {
			b = b[:len(b)-1]
		}
		return b
	})
}
