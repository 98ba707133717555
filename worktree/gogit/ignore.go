package gogit

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing/format/gitignore"

	"github.com/stratafs/strata/internal/glob"
	"github.com/stratafs/strata/worktree"
)

// selector decides which ignored directories Snapshot includes.
type selector struct {
	auto    bool
	globs   [][]string // each: path elements; one element = a name at any depth
	raw     []string   // the globs as given
	matched []bool     // by glob: it selected a directory
}

// unmatched lists the globs that selected nothing.
func (s *selector) unmatched() []string {
	var out []string
	for i, ok := range s.matched {
		if !ok {
			out = append(out, s.raw[i])
		}
	}
	return out
}

// newSelector compiles worktree.SnapshotOptions.WithIgnored: nil or empty means
// "auto"; "none" alone includes nothing; otherwise "auto" and globs add up.
func newSelector(with []string) (*selector, error) {
	if len(with) == 0 {
		return &selector{auto: true}, nil
	}
	s := &selector{}
	for _, w := range with {
		switch w {
		case "none":
			if len(with) != 1 {
				return nil, fmt.Errorf("with-ignored: %q cannot be combined with other values", w)
			}
			return s, nil
		case "auto":
			s.auto = true
			continue
		}
		g := strings.Trim(w, "/")
		if g == "" {
			return nil, fmt.Errorf("with-ignored %q: empty pattern", w)
		}
		elems := strings.Split(g, "/")
		for _, e := range elems {
			if e == "" {
				return nil, fmt.Errorf("with-ignored %q: empty path element", w)
			}
			if _, err := path.Match(e, ""); err != nil {
				return nil, fmt.Errorf("with-ignored %q: %w", w, err)
			}
		}
		if len(elems) == 1 && strings.HasPrefix(w, "/") {
			elems = append([]string{""}, elems...) // anchored single element
		}
		s.globs = append(s.globs, elems)
		s.raw = append(s.raw, w)
		s.matched = append(s.matched, false)
	}
	return s, nil
}

// none reports whether nothing can be selected.
func (s *selector) none() bool { return !s.auto && len(s.globs) == 0 }

// selects reports whether the ignored directory at rel (slash-separated,
// relative to the repository) is included; abs is its path on disk.
func (s *selector) selects(rel, abs string) bool {
	name := path.Base(rel)
	// Every glob that matches is marked (unmatched warns of the others),
	// so they are tried before auto.
	var elems []string
	sel := false
	for i, g := range s.globs {
		if s.globMatches(g, rel, name, &elems) {
			s.matched[i], sel = true, true
		}
	}
	if sel {
		return true
	}
	if s.auto {
		for _, d := range worktree.AutoIgnoredDirs {
			if name != d {
				continue
			}
			if d != "env" {
				return true
			}
			if st, err := os.Lstat(filepath.Join(abs, "pyvenv.cfg")); err == nil && st.Mode().IsRegular() {
				return true
			}
		}
	}
	return false
}

func (s *selector) globMatches(g []string, rel, name string, elems *[]string) bool {
	if len(g) == 1 {
		ok, _ := path.Match(g[0], name)
		return ok
	}
	if *elems == nil {
		*elems = strings.Split(rel, "/")
	}
	if g[0] == "" { // "/name": anchored at the top
		if len(*elems) == 1 {
			ok, _ := path.Match(g[1], name)
			return ok
		}
		return false
	}
	return glob.MatchElems(g, *elems)
}

// parseIgnore parses the contents of a .gitignore (or exclude) file whose
// patterns apply below domain (path elements relative to the top).
func parseIgnore(data []byte, domain []string) []gitignore.Pattern {
	var ps []gitignore.Pattern
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := strings.TrimSuffix(sc.Text(), "\r")
		if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
			continue
		}
		ps = append(ps, gitignore.ParsePattern(line, domain))
	}
	return ps
}

// basePatterns are the patterns that apply to the whole repository, lowest
// priority first: core.excludesfile (the repository's, else the user's or
// the system's, else git's default $XDG_CONFIG_HOME/git/ignore), then
// info/exclude of the common git directory.
func basePatterns(r *gitRepo) []gitignore.Pattern {
	var ps []gitignore.Pattern
	if f := excludesFile(r); f != "" {
		if b, err := os.ReadFile(f); err == nil {
			ps = append(ps, parseIgnore(b, nil)...)
		}
	}
	if b, err := os.ReadFile(filepath.Join(r.common, "info", "exclude")); err == nil {
		ps = append(ps, parseIgnore(b, nil)...)
	}
	return ps
}

// excludesFile finds core.excludesfile as git does.
func excludesFile(r *gitRepo) string {
	get := func(c *config.Config) string {
		if c == nil || c.Raw == nil || !c.Raw.HasSection("core") {
			return ""
		}
		return c.Raw.Section("core").Option("excludesfile")
	}
	f := get(r.local)
	if f == "" {
		if c, err := config.LoadConfig(config.GlobalScope); err == nil {
			f = get(c)
		}
	}
	if f == "" {
		if c, err := config.LoadConfig(config.SystemScope); err == nil {
			f = get(c)
		}
	}
	home, _ := os.UserHomeDir()
	if f == "" {
		xdg := os.Getenv("XDG_CONFIG_HOME")
		if xdg == "" && home != "" {
			xdg = filepath.Join(home, ".config")
		}
		if xdg == "" {
			return ""
		}
		return filepath.Join(xdg, "git", "ignore")
	}
	if rest, ok := strings.CutPrefix(f, "~/"); ok && home != "" {
		f = filepath.Join(home, rest)
	}
	return f
}

// ignoreScope is the gitignore state of one directory during a walk: the
// patterns that apply in it (base, then each ancestor's .gitignore, then its
// own), and whether the directory itself is ignored (then everything under
// it is, as in git).
type ignoreScope struct {
	patterns []gitignore.Pattern
	ignored  bool
}

// ignores reports whether the entry at elems (path elements from the
// top) is ignored in this scope.
func (sc ignoreScope) ignores(elems []string, isDir bool) bool {
	return sc.ignored || gitignore.NewMatcher(sc.patterns).Match(elems, isDir)
}

// with returns the scope extended by more patterns (a directory's own
// .gitignore), without sharing the backing array with siblings.
func (sc ignoreScope) with(ps []gitignore.Pattern, ignored bool) ignoreScope {
	if len(ps) == 0 {
		return ignoreScope{patterns: sc.patterns, ignored: sc.ignored || ignored}
	}
	all := make([]gitignore.Pattern, 0, len(sc.patterns)+len(ps))
	all = append(all, sc.patterns...)
	all = append(all, ps...)
	return ignoreScope{patterns: all, ignored: sc.ignored || ignored}
}
