package overlayfs

import (
	"errors"
	"path"
	"strings"
	"testing"
)

func TestResolveRedirect(t *testing.T) {
	tests := []struct {
		parent, v string
		want      string // "" means an error
	}{
		{"", "b", "b"},
		{".", "b", "b"},
		{"a", "b", "a/b"},
		{"a/x", "b", "a/x/b"},
		{"a", "/b", "b"},
		{"a/x", "/c/d/e", "c/d/e"},
		{"", "with\nnewline", "with\nnewline"},
		{"", "\xff\xfe", "\xff\xfe"},
		{"", "", ""},
		{"", "/", ""},
		{"", "//a", ""},
		{"", "/a//b", ""},
		{"", "/a/", ""},
		{"", "/a/./b", ""},
		{"", "/../../etc", ""},
		{"", "/a/..", ""},
		{"a", "..", ""},
		{"a", ".", ""},
		{"a", "../../etc", ""},
		{"a", "b/c", ""},
		{"a", "b\x00c", ""},
		{"/a", "b", ""},
		{"../a", "b", ""},
		{"a//b", "c", ""},
	}
	for _, tt := range tests {
		got, err := ResolveRedirect(tt.parent, tt.v)
		if tt.want == "" {
			if err == nil || !errors.Is(err, ErrBadRedirect) {
				t.Errorf("ResolveRedirect(%q, %q) = %q, %v; want ErrBadRedirect", tt.parent, tt.v, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ResolveRedirect(%q, %q) = %q, %v; want %q", tt.parent, tt.v, got, err, tt.want)
		}
	}
}

// FuzzResolveRedirect checks that whatever a workspace writes into an
// overlay.redirect xattr, the result is a clean path inside the layer
// stack or an error.
func FuzzResolveRedirect(f *testing.F) {
	for _, s := range [][2]string{
		{"", "b"}, {"a", "b"}, {"a/b", "/c/d"}, {"", "/"}, {"", "../../etc"},
		{"a", "/../../etc"}, {"", "/a//b"}, {"x", "."}, {"", "a\x00b"}, {".", "..."},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, parent, v string) {
		got, err := ResolveRedirect(parent, v)
		if err != nil {
			if !errors.Is(err, ErrBadRedirect) {
				t.Fatalf("error %v does not wrap ErrBadRedirect", err)
			}
			return
		}
		if got == "" || got == "." || strings.HasPrefix(got, "/") || strings.IndexByte(got, 0) >= 0 {
			t.Fatalf("ResolveRedirect(%q, %q) = %q", parent, v, got)
		}
		if path.Clean(got) != got {
			t.Fatalf("ResolveRedirect(%q, %q) = %q, not clean", parent, v, got)
		}
		for _, c := range strings.Split(got, "/") {
			if c == "" || c == "." || c == ".." {
				t.Fatalf("ResolveRedirect(%q, %q) = %q: component %q", parent, v, got, c)
			}
		}
		// A relative redirect stays next to its directory; an absolute one
		// is taken as is.
		if v[0] != '/' {
			p := parent
			if p == "." {
				p = ""
			}
			if want := strings.TrimPrefix(p+"/"+v, "/"); got != want {
				t.Fatalf("ResolveRedirect(%q, %q) = %q, want %q", parent, v, got, want)
			}
		} else if got != v[1:] {
			t.Fatalf("ResolveRedirect(%q, %q) = %q", parent, v, got)
		}
	})
}
