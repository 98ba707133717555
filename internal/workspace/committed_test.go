package workspace

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stratafs/strata/overlayfs"
	"github.com/stratafs/strata/snapshot"
)

// deltaCase sets up an upper over one lower, records the committed-state
// index, changes the upper, and returns what deltaSince makes of it. The
// upper is edited directly, as the kernel leaves it: a deletion of
// something only the upper held leaves no whiteout.
func deltaCase(t *testing.T, setup, change func(upper, lower string)) ([]snapshot.UpperChange, bool) {
	t.Helper()
	dir := t.TempDir()
	upper, lower := filepath.Join(dir, "upper"), filepath.Join(dir, "lower")
	for _, d := range []string{upper, lower} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	setup(upper, lower)
	st0, err := walkUpper(upper)
	if err != nil {
		t.Fatal(err)
	}
	waitPastCtimes(st0.maxCtime)
	idx := &committedIndex{Entries: st0.entries}
	change(upper, lower)
	st1, err := walkUpper(upper)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := overlayfs.Changes(upper, []string{lower}, overlayfs.FlavourUser)
	if err != nil {
		t.Fatal(err)
	}
	return idx.deltaSince(st1, cs, upper, []string{lower})
}

func summary(cs []snapshot.UpperChange) string {
	var b []string
	for _, c := range cs {
		b = append(b, c.Kind.String()+" "+c.Path)
	}
	return strings.Join(b, ", ")
}

// TestDeltaSince pins the committed-state index's short way (issue 12,
// defect 2: every commit re-read all the workspace ever changed): only what
// changed since the last commit is applied, relative to the base commit,
// and what it cannot express sends the commit the long way.
func TestDeltaSince(t *testing.T) {
	for _, tc := range []struct {
		name          string
		setup, change func(t *testing.T, upper, lower string)
		want          string // summary of the changes; "long way" when !ok
	}{
		{
			name:   "nothing since",
			setup:  func(t *testing.T, u, l string) { write(t, u+"/a", "1") },
			change: func(t *testing.T, u, l string) {},
			want:   "",
		},
		{
			name: "one file of many",
			setup: func(t *testing.T, u, l string) {
				for _, f := range []string{"a", "b", "c"} {
					write(t, u+"/"+f, f)
				}
			},
			change: func(t *testing.T, u, l string) { write(t, u+"/b", "changed") },
			want:   "added b",
		},
		{
			name:   "upper-only file deleted",
			setup:  func(t *testing.T, u, l string) { write(t, u+"/a", "1"); write(t, u+"/b", "2") },
			change: func(t *testing.T, u, l string) { os.Remove(u + "/a") },
			want:   "modified ., deleted a",
		},
		{
			name:   "vanished over something beneath",
			setup:  func(t *testing.T, u, l string) { write(t, l+"/a", "lower"); write(t, u+"/a", "upper") },
			change: func(t *testing.T, u, l string) { os.Remove(u + "/a") },
			want:   "long way",
		},
		{
			name:   "new directory",
			setup:  func(t *testing.T, u, l string) { write(t, u+"/a", "1") },
			change: func(t *testing.T, u, l string) { write(t, u+"/d/f", "x") },
			want:   "modified ., added d, added d/f",
		},
		{
			name:  "directory re-created",
			setup: func(t *testing.T, u, l string) { write(t, u+"/d/old", "1"); write(t, u+"/d/keep", "2") },
			change: func(t *testing.T, u, l string) {
				// The old directory is removed only after the new
				// one exists, so that its inode number is not reused
				// (a reused one is applied as modified, with the old
				// entries deleted one by one: the same result).
				if err := os.Rename(u+"/d", u+"/d.old"); err != nil {
					t.Fatal(err)
				}
				write(t, u+"/d/new", "3")
				os.RemoveAll(u + "/d.old")
			},
			want: "modified ., added d, added d/new",
		},
		{
			name:   "file added to a committed directory",
			setup:  func(t *testing.T, u, l string) { write(t, u+"/d/a", "1") },
			change: func(t *testing.T, u, l string) { write(t, u+"/d/b", "2") },
			want:   "modified d, added d/b",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs, ok := deltaCase(t, func(u, l string) { tc.setup(t, u, l) }, func(u, l string) { tc.change(t, u, l) })
			got := summary(cs)
			if !ok {
				got = "long way"
			}
			if got != tc.want {
				t.Errorf("deltaSince: %q, want %q", got, tc.want)
			}
			for _, c := range cs {
				if c.ContentEqual != nil {
					t.Errorf("%s: ContentEqual kept (the base may differ from the lower)", c.Path)
				}
			}
		})
	}
}

