package snapshot

import (
	"fmt"
	"path"
	"strings"

	"github.com/stratafs/strata/internal/glob"
)

// excluder matches ImportOptions.Exclude globs against entry paths.
//
// The semantics are a small, predictable subset of .gitignore, those of
// package internal/glob (strata's one glob matcher) plus a trailing slash:
//
//   - A glob without a slash (after removing a trailing one) matches the name
//     of an entry at any depth: "node_modules" and "*.tmp" match
//     "a/b/node_modules" and "x.tmp".
//   - A glob with a slash is anchored at the source root and matched against
//     the whole path, element by element: "src/*.tmp" matches "src/a.tmp" but
//     not "src/sub/a.tmp"; a leading slash is allowed and ignored.
//   - Within an element, path.Match syntax: '*', '?', '[...]', '\\' escapes.
//     '*' never matches a slash.
//   - An element "**" matches zero or more whole elements ("a/**/b" matches
//     "a/b" and "a/x/y/b"); a trailing "**" matches one or more ("build/**"
//     excludes everything under build but keeps build itself).
//   - A trailing slash restricts the glob to directories ("cache/").
//   - A glob that matches a directory skips it and everything under it.
type excluder struct {
	pats []excludePattern
}

type excludePattern struct {
	glob     string   // as given, for error messages
	elems    []string // anchored: the elements to match; base: one element
	anchored bool
	dirOnly  bool
}

// newExcluder validates and compiles globs. It returns nil for no globs.
func newExcluder(globs []string) (*excluder, error) {
	if len(globs) == 0 {
		return nil, nil
	}
	x := &excluder{}
	for _, g := range globs {
		p := excludePattern{glob: g}
		s := g
		if strings.HasSuffix(s, "/") {
			p.dirOnly = true
			s = strings.TrimRight(s, "/")
		}
		if strings.Contains(s, "/") {
			p.anchored = true
			s = strings.TrimLeft(s, "/")
		}
		if s == "" {
			return nil, fmt.Errorf("exclude %q: empty pattern", g)
		}
		p.elems = strings.Split(s, "/")
		for _, e := range p.elems {
			if e == "" {
				return nil, fmt.Errorf("exclude %q: empty path element", g)
			}
			if _, err := path.Match(e, ""); err != nil {
				return nil, fmt.Errorf("exclude %q: %w", g, err)
			}
		}
		x.pats = append(x.pats, p)
	}
	return x, nil
}

// match reports whether the entry at rel (slash-separated, relative to the
// root, never "") is excluded. A nil excluder matches nothing.
func (x *excluder) match(rel string, isDir bool) bool {
	if x == nil {
		return false
	}
	var elems []string // split lazily: most globs are base-name globs
	for i := range x.pats {
		p := &x.pats[i]
		if p.dirOnly && !isDir {
			continue
		}
		if !p.anchored {
			if ok, _ := path.Match(p.elems[0], path.Base(rel)); ok {
				return true
			}
			continue
		}
		if elems == nil {
			elems = strings.Split(rel, "/")
		}
		if glob.MatchElems(p.elems, elems) {
			return true
		}
	}
	return false
}
