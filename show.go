package strata

import (
	"context"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/stratafs/strata/image"
	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
)

// Entry describes one tree entry for output.
type Entry struct {
	Name string `json:"name"`
	// NameBase64 holds the exact bytes of Name when they are not valid
	// UTF-8 (JSON strings cannot carry them).
	NameBase64 string   `json:"name_base64,omitempty"`
	Type       string   `json:"type"`
	Mode       uint32   `json:"mode"`
	UID        uint32   `json:"uid"`
	GID        uint32   `json:"gid"`
	Size       int64    `json:"size"`
	MtimeNs    int64    `json:"mtime_ns"`
	Target     string   `json:"target,omitempty"`
	LinkGroup  string   `json:"link_group,omitempty"`
	Content    store.ID `json:"content,omitempty"`
}

// NewEntry converts a tree entry for output.
func NewEntry(e *store.TreeEntry) Entry {
	return Entry{
		Name:       e.Name,
		NameBase64: base64IfInvalid(e.Name),
		Type:       e.Type.String(),
		Mode:       e.Mode,
		UID:        e.UID,
		GID:        e.GID,
		Size:       e.Size,
		MtimeNs:    e.MtimeNs,
		Target:     e.Target,
		LinkGroup:  e.LinkGroup,
		Content:    e.Content,
	}
}

// Shown is what `show` found: a commit (Path unset), a directory listing,
// or a single non-directory entry whose bytes ReadContent streams.
type Shown struct {
	Commit  LogEntry `json:"commit"`
	Path    string   `json:"path,omitempty"`
	IsPath  bool     `json:"-"`
	Entry   *Entry   `json:"entry,omitempty"`   // the entry at Path (nil for the root)
	Listing []Entry  `json:"listing,omitempty"` // when Path is a directory
	// Image is the image config an image commit keeps (import --image).
	Image *image.Config `json:"image,omitempty"`
	raw   *store.TreeEntry
}

// Show resolves REF or REF:PATH.
func (r *Repo) Show(ctx context.Context, spec string) (*Shown, error) {
	ref, p, hasPath := strings.Cut(spec, ":")
	t, err := r.parseTarget(ctx, "show", ref, false)
	if err != nil {
		return nil, err
	}
	var out Shown
	var c *store.Commit
	err = r.view(ctx, func(tx *store.Tx) error {
		id, err := resolve(tx, t.Ref)
		if err != nil {
			return err
		}
		if c, err = tx.Commit(id); err != nil {
			return err
		}
		out.Commit = logEntry(id, c)
		out.Image, err = image.ConfigFromMessage(c.Message)
		return err
	})
	if err != nil || !hasPath {
		return &out, err
	}
	out.IsPath = true
	p = strings.Trim(path.Clean("/"+p), "/")
	out.Path = p
	treeID := c.Tree
	if p != "" {
		st, err := r.db()
		if err != nil {
			return nil, err
		}
		e, err := snapshot.Lookup(ctx, st, c.Tree, p)
		if err != nil {
			return nil, fmt.Errorf("%s:%s: %w", ref, p, err)
		}
		ent := NewEntry(e)
		out.Entry, out.raw = &ent, e
		if e.Type != store.TypeDir {
			return &out, nil
		}
		treeID = e.Content
	}
	err = r.view(ctx, func(tx *store.Tx) error {
		t, err := tx.Tree(treeID)
		if err != nil {
			return err
		}
		out.Listing = make([]Entry, 0, len(t.Entries))
		for i := range t.Entries {
			out.Listing = append(out.Listing, NewEntry(&t.Entries[i]))
		}
		return nil
	})
	return &out, err
}

// WriteContent writes the bytes of a shown file (or a symlink's target) to w.
func (r *Repo) WriteContent(ctx context.Context, s *Shown, w io.Writer) error {
	if s.raw == nil {
		return fmt.Errorf("show: %q is not a file", s.Path)
	}
	switch s.raw.Type {
	case store.TypeFile:
		st, err := r.db()
		if err != nil {
			return err
		}
		_, err = st.ReadContentTo(ctx, s.raw.Content, w)
		return err
	case store.TypeSymlink:
		_, err := io.WriteString(w, s.raw.Target)
		return err
	}
	return fmt.Errorf("show: %q is a %s", s.Path, s.raw.Type)
}
