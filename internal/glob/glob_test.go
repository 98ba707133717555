package glob

import "testing"

// TestMatch pins the one meaning of "**" (issue 12: --exclude and
// --protect disagreed on a trailing "**").
func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		glob, path string
		want       bool
	}{
		{"build/**", "build/out/o.bin", true},
		{"build/**", "build/top", true},
		{"build/**", "build", false}, // trailing: one or more
		{"build/**", "sub/build/keep", false},
		{"/build/**", "build/top", true},
		{"a/**/gen.txt", "a/gen.txt", true}, // inner: zero or more
		{"a/**/gen.txt", "a/x/y/gen.txt", true},
		{"a/**/gen.txt", "lib/gen.txt", false},
		{"**/node_modules", "node_modules", true},
		{"**/node_modules", "packages/p1/node_modules", true},
		{"*.pyc", "deep/dir/x.pyc", true},
		{"docs/*", "docs/readme", true},
		{"docs/*", "docs/a/readme", false},
		{"**", "anything/at/all", true},
		{".github/workflows/**", ".github/other.yml", false},
	} {
		if got := Match(tc.glob, tc.path); got != tc.want {
			t.Errorf("Match(%q, %q) = %v; want %v", tc.glob, tc.path, got, tc.want)
		}
	}
	if Valid("a/[") || !Valid("a/**/*.go") {
		t.Errorf("Valid is wrong")
	}
}
