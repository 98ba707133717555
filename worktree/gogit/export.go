package gogit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/gitignore"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
	"github.com/stratafs/strata/worktree"
)

// defaultAuthor is the identity of an exported commit when neither the
// options nor git's configuration name one.
const defaultAuthor = "strata <strata@localhost>"

// ExportGit records the change from baseTree to tree as a git commit in
// the repository at repoDir, on the new branch opts.Branch, whose parent
// is parentRev (the commit baseTree was imported from). It starts from
// parentRev's git tree and applies every changed path of
// snapshot.Diff(baseTree, tree) except paths inside .git and new paths that
// git ignores (by the .gitignore files of parentRev as the change leaves
// them, info/exclude and core.excludesfile); a path parentRev tracks is
// applied even if ignored, as `git commit -a` would. It writes objects and
// the branch only: the working copy, the index and HEAD are left alone.
// An existing branch is refused (an error wrapping store.ErrExists) unless
// opts.Force.
func ExportGit(ctx context.Context, s *store.Store, baseTree, tree store.ID, parentRev string, repoDir string, opts worktree.ExportOptions) (*worktree.ExportResult, error) {
	res, err := exportGit(ctx, s, baseTree, tree, parentRev, repoDir, opts)
	if err != nil {
		return nil, fmt.Errorf("export-git to %s: %w", repoDir, err)
	}
	return res, nil
}

type exporter struct {
	ctx     context.Context
	s       *store.Store
	r       *gitRepo
	orig    *gtree // parentRev's tree, never edited
	edit    *gtree // the tree being made
	changed map[string]*snapshot.Change
	base    []gitignore.Pattern
	pats    map[string][]gitignore.Pattern // by directory
	dirIgn  map[string]bool
	blobs   map[store.ID]plumbing.Hash
}

func exportGit(ctx context.Context, s *store.Store, baseTree, tree store.ID, parentRev string, repoDir string, opts worktree.ExportOptions) (*worktree.ExportResult, error) {
	if opts.Branch == "" {
		return nil, fmt.Errorf("no branch name: %w", store.ErrInvalidName)
	}
	refName := plumbing.NewBranchReferenceName(opts.Branch)
	if err := refName.Validate(); err != nil {
		return nil, fmt.Errorf("branch %q: %w", opts.Branch, store.ErrInvalidName)
	}
	r, err := openRepo(repoDir)
	if err != nil {
		return nil, err
	}
	defer r.close()
	author, err := r.author(opts.Author)
	if err != nil {
		return nil, err
	}
	ph, err := r.repo.ResolveRevision(plumbing.Revision(parentRev))
	if err != nil {
		return nil, fmt.Errorf("parent %q: %w", parentRev, err)
	}
	parent, err := object.GetCommit(r.repo.Storer, *ph)
	if err != nil {
		return nil, fmt.Errorf("parent %s: %w", ph, err)
	}
	if err := r.checkBranch(refName, opts.Force); err != nil {
		return nil, err
	}

	changes, err := snapshot.Diff(ctx, s, baseTree, tree)
	if err != nil {
		return nil, fmt.Errorf("diff: %w", err)
	}
	x := &exporter{
		ctx: ctx, s: s, r: r,
		orig:    &gtree{hash: parent.TreeHash},
		edit:    &gtree{hash: parent.TreeHash},
		changed: make(map[string]*snapshot.Change, len(changes)),
		base:    basePatterns(r),
		pats:    map[string][]gitignore.Pattern{},
		dirIgn:  map[string]bool{},
		blobs:   map[store.ID]plumbing.Hash{},
	}
	for i := range changes {
		x.changed[changes[i].Path] = &changes[i]
	}
	res := &worktree.ExportResult{Branch: opts.Branch, Parent: ph.String()}
	for i := range changes {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		skipped, err := x.apply(&changes[i])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", changes[i].Path, err)
		}
		if skipped {
			res.Skipped = append(res.Skipped, changes[i].Path)
		}
	}
	treeHash, _, err := x.write(x.edit)
	if err != nil {
		return nil, err
	}
	if res.Changed, err = x.count(parent.TreeHash, treeHash); err != nil {
		return nil, err
	}

	msg := opts.Message
	if msg == "" {
		msg = "strata: " + tree.Short()
	}
	if !strings.HasSuffix(msg, "\n") {
		msg += "\n"
	}
	author.When = time.Now()
	c := &object.Commit{
		Author: author, Committer: author, Message: msg,
		TreeHash: treeHash, ParentHashes: []plumbing.Hash{*ph},
	}
	obj := r.repo.Storer.NewEncodedObject()
	if err := c.Encode(obj); err != nil {
		return nil, fmt.Errorf("encode commit: %w", err)
	}
	ch, err := r.repo.Storer.SetEncodedObject(obj)
	if err != nil {
		return nil, fmt.Errorf("write commit: %w", err)
	}
	if err := r.repo.Storer.SetReference(plumbing.NewHashReference(refName, ch)); err != nil {
		return nil, fmt.Errorf("set branch %q: %w", opts.Branch, err)
	}
	res.Commit = ch.String()
	return res, nil
}

