package snapshot

import (
	"slices"
	"sort"
	"testing"

	"github.com/stratafs/strata/store"
)

// TestSortedNames: a loaded directory's names come out sorted after any
// mix of removals and additions, taken from the tree it was loaded from
// where they can be.
func TestSortedNames(t *testing.T) {
	orig := &store.Tree{}
	for _, n := range []string{"a", "b", "c", "d", "f", "h"} {
		orig.Entries = append(orig.Entries, store.TreeEntry{Name: n, Type: store.TypeFile})
	}
	for _, tc := range []struct{ remove, add []string }{
		{},
		{remove: []string{"a", "h"}},
		{add: []string{"0", "e", "g", "z"}},
		{remove: []string{"b", "c", "d"}, add: []string{"bb", "cc", "A"}},
		{remove: []string{"a", "b", "c", "d", "f", "h"}, add: []string{"x"}},
		{remove: []string{"a", "b", "c", "d", "f", "h"}},
	} {
		d := &edir{orig: orig, entries: map[string]*store.TreeEntry{}}
		for i := range orig.Entries {
			d.entries[orig.Entries[i].Name] = &orig.Entries[i]
		}
		for _, n := range tc.remove {
			delete(d.entries, n)
		}
		for _, n := range tc.add {
			d.entries[n] = &store.TreeEntry{Name: n}
		}
		var want []string
		for n := range d.entries {
			want = append(want, n)
		}
		sort.Strings(want)
		if got := d.sortedNames(); !slices.Equal(got, want) {
			t.Errorf("remove %v add %v: %v, want %v", tc.remove, tc.add, got, want)
		}
	}
	// A fresh directory: no tree to take the order from.
	d := newFreshDir()
	for _, n := range []string{"b", "a", "c"} {
		d.entries[n] = &store.TreeEntry{Name: n}
	}
	if got := d.sortedNames(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("fresh directory: %v", got)
	}
}
