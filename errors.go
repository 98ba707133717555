package strata

import (
	"context"
	"encoding/base64"
	"errors"
	"os"
	"unicode/utf8"
)

func isNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// Error kinds: what Kind calls an error's category.
const (
	KindUsage       = "usage"        // ErrInvalidArgument: bad input other than a name
	KindInvalidName = "invalid_name" // ErrInvalidName
	KindConflict    = "conflict"     // ErrConflict: nothing was changed
	KindNotFound    = "not_found"    // ErrNotFound
	KindExists      = "exists"       // ErrExists
	KindNoStore     = "no_store"     // ErrNoStore
	KindReadOnly    = "read_only"    // ErrReadOnly
	KindNoSpace     = "no_space"     // ErrNoSpace
	KindCorrupt     = "corrupt"      // ErrCorrupt
	KindUnsupported = "unsupported"  // ErrUnsupported
	KindPermission  = "permission"   // os.ErrPermission
	KindInterrupted = "interrupted"  // context.Canceled
	KindError       = "error"        // anything else
)

// Kind names the category of err: the one classification of strata's
// errors. The CLI's exit codes and its --json "kind", and a batch job's
// "error_kind", all come from it. A usage error (the kinds usage and
// invalid_name) is the caller's to fix; a conflict changed nothing.
func Kind(err error) string {
	switch {
	case errors.Is(err, ErrInvalidArgument):
		return KindUsage
	case errors.Is(err, ErrInvalidName):
		return KindInvalidName
	case errors.Is(err, ErrConflict):
		return KindConflict
	case errors.Is(err, ErrNotFound):
		return KindNotFound
	case errors.Is(err, ErrExists):
		return KindExists
	case errors.Is(err, ErrNoStore):
		return KindNoStore
	case errors.Is(err, ErrReadOnly):
		return KindReadOnly
	case errors.Is(err, ErrNoSpace):
		return KindNoSpace
	case errors.Is(err, ErrCorrupt):
		return KindCorrupt
	case errors.Is(err, ErrUnsupported):
		return KindUnsupported
	case errors.Is(err, os.ErrPermission):
		return KindPermission
	case errors.Is(err, context.Canceled):
		return KindInterrupted
	}
	return KindError
}

// base64IfInvalid returns the standard base64 of s when s is not valid
// UTF-8, and "" otherwise: JSON output carries such names both lossily
// (as a string with U+FFFD) and exactly.
func base64IfInvalid(s string) string {
	if utf8.ValidString(s) {
		return ""
	}
	return base64.StdEncoding.EncodeToString([]byte(s))
}