// author parses "Name <email>", or finds the identity git would use.
func (r *gitRepo) author(s string) (object.Signature, error) {
	if s == "" {
		cfg, err := r.repo.ConfigScoped(config.SystemScope)
		if err == nil {
			name, email := cfg.Author.Name, cfg.Author.Email
			if name == "" {
				name = cfg.User.Name
			}
			if email == "" {
				email = cfg.User.Email
			}
			if name != "" && email != "" {
				return object.Signature{Name: name, Email: email}, nil
			}
		}
		s = defaultAuthor
	}
	i, j := strings.LastIndexByte(s, '<'), strings.LastIndexByte(s, '>')
	if i < 0 || j != len(s)-1 || j < i || strings.TrimSpace(s[:i]) == "" ||
		strings.ContainsAny(s[:i], "<>\n") || strings.ContainsAny(s[i+1:j], "<>\n") {
		return object.Signature{}, fmt.Errorf("author %q: want \"Name <email>\"", s)
	}
	return object.Signature{Name: strings.TrimSpace(s[:i]), Email: s[i+1 : j]}, nil
}

// checkBranch refuses an existing branch unless force, and a branch that
// a working copy of the repository has checked out in any case (moving it
// would change what that working copy's HEAD means).
func (r *gitRepo) checkBranch(ref plumbing.ReferenceName, force bool) error {
	if r.checkedOut(ref) {
		return fmt.Errorf("branch %q is checked out in a working copy of %s; export to another branch: %w",
			ref.Short(), r.common, store.ErrConflict)
	}
	_, err := r.repo.Storer.Reference(ref)
	switch {
	case err == nil && !force:
		return fmt.Errorf("branch %q: %w (use force to move it)", ref.Short(), store.ErrExists)
	case err != nil && !errors.Is(err, plumbing.ErrReferenceNotFound):
		return fmt.Errorf("branch %q: %w", ref.Short(), err)
	}
	return nil
}

// checkedOut reports whether the HEAD of the main working copy or of a
// linked worktree is the symbolic ref ref.
func (r *gitRepo) checkedOut(ref plumbing.ReferenceName) bool {
	heads := []string{filepath.Join(r.common, "HEAD")}
	if m, err := filepath.Glob(filepath.Join(r.common, "worktrees", "*", "HEAD")); err == nil {
		heads = append(heads, m...)
	}
	for _, h := range heads {
		b, err := os.ReadFile(h)
		if err == nil && strings.TrimSpace(string(b)) == "ref: "+ref.String() {
			return true
		}
	}
	return false
}

// apply applies one change to the edited tree; skipped reports a change
// git cannot record.
func (x *exporter) apply(c *snapshot.Change) (skipped bool, err error) {
	p := c.Path
	elems := strings.Split(p, "/")
	for _, e := range elems {
		if strings.EqualFold(e, ".git") {
			return false, nil
		}
	}
	orig, inSub, err := x.orig.lookup(x, elems)
	if err != nil {
		return false, err
	}
	if inSub {
		return true, nil // inside a submodule
	}
	if c.New == nil { // deleted
		if c.Old.Type != store.TypeDir || (orig != nil && orig.mode == filemode.Submodule) {
			return false, x.edit.remove(x, elems)
		}
		return false, nil // a directory goes when its last entry does
	}
	tracked := orig != nil && orig.mode != filemode.Dir
	if !tracked {
		ign, err := x.ignored(elems, c.New.Type == store.TypeDir)
		if err != nil {
			return false, err
		}
		if ign {
			return false, nil
		}
	}
	switch c.New.Type {
	case store.TypeDir:
		if orig != nil && orig.mode == filemode.Submodule {
			return false, nil // the submodule's directory
		}
		// A file or link replaced by a directory goes; the directory
		// itself appears with its first entry.
		cur, _, err := x.edit.lookup(x, elems)
		if err != nil {
			return false, err
		}
		if cur != nil && cur.mode != filemode.Dir {
			return false, x.edit.remove(x, elems)
		}
		return false, nil
	case store.TypeFile:
		h, err := x.fileBlob(c.New)
		if err != nil {
			return false, err
		}
		mode := filemode.Regular
		if c.New.Mode&0o100 != 0 {
			mode = filemode.Executable
		}
		return false, x.edit.set(x, elems, mode, h)
	case store.TypeSymlink:
		h, err := x.writeBlob(int64(len(c.New.Target)), func(w io.Writer) (int64, error) {
			n, err := io.WriteString(w, c.New.Target)
			return int64(n), err
		})
		if err != nil {
			return false, err
		}
		return false, x.edit.set(x, elems, filemode.Symlink, h)
	}
	return true, nil // FIFOs, devices, sockets
}

