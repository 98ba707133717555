package registry

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
)

// Whiteout names of the OCI image layer specification ("Whiteouts").
const (
	whiteoutPrefix = ".wh."
	opaqueMarker   = ".wh..wh..opq"
	// Other ".wh..wh." names are aufs metadata (.wh..wh.plnk, .wh..wh.aufs)
	// that docker writes and readers skip.
	whiteoutMeta = ".wh..wh."
)

// ErrUnsafePath is the category of a layer member whose name or hard-link
// target leaves the root (an absolute ".." walk) or is not a valid entry
// name. The layer is refused before anything of it is committed.
var ErrUnsafePath = errors.New("unsafe path in layer")

// memberKind classifies a layer tar member.
type memberKind uint8

const (
	memberEntry    memberKind = iota + 1 // a file, directory, symlink, device or FIFO
	memberHardlink                       // a hard link to Link
	memberWhiteout                       // deletes Path of the lower layers
	memberOpaque                         // makes directory Path opaque
	memberSkip                           // the root's own metadata, aufs metadata, global headers
)

// member is one checked tar member: Path and Link are clean relative
// paths ("" is the root) of valid entry names.
type member struct {
	Kind memberKind
	Path string
	Link string // memberHardlink: the target's path
	Hdr  *tar.Header
}

// cleanPath turns a tar member name (or hard-link target) into a clean
// slash-separated path relative to the root, "" for the root itself.
// Leading "/" and "./" are dropped (layers are extracted at the root);
// any ".." element, NUL, or element store.ValidateName refuses makes it
// unsafe: the OCI specification leaves such names to the extractor, and
// strata refuses them rather than guessing.
func cleanPath(name string) (string, error) {
	p := strings.TrimLeft(name, "/")
	for strings.HasPrefix(p, "./") {
		p = strings.TrimLeft(p[2:], "/")
	}
	p = strings.TrimSuffix(p, "/")
	if p == "." {
		p = ""
	}
	if p == "" {
		return "", nil
	}
	for _, el := range strings.Split(p, "/") {
		switch el {
		case "", ".":
			continue
		case "..":
			return "", fmt.Errorf("%q: \"..\" walks out of the layer's root: %w", name, ErrUnsafePath)
		}
		if err := store.ValidateName(el); err != nil {
			return "", fmt.Errorf("%q: %v: %w", name, err, ErrUnsafePath)
		}
	}
	return path.Clean(p), nil
}

// classify checks one header and says what it is.
func classify(h *tar.Header) (*member, error) {
	switch h.Typeflag {
	case tar.TypeXGlobalHeader:
		return &member{Kind: memberSkip, Hdr: h}, nil
	case tar.TypeReg, tar.TypeRegA, tar.TypeDir, tar.TypeSymlink, tar.TypeLink,
		tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
	default:
		return nil, fmt.Errorf("%q: unsupported tar member type %q", h.Name, h.Typeflag)
	}
	p, err := cleanPath(h.Name)
	if err != nil {
		return nil, err
	}
	m := &member{Kind: memberEntry, Path: p, Hdr: h}
	if p == "" {
		m.Kind = memberSkip // the root's own metadata is not recorded
		return m, nil
	}
	dir, base := path.Split(p)
	dir = strings.TrimSuffix(dir, "/")
	switch {
	case base == opaqueMarker:
		m.Kind, m.Path = memberOpaque, dir
		return m, nil
	case strings.HasPrefix(base, whiteoutMeta):
		m.Kind = memberSkip
		return m, nil
	case strings.HasPrefix(base, whiteoutPrefix):
		name := base[len(whiteoutPrefix):]
		if err := store.ValidateName(name); err != nil {
			return nil, fmt.Errorf("%q: whiteout of %v: %w", h.Name, err, ErrUnsafePath)
		}
		m.Kind, m.Path = memberWhiteout, path.Join(dir, name)
		return m, nil
	}
	switch h.Typeflag {
	case tar.TypeLink:
		t, err := cleanPath(h.Linkname)
		if err != nil {
			return nil, fmt.Errorf("%q: hard link target: %w", h.Name, err)
		}
		if t == "" || t == p {
			return nil, fmt.Errorf("%q: hard link to %q: %w", h.Name, h.Linkname, ErrUnsafePath)
		}
		m.Kind, m.Link = memberHardlink, t
	case tar.TypeSymlink:
		// A symlink's target is data, kept verbatim: it is never followed
		// when strata materializes the tree (DESIGN invariant 6).
		if h.Linkname == "" || strings.IndexByte(h.Linkname, 0) >= 0 {
			return nil, fmt.Errorf("%q: symlink target %q: %w", h.Name, h.Linkname, ErrUnsafePath)
		}
	}
	return m, nil
}

