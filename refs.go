package strata

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/stratafs/strata/store"
)

// Resolve turns a ref (branch, commit id, unique id prefix of at least 4
// hex digits, each optionally followed by ~N or ^ any number of times) into
// a commit id.
func (r *Repo) Resolve(ctx context.Context, ref string) (store.ID, error) {
	var id store.ID
	err := r.view(ctx, func(tx *store.Tx) error {
		var err error
		id, err = resolve(tx, ref)
		return err
	})
	return id, err
}

// resolve is Resolve inside a transaction.
func resolve(tx *store.Tx, ref string) (store.ID, error) {
	if ref == "" {
		return store.ZeroID, fmt.Errorf("empty ref: %w", ErrNotFound)
	}
	base, steps, err := splitAncestry(ref)
	if err != nil {
		return store.ZeroID, err
	}
	id, err := resolveBase(tx, base)
	if err != nil {
		return store.ZeroID, err
	}
	for i := 0; i < steps; i++ {
		c, err := tx.Commit(id)
		if err != nil {
			return store.ZeroID, fmt.Errorf("ref %q: %w", ref, err)
		}
		if len(c.Parents) == 0 {
			return store.ZeroID, fmt.Errorf("ref %q: commit %s has no parent: %w", ref, id.Short(), ErrNotFound)
		}
		id = c.Parents[0]
	}
	return id, nil
}

// splitAncestry splits "main~2^" into ("main", 3).
func splitAncestry(ref string) (string, int, error) {
	steps := 0
	for {
		switch {
		case strings.HasSuffix(ref, "^"):
			ref = ref[:len(ref)-1]
			steps++
			continue
		}
		i := strings.LastIndexByte(ref, '~')
		if i < 0 {
			break
		}
		n := 1
		if num := ref[i+1:]; num != "" {
			v, err := strconv.Atoi(num)
			if err != nil || v < 0 {
				// Not an ancestry suffix; '~' is not valid in branch
				// names, so this ref is simply malformed.
				return "", 0, fmt.Errorf("ref %q: bad ancestry suffix %q: %w", ref, ref[i:], ErrInvalidName)
			}
			n = v
		}
		ref = ref[:i]
		steps += n
	}
	if ref == "" {
		return "", 0, fmt.Errorf("ref: nothing before ~ or ^: %w", ErrInvalidName)
	}
	return ref, steps, nil
}

func resolveBase(tx *store.Tx, base string) (store.ID, error) {
	id, err := tx.Ref(base)
	if err == nil {
		return id, nil
	}
	if !isNotFound(err) {
		return store.ZeroID, err
	}
	if isHex(base) && len(base) >= 4 {
		id, perr := tx.ResolvePrefix(base, store.KindCommit)
		if perr == nil {
			return id, nil
		}
		if !isNotFound(perr) {
			return store.ZeroID, perr
		}
	}
	return store.ZeroID, fmt.Errorf("ref %q: no such branch or commit: %w", base, ErrNotFound)
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
