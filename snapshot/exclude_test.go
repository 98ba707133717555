package snapshot

import "testing"

func TestExcludeMatch(t *testing.T) {
	for _, tc := range []struct {
		glob  string
		path  string
		isDir bool
		want  bool
	}{
		// A glob without a slash matches a name at any depth.
		{"node_modules", "node_modules", true, true},
		{"node_modules", "a/b/node_modules", true, true},
		{"node_modules", "node_modules_x", true, false},
		{"*.tmp", "x.tmp", false, true},
		{"*.tmp", "deep/er/x.tmp", false, true},
		{"*.tmp", "x.tmp/y", false, false}, // only the last element: "x.tmp" itself is excluded first
		{"?.c", "a.c", false, true},
		{"[ab].c", "c.c", false, false},
		{".git", "sub/.git", true, true},
		// A glob with a slash is anchored.
		{"src/*.tmp", "src/a.tmp", false, true},
		{"src/*.tmp", "src/sub/a.tmp", false, false},
		{"src/*.tmp", "other/src/a.tmp", false, false},
		{"/build", "build", true, true},
		{"/build", "sub/build", true, false},
		{"a/b", "a/b", false, true},
		{"a/b", "a", true, false},
		// "**".
		{"**", "anything", false, true},
		{"a/**/b", "a/b", false, true},
		{"a/**/b", "a/x/y/b", false, true},
		{"a/**/b", "a/x/y/c", false, false},
		{"**/b", "b", false, true},
		{"**/b", "x/y/b", false, true},
		{"build/**", "build", true, false}, // trailing ** needs one element or more
		{"build/**", "build/x", false, true},
		{"build/**", "build/x/y", false, true},
		// A trailing slash: directories only.
		{"cache/", "cache", true, true},
		{"cache/", "cache", false, false},
		{"cache/", "x/cache", true, true},
		{"src/gen/", "src/gen", true, true},
		// Names are bytes.
		{"bad-\xff*", "bad-\xff\xfe", false, true},
		{"line\nbreak", "d/line\nbreak", false, true},
		{`\*`, "*", false, true},
		{`\*`, "x", false, false},
	} {
		x, err := newExcluder([]string{tc.glob})
		if err != nil {
			t.Fatalf("%q: %v", tc.glob, err)
		}
		if got := x.match(tc.path, tc.isDir); got != tc.want {
			t.Errorf("glob %q on %q (dir %v) = %v, want %v", tc.glob, tc.path, tc.isDir, got, tc.want)
		}
	}
}

func TestExcludeInvalid(t *testing.T) {
	for _, g := range []string{"", "/", "a//b", "[", "a/[x", `x\`} {
		if _, err := newExcluder([]string{g}); err == nil {
			t.Errorf("glob %q accepted", g)
		}
	}
	var x *excluder
	if x.match("a", true) {
		t.Error("nil excluder matched")
	}
}