// ignored reports whether a new path is ignored: it, or a directory on
// the way to it, matches the patterns that apply there.
func (x *exporter) ignored(elems []string, isDir bool) (bool, error) {
	pats := x.base
	for i := 1; i <= len(elems); i++ {
		dir := strings.Join(elems[:i-1], "/")
		own, err := x.patterns(dir, elems[:i-1])
		if err != nil {
			return false, err
		}
		if len(own) > 0 {
			pats = append(pats[:len(pats):len(pats)], own...)
		}
		last := i == len(elems)
		if !last {
			key := strings.Join(elems[:i], "/")
			ign, ok := x.dirIgn[key]
			if !ok {
				ign = gitignore.NewMatcher(pats).Match(elems[:i], true)
				x.dirIgn[key] = ign
			}
			if ign {
				return true, nil
			}
			continue
		}
		return gitignore.NewMatcher(pats).Match(elems, isDir), nil
	}
	return false, nil
}

// patterns returns the patterns of dir's .gitignore as the change leaves
// it: the changed version if the change touches it, else parentRev's.
func (x *exporter) patterns(dir string, elems []string) ([]gitignore.Pattern, error) {
	if ps, ok := x.pats[dir]; ok {
		return ps, nil
	}
	p := joinRel(dir, ".gitignore")
	var data []byte
	if c, ok := x.changed[p]; ok {
		if c.New != nil && c.New.Type == store.TypeFile && c.New.Size <= 16<<20 {
			var buf bytes.Buffer
			if _, err := x.s.ReadContentTo(x.ctx, c.New.Content, &buf); err != nil {
				return nil, fmt.Errorf("%s: %w", p, err)
			}
			data = buf.Bytes()
		}
	} else {
		e, _, err := x.orig.lookup(x, append(elems[:len(elems):len(elems)], ".gitignore"))
		if err != nil {
			return nil, err
		}
		if e != nil && (e.mode == filemode.Regular || e.mode == filemode.Executable) {
			if data, err = readBlob(x.r.repo, e.hash, 16<<20); err != nil {
				return nil, fmt.Errorf("%s: %w", p, err)
			}
		}
	}
	ps := parseIgnore(data, elems)
	x.pats[dir] = ps
	return ps, nil
}

// fileBlob writes the content of a file entry as a git blob.
func (x *exporter) fileBlob(e *store.TreeEntry) (plumbing.Hash, error) {
	if h, ok := x.blobs[e.Content]; ok {
		return h, nil
	}
	h, err := x.writeBlob(e.Size, func(w io.Writer) (int64, error) {
		return x.s.ReadContentTo(x.ctx, e.Content, w)
	})
	if err != nil {
		return plumbing.ZeroHash, err
	}
	x.blobs[e.Content] = h
	return h, nil
}

// lazyWriter is go-git's filesystem object storage, which streams an
// object of known size into a loose object file.
type lazyWriter interface {
	LazyWriter() (io.WriteCloser, func(plumbing.ObjectType, int64) error, error)
}

// writeBlob stores a blob of size bytes that fill writes.
func (x *exporter) writeBlob(size int64, fill func(io.Writer) (int64, error)) (plumbing.Hash, error) {
	st := x.r.repo.Storer
	if lw, ok := st.(lazyWriter); ok {
		w, header, err := lw.LazyWriter()
		if err != nil {
			return plumbing.ZeroHash, fmt.Errorf("write blob: %w", err)
		}
		hw, ok := w.(interface{ Hash() plumbing.Hash })
		if !ok {
			w.Close()
		} else {
			err := header(plumbing.BlobObject, size)
			var n int64
			if err == nil {
				n, err = fill(w)
			}
			if err == nil && n != size {
				err = fmt.Errorf("content is %d bytes, the tree says %d", n, size)
			}
			if cerr := w.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return plumbing.ZeroHash, fmt.Errorf("write blob: %w", err)
			}
			return hw.Hash(), nil
		}
	}
	obj := st.NewEncodedObject()
	obj.SetType(plumbing.BlobObject)
	obj.SetSize(size)
	w, err := obj.Writer()
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("write blob: %w", err)
	}
	n, err := fill(w)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != size {
		err = fmt.Errorf("content is %d bytes, the tree says %d", n, size)
	}
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("write blob: %w", err)
	}
	h, err := st.SetEncodedObject(obj)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("write blob: %w", err)
	}
	return h, nil
}

