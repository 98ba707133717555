package textdiff

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func TestMerge3(t *testing.T) {
	lines := func(s string) string {
		if s == "" {
			return ""
		}
		return strings.Join(strings.Split(s, " "), "\n") + "\n"
	}
	tests := []struct {
		name               string
		base, ours, theirs string
		want               string
		conflict           bool
		rawBase, rawOurs   bool // take base/ours as given, not through lines
		rawTheirs, rawWant bool
	}{
		{name: "nothing changed", base: "1 2 3", ours: "1 2 3", theirs: "1 2 3", want: "1 2 3"},
		{name: "ours only", base: "1 2 3", ours: "1 X 3", theirs: "1 2 3", want: "1 X 3"},
		{name: "theirs only", base: "1 2 3", ours: "1 2 3", theirs: "1 2 Y", want: "1 2 Y"},
		{name: "both, apart", base: "1 2 3 4 5", ours: "1 X 3 4 5", theirs: "1 2 3 Y 5", want: "1 X 3 Y 5"},
		{name: "same change on both", base: "1 2 3", ours: "1 X 3", theirs: "1 X 3", want: "1 X 3"},
		{name: "same deletion on both", base: "1 2 3 4", ours: "1 4", theirs: "1 4", want: "1 4"},
		{name: "insert at both ends", base: "1 2 3", ours: "0 1 2 3", theirs: "1 2 3 4", want: "0 1 2 3 4"},
		{name: "from empty base, same", base: "", ours: "a b", theirs: "a b", want: "a b"},
		{name: "overlapping",
			base: "1 2 3", ours: "1 X 3", theirs: "1 Y 3", conflict: true,
			want: "1 <<<<<<<_ours X ======= Y >>>>>>>_theirs 3"},
		// git merge-file conflicts on changes that touch without
		// overlapping (xmerge.c: i1 + chg1 < other's i1 is required).
		{name: "adjacent lines",
			base: "1 2 3 4 5", ours: "1 X 3 4 5", theirs: "1 2 Y 4 5", conflict: true,
			want: "1 <<<<<<<_ours X 3 ======= 2 Y >>>>>>>_theirs 4 5"},
		{name: "insert next to a change",
			base: "1 2 3 4 5", ours: "1 X 3 4 5", theirs: "1 2 I 3 4 5", conflict: true,
			want: "1 <<<<<<<_ours X ======= 2 I >>>>>>>_theirs 3 4 5"},
		{name: "two inserts at the same place",
			base: "1 2", ours: "1 A 2", theirs: "1 B 2", conflict: true,
			want: "1 <<<<<<<_ours A ======= B >>>>>>>_theirs 2"},
		{name: "one unchanged line between is enough",
			base: "1 2 3 4 5", ours: "1 X 3 4 5", theirs: "1 2 3 Y 5", want: "1 X 3 Y 5"},
		{name: "common lines moved out of the markers",
			base: "1 2 3", ours: "1 C X C2 3", theirs: "1 C Y C2 3", conflict: true,
			want: "1 C <<<<<<<_ours X ======= Y >>>>>>>_theirs C2 3"},
		{name: "delete vs edit",
			base: "1 2 3", ours: "1 3", theirs: "1 Y 3", conflict: true,
			want: "1 <<<<<<<_ours ======= Y >>>>>>>_theirs 3"},
		{name: "conflict at the end without newline",
			base: "1\n2", ours: "1\nX", theirs: "1\nY", conflict: true,
			rawBase: true, rawOurs: true, rawTheirs: true, rawWant: true,
			want: "1\n<<<<<<< ours\nX\n=======\nY\n>>>>>>> theirs\n"},
		{name: "newline added by both",
			base: "1\n2", ours: "1\n2\n", theirs: "1\n2\n",
			rawBase: true, rawOurs: true, rawTheirs: true, rawWant: true, want: "1\n2\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conv := func(s string, raw bool) []byte {
				if raw {
					return []byte(s)
				}
				return []byte(strings.ReplaceAll(lines(s), "_", " "))
			}
			got, conflict := Merge3(conv(tt.base, tt.rawBase), conv(tt.ours, tt.rawOurs), conv(tt.theirs, tt.rawTheirs))
			want := conv(tt.want, tt.rawWant)
			if conflict != tt.conflict || !bytes.Equal(got, want) {
				t.Errorf("got conflict=%v\n%s\nwant conflict=%v\n%s", conflict, got, tt.conflict, want)
			}
		})
	}
}

// TestMerge3Properties checks the laws of a three-way merge.
func TestMerge3Properties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		base := textGen(20).Draw(t, "base")
		ours := textGen(20).Draw(t, "ours")
		theirs := textGen(20).Draw(t, "theirs")
		for _, c := range []struct {
			name     string
			b, o, th []byte
			want     []byte
		}{
			{"theirs == base gives ours", base, ours, base, ours},
			{"ours == base gives theirs", base, base, theirs, theirs},
			{"ours == theirs gives ours", base, ours, ours, ours},
		} {
			got, conflict := Merge3(c.b, c.o, c.th)
			if conflict || !bytes.Equal(got, c.want) {
				t.Fatalf("%s: got %q conflict=%v, want %q", c.name, got, conflict, c.want)
			}
		}
	})
}

