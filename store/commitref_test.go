package store

import (
	"context"
	"errors"
	"testing"
)

// TestCommitOnBranch: the one commit-on-branch transaction puts the commit,
// moves the branch by CAS and logs it; a lost CAS is a BranchMovedError
// (ErrConflict) and leaves neither the commit's ref move nor a log entry.
func TestCommitOnBranch(t *testing.T) {
	ctx := context.Background()
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	commit := func(old ID, msg string) (ID, error) {
		w, err := s.NewWriter(ctx, "test")
		if err != nil {
			t.Fatal(err)
		}
		defer w.Abort()
		tid, err := w.PutTree(&Tree{})
		if err != nil {
			t.Fatal(err)
		}
		c := &Commit{Tree: tid, Message: msg}
		if !old.IsZero() {
			c.Parents = []ID{old}
		}
		var id ID
		err = w.Finish(func(tx *Tx) error {
			id, err = tx.CommitOnBranch(c, "b", old, Op{Kind: "test", Detail: msg})
			return err
		})
		return id, err
	}
	first, err := commit(ZeroID, "one")
	if err != nil {
		t.Fatal(err)
	}
	second, err := commit(first, "two")
	if err != nil {
		t.Fatal(err)
	}
	_, err = commit(first, "stale")
	var moved *BranchMovedError
	if !errors.As(err, &moved) || !errors.Is(err, ErrConflict) {
		t.Fatalf("a stale CAS: %v, want a BranchMovedError matching ErrConflict", err)
	}
	if err := s.View(ctx, func(tx *Tx) error {
		head, err := tx.Ref("b")
		if err != nil {
			return err
		}
		if head != second {
			t.Errorf("branch at %s, want %s", head.Short(), second.Short())
		}
		ops, err := tx.Ops("b", 0)
		if err != nil {
			return err
		}
		if len(ops) != 2 || ops[0].New != second || ops[0].Old != first || ops[0].Ref != "b" {
			t.Errorf("log: %+v, want two entries, the newest %s→%s", ops, first.Short(), second.Short())
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