// count returns how many paths differ between two git trees.
func (x *exporter) count(a, b plumbing.Hash) (int, error) {
	ta, err := object.GetTree(x.r.repo.Storer, a)
	if err != nil {
		return 0, fmt.Errorf("tree %s: %w", a, err)
	}
	tb, err := object.GetTree(x.r.repo.Storer, b)
	if err != nil {
		return 0, fmt.Errorf("tree %s: %w", b, err)
	}
	ch, err := object.DiffTreeContext(x.ctx, ta, tb)
	if err != nil {
		return 0, fmt.Errorf("diff trees: %w", err)
	}
	return len(ch), nil
}

// gtree is a git tree being read or edited: loaded lazily, written only
// where dirty.
type gtree struct {
	hash    plumbing.Hash // the tree as read; ZeroHash for a new one
	entries map[string]*gent
	loaded  bool
	dirty   bool
}

type gent struct {
	mode filemode.FileMode
	hash plumbing.Hash
	sub  *gtree // directories, once visited
}

func (t *gtree) load(x *exporter) error {
	if t.loaded {
		return nil
	}
	t.loaded = true
	t.entries = map[string]*gent{}
	if t.hash.IsZero() {
		return nil
	}
	gt, err := object.GetTree(x.r.repo.Storer, t.hash)
	if err != nil {
		return fmt.Errorf("tree %s: %w", t.hash, err)
	}
	for _, e := range gt.Entries {
		t.entries[e.Name] = &gent{mode: e.Mode, hash: e.Hash}
	}
	return nil
}

func (e *gent) dir() *gtree {
	if e.sub == nil {
		e.sub = &gtree{hash: e.hash}
	}
	return e.sub
}

// lookup returns the entry at elems, or nil; inSub reports that a
// submodule lies strictly above it.
func (t *gtree) lookup(x *exporter, elems []string) (e *gent, inSub bool, err error) {
	d := t
	for i, name := range elems {
		if err := d.load(x); err != nil {
			return nil, false, err
		}
		e = d.entries[name]
		if e == nil {
			return nil, false, nil
		}
		if i == len(elems)-1 {
			return e, false, nil
		}
		switch e.mode {
		case filemode.Dir:
			d = e.dir()
		case filemode.Submodule:
			return nil, true, nil
		default:
			return nil, false, nil
		}
	}
	return nil, false, nil
}

// set puts a blob at elems, making directories on the way (replacing
// what is not a directory there).
func (t *gtree) set(x *exporter, elems []string, mode filemode.FileMode, h plumbing.Hash) error {
	d := t
	for _, name := range elems[:len(elems)-1] {
		if err := d.load(x); err != nil {
			return err
		}
		d.dirty = true
		e := d.entries[name]
		if e == nil || e.mode != filemode.Dir {
			e = &gent{mode: filemode.Dir, sub: &gtree{loaded: true, entries: map[string]*gent{}}}
			d.entries[name] = e
		}
		d = e.dir()
	}
	if err := d.load(x); err != nil {
		return err
	}
	d.dirty = true
	d.entries[elems[len(elems)-1]] = &gent{mode: mode, hash: h}
	return nil
}

// remove deletes the entry at elems, if there is one.
func (t *gtree) remove(x *exporter, elems []string) error {
	var path []*gtree
	d := t
	for i, name := range elems {
		if err := d.load(x); err != nil {
			return err
		}
		path = append(path, d)
		e := d.entries[name]
		if e == nil {
			return nil
		}
		if i == len(elems)-1 {
			delete(d.entries, name)
			for _, p := range path {
				p.dirty = true
			}
			return nil
		}
		if e.mode != filemode.Dir {
			return nil
		}
		d = e.dir()
	}
	return nil
}

// write stores the dirty trees under t, bottom-up, dropping directories
// left empty, and returns t's hash and whether it is empty.
func (x *exporter) write(t *gtree) (plumbing.Hash, bool, error) {
	if !t.dirty {
		return t.hash, false, nil
	}
	ents := make([]object.TreeEntry, 0, len(t.entries))
	for name, e := range t.entries {
		if e.mode == filemode.Dir && e.sub != nil && e.sub.dirty {
			h, empty, err := x.write(e.sub)
			if err != nil {
				return plumbing.ZeroHash, false, err
			}
			if empty {
				continue // git has no empty directories
			}
			e.hash = h
		}
		ents = append(ents, object.TreeEntry{Name: name, Mode: e.mode, Hash: e.hash})
	}
	sort.Sort(object.TreeEntrySorter(ents))
	gt := &object.Tree{Entries: ents}
	obj := x.r.repo.Storer.NewEncodedObject()
	if err := gt.Encode(obj); err != nil {
		return plumbing.ZeroHash, false, fmt.Errorf("encode tree: %w", err)
	}
	h, err := x.r.repo.Storer.SetEncodedObject(obj)
	if err != nil {
		return plumbing.ZeroHash, false, fmt.Errorf("write tree: %w", err)
	}
	t.hash = h
	return h, len(ents) == 0, nil
}
