package overlayfs

import (
	"errors"
	"fmt"
	"strings"
)

// ErrBadRedirect reports an overlay.redirect value that does not name a
// path inside the layer stack. Redirects come from a workspace's upper
// directory, which the sandboxed command can write, so they are untrusted.
var ErrBadRedirect = errors.New("invalid overlay redirect")

// parseRedirect splits an overlay.redirect value into path components. An
// absolute value ("/a/b") names a path from the root of the layer stack; a
// relative one ("b") names a sibling of the directory carrying it.
//
// The kernel accepts an absolute value only if every '/' is followed by a
// non-empty component, and a relative one only without '/'
// (Linux: fs/overlayfs/namei.c ovl_check_redirect). Its lookups refuse "."
// and ".." (fs/namei.c lookup_one_common); here they are errors, as are NUL
// bytes, which would end the kernel's string early.
func parseRedirect(v string) (comps []string, abs bool, err error) {
	switch {
	case v == "":
		return nil, false, fmt.Errorf("%w: empty", ErrBadRedirect)
	case strings.IndexByte(v, 0) >= 0:
		return nil, false, fmt.Errorf("%w %q: NUL byte", ErrBadRedirect, v)
	}
	if v[0] == '/' {
		abs = true
		comps = strings.Split(v[1:], "/")
	} else {
		if strings.IndexByte(v, '/') >= 0 {
			return nil, false, fmt.Errorf("%w %q: a relative redirect names one sibling", ErrBadRedirect, v)
		}
		comps = []string{v}
	}
	for _, c := range comps {
		if c == "" || c == "." || c == ".." {
			return nil, false, fmt.Errorf("%w %q: component %q", ErrBadRedirect, v, c)
		}
	}
	return comps, abs, nil
}

// ResolveRedirect returns the path, relative to the root of the layer
// stack, that a directory's overlay.redirect value v names. parent is the
// path of the directory's parent beneath ("" or "." for the root), which a
// relative value is resolved against. The result is clean, relative, and
// never empty, "." or outside the root; anything else is an error wrapping
// ErrBadRedirect.
func ResolveRedirect(parent, v string) (string, error) {
	comps, abs, err := parseRedirect(v)
	if err != nil {
		return "", err
	}
	if abs {
		return strings.Join(comps, "/"), nil
	}
	if parent == "." {
		parent = ""
	}
	if parent != "" {
		if !validRel(parent) {
			return "", fmt.Errorf("%w: parent %q is not a clean relative path", ErrBadRedirect, parent)
		}
		return parent + "/" + comps[0], nil
	}
	return comps[0], nil
}

// validRel reports whether p is a non-empty slash-separated relative path
// without empty, "." or ".." components or NUL bytes.
func validRel(p string) bool {
	if p == "" || strings.IndexByte(p, 0) >= 0 {
		return false
	}
	for c := range strings.SplitSeq(p, "/") {
		if c == "" || c == "." || c == ".." {
			return false
		}
	}
	return true
}