// readMembers reads a layer tar and calls fn for every member in order,
// with the member's content as r for regular files (fn must consume it or
// leave it; the rest is skipped). Every name and hard-link target is
// checked before fn sees it.
func readMembers(r io.Reader, fn func(m *member, r io.Reader) error) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read layer tar: %w", err)
		}
		m, err := classify(h)
		if err != nil {
			return err
		}
		if err := fn(m, tr); err != nil {
			return err
		}
	}
}

// entryFromHeader is the tree entry a tar member describes (content not
// yet set). Xattrs come from PAX SCHILY.xattr records; the overlay
// namespaces are dropped (a layer must not carry its own whiteout
// markers into a workspace's upper layer).
func entryFromHeader(h *tar.Header, name string) *store.TreeEntry {
	e := &store.TreeEntry{
		Name: name, Mode: uint32(h.Mode) & 0o7777,
		UID: uint32(h.Uid), GID: uint32(h.Gid),
		MtimeNs: h.ModTime.UnixNano(),
	}
	switch h.Typeflag {
	case tar.TypeDir:
		e.Type = store.TypeDir
	case tar.TypeSymlink:
		e.Type, e.Target, e.Size = store.TypeSymlink, h.Linkname, int64(len(h.Linkname))
	case tar.TypeChar:
		e.Type, e.Rdev = store.TypeCharDev, unix.Mkdev(uint32(h.Devmajor), uint32(h.Devminor))
	case tar.TypeBlock:
		e.Type, e.Rdev = store.TypeBlockDev, unix.Mkdev(uint32(h.Devmajor), uint32(h.Devminor))
	case tar.TypeFifo:
		e.Type = store.TypeFIFO
	default:
		e.Type = store.TypeFile
	}
	if e.Type == store.TypeFile || e.Type == store.TypeDir {
		for k, v := range h.PAXRecords {
			x, ok := strings.CutPrefix(k, "SCHILY.xattr.")
			if !ok || strings.HasPrefix(x, "trusted.overlay.") || strings.HasPrefix(x, "user.overlay.") {
				continue
			}
			e.Xattrs = append(e.Xattrs, store.Xattr{Name: x, Value: []byte(v)})
		}
		slices.SortFunc(e.Xattrs, func(a, b store.Xattr) int { return strings.Compare(a.Name, b.Name) })
	}
	return e
}

// contentWriter stores a file's bytes; *store.Writer is one.
type contentWriter interface {
	WriteContent(r io.Reader) (store.ID, int64, error)
}

// lowerLookup returns the entry at p in the tree beneath the layer (nil,
// nil if there is none).
type lowerLookup func(p string) (*store.TreeEntry, error)

