package textdiff

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func TestSplitLines(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"\n", []string{"\n"}},
		{"a", []string{"a"}},
		{"a\nb", []string{"a\n", "b"}},
		{"a\nb\n", []string{"a\n", "b\n"}},
		{"a\r\n\r\n", []string{"a\r\n", "\r\n"}},
		{"\n\nx", []string{"\n", "\n", "x"}},
	}
	for _, tt := range tests {
		var got []string
		for _, l := range SplitLines([]byte(tt.in)) {
			got = append(got, string(l))
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("SplitLines(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestLines(t *testing.T) {
	tests := []struct {
		name string
		a, b string
		want []Op
	}{
		{"both empty", "", "", nil},
		{"equal", "a\nb\n", "a\nb\n", []Op{{Equal, 0, 0, 2}}},
		{"create", "", "a\nb\n", []Op{{Insert, 0, 0, 2}}},
		{"remove", "a\nb\n", "", []Op{{Delete, 0, 0, 2}}},
		{"replace middle", "a\nb\nc\n", "a\nB\nc\n", []Op{{Equal, 0, 0, 1}, {Delete, 1, 1, 1}, {Insert, 2, 1, 1}, {Equal, 2, 2, 1}}},
		{"insert at start", "b\nc\n", "a\nb\nc\n", []Op{{Insert, 0, 0, 1}, {Equal, 0, 1, 2}}},
		{"insert at end", "a\nb\n", "a\nb\nc\n", []Op{{Equal, 0, 0, 2}, {Insert, 2, 2, 1}}},
		{"delete at start", "a\nb\nc\n", "b\nc\n", []Op{{Delete, 0, 0, 1}, {Equal, 1, 0, 2}}},
		// The last line without its newline is a different line.
		{"newline added", "a\nb", "a\nb\n", []Op{{Equal, 0, 0, 1}, {Delete, 1, 1, 1}, {Insert, 2, 1, 1}}},
		{"newline removed", "a\nb\n", "a\nb", []Op{{Equal, 0, 0, 1}, {Delete, 1, 1, 1}, {Insert, 2, 1, 1}}},
		{"crlf", "a\r\nb\r\n", "a\nb\r\n", []Op{{Delete, 0, 0, 1}, {Insert, 1, 0, 1}, {Equal, 1, 1, 1}}},
		{"unrelated", "a\nb\n", "c\nd\ne\n", []Op{{Delete, 0, 0, 2}, {Insert, 2, 0, 3}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Lines([]byte(tt.a), []byte(tt.b))
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Lines(%q, %q) =\n%v\nwant\n%v", tt.a, tt.b, got, tt.want)
			}
			if _, err := checkOps([]byte(tt.a), []byte(tt.b), got); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestLinesProperties: the runs of Lines(a, b) rebuild b from a, and, below
// the cost cap, the diff is minimal.
func TestLinesProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := textGen(40).Draw(t, "a")
		b := textGen(40).Draw(t, "b")
		ops := Lines(a, b)
		got, err := checkOps(a, b, ops)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, b) {
			t.Fatalf("rebuilt %q, want %q", got, b)
		}
		if c, m := editCost(ops), minCost(a, b); c != m {
			t.Fatalf("edit cost %d, minimal is %d: %v", c, m, ops)
		}
	})
}

// TestLinesMinimalRandom checks minimality on larger random edits than
// rapid draws, still below the cost cap.
func TestLinesMinimalRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for iter := 0; iter < 300; iter++ {
		a := randomText(r, r.IntN(300), 1+r.IntN(20))
		b := mutate(r, a, r.IntN(30))
		ops := Lines(a, b)
		if _, err := checkOps(a, b, ops); err != nil {
			t.Fatalf("iter %d: %v", iter, err)
		}
		if c, m := editCost(ops), minCost(a, b); c != m {
			t.Fatalf("iter %d: edit cost %d, minimal is %d", iter, c, m)
		}
	}
}

// TestLinesLarge checks that inputs far past the cost cap finish quickly and
// still give a correct diff: unrelated files (handled by setting aside lines
// unique to one side), many scattered edits, and repetitive lines that defeat
// that pre-pass.
func TestLinesLarge(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	rep := func(n int, pat ...string) []byte {
		var b bytes.Buffer
		for i := 0; i < n; i++ {
			b.WriteString(pat[r.IntN(len(pat))])
		}
		return b.Bytes()
	}
	big := randomText(r, 200000, 1<<30)
	tests := []struct {
		name string
		a, b []byte
	}{
		{"unrelated", randomText(r, 100000, 1<<30), randomText(r, 100000, 1<<30)},
		{"scattered edits", big, mutate(r, big, 20000)},
		{"repetitive", rep(30000, "x\n", "y\n", "z\n"), rep(30000, "x\n", "y\n", "w\n")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			ops := Lines(tt.a, tt.b)
			d := time.Since(start)
			got, err := checkOps(tt.a, tt.b, ops)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tt.b) {
				t.Fatal("rebuilt text differs")
			}
			t.Logf("%d+%d lines, cost %d, %v", bytes.Count(tt.a, []byte{'\n'}), bytes.Count(tt.b, []byte{'\n'}), editCost(ops), d)
		})
	}
}

func BenchmarkLines(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	a := randomText(r, 20000, 5000)
	c := mutate(r, a, 200)
	b.SetBytes(int64(len(a) + len(c)))
	for b.Loop() {
		Lines(a, c)
	}
}

// randomText returns n lines drawn from distinct possible lines.
func randomText(r *rand.Rand, n, distinct int) []byte {
	var b bytes.Buffer
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "line %d\n", r.IntN(distinct))
	}
	return b.Bytes()
}

// mutate applies about n random line edits (replace, insert, delete) to a,
// in one pass, and sometimes drops or adds the final newline.
func mutate(r *rand.Rand, a []byte, n int) []byte {
	lines := SplitLines(a)
	var out []byte
	p := float64(n) / float64(len(lines)+1)
	newLine := func() []byte { return []byte(fmt.Sprintf("new %d\n", r.IntN(1000))) }
	for i := 0; i <= len(lines); i++ {
		if r.Float64() < p {
			switch r.IntN(3) {
			case 0:
				out = append(out, newLine()...)
			case 1:
				if i < len(lines) {
					continue // deleted
				}
			case 2:
				if i < len(lines) {
					out = append(out, newLine()...)
					continue // replaced
				}
			}
		}
		if i < len(lines) {
			out = append(out, lines[i]...)
		}
	}
	if r.IntN(8) == 0 && len(out) > 0 {
		if out[len(out)-1] == '\n' {
			out = out[:len(out)-1]
		} else {
			out = append(out, '\n')
		}
	}
	return out
}
