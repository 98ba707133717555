package strata

import (
	"errors"
	"testing"
)

func TestSplitAncestry(t *testing.T) {
	for _, tc := range []struct {
		in    string
		base  string
		steps int
		err   bool
	}{
		{"main", "main", 0, false},
		{"main~", "main", 1, false},
		{"main~3", "main", 3, false},
		{"main^", "main", 1, false},
		{"main~2^^", "main", 4, false},
		{"ws/a~1", "ws/a", 1, false},
		{"abc123^", "abc123", 1, false},
		{"~1", "", 0, true},
		{"main~x", "", 0, true},
	} {
		base, steps, err := splitAncestry(tc.in)
		if (err != nil) != tc.err || base != tc.base || steps != tc.steps {
			t.Errorf("splitAncestry(%q) = %q, %d, %v; want %q, %d, err=%v", tc.in, base, steps, err, tc.base, tc.steps, tc.err)
		}
		if err != nil && !errors.Is(err, ErrInvalidName) {
			t.Errorf("splitAncestry(%q): error %v is not ErrInvalidName", tc.in, err)
		}
	}
}
