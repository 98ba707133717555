//go:build !linux

package landlock

import "fmt"

// ABI reports 0: Landlock is a Linux security module.
func ABI() (int, error) { return 0, fmt.Errorf("%w: not Linux", ErrUnsupported) }

// Apply fails: Landlock is a Linux security module.
func Apply(r *Ruleset) error { return fmt.Errorf("landlock: Apply: %w: not Linux", ErrUnsupported) }
