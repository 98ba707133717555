package main

import (
	"io"
	"slices"
	"testing"
)

func TestPermuteArgs(t *testing.T) {
	app := newApp(&env{stdout: io.Discard, stderr: io.Discard})
	for _, tc := range []struct {
		in, want []string
	}{
		{[]string{"strata", "import", "DIR", "-b", "dev"}, []string{"strata", "import", "-b", "dev", "--", "DIR"}},
		{[]string{"strata", "--json", "import", "DIR", "--exclude", "x", "--skip-unreadable"},
			[]string{"strata", "--json", "import", "--exclude", "x", "--skip-unreadable", "--", "DIR"}},
		{[]string{"strata", "--home", "/h", "log"}, []string{"strata", "--home", "/h", "log"}},
		{[]string{"strata", "branch", "create", "x", "--from", "main~1"}, []string{"strata", "branch", "create", "--from", "main~1", "--", "x"}},
		{[]string{"strata", "exec", "ws1", "ls", "-la"}, []string{"strata", "exec", "--", "ws1", "ls", "-la"}},
		{[]string{"strata", "exec", "ws1", "--cwd", "src", "--", "ls", "-la"}, []string{"strata", "exec", "--cwd", "src", "--", "ws1", "ls", "-la"}},
		{[]string{"strata", "exec", "--env", "A=1", "ws1", "sh", "-c", "echo $A"}, []string{"strata", "exec", "--env", "A=1", "--", "ws1", "sh", "-c", "echo $A"}},
		{[]string{"strata", "exec", "ws1", "ls", "--cwd", "x"}, []string{"strata", "exec", "--", "ws1", "ls", "--cwd", "x"}},
		{[]string{"strata", "gc", "--prune=0s"}, []string{"strata", "gc", "--prune=0s"}},
		{[]string{"strata", "nosuch", "-x"}, []string{"strata", "nosuch", "-x"}},
		{[]string{"strata", "ws", "list", "--json"}, []string{"strata", "--json", "ws", "list"}},
		{[]string{"strata", "log", "main", "--home", "/h", "-n", "3"}, []string{"strata", "--home", "/h", "log", "-n", "3", "--", "main"}},
		{[]string{"strata", "exec", "w", "--", "ls", "--json"}, []string{"strata", "exec", "--", "w", "ls", "--json"}},
		{[]string{"strata", "exec", "w", "npm", "--json"}, []string{"strata", "exec", "--", "w", "npm", "--json"}},
		{[]string{"strata", "exec", "--json", "w", "true"}, []string{"strata", "--json", "exec", "--", "w", "true"}},
	} {
		if got := permuteArgs(app, tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("permuteArgs(%q)\n got %q\nwant %q", tc.in, got, tc.want)
		}
	}
}

func TestQuotePath(t *testing.T) {
	for in, want := range map[string]string{
		"plain/path.txt": "plain/path.txt",
		"new\nline":      `"new\nline"`,
		"bad\xffutf8":    `"bad\xffutf8"`,
		"ümlaut":         "ümlaut",
	} {
		if got := quotePath(in); got != want {
			t.Errorf("quotePath(%q) = %s, want %s", in, got, want)
		}
	}
}