// layerChanges reads one layer tar and returns the changes that apply it
// to the tree beneath (lower): entries with their content written
// through w, whiteouts as deletions, opaque markers as opaque
// directories. Directories the tar leaves implicit are added (0755,
// root) where the tree beneath has none; a member whose parent is a
// non-directory beneath (a symlink, typically) is refused, since writing
// through it would land outside the directory it names.
func layerChanges(r io.Reader, w contentWriter, lower lowerLookup) ([]snapshot.UpperChange, error) {
	entries := map[string]*store.TreeEntry{}
	opaque := map[string]bool{}
	deleted := map[string]bool{}
	groups := map[string]string{} // path of a linked file → its group key
	err := readMembers(r, func(m *member, cr io.Reader) error {
		switch m.Kind {
		case memberSkip:
			if m.Path == "" && m.Hdr.Typeflag == tar.TypeReg {
				return fmt.Errorf("%q: the root must be a directory", m.Hdr.Name)
			}
			return nil
		case memberWhiteout:
			deleted[m.Path] = true
			return nil
		case memberOpaque:
			opaque[m.Path] = true
			return nil
		case memberHardlink:
			t := entries[m.Link]
			if t == nil && !deleted[m.Link] {
				lo, err := lower(m.Link)
				if err != nil {
					return err
				}
				if lo != nil && lo.Type == store.TypeFile {
					c := *lo
					t = &c
					entries[m.Link] = t // joins the group: one change, same metadata
				}
			}
			if t == nil || t.Type != store.TypeFile {
				return fmt.Errorf("%q: hard link to %q, which is not a regular file of this layer or beneath it", m.Hdr.Name, m.Hdr.Linkname)
			}
			key, ok := groups[m.Link]
			if !ok {
				// NUL: no tree's group key can be this (ApplyUpper re-keys).
				key = m.Link + "\x00layer"
				groups[m.Link] = key
				t.LinkGroup = key
			}
			e := *t
			e.Name = path.Base(m.Path)
			entries[m.Path] = &e
			groups[m.Path] = key
			return nil
		}
		e := entryFromHeader(m.Hdr, path.Base(m.Path))
		if e.Type == store.TypeFile && m.Hdr.Size > 0 {
			id, n, err := w.WriteContent(cr)
			if err != nil {
				return fmt.Errorf("%q: %w", m.Hdr.Name, err)
			}
			if n != m.Hdr.Size {
				return fmt.Errorf("%q: %d bytes of content, header says %d", m.Hdr.Name, n, m.Hdr.Size)
			}
			e.Content, e.Size = id, n
		}
		if old := entries[m.Path]; old != nil && old.Type == store.TypeDir && e.Type != store.TypeDir {
			// A later member replaces a directory of this layer: what the
			// layer put under it goes too.
			for p := range entries {
				if strings.HasPrefix(p, m.Path+"/") {
					delete(entries, p)
				}
			}
		}
		delete(groups, m.Path)
		entries[m.Path] = e
		return nil
	})
	if err != nil {
		return nil, err
	}

	var out []snapshot.UpperChange
	// Implicit parents, checked against the tree beneath.
	seen := map[string]bool{}
	var parents []string
	for p := range entries {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if seen[d] {
				break
			}
			seen[d] = true
			parents = append(parents, d)
		}
	}
	for p := range opaque {
		if p != "" && entries[p] == nil && !seen[p] {
			seen[p] = true
			parents = append(parents, p)
		}
	}
	slices.Sort(parents)
	for _, d := range parents {
		if e := entries[d]; e != nil {
			if e.Type != store.TypeDir {
				return nil, fmt.Errorf("%q is a %v in this layer, and the layer has entries under it", d, e.Type)
			}
			continue
		}
		lo, err := lower(d)
		if err != nil {
			return nil, err
		}
		below := false // something under d is deleted in this layer
		for _, a := range ancestors(d) {
			if deleted[a] {
				below = true
			}
		}
		switch {
		case lo != nil && lo.Type == store.TypeDir && !deleted[d] && !below:
			if opaque[d] {
				c := *lo
				entries[d] = &c
			}
			continue // the directory beneath holds them
		case lo != nil && lo.Type == store.TypeDir:
			c := *lo
			entries[d] = &c
			opaque[d] = true // deleted and re-created in this layer
		case lo != nil && !deleted[d] && !below:
			return nil, fmt.Errorf("%q: the layer writes under %q, which is a %v in the layers beneath (refusing to write through it): %w", d, d, lo.Type, ErrUnsafePath)
		default:
			entries[d] = &store.TreeEntry{Name: path.Base(d), Type: store.TypeDir, Mode: 0o755}
		}
	}
	for p := range deleted {
		if e := entries[p]; e != nil {
			if e.Type == store.TypeDir {
				opaque[p] = true // the whiteout hides what was beneath, not the layer's own
			}
			continue
		}
		// A whiteout deletes only what is beneath; under a directory this
		// layer hides, replaces or deletes whole it has nothing to do.
		moot := false
		for _, a := range ancestors(p) {
			if deleted[a] || opaque[a] || (entries[a] != nil && entries[a].Type != store.TypeDir) {
				moot = true
				break
			}
		}
		if moot {
			continue
		}
		lo, err := lower(p)
		if err != nil {
			return nil, err
		}
		if lo != nil {
			out = append(out, snapshot.UpperChange{Path: p, Kind: snapshot.UpperDeleted})
		}
	}
	for p, e := range entries {
		out = append(out, snapshot.UpperChange{Path: p, Kind: snapshot.UpperModified, Opaque: opaque[p] && e.Type == store.TypeDir, Entry: e})
	}
	if opaque[""] {
		out = append(out, snapshot.UpperChange{Path: ".", Kind: snapshot.UpperModified, Opaque: true})
	}
	return out, nil
}

// ancestors returns the proper ancestors of p, outermost first.
func ancestors(p string) []string {
	var out []string
	for d := path.Dir(p); d != "."; d = path.Dir(d) {
		out = append(out, d)
	}
	slices.Reverse(out)
	return out
}
