package mcp

import (
	"errors"
	"path"
	"strings"
	"testing"
)

func TestCapped(t *testing.T) {
	for _, tc := range []struct {
		limit  int
		writes []string
		want   string
		trunc  bool
	}{
		{10, []string{"hello"}, "hello", false},
		{10, []string{"0123456789"}, "0123456789", false},
		{10, []string{"0123456789abcdef"}, "01234\n[… 6 bytes cut …]\nbcdef", true},
		{10, []string{"01", "234", "56789abc", "def"}, "01234\n[… 6 bytes cut …]\nbcdef", true},
		{4, []string{strings.Repeat("x", 100), "yz"}, "xx\n[… 98 bytes cut …]\nyz", true},
	} {
		c := newCapped(tc.limit)
		for _, w := range tc.writes {
			c.write([]byte(w))
		}
		if got := c.String(); got != tc.want || c.truncated() != tc.trunc {
			t.Errorf("limit %d %q: got %q (truncated %v), want %q (%v)", tc.limit, tc.writes, got, c.truncated(), tc.want, tc.trunc)
		}
	}
}

func TestLineRange(t *testing.T) {
	b := []byte("a\nb\nc\nd")
	for _, tc := range []struct {
		start, end int
		want       string
	}{
		{1, 4, "a\nb\nc\nd"}, {2, 3, "b\nc\n"}, {4, 4, "d"}, {1, 1, "a\n"}, {5, 6, ""},
	} {
		if got := string(lineRange(b, tc.start, tc.end)); got != tc.want {
			t.Errorf("lines %d-%d: %q, want %q", tc.start, tc.end, got, tc.want)
		}
	}
	if n := countLines(b); n != 4 {
		t.Errorf("countLines = %d", n)
	}
}

func TestRel(t *testing.T) {
	r := &root{target: "/work/proj"}
	for _, tc := range []struct {
		in, want string
		escape   bool
	}{
		{"a.txt", "a.txt", false},
		{"src/../a.txt", "src/../a.txt", false}, // the kernel resolves `..`
		{"/work/proj", ".", false},
		{"/work/proj/src/x.go", "src/x.go", false},
		{"/work/projx/a", "", true},
		{"/etc/passwd", "", true},
		{"..", "", true},
		{"../proj/a", "", true},
		{"src/../../a", "", true},
		{"/work/proj/../other", "", true},
	} {
		got, err := r.rel(tc.in)
		if tc.escape {
			if !errors.Is(err, errEscape) {
				t.Errorf("rel(%q) = %q, %v; want an escape error", tc.in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("rel(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	if _, err := r.rel(""); err == nil {
		t.Error("rel(\"\"): no error")
	}
}

func TestArgv(t *testing.T) {
	if a, err := argv("echo hi"); err != nil || strings.Join(a, " ") != "/bin/sh -c echo hi" {
		t.Errorf("string: %q %v", a, err)
	}
	if a, err := argv([]any{"ls", "-l"}); err != nil || strings.Join(a, " ") != "ls -l" {
		t.Errorf("list: %q %v", a, err)
	}
	for _, bad := range []any{"", " ", []any{}, []any{"ls", 3}, 42, nil} {
		if _, err := argv(bad); err == nil {
			t.Errorf("argv(%#v): no error", bad)
		}
	}
}

func TestListenAddr(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		loopback bool
	}{
		{"8080", "127.0.0.1:8080", true},
		{":8080", "127.0.0.1:8080", true},
		{"localhost:1", "localhost:1", true},
		{"[::1]:1", "[::1]:1", true},
		{"0.0.0.0:1", "0.0.0.0:1", false},
		{"10.1.2.3:1", "10.1.2.3:1", false},
		{"example.com:1", "example.com:1", false},
	} {
		got, lb, err := ListenAddr(tc.in)
		if err != nil || got != tc.want || lb != tc.loopback {
			t.Errorf("ListenAddr(%q) = %q %v %v; want %q %v", tc.in, got, lb, err, tc.want, tc.loopback)
		}
	}
	if _, _, err := ListenAddr(""); err == nil {
		t.Error("empty address: no error")
	}
}

// FuzzRel: whatever path a client sends, rel either refuses it or returns
// a relative path that does not climb above the root lexically (the
// kernel's RESOLVE_BENEATH handles symlinks), and never an absolute one.
func FuzzRel(f *testing.F) {
	for _, s := range []string{"a", "../a", "/work/proj/a", "/work/proj/../x", "a/../../b", "./", "//", "/work/proj//a/..", "\x00"} {
		f.Add(s)
	}
	r := &root{target: "/work/proj"}
	f.Fuzz(func(t *testing.T, p string) {
		got, err := r.rel(p)
		if err != nil {
			return
		}
		if got == "" || path.IsAbs(got) || strings.IndexByte(got, 0) >= 0 {
			t.Fatalf("rel(%q) = %q", p, got)
		}
		if c := path.Clean(got); c == ".." || strings.HasPrefix(c, "../") {
			t.Fatalf("rel(%q) = %q climbs out", p, got)
		}
	})
}
