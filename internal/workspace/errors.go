package workspace

import (
	"errors"

	"github.com/stratafs/strata/internal/workspace/hotpath"
	"github.com/stratafs/strata/nsexec"
)

// ErrNotRunning reports that a workspace has no live keeper.
var ErrNotRunning = nsexec.ErrNotRunning

// ErrNeedSubIDNS: work on a workspace that maps subordinate ids was
// attempted outside their user namespace.
var ErrNeedSubIDNS = nsexec.ErrNeedSubIDNS

// ErrInvalidArgument marks bad input other than a name (a flag value, a
// batch job, a patch, a range). Errors in this category carry their whole
// explanation; the sentinel adds no text to them (Invalidf). The root
// package re-exports it as strata.ErrInvalidArgument; it is hotpath's, which
// plans commands for the front too.
var ErrInvalidArgument = hotpath.ErrInvalidArgument

// Invalidf returns an ErrInvalidArgument error with the formatted message,
// without a ": invalid argument" suffix.
func Invalidf(format string, args ...any) error { return hotpath.Invalidf(format, args...) }

// ErrUnsupported: the kernel or user lacks a feature (strata doctor).
var ErrUnsupported = errors.ErrUnsupported
