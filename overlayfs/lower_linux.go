package overlayfs

import (
	"errors"
	"io/fs"
	"path"

	"golang.org/x/sys/unix"
)

// layerDir is one real directory merged at some path beneath.
type layerDir struct {
	layer int    // index into the lowers, 0 = topmost
	path  string // real path on disk
}

// beneath is what the lowers alone show at one path.
type beneath struct {
	found bool
	path  string      // real path of the visible (topmost) entry
	st    unix.Stat_t // its stat
	stack []layerDir  // for a directory: every directory merged there, topmost first
}

func (b *beneath) isDir() bool { return b.found && b.st.Mode&unix.S_IFMT == unix.S_IFDIR }

// lowerSet answers "what is beneath path P" for a layer stack the way the
// kernel's lookup does: topmost layer first, stopping at whiteouts,
// non-directories and opaque directories, following redirects.
type lowerSet struct {
	roots  []string
	prefix string
	cache  map[string]*beneath // by path beneath; "" is the root
}

func newLowerSet(roots []string, prefix string) *lowerSet {
	return &lowerSet{roots: roots, prefix: prefix, cache: map[string]*beneath{}}
}

// lookup returns what is beneath p ("" for the root, else a clean relative
// path). Results are cached: layers are read-only.
func (ls *lowerSet) lookup(p string) (*beneath, error) {
	if b, ok := ls.cache[p]; ok {
		return b, nil
	}
	var b *beneath
	var err error
	if p == "" {
		b, err = ls.root()
	} else {
		dir, name := path.Split(p)
		var parent *beneath
		if parent, err = ls.lookup(trimSlash(dir)); err != nil {
			return nil, err
		}
		b = &beneath{}
		if parent.isDir() {
			b, err = ls.lookupChild(parent.stack, name)
		}
	}
	if err != nil {
		return nil, err
	}
	ls.cache[p] = b
	return b, nil
}

func trimSlash(dir string) string {
	if dir != "" && dir[len(dir)-1] == '/' {
		return dir[:len(dir)-1]
	}
	return dir
}

// root merges every layer's root, as the kernel does whatever markers the
// roots carry (Linux: fs/overlayfs/super.c ovl_get_lowerstack).
func (ls *lowerSet) root() (*beneath, error) {
	b := &beneath{}
	if len(ls.roots) == 0 {
		return b, nil
	}
	if err := unix.Lstat(ls.roots[0], &b.st); err != nil {
		return nil, &fs.PathError{Op: "lstat", Path: ls.roots[0], Err: err}
	}
	b.found, b.path = true, ls.roots[0]
	for i, r := range ls.roots {
		b.stack = append(b.stack, layerDir{layer: i, path: r})
	}
	return b, nil
}

func (ls *lowerSet) rootStack() []layerDir {
	s := make([]layerDir, len(ls.roots))
	for i, r := range ls.roots {
		s[i] = layerDir{layer: i, path: r}
	}
	return s
}

// lookupState mirrors the kernel's struct ovl_lookup_data.
type lookupState struct {
	name  []string // components to look up in the next layer
	abs   bool     // name is from the root of each layer
	isDir bool     // a directory was found: only directories merge below it
	stop  bool     // no further layer is consulted
}

// lookupChild looks name up in the directories of stack (the stack of its
// parent), like the lower-layer loop of ovl_lookup
// (Linux: fs/overlayfs/namei.c ovl_lookup).
func (ls *lowerSet) lookupChild(stack []layerDir, name string) (*beneath, error) {
	b := &beneath{}
	d := lookupState{name: []string{name}}
	onRoot := false
	for i := 0; i < len(stack) && !d.stop; i++ {
		layer := stack[i].layer
		base := stack[i].path
		if d.abs {
			base = ls.roots[layer]
		}
		p, st, found, err := ls.lookupLayer(base, &d)
		if err != nil {
			return nil, err
		}
		if found {
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				b.stack = append(b.stack, layerDir{layer: layer, path: p})
			}
			if !b.found {
				b.found, b.path, b.st = true, p, st
			}
		}
		// An absolute redirect continues in the next layer from its root,
		// whatever the parent's stack: ovl_lookup switches to the root's
		// lower stack ("poe = roe").
		if d.abs && !onRoot {
			stack, onRoot = ls.rootStack(), true
			i = layer
		}
	}
	return b, nil
}

// lookupLayer walks d.name below base in one layer, like ovl_lookup_layer
// and ovl_lookup_single, updating d for the layers below.
func (ls *lowerSet) lookupLayer(base string, d *lookupState) (string, unix.Stat_t, bool, error) {
	var st unix.Stat_t
	comps := d.name // this layer walks the name it started with
	cur := base
	for k, c := range comps {
		last := k == len(comps)-1
		p := cur + "/" + c
		if err := unix.Lstat(p, &st); err != nil {
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ENAMETOOLONG) {
				return "", st, false, nil
			}
			return "", st, false, &fs.PathError{Op: "lstat", Path: p, Err: err}
		}
		x, err := readXattrSet(p, ls.prefix)
		if err != nil {
			return "", st, false, err
		}
		white, err := isWhiteout(&st, x)
		if err != nil {
			return "", st, false, err
		}
		if white {
			d.stop = true
			return "", st, false, nil
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			d.stop = true
			if d.isDir || !last {
				return "", st, false, nil
			}
			return p, st, true, nil
		}
		if last {
			d.isDir = true
		}
		cur = p
		if v, _, err := x.marker("opaque"); err != nil {
			return "", st, false, err
		} else if v == "y" {
			d.stop = true
			continue
		}
		v, ok, err := x.marker("redirect")
		if err != nil {
			return "", st, false, err
		}
		if !ok {
			continue
		}
		rc, abs, err := parseRedirect(v)
		if err != nil {
			// The kernel warns and ignores an invalid redirect.
			continue
		}
		rest := append([]string(nil), comps[k+1:]...)
		if abs {
			d.name = append(rc, rest...)
			d.abs = true
			// A redirect below an opaque ancestor still reaches the
			// layers below (ovl_check_redirect resets d->stop).
			d.stop = false
		} else {
			d.name = append(append(append([]string(nil), comps[:k]...), rc[0]), rest...)
		}
	}
	return cur, st, true, nil
}

// isWhiteout reports whether an entry hides the name beneath: a character
// device 0/0, or a zero-size regular file with the overlay.whiteout xattr
// (Linux 6.7+: fs/overlayfs/util.c ovl_path_check_xwhiteout_xattr). The
// kernel's lookup honours the latter on its own; the overlay.opaque="x"
// marker on the parent only tells readdir where to look for them.
func isWhiteout(st *unix.Stat_t, x xattrSet) (bool, error) {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		return st.Rdev == 0, nil
	case unix.S_IFREG:
		return st.Size == 0 && x.has("whiteout"), nil
	}
	return false, nil
}
