package strata

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/bluekeyes/go-gitdiff/gitdiff"

	"github.com/stratafs/strata/internal/workspace"
	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
)

// PatchError says which file and hunk of a patch did not apply.
type PatchError struct {
	File string // the path in the patch
	Hunk string // the failing hunk's header and lines, when known
	Err  error  // gitdiff's error
}

func (e *PatchError) Error() string {
	if e.Hunk != "" {
		return fmt.Sprintf("patch does not apply: %s: %v; the hunk that failed:\n%s", e.File, e.Err, e.Hunk)
	}
	return fmt.Sprintf("patch does not apply: %s: %v", e.File, e.Err)
}
func (e *PatchError) Unwrap() error { return e.Err }

// ErrPatch marks a patch that cannot be parsed or applied.
var ErrPatch = errors.New("patch does not apply")

func (e *PatchError) Is(target error) bool { return target == ErrPatch }

// applyPatch applies a git-style unified diff to a workspace that has not
// been mounted yet: every file is patched in memory first (original
// contents from the base tree in the store), then the lifecycle writes the
// results straight into its upper directory (workspace.WriteUpper), so the
// result is exactly what applying the patch in the merged view would give.
//
// dir (relative, "" for the root) is where the patch's paths start: an
// image-rooted run's project directory (/testbed).
func (r *Repo) applyPatch(ctx context.Context, st *store.Store, baseTree store.ID, upper, dir string, patch []byte) (int, error) {
	files, _, err := gitdiff.Parse(bytes.NewReader(patch))
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrPatch, err)
	}
	if len(files) == 0 {
		return 0, fmt.Errorf("%w: no file changes found in the patch", ErrPatch)
	}
	// git patches name files without their a/ and b/ prefixes already;
	// traditional unified diffs are taken as patch -p1 takes them.
	strip := !isGitPatch(patch)
	var plan []workspace.UpperFile
	for _, f := range files {
		oldName, newName := patchPath(f.OldName, strip), patchPath(f.NewName, strip)
		name := newName
		if f.IsDelete {
			name = oldName
		}
		for _, p := range []string{oldName, newName} {
			if p != "" && !cleanRel(p) {
				return 0, &PatchError{File: p, Err: errors.New("path leaves the tree or names .git internals")}
			}
		}
		if dir != "" {
			oldName, newName, name = inDir(dir, oldName), inDir(dir, newName), inDir(dir, name)
		}
		var src []byte
		var srcMode uint32 = 0o644
		if !f.IsNew {
			e, err := snapshot.Lookup(ctx, st, baseTree, oldName)
			if err != nil {
				return 0, &PatchError{File: oldName, Err: fmt.Errorf("not in the base tree: %w", err)}
			}
			switch e.Type {
			case store.TypeFile:
				var buf bytes.Buffer
				if _, err := st.ReadContentTo(ctx, e.Content, &buf); err != nil {
					return 0, err
				}
				src = buf.Bytes()
			case store.TypeSymlink:
				src = []byte(e.Target)
			default:
				return 0, &PatchError{File: oldName, Err: fmt.Errorf("is a %s in the base tree", e.Type)}
			}
			srcMode = e.Mode
		} else if _, err := snapshot.Lookup(ctx, st, baseTree, newName); err == nil {
			return 0, &PatchError{File: newName, Err: errors.New("the patch creates it, but it already exists")}
		}
		var out bytes.Buffer
		if err := gitdiff.Apply(&out, bytes.NewReader(src), f); err != nil {
			pe := &PatchError{File: name, Err: err}
			var ae *gitdiff.ApplyError
			if errors.As(err, &ae) && ae.Fragment > 0 && ae.Fragment <= len(f.TextFragments) {
				frag := f.TextFragments[ae.Fragment-1]
				pe.Err = fmt.Errorf("hunk %d, line %d of the hunk (line %d of the file): %w", ae.Fragment, ae.FragmentLine, ae.Line, err)
				pe.Hunk = strings.TrimRight(frag.String(), "\n")
			}
			return 0, pe
		}
		if f.IsDelete {
			plan = append(plan, workspace.UpperFile{Path: oldName, Delete: true})
			continue
		}
		mode := srcMode
		if f.NewMode != 0 {
			mode = uint32(f.NewMode.Perm())
			if f.NewMode&fs.ModeSymlink != 0 || f.NewMode&0o170000 == workspace.ModeSymlink {
				mode = workspace.ModeSymlink
			}
		}
		if f.IsRename || (oldName != "" && oldName != newName && !f.IsCopy && !f.IsNew) {
			plan = append(plan, workspace.UpperFile{Path: oldName, Delete: true})
		}
		plan = append(plan, workspace.UpperFile{Path: newName, Content: out.Bytes(), Mode: mode})
	}
	// Everything applied in memory: now write.
	if err := workspace.WriteUpper(ctx, st, baseTree, upper, plan); err != nil {
		if fe := (*workspace.FileError)(nil); errors.As(err, &fe) {
			return 0, &PatchError{File: fe.File, Err: fe.Err}
		}
		return 0, err
	}
	return len(files), nil
}

// inDir joins a patch path onto dir ("" stays "").
func inDir(dir, p string) string {
	if p == "" {
		return ""
	}
	return path.Join(dir, p)
}

// patchPath cleans a name from a patch; with strip, it drops the first
// path element, as patch -p1 does (a/, b/ or a directory name).
func patchPath(p string, strip bool) string {
	if p == "" || p == "/dev/null" {
		return ""
	}
	p = strings.TrimPrefix(path.Clean(p), "./")
	if strip {
		if _, rest, ok := strings.Cut(p, "/"); ok {
			p = rest
		}
	}
	return p
}

// isGitPatch reports whether a patch is in git's format (diff --git
// headers).
func isGitPatch(patch []byte) bool {
	return bytes.HasPrefix(patch, []byte("diff --git ")) || bytes.Contains(patch, []byte("\ndiff --git "))
}

// cleanRel reports whether p is a clean relative path that stays in the
// tree and does not touch .git's internals.
func cleanRel(p string) bool {
	if p == "" || path.IsAbs(p) || path.Clean(p) != p || p == ".." || strings.HasPrefix(p, "../") {
		return false
	}
	for _, el := range strings.Split(p, "/") {
		if strings.EqualFold(el, ".git") {
			return false
		}
	}
	return true
}
