package strata

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

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
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
