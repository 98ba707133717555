package workspace

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
)

// UpperFile is one path a patch leaves in an upper directory.
type UpperFile struct {
	Path    string // clean, relative, slash-separated
	Content []byte // a file's content, or a symlink's target
	Mode    uint32 // permission bits, or ModeSymlink
	Delete  bool   // a whiteout
}

// ModeSymlink marks an UpperFile that is a symlink.
const ModeSymlink = 0o120000

// FileError says which path of a patch cannot be written, and why.
type FileError struct {
	File string
	Err  error
}

func (e *FileError) Error() string { return e.File + ": " + e.Err.Error() }
func (e *FileError) Unwrap() error { return e.Err }

// WriteUpper writes files into the upper directory of a workspace (or
// run) that has not been mounted yet, in overlay format: files and
// symlinks with their content, whiteouts for deleted paths, and the parent
// directories they need with the attributes baseTree gives them (as the
// kernel's copy-up would make them). The result is what writing the same
// files in the merged view would give.
func WriteUpper(ctx context.Context, st *store.Store, baseTree store.ID, upper string, files []UpperFile) error {
	// A reflink or copy run's tree is the whole tree: a deleted path is
	// only removed (plainrun.go).
	plainTree := isPlainTree(upper)
	for _, p := range files {
		if err := ensureUpperParents(ctx, st, baseTree, upper, p.Path); err != nil {
			return err
		}
		dst := filepath.Join(upper, filepath.FromSlash(p.Path))
		_ = os.Remove(dst)
		switch {
		case p.Delete && plainTree:
		case p.Delete:
			if err := unix.Mknod(dst, unix.S_IFCHR|0o000, 0); err != nil {
				return fmt.Errorf("patch: whiteout %s: %w", p.Path, err)
			}
		case p.Mode == ModeSymlink:
			if err := os.Symlink(string(p.Content), dst); err != nil {
				return fmt.Errorf("patch: %s: %w", p.Path, err)
			}
		default:
			if err := os.WriteFile(dst, p.Content, 0o600); err != nil {
				return fmt.Errorf("patch: %s: %w", p.Path, err)
			}
			if err := unix.Chmod(dst, p.Mode&0o7777); err != nil {
				return err
			}
		}
	}
	return nil
}

// ensureUpperParents creates the parent directories of rel in the upper
// directory, each with the attributes the base tree gives it.
func ensureUpperParents(ctx context.Context, st *store.Store, baseTree store.ID, upper, rel string) error {
	dir := path.Dir(rel)
	if dir == "." {
		return nil
	}
	cur := ""
	for _, el := range strings.Split(dir, "/") {
		cur = path.Join(cur, el)
		dst := filepath.Join(upper, filepath.FromSlash(cur))
		if fi, err := os.Lstat(dst); err == nil {
			if !fi.IsDir() {
				return fmt.Errorf("patch: %s is not a directory in the workspace", cur)
			}
			continue
		}
		mode, mtime := uint32(0o755), int64(0)
		if e, err := snapshot.Lookup(ctx, st, baseTree, cur); err == nil {
			if e.Type != store.TypeDir {
				return &FileError{File: rel, Err: fmt.Errorf("%s is a %s in the base tree", cur, e.Type)}
			}
			mode, mtime = e.Mode, e.MtimeNs
		}
		if err := os.Mkdir(dst, 0o700); err != nil {
			return err
		}
		if err := unix.Chmod(dst, mode&0o7777); err != nil {
			return err
		}
		if mtime != 0 {
			ts := unix.NsecToTimespec(mtime)
			_ = unix.UtimesNano(dst, []unix.Timespec{ts, ts})
		}
	}
	return nil
}
