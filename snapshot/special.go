package snapshot

import (
	"context"
	"fmt"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/store"
)

// Special entries are what a change made in a workspace must not carry
// into a real directory unless the user asks: a setuid or setgid bit (as
// root, apply would plant a setuid-root binary a sandboxed agent chose;
// rootless, a setuid-user one), and a device node. One function decides,
// for `run --commit`'s policy check (which refuses them), `apply` and
// `export` of a workspace's branch (which strip them).

// SpecialReason says why the entry new, which a change writes at a path
// where old was (nil: nothing), is special, or returns "". Special are: a
// device node; setuid/setgid bits on a file, unless the file had them
// already with the same content (the change only touched its mtime or
// other bits); setuid/setgid bits a directory gains. Removing bits is
// never special.
func SpecialReason(old, new *store.TreeEntry) string {
	if new == nil {
		return ""
	}
	const suidBits = 0o6000
	bits := new.Mode & suidBits
	switch new.Type {
	case store.TypeCharDev, store.TypeBlockDev:
		if old != nil && old.Type == new.Type && old.Rdev == new.Rdev {
			return ""
		}
		return fmt.Sprintf("a device node (%v %d:%d)", new.Type, unix.Major(new.Rdev), unix.Minor(new.Rdev))
	case store.TypeFile:
		if bits == 0 || old != nil && old.Type == store.TypeFile && old.Mode&bits == bits && old.Content == new.Content {
			return ""
		}
		return fmt.Sprintf("sets the setuid/setgid bit (mode %04o)", new.Mode&0o7777)
	case store.TypeDir:
		if bits == 0 || old != nil && old.Type == store.TypeDir && old.Mode&bits == bits {
			return ""
		}
		return fmt.Sprintf("sets the setuid/setgid bit (mode %04o)", new.Mode&0o7777)
	}
	return ""
}

// Stripped is one entry StripSpecial made harmless.
type Stripped struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
	// Action is "bits cleared" (the entry is written without its
	// setuid/setgid bits) or "not written" (a device node: the path keeps
	// what the base had there, or stays absent).
	Action string `json:"action"`
}

// StripSpecial returns tree with every special entry of the change from
// base to tree (SpecialReason) made harmless — setuid/setgid bits
// cleared, device nodes replaced by base's entry at their path or left
// out — as a tree written with w, and what it changed. With nothing
// special it returns tree itself.
func StripSpecial(ctx context.Context, s *store.Store, w *store.Writer, base, tree store.ID) (store.ID, []Stripped, error) {
	changes, err := Diff(ctx, s, base, tree)
	if err != nil {
		return store.ZeroID, nil, err
	}
	edits := map[string]*store.TreeEntry{} // path → replacement; nil: drop
	var out []Stripped
	for _, c := range changes {
		reason := SpecialReason(c.Old, c.New)
		if reason == "" {
			continue
		}
		switch c.New.Type {
		case store.TypeCharDev, store.TypeBlockDev:
			edits[c.Path] = c.Old // nil when base had nothing
			out = append(out, Stripped{Path: c.Path, Reason: reason, Action: "not written"})
		default:
			e := *c.New
			e.Mode &^= 0o6000
			edits[c.Path] = &e
			out = append(out, Stripped{Path: c.Path, Reason: reason, Action: "bits cleared"})
		}
	}
	if len(edits) == 0 {
		return tree, nil, nil
	}
	below := map[string]bool{} // directories holding an edit
	for p := range edits {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			below[d] = true
		}
	}
	var rewrite func(id store.ID, prefix string) (store.ID, error)
	rewrite = func(id store.ID, prefix string) (store.ID, error) {
		var t *store.Tree
		if err := s.View(ctx, func(tx *store.Tx) error {
			var err error
			t, err = tx.Tree(id)
			return err
		}); err != nil {
			return store.ZeroID, err
		}
		entries := make([]store.TreeEntry, 0, len(t.Entries))
		changed := false
		for _, e := range t.Entries {
			p := joinRel(prefix, e.Name)
			if repl, ok := edits[p]; ok {
				changed = true
				if repl == nil {
					continue
				}
				e = *repl
			}
			if e.Type == store.TypeDir && below[p] {
				sub, err := rewrite(e.Content, p)
				if err != nil {
					return store.ZeroID, err
				}
				if sub != e.Content {
					e.Content, changed = sub, true
				}
			}
			entries = append(entries, e)
		}
		if !changed {
			return id, nil
		}
		return w.PutTree(&store.Tree{Entries: entries})
	}
	root, err := rewrite(tree, "")
	if err != nil {
		return store.ZeroID, nil, fmt.Errorf("strip special entries: %w", err)
	}
	return root, out, nil
}

// SpecialSummary is one line per stripped entry, for messages.
func SpecialSummary(s []Stripped) string {
	var b strings.Builder
	for _, x := range s {
		fmt.Fprintf(&b, "\n  %s: %s (%s)", x.Path, x.Reason, x.Action)
	}
	return b.String()
}