// TestMerge3Disjoint: edits to disjoint regions of a base, at least one
// unchanged line apart, merge cleanly to the file with both edits. Base
// lines are distinct and edits bring new lines, so the diffs are not
// ambiguous.
func TestMerge3Disjoint(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 30).Draw(t, "n")
		base := make([]string, n)
		for i := range base {
			base[i] = fmt.Sprintf("base %d\n", i)
		}
		// Each base line, and the gap before each (index n is the end),
		// belongs to ours, theirs or neither; a region edited by one side
		// is separated from the other side's by an untouched line.
		type edit struct {
			del  bool
			ins  []string
			side int // 1 ours, 2 theirs
		}
		edits := map[int]edit{}
		last, lastSide := -10, 0
		for i := 0; i <= n; i++ {
			side := rapid.IntRange(0, 2).Draw(t, "side")
			if side == 0 {
				continue
			}
			if lastSide != 0 && lastSide != side && i-last < 2 {
				continue
			}
			e := edit{side: side, del: i < n && rapid.Bool().Draw(t, "del")}
			for k := rapid.IntRange(0, 2).Draw(t, "ins"); k > 0; k-- {
				e.ins = append(e.ins, fmt.Sprintf("side %d edit %d.%d\n", side, i, k))
			}
			if !e.del && len(e.ins) == 0 {
				continue
			}
			edits[i] = e
			last, lastSide = i, side
		}
		build := func(sides ...int) []byte {
			var b []byte
			for i := 0; i <= n; i++ {
				e, ok := edits[i]
				use := false
				for _, s := range sides {
					use = use || (ok && e.side == s)
				}
				if use {
					for _, l := range e.ins {
						b = append(b, l...)
					}
				}
				if i < n && !(use && e.del) {
					b = append(b, base[i]...)
				}
			}
			return b
		}
		got, conflict := Merge3(build(), build(1), build(2))
		if want := build(1, 2); conflict || !bytes.Equal(got, want) {
			t.Fatalf("conflict=%v\n%s\nwant\n%s", conflict, got, want)
		}
	})
}

// TestMerge3MatchesGit compares Merge3 with git merge-file: the conflict
// flag must agree, and clean merges must be identical. Half the cases edit
// a base of distinct lines, where the diffs are unambiguous and edits often
// touch, pinning git's rule that touching changes conflict; the other half
// use a few repeated lines, where it matters that changes slide as git's
// do before it decides whether they touch.
func TestMerge3MatchesGit(t *testing.T) {
	requireTool(t, "git")
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(13, 14))
	edit := func(base [][]byte, tag string, rate int) []byte {
		var b []byte
		for i := 0; i <= len(base); i++ {
			if r.IntN(rate) == 0 {
				b = append(b, fmt.Sprintf("%s ins %d\n", tag, i)...)
			}
			if i == len(base) {
				break
			}
			switch r.IntN(rate + 2) {
			case 0: // delete
			case 1:
				b = append(b, fmt.Sprintf("%s mod %d\n", tag, i)...)
			case 2:
				b = append(b, fmt.Sprintf("same mod %d\n", i)...) // may match the other side
			default:
				b = append(b, base[i]...)
			}
		}
		return b
	}
	const n = 400
	conflicts := 0
	for iter := 0; iter < n; iter++ {
		var bb, ours, theirs []byte
		if iter%2 == 0 {
			for i := 0; i < r.IntN(15); i++ {
				bb = append(bb, fmt.Sprintf("base %d\n", i)...)
			}
			if len(bb) > 0 && r.IntN(5) == 0 {
				bb = bb[:len(bb)-1]
			}
			rate := 2 + r.IntN(20)
			ours, theirs = edit(SplitLines(bb), "ours", rate), edit(SplitLines(bb), "theirs", rate)
		} else {
			vocab := []string{"a\n", "b\n", "}\n", "\n", "\tx\n", "c\n"}[:2+r.IntN(4)]
			for k := r.IntN(40); k > 0; k-- {
				bb = append(bb, vocab[r.IntN(len(vocab))]...)
			}
			ours, theirs = mutate(r, bb, 1+r.IntN(4)), mutate(r, bb, 1+r.IntN(4))
		}
		for name, data := range map[string][]byte{"base": bb, "ours": ours, "theirs": theirs} {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		// The exit status is the number of conflicts.
		out, err := run(t, dir, "git", "merge-file", "-p", "ours", "base", "theirs")
		gitConflict := err != nil
		got, conflict := Merge3(bb, ours, theirs)
		if conflict != gitConflict || (!conflict && !bytes.Equal(got, out)) {
			t.Fatalf("iter %d: base\n%s\nours\n%s\ntheirs\n%s\ngot conflict=%v\n%s\ngit conflict=%v (%v)\n%s",
				iter, bb, ours, theirs, conflict, got, gitConflict, err, out)
		}
		if conflict {
			conflicts++
		}
	}
	t.Logf("%d merges, %d conflicts", n, conflicts)
}
