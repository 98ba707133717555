package textdiff

import (
	"bytes"
	"strconv"
	"testing"
)

// The seed corpora are in testdata/fuzz/<FuzzName>/.

// FuzzLines: Lines never panics and its runs rebuild b from a; the unified
// hunks apply back strictly; WritePatch accepts any content.
func FuzzLines(f *testing.F) {
	f.Add([]byte("a\nb\nc\n"), []byte("a\nB\nc"))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		ops := Lines(a, b)
		got, err := checkOps(a, b, ops)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, b) {
			t.Fatalf("rebuilt %q, want %q", got, b)
		}
		for _, ctx := range []int{0, 3} {
			u := Unified(a, b, ctx)
			got, err := applyUnified(a, u)
			if err != nil {
				t.Fatalf("context %d: %v\n%s", ctx, err, u)
			}
			if !bytes.Equal(got, b) {
				t.Fatalf("context %d: hunks give %q, want %q", ctx, got, b)
			}
		}
		var buf bytes.Buffer
		if err := WritePatch(&buf, FilePatch{OldPath: "f", NewPath: "f", OldMode: ModeFile, NewMode: ModeExec, Old: a, New: b}); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzMerge3: Merge3 never panics, obeys the identity laws, and is
// symmetric in ours and theirs where it merges cleanly.
func FuzzMerge3(f *testing.F) {
	f.Add([]byte("1\n2\n3\n"), []byte("1\nX\n3\n"), []byte("1\n2\nY\n"))
	f.Fuzz(func(t *testing.T, base, ours, theirs []byte) {
		merged, conflict := Merge3(base, ours, theirs)
		swapped, swappedConflict := Merge3(base, theirs, ours)
		if conflict != swappedConflict {
			t.Fatalf("conflict %v, swapped %v", conflict, swappedConflict)
		}
		if !conflict && !bytes.Equal(merged, swapped) {
			t.Fatalf("merged %q, swapped %q", merged, swapped)
		}
		check := func(name string, want []byte) {
			if conflict || !bytes.Equal(merged, want) {
				t.Fatalf("%s: got %q (conflict %v), want %q", name, merged, conflict, want)
			}
		}
		if bytes.Equal(theirs, base) {
			check("theirs == base", ours)
		}
		if bytes.Equal(ours, base) {
			check("ours == base", theirs)
		}
		if bytes.Equal(ours, theirs) {
			check("ours == theirs", ours)
		}
	})
}

// FuzzQuotePath: a quoted path is printable ASCII and unquotes to the
// original; an unquoted one needed no quoting.
func FuzzQuotePath(f *testing.F) {
	f.Add("plain")
	f.Add("tab\there")
	f.Fuzz(func(t *testing.T, p string) {
		q := QuotePath(p)
		if q == p {
			for i := 0; i < len(p); i++ {
				if mustQuote(p[i]) {
					t.Fatalf("%q left unquoted", p)
				}
			}
			return
		}
		for i := 0; i < len(q); i++ {
			if q[i] < 0x20 || q[i] >= 0x7f {
				t.Fatalf("QuotePath(%q) = %q has byte %#x", p, q, q[i])
			}
		}
		u, err := strconv.Unquote(q)
		if err != nil || u != p {
			t.Fatalf("QuotePath(%q) = %s unquotes to %q, %v", p, q, u, err)
		}
	})
}
