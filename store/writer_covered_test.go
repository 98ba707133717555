package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// TestRetainedUnder: entries retained through their parent tree are not
// checked one by one at Finish — the parent is, so a commit whose parent
// tree is gone by then fails with ErrNotFound instead of landing a tree
// with missing objects — and a parent the Writer did not retain is
// refused.
func TestRetainedUnder(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	w, err := s.NewWriter(ctx, "base")
	if err != nil {
		t.Fatal(err)
	}
	parent := &Tree{}
	var kids []ID
	for i := range 50 {
		id, err := w.WriteBytes([]byte(fmt.Sprint("file ", i)))
		if err != nil {
			t.Fatal(err)
		}
		kids = append(kids, id)
		parent.Entries = append(parent.Entries, TreeEntry{Name: fmt.Sprintf("f%02d", i), Type: TypeFile, Mode: 0o644, Content: id})
	}
	pid, err := w.PutTree(parent)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Finish(func(*Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}

	commit := func(optimistic bool, drop ID) error {
		w, err := s.NewWriter(ctx, "edit")
		if err != nil {
			t.Fatal(err)
		}
		defer w.Abort()
		if optimistic {
			w.Optimistic()
		}
		if err := w.RetainedUnder(pid, kids); err == nil {
			t.Fatal("RetainedUnder of a parent not retained: no error")
		}
		if ok, err := w.Retain(pid); err != nil || !ok {
			t.Fatalf("retain parent: %v %v", ok, err)
		}
		nt := &Tree{Entries: append([]TreeEntry(nil), parent.Entries...)}
		nid, err := w.WriteBytes([]byte("edited"))
		if err != nil {
			t.Fatal(err)
		}
		nt.Entries[0].Content = nid
		if _, err := w.PutTree(nt); err != nil {
			t.Fatal(err)
		}
		if err := w.RetainedUnder(pid, kids[1:]); err != nil {
			t.Fatal(err)
		}
		if !drop.IsZero() {
			if err := s.Update(ctx, func(tx *Tx) error {
				_, err := tx.exec(`DELETE FROM objects WHERE id = ?`, drop[:])
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
		return w.Finish(func(*Tx) error { return nil })
	}
	if err := commit(true, ZeroID); err != nil {
		t.Fatalf("optimistic: %v", err)
	}
	if err := commit(false, ZeroID); err != nil {
		t.Fatalf("claiming: %v", err)
	}
	// gc deletes a tree before what it references: a parent gone at
	// Finish fails the commit.
	if err := commit(true, pid); !errors.Is(err, ErrNotFound) {
		t.Fatalf("optimistic, parent gone before Finish: %v; want ErrNotFound", err)
	}
	// A child gone while its parent stays (which gc never leaves) is
	// not looked up: the parent's check stands for it.
	if err := s.Update(ctx, func(tx *Tx) error { _, err := tx.PutTree(parent); return err }); err != nil {
		t.Fatal(err)
	}
	if err := commit(true, kids[7]); err != nil {
		t.Fatalf("optimistic, a retained-under child gone: %v; want no check of it", err)
	}
}
