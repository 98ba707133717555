package strata

import (
	"context"
	"strings"

	"github.com/stratafs/strata/internal/workspace"
)

// target is what a verb's argument names — NAME | REF | A..B — read in one
// place, so that every verb (diff, apply, export, export-git, promote,
// show) agrees on it:
//
//   - A..B, where the verb takes ranges: the change from ref A to ref B;
//   - NAME, a registered workspace: its current view (uncommitted changes
//     included) where the verb reads one, else its branch. A workspace
//     wins over a branch of the same name; `main` and `HEAD` are never
//     workspace names (ValidateWorkspaceName), so they always name refs;
//   - NAME~N, NAME^: the ancestors of the workspace's branch;
//   - anything else is a REF (Resolve): a branch, a commit id or a unique
//     prefix of one, with ~N or ^.
type target struct {
	Arg string
	// From and To are the two refs of A..B (Range).
	From, To string
	Range    bool
	// Ref is the ref the argument names: Arg itself, or the workspace's
	// branch with Arg's ancestry suffix.
	Ref string
	// WS is the workspace the argument names (by its part before ~N or
	// ^), or nil.
	WS *workspace.Record
	// Exact: Arg is the workspace's name itself, no suffix.
	Exact bool
}

// parseTarget reads arg for verb; ranges says whether the verb takes A..B.
// Only a malformed range is an error here: a ref that does not resolve
// fails where the verb resolves it, with the ref's own message.
func (r *Repo) parseTarget(ctx context.Context, verb, arg string, ranges bool) (*target, error) {
	if ranges {
		if a, b, ok := strings.Cut(arg, ".."); ok {
			if a == "" || b == "" {
				return nil, invalidf("%s %q: want A..B", verb, arg)
			}
			return &target{Arg: arg, From: a, To: b, Range: true}, nil
		}
	}
	t := &target{Arg: arg, Ref: arg}
	name, _, err := splitAncestry(arg)
	if err != nil || ValidateWorkspaceName(name) != nil {
		return t, nil
	}
	if w, err := r.loadWorkspace(ctx, name); err == nil {
		t.WS, t.Exact = w, name == arg
		t.Ref = w.Branch + arg[len(name):]
	}
	return t, nil
}
