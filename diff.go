package strata

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"

	"github.com/stratafs/strata/internal/textdiff"
	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
)

// DiffSpec is what a diff compares: two trees, named for output.
type DiffSpec struct {
	From, To         store.ID // trees
	FromRef, ToRef   string   // how the user named them
	Workspace        string   // set when To is a workspace's current view
	FromCommit, ToID store.ID // commits, when known

	scratch *store.Writer // holds a workspace's view in memory
}

// Release drops what a workspace's diff holds in memory (its view's new
// trees and chunks) once its changes have been printed; Repo.Close does
// otherwise, so a long-lived Repo (the MCP server) calls it. It does
// nothing for other diffs.
func (s *DiffSpec) Release() {
	if s != nil && s.scratch != nil {
		_ = s.scratch.Abort()
	}
}

// FileChange is one changed path, with line counts for text files.
type FileChange struct {
	Path string `json:"path"`
	// PathBase64 carries the exact bytes when Path is not valid UTF-8.
	PathBase64 string `json:"path_base64,omitempty"`
	// Status is git's letter: A added, D deleted, M modified, T type
	// changed.
	Status  string `json:"status"`
	Old     *Entry `json:"old,omitempty"`
	New     *Entry `json:"new,omitempty"`
	Binary  bool   `json:"binary,omitempty"`
	Added   int    `json:"added"`   // lines, for text files
	Deleted int    `json:"deleted"` // lines, for text files
}

// Diff resolves what `strata diff ARG` compares: a workspace (its base
// against its current view, uncommitted changes included), REF (its first
// parent against it), or A..B.
func (r *Repo) Diff(ctx context.Context, arg string) (*DiffSpec, []snapshot.Change, error) {
	st, err := r.db()
	if err != nil {
		return nil, nil, err
	}
	t, err := r.parseTarget(ctx, "diff", arg, true)
	if err != nil {
		return nil, nil, err
	}
	if t.Range {
		ta, ca, err := r.commitTree(ctx, t.From)
		if err != nil {
			return nil, nil, err
		}
		tb, cb, err := r.commitTree(ctx, t.To)
		if err != nil {
			return nil, nil, err
		}
		spec := &DiffSpec{From: ta, To: tb, FromRef: t.From, ToRef: t.To, FromCommit: ca, ToID: cb}
		ch, err := snapshot.Diff(ctx, st, ta, tb)
		return spec, ch, err
	}
	if t.WS != nil && t.Exact {
		return r.workspaceDiff(ctx, arg)
	}
	tb, cb, err := r.commitTree(ctx, t.Ref)
	if err != nil {
		return nil, nil, err
	}
	spec := &DiffSpec{To: tb, ToRef: arg, ToID: cb, FromRef: arg + "^"}
	if err := st.View(ctx, func(tx *store.Tx) error {
		c, err := tx.Commit(cb)
		if err != nil || len(c.Parents) == 0 {
			return err
		}
		pc, err := tx.Commit(c.Parents[0])
		if err != nil {
			return err
		}
		spec.From, spec.FromCommit = pc.Tree, c.Parents[0]
		return nil
	}); err != nil {
		return nil, nil, err
	}
	ch, err := snapshot.Diff(ctx, st, spec.From, spec.To)
	return spec, ch, err
}

func (r *Repo) commitTree(ctx context.Context, ref string) (store.ID, store.ID, error) {
	var tree, id store.ID
	err := r.view(ctx, func(tx *store.Tx) error {
		var err error
		if id, err = resolve(tx, ref); err != nil {
			return err
		}
		c, err := tx.Commit(id)
		if err != nil {
			return err
		}
		tree = c.Tree
		return nil
	})
	return tree, id, err
}

// workspaceDiff compares a workspace's base with its current view. The
// view is built through a scratch writer: its new objects stay in memory
// (readable through the store until Close), nothing is written to the
// store, so it works on a read-only or full one.
func (r *Repo) workspaceDiff(ctx context.Context, name string) (*DiffSpec, []snapshot.Change, error) {
	st, err := r.db()
	if err != nil {
		return nil, nil, err
	}
	wr, err := st.NewScratchWriter(ctx, "diff "+name)
	if err != nil {
		return nil, nil, err
	}
	w, wt, err := r.workspaceTree(ctx, name, wr, nil, false)
	if err != nil {
		wr.Abort()
		return nil, nil, err
	}
	// Keep the objects until the patch has been printed: Release (or Close)
	// drops them.
	spec := &DiffSpec{From: wt.Base.Tree, To: wt.Tree, FromRef: w.Base.Short(), ToRef: name, Workspace: name, FromCommit: w.Base, scratch: wr}
	if err := wr.Flush(); err != nil { // Diff reads the new trees
		wr.Abort()
		return nil, nil, err
	}
	ch, err := snapshot.Diff(ctx, st, spec.From, spec.To)
	if err != nil {
		wr.Abort()
		return nil, nil, err
	}
	r.pending = append(r.pending, wr)
	return spec, ch, nil
}

