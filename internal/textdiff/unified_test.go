package textdiff

import (
	"bytes"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// TestUnified pins hunk text against what git diff (2.39) prints for the
// same inputs, minus the file header.
func TestUnified(t *testing.T) {
	num := func(lines ...string) string { return strings.Join(lines, "\n") + "\n" }
	tests := []struct {
		name    string
		a, b    string
		context int
		want    string
	}{
		{"equal", "a\n", "a\n", 3, ""},
		{"both empty", "", "", 3, ""},
		{"modify middle",
			num("1", "2", "3", "4", "5", "6", "7", "8", "9", "10"),
			num("1", "2", "3", "4", "five", "6", "7", "8", "9", "10"), 3,
			"@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n"},
		{"create", "", "a\nb\nc\n", 3, "@@ -0,0 +1,3 @@\n+a\n+b\n+c\n"},
		{"remove one line", "a\n", "", 3, "@@ -1 +0,0 @@\n-a\n"},
		{"remove without newline", "a\nb", "", 3,
			"@@ -1,2 +0,0 @@\n-a\n-b\n\\ No newline at end of file\n"},
		{"add final newline", "a\nb", "a\nb\n", 3,
			"@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n"},
		{"neither has newline", "x", "y", 3,
			"@@ -1 +1 @@\n-x\n\\ No newline at end of file\n+y\n\\ No newline at end of file\n"},
		{"insert at start", "b\nc\nd\ne\n", "a\nb\nc\nd\ne\n", 3, "@@ -1,3 +1,4 @@\n+a\n b\n c\n d\n"},
		{"changes 6 apart share a hunk",
			num("1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15"),
			num("1", "X", "3", "4", "5", "6", "7", "8", "Y", "10", "11", "12", "13", "14", "15"), 3,
			"@@ -1,12 +1,12 @@\n 1\n-2\n+X\n 3\n 4\n 5\n 6\n 7\n 8\n-9\n+Y\n 10\n 11\n 12\n"},
		{"changes 7 apart do not",
			num("1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15"),
			num("1", "X", "3", "4", "5", "6", "7", "8", "9", "Y", "11", "12", "13", "14", "15"), 3,
			"@@ -1,5 +1,5 @@\n 1\n-2\n+X\n 3\n 4\n 5\n@@ -7,7 +7,7 @@\n 7\n 8\n 9\n-10\n+Y\n 11\n 12\n 13\n"},
		{"U0 insert", "1\n2\n3\n4\n5\n", "1\n2\n3\nx\ny\n4\n5\n", 0, "@@ -3,0 +4,2 @@\n+x\n+y\n"},
		{"U0 delete", "1\n2\n3\n4\n5\n", "1\n2\n5\n", 0, "@@ -3,2 +2,0 @@\n-3\n-4\n"},
		{"negative context is 0", "1\n2\n3\n", "1\nX\n3\n", -1, "@@ -2 +2 @@\n-2\n+X\n"},
		{"section",
			"int main() {\n\t1\n\t2\n\t3\n\t4\n}\n", "int main() {\n\t1\n\t2\n\t3\n\tfour\n}\n", 3,
			"@@ -2,5 +2,5 @@ int main() {\n \t1\n \t2\n \t3\n-\t4\n+\tfour\n }\n"},
		{"section trimmed of trailing space",
			"  \n$x  \t \r\n1\n2\n3\n4\n", "  \n$x  \t \r\n1\n2\n3\n5\n", 3,
			"@@ -3,4 +3,4 @@ $x\n 1\n 2\n 3\n-4\n+5\n"},
		{"section cut to 80 bytes",
			strings.Repeat("x", 100) + "\n1\n2\n3\n4\n", strings.Repeat("x", 100) + "\n1\n2\n3\n5\n", 3,
			"@@ -2,4 +2,4 @@ " + strings.Repeat("x", 80) + "\n 1\n 2\n 3\n-4\n+5\n"},
		{"section searched only above the first context line",
			num("f1", " a", " b", " c", " d", " e", " f", " g", " h", " i", " j", " k", " l", " m"),
			num("f1", " a", " B", " c", " d", " e", " f", " g", " h", " i", " j", " k", " L", " m"), 3,
			"@@ -1,6 +1,6 @@\n f1\n  a\n- b\n+ B\n  c\n  d\n  e\n@@ -10,5 +10,5 @@ f1\n  i\n  j\n  k\n- l\n+ L\n  m\n"},
		{"section kept from the previous hunk",
			num("f1", " a", " b", " c", " d", " e", " f", " g", " h", " i", " j", " k", " l", " m", " n", " o"),
			num("f1", " a", " b", " c", " d", " E", " f", " g", " h", " i", " j", " k", " l", " m", " N", " o"), 1,
			"@@ -5,3 +5,3 @@ f1\n  d\n- e\n+ E\n  f\n@@ -14,3 +14,3 @@ f1\n  m\n- n\n+ N\n  o\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(Unified([]byte(tt.a), []byte(tt.b), tt.context))
			if got != tt.want {
				t.Errorf("got\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

// TestHunksRoundTrip: applying the hunks of a to b, strictly, gives b, for
// every context size.
func TestHunksRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := textGen(30).Draw(t, "a")
		b := textGen(30).Draw(t, "b")
		ctx := rapid.IntRange(0, 5).Draw(t, "context")
		u := Unified(a, b, ctx)
		got, err := applyUnified(a, u)
		if err != nil {
			t.Fatalf("%v\n%s", err, u)
		}
		if !bytes.Equal(got, b) {
			t.Fatalf("applied %q, want %q\n%s", got, b, u)
		}
	})
}
