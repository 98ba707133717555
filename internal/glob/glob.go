// Package glob is strata's one matcher of slash-separated paths against
// globs: import's --exclude, run's --protect and import --git's
// --with-ignored all mean the same by a glob.
//
//   - A glob without a slash matches the last element of a path — a name at
//     any depth: "node_modules" and "*.tmp" match "a/b/node_modules" and
//     "x.tmp".
//   - A glob with a slash is anchored at the root and matched element by
//     element: "src/*.tmp" matches "src/a.tmp" but not "src/sub/a.tmp"; a
//     leading slash is allowed and ignored.
//   - Within an element, path.Match syntax: '*', '?', '[...]', '\\'
//     escapes; '*' never matches a slash.
//   - An element "**" matches zero or more whole elements ("a/**/b" matches
//     "a/b" and "a/x/y/b"), except at the end, where it matches one or
//     more: "build/**" is everything under build, not build itself.
package glob

import (
	"path"
	"strings"
)

// Match reports whether the slash-separated path p matches glob.
func Match(glob, p string) bool {
	glob = strings.TrimPrefix(glob, "/")
	if !strings.Contains(glob, "/") && glob != "**" {
		ok, _ := path.Match(glob, path.Base(p))
		return ok
	}
	return MatchElems(strings.Split(glob, "/"), strings.Split(p, "/"))
}

// MatchElems matches glob elements against path elements (see the package
// comment for "**").
func MatchElems(pat, name []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			rest := pat[1:]
			if len(rest) == 0 {
				return len(name) > 0 // trailing "**": one or more
			}
			for i := 0; i <= len(name); i++ {
				if MatchElems(rest, name[i:]) {
					return true
				}
			}
			return false
		}
		if len(name) == 0 {
			return false
		}
		if ok, _ := path.Match(pat[0], name[0]); !ok {
			return false
		}
		pat, name = pat[1:], name[1:]
	}
	return len(name) == 0
}

// Valid reports whether every element of glob is a valid path.Match
// pattern.
func Valid(glob string) bool {
	for _, e := range strings.Split(strings.TrimPrefix(glob, "/"), "/") {
		if _, err := path.Match(e, ""); err != nil {
			return false
		}
	}
	return true
}