// FileChanges turns tree changes into per-file changes as git shows them:
// directories are left out (git tracks none), line counts are computed for
// text files.
func (r *Repo) FileChanges(ctx context.Context, changes []snapshot.Change, counts bool) ([]FileChange, error) {
	st, err := r.db()
	if err != nil {
		return nil, err
	}
	var out []FileChange
	for _, c := range changes {
		oldF := c.Old != nil && isGitFile(c.Old)
		newF := c.New != nil && isGitFile(c.New)
		if !oldF && !newF {
			continue
		}
		fc := FileChange{Path: c.Path, PathBase64: base64IfInvalid(c.Path)}
		switch {
		case oldF && newF && c.Old.Type != c.New.Type:
			fc.Status = "T"
		case oldF && newF:
			if c.Old.Content == c.New.Content && gitMode(c.Old) == gitMode(c.New) && c.Old.Target == c.New.Target {
				continue // metadata git does not track (mtime, owner, xattrs)
			}
			fc.Status = "M"
		case newF:
			fc.Status = "A"
		default:
			fc.Status = "D"
		}
		if oldF {
			e := NewEntry(c.Old)
			fc.Old = &e
		}
		if newF {
			e := NewEntry(c.New)
			fc.New = &e
		}
		if counts {
			// A file above BigFileThreshold counts as binary, unread
			// (git's core.bigFileThreshold). Otherwise binary is decided
			// by the first 8000 bytes: a binary file (a 2 GiB sparse
			// image) is not read further.
			if bigFile(c, oldF, newF, BigFileThreshold) {
				fc.Binary = true
				out = append(out, fc)
				continue
			}
			if bin, err := r.binaryHead(ctx, st, c, oldF, newF); err != nil {
				return nil, err
			} else if bin {
				fc.Binary = true
				out = append(out, fc)
				continue
			}
			a, b, err := r.sides(ctx, st, c, oldF, newF)
			if err != nil {
				return nil, err
			}
			if textdiff.IsBinary(a) || textdiff.IsBinary(b) {
				fc.Binary = true
			} else {
				for _, op := range textdiff.Lines(a, b) {
					switch op.Kind {
					case textdiff.Insert:
						fc.Added += op.N
					case textdiff.Delete:
						fc.Deleted += op.N
					}
				}
			}
		}
		out = append(out, fc)
	}
	return out, nil
}

// isGitFile reports whether git would show an entry: regular files and
// symlinks.
func isGitFile(e *store.TreeEntry) bool {
	return e.Type == store.TypeFile || e.Type == store.TypeSymlink
}

// gitMode is the mode git records for an entry.
func gitMode(e *store.TreeEntry) uint32 {
	switch {
	case e.Type == store.TypeSymlink:
		return textdiff.ModeSymlink
	case e.Mode&0o111 != 0:
		return textdiff.ModeExec
	}
	return textdiff.ModeFile
}

// binaryHead reports whether either side of a change is binary, reading
// only the first bytes git inspects of each.
func (r *Repo) binaryHead(ctx context.Context, st *store.Store, c snapshot.Change, oldF, newF bool) (bool, error) {
	head := func(e *store.TreeEntry) (bool, error) {
		if e.Type != store.TypeFile || e.Content.IsZero() {
			return false, nil
		}
		rc, err := st.OpenContent(ctx, e.Content)
		if err != nil {
			return false, err
		}
		defer rc.Close()
		b := make([]byte, 8000)
		n, err := io.ReadFull(rc, b)
		if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
			return false, err
		}
		return textdiff.IsBinary(b[:n]), nil
	}
	for _, s := range []struct {
		use bool
		e   *store.TreeEntry
	}{{oldF, c.Old}, {newF, c.New}} {
		if !s.use {
			continue
		}
		if bin, err := head(s.e); err != nil || bin {
			return bin, err
		}
	}
	return false, nil
}

// sides reads the old and new bytes of a change (symlink targets for
// symlinks); an absent side is empty.
func (r *Repo) sides(ctx context.Context, st *store.Store, c snapshot.Change, oldF, newF bool) ([]byte, []byte, error) {
	read := func(e *store.TreeEntry) ([]byte, error) {
		if e.Type == store.TypeSymlink {
			return []byte(e.Target), nil
		}
		var buf bytes.Buffer
		_, err := st.ReadContentTo(ctx, e.Content, &buf)
		return buf.Bytes(), err
	}
	var a, b []byte
	var err error
	if oldF {
		if a, err = read(c.Old); err != nil {
			return nil, nil, err
		}
	}
	if newF {
		if b, err = read(c.New); err != nil {
			return nil, nil, err
		}
	}
	return a, b, nil
}

// BigFileThreshold is the default size above which a patch shows a file
// as "Binary files a/X and b/X differ" instead of its content, and --stat
// counts it as binary without reading it: git's core.bigFileThreshold
// default. A patch holds a file's content in memory, twice over, and a GIT
// binary literal of it; above this size the content is only streamed
// through a hash for the index line.
const BigFileThreshold int64 = 512 << 20

