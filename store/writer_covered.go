package store

import "fmt"

// RetainedUnder records that ids are referenced by parent, an object this
// Writer retained (Retain or RetainAll reported it present), so that
// Finish checks parent alone instead of each of them: gc deletes an
// object's referrers before the object (parentsFirst), so while parent is
// in the store, so is everything it references; and a retained parent
// protects them from gc as it protects itself. A commit that rewrites a
// directory of 4,000 entries to change one then checks the directory's
// previous tree, not 3,999 unchanged children (docs/store.md, "Writers").
//
// The caller must know that parent references every id (they are entries
// of the tree parent); an id that parent does not reference would go
// unchecked.
func (w *Writer) RetainedUnder(parent ID, ids []ID) error {
	if err := w.begin(); err != nil {
		return err
	}
	defer w.end()
	w.mu.Lock()
	defer w.mu.Unlock()
	_, known := w.known[parent]
	_, assumed := w.assumed[parent]
	if !known && !assumed {
		return fmt.Errorf("writer %s: RetainedUnder %s: the parent was not retained", w.purpose, parent.Short())
	}
	for _, id := range ids {
		if !id.IsZero() {
			w.known[id] = struct{}{}
		}
	}
	return nil
}
