package store

import "fmt"

// BranchMovedError wraps the CAS failure of CommitOnBranch, so that callers
// can tell it from a failure to store the commit.
type BranchMovedError struct{ Err error }

func (e *BranchMovedError) Error() string { return e.Err.Error() }
func (e *BranchMovedError) Unwrap() error { return e.Err }

// CommitOnBranch is the one transaction of every command that makes a
// commit on a branch (import, git import, commit, run --commit, promote):
// put commit c, move branch from old to it by compare-and-swap (old ZeroID:
// create it), and log op with its Ref, Old and New filled in. A lost CAS
// is an *BranchMovedError wrapping ErrConflict; like every error of fn, it
// rolls the caller's whole transaction back. Update only.
func (tx *Tx) CommitOnBranch(c *Commit, branch string, old ID, op Op) (ID, error) {
	id, err := tx.PutCommit(c)
	if err != nil {
		return ZeroID, err
	}
	if err := tx.SetRef(branch, old, id); err != nil {
		return ZeroID, &BranchMovedError{err}
	}
	op.Ref, op.Old, op.New = branch, old, id
	if err := tx.AppendOp(op); err != nil {
		return ZeroID, fmt.Errorf("log %s: %w", op.Kind, err)
	}
	return id, nil
}