// PatchOptions tunes WritePatchOptions.
type PatchOptions struct {
	// BigFileThreshold: a file larger than this on either side is
	// summarized. 0 means the package's BigFileThreshold; negative means
	// none (every file in full, each read whole into memory).
	BigFileThreshold int64
}

func (o PatchOptions) threshold() int64 {
	switch {
	case o.BigFileThreshold == 0:
		return BigFileThreshold
	case o.BigFileThreshold < 0:
		return -1
	}
	return o.BigFileThreshold
}

// bigFile reports whether either present side of a change is a file above
// threshold (negative: none is).
func bigFile(c snapshot.Change, oldF, newF bool, threshold int64) bool {
	if threshold < 0 {
		return false
	}
	return (oldF && c.Old.Type == store.TypeFile && c.Old.Size > threshold) ||
		(newF && c.New.Type == store.TypeFile && c.New.Size > threshold)
}

// WritePatch writes changes as a git-style patch that `git apply` and (for
// text) `patch -p1` accept: binary files as GIT binary patches, mode
// changes, symlinks, and file/symlink type changes as delete + add. Files
// above BigFileThreshold are summarized (see WritePatchOptions).
func (r *Repo) WritePatch(ctx context.Context, w io.Writer, changes []snapshot.Change) error {
	_, err := r.WritePatchOptions(ctx, w, changes, PatchOptions{})
	return err
}

// WritePatchOptions is WritePatch with options. A file above the big-file
// threshold on either side gets a section that ends "Binary files a/X and
// b/X differ" after its index line (git's own output for such a file), its
// content read only to compute the git blob ids, in bounded memory; such a
// section says the file changed but git apply cannot apply it (apply,
// export and promote carry the file exactly). It returns the paths so
// summarized, in patch order.
func (r *Repo) WritePatchOptions(ctx context.Context, w io.Writer, changes []snapshot.Change, opt PatchOptions) ([]string, error) {
	st, err := r.db()
	if err != nil {
		return nil, err
	}
	threshold := opt.threshold()
	var summarized []string
	for _, c := range changes {
		oldF := c.Old != nil && isGitFile(c.Old)
		newF := c.New != nil && isGitFile(c.New)
		if !oldF && !newF {
			continue
		}
		if oldF && newF && c.Old.Content == c.New.Content && gitMode(c.Old) == gitMode(c.New) && c.Old.Target == c.New.Target {
			continue
		}
		var p textdiff.FilePatch
		if bigFile(c, oldF, newF, threshold) {
			ah, bh, err := r.blobIDs(ctx, st, c, oldF, newF)
			if err != nil {
				return summarized, err
			}
			p = textdiff.FilePatch{OldPath: c.Path, NewPath: c.Path, OldHash: ah, NewHash: bh, Summary: true}
			summarized = append(summarized, c.Path)
		} else {
			a, b, err := r.sides(ctx, st, c, oldF, newF)
			if err != nil {
				return summarized, err
			}
			p = textdiff.FilePatch{OldPath: c.Path, NewPath: c.Path, Old: a, New: b}
		}
		if oldF {
			p.OldMode = gitMode(c.Old)
		}
		if newF {
			p.NewMode = gitMode(c.New)
		}
		if oldF && newF && c.Old.Type != c.New.Type {
			// git shows a file <-> symlink change as a delete and an add.
			del, add := p, p
			del.NewMode, del.New = 0, nil
			add.OldMode, add.Old = 0, nil
			if err := textdiff.WritePatch(w, del); err != nil {
				return summarized, err
			}
			p = add
		}
		if err := textdiff.WritePatch(w, p); err != nil {
			return summarized, fmt.Errorf("patch %s: %w", c.Path, err)
		}
	}
	return summarized, nil
}

// blobIDs are the git blob ids of a change's present sides, the content
// streamed through the hash (a symlink's target hashed as its content).
func (r *Repo) blobIDs(ctx context.Context, st *store.Store, c snapshot.Change, oldF, newF bool) (string, string, error) {
	id := func(e *store.TreeEntry) (string, error) {
		if e.Type == store.TypeSymlink {
			return textdiff.BlobID([]byte(e.Target)), nil
		}
		h := textdiff.NewBlobHash(e.Size)
		if !e.Content.IsZero() {
			n, err := st.ReadContentTo(ctx, e.Content, h)
			if err != nil {
				return "", fmt.Errorf("diff %s: %w", c.Path, err)
			}
			if n != e.Size {
				return "", fmt.Errorf("diff %s: content is %d bytes, the tree says %d", c.Path, n, e.Size)
			}
		}
		return hex.EncodeToString(h.Sum(nil)), nil
	}
	var a, b string
	var err error
	if oldF {
		if a, err = id(c.Old); err != nil {
			return "", "", err
		}
	}
	if newF {
		if b, err = id(c.New); err != nil {
			return "", "", err
		}
	}
	return a, b, nil
}
