//go:build !linux

package seccomp

import "errors"

var errNotLinux = errors.New("seccomp: not Linux")

// Apply fails: seccomp filters are Linux's.
func Apply(f *Filter) error { return errNotLinux }

// Available reports false: seccomp filters are Linux's.
func Available() (bool, string) { return false, "not Linux" }