// TestCommittedIndex: the index is kept for the base, mount base and upper
// it describes and ignored for any other; with it a workspace is clean
// right after a commit, and an edit makes it dirty by that file's size.
func TestCommittedIndex(t *testing.T) {
	dir := t.TempDir()
	rec := &Record{Name: "a", Dir: dir, Base: testID(1), MountBase: testID(1).String(), Upper: filepath.Join(dir, "upper"), Work: filepath.Join(dir, "work")}
	o := overlay{&Manager{}}
	if dirty, n := o.Uncommitted(rec); dirty || n != 0 {
		t.Errorf("no upper: dirty %v, %d bytes", dirty, n)
	}
	write(t, filepath.Join(rec.Upper, "a.txt"), "hello")
	write(t, filepath.Join(rec.Upper, "d", "b.txt"), "hi")
	if dirty, n := o.Uncommitted(rec); !dirty || n != 7 {
		t.Errorf("upper without an index: dirty %v, %d bytes; want 7", dirty, n)
	}
	st, err := walkUpper(rec.Upper)
	if err != nil {
		t.Fatal(err)
	}
	waitPastCtimes(st.maxCtime)
	// Committed as a new base: the index is keyed by it.
	o.Committed(rec, testID(2), &Tree{state: st})
	if loadCommittedIndex(rec) != nil {
		t.Error("the index of base 2 is used for base 1")
	}
	rec.Base = testID(2)
	if loadCommittedIndex(rec) == nil {
		t.Fatal("the index of the workspace's base is ignored")
	}
	if dirty, n := o.Uncommitted(rec); dirty || n != 0 {
		t.Errorf("right after a commit: dirty %v, %d bytes", dirty, n)
	}
	for _, other := range []func(r *Record){
		func(r *Record) { r.MountBase = testID(3).String() },
		func(r *Record) { r.Upper = filepath.Join(dir, "upper.abc") },
	} {
		r := *rec
		other(&r)
		if loadCommittedIndex(&r) != nil {
			t.Errorf("the index is used for %+v", r)
		}
	}
	write(t, filepath.Join(rec.Upper, "d", "b.txt"), "hi there")
	if dirty, n := o.Uncommitted(rec); !dirty || n != 8 {
		t.Errorf("after an edit: dirty %v, %d bytes; want 8", dirty, n)
	}
	cur, err := walkUpper(rec.Upper)
	if err != nil {
		t.Fatal(err)
	}
	idx := loadCommittedIndex(rec)
	need := idx.needed(cur)
	for _, p := range []string{"d", "d/b.txt"} {
		if !need[p] {
			t.Errorf("%s not read", p)
		}
	}
	if need["a.txt"] {
		t.Error("an unchanged file is read again")
	}
	// A damaged index is no index.
	if err := os.WriteFile(filepath.Join(dir, "committed.idx"), []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	if loadCommittedIndex(rec) != nil {
		t.Error("a damaged index was used")
	}
}

// TestCommittedIndexEncoding: the index file round-trips every field, odd
// names included, and a file of another version, a gob file of earlier
// releases or a torn one reads as no index.
func TestCommittedIndexEncoding(t *testing.T) {
	idx := &committedIndex{Base: "b1", MountBase: "m2", Upper: "upper-3", Entries: map[string]upperStat{
		".":                     {Ino: 2, Mode: 0o40755, Size: 4096, Mtime: 1, Ctime: 2, Nlink: 3, Opaque: true},
		"a/b\nc":                {Ino: 1 << 40, Mode: 0o100644, Size: -1, Mtime: -5, Ctime: 1 << 62, Nlink: 1},
		"\xff\x00名前 with space": {Ino: 7, Mode: 0o120777, Size: 12},
	}}
	b := idx.encode()
	got, err := decodeCommittedIndex(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Base != idx.Base || got.MountBase != idx.MountBase || got.Upper != idx.Upper || len(got.Entries) != len(idx.Entries) {
		t.Fatalf("decoded %+v, want %+v", got, idx)
	}
	for p, e := range idx.Entries {
		if got.Entries[p] != e {
			t.Errorf("%q: decoded %+v, want %+v", p, got.Entries[p], e)
		}
	}
	empty, err := decodeCommittedIndex((&committedIndex{Entries: map[string]upperStat{}}).encode())
	if err != nil || empty.Entries == nil || len(empty.Entries) != 0 {
		t.Errorf("an empty index: %+v, %v", empty, err)
	}
	for name, bad := range map[string][]byte{
		"empty":         nil,
		"other version": append([]byte("strata committed index 3\n"), b[len(committedIndexMagic):]...),
		"gob":           []byte("\x3f\xff\x81\x03\x01\x01\x0ecommittedIndex"),
		"torn":          b[:len(b)-3],
		"trailing":      append(append([]byte{}, b...), 0),
		"huge count":    append([]byte(committedIndexMagic), 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f),
	} {
		if got, err := decodeCommittedIndex(bad); err == nil {
			t.Errorf("%s: decoded %+v, want an error", name, got)
		}
	}
}
