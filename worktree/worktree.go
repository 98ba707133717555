package worktree

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
)

// ErrNotLinked is returned by Snapshot and ExportGit in a binary that does
// not link package worktree/gogit (strata-core built with the strata_lean
// tag hands import --git and export-git over to strata-full instead).
var ErrNotLinked = errors.New("git support (go-git) is not linked into this binary: import package github.com/stratafs/strata/worktree/gogit")

// impl is the go-git side, registered by package worktree/gogit's init.
var impl struct {
	snapshot func(ctx context.Context, s *store.Store, w *store.Writer, repoArg string, opts SnapshotOptions) (*SnapshotResult, error)
	export   func(ctx context.Context, s *store.Store, baseTree, tree store.ID, parentRev string, repoDir string, opts ExportOptions) (*ExportResult, error)
}

// Register installs the go-git implementation of Snapshot and ExportGit.
// Package worktree/gogit calls it from its init, once; nothing else
// should: a second call, or a nil function, panics (a binary would
// otherwise run whichever came last), as image.Register does. Package
// inits run one at a time before main and impl is only read after, so it
// needs no lock.
func Register(
	snapshot func(ctx context.Context, s *store.Store, w *store.Writer, repoArg string, opts SnapshotOptions) (*SnapshotResult, error),
	export func(ctx context.Context, s *store.Store, baseTree, tree store.ID, parentRev string, repoDir string, opts ExportOptions) (*ExportResult, error),
) {
	if snapshot == nil || export == nil {
		panic("worktree: Register with a nil function")
	}
	if impl.snapshot != nil {
		panic("worktree: Register called twice")
	}
	impl.snapshot, impl.export = snapshot, export
}

// Linked reports whether this binary links the go-git implementation
// (package worktree/gogit).
func Linked() bool { return impl.snapshot != nil }

// Snapshot reads the commit repoArg names (REPO[@REV], REV default HEAD)
// from the source repository, with the ignored directories
// opts.WithIgnored selects and a synthetic .git, into the store through w,
// and returns the root tree; the caller commits it. See package gogit.
func Snapshot(ctx context.Context, s *store.Store, w *store.Writer, repoArg string, opts SnapshotOptions) (*SnapshotResult, error) {
	if impl.snapshot == nil {
		return nil, fmt.Errorf("import --git %s: %w", repoArg, ErrNotLinked)
	}
	return impl.snapshot(ctx, s, w, repoArg, opts)
}

// ExportGit records the change from baseTree to tree as a git commit on
// the new branch opts.Branch of the repository at repoDir, whose parent
// is parentRev. See package gogit.
func ExportGit(ctx context.Context, s *store.Store, baseTree, tree store.ID, parentRev string, repoDir string, opts ExportOptions) (*ExportResult, error) {
	if impl.export == nil {
		return nil, fmt.Errorf("export-git to %s: %w", repoDir, ErrNotLinked)
	}
	return impl.export(ctx, s, baseTree, tree, parentRev, repoDir, opts)
}

// AutoIgnoredDirs are the names of the ignored directories that
// SnapshotOptions.WithIgnored "auto" (the default) includes: dependency
// and tool directories whose contents a build or test run needs and that
// are expensive to recreate. A directory qualifies only if git ignores it;
// "env" also needs a pyvenv.cfg inside (a Python virtual environment, not
// any directory named env).
var AutoIgnoredDirs = []string{
	"node_modules",     // npm, yarn, pnpm
	"bower_components", // bower
	".yarn",            // yarn berry cache and PnP state
	".venv",            // Python virtual environments
	"venv",             //
	"env",              // only with pyvenv.cfg
	"__pypackages__",   // PEP 582
	".tox",             // tox
	".nox",             // nox
	"target",           // cargo, maven
	".gradle",          // gradle
	"vendor",           // go, composer, bundler — when ignored
}

// SnapshotOptions tune Snapshot. The zero value includes the "auto"
// ignored directories.
type SnapshotOptions struct {
	// WithIgnored selects the ignored directories of the working copy to
	// include: nil, empty or "auto" — the directories git ignores whose
	// name is in AutoIgnoredDirs; "none" — none; otherwise glob patterns
	// (path.Match syntax per element, "**" for any number of elements)
	// matched against the slash-separated repository-relative paths of
	// ignored directories; a pattern without a slash matches a name at
	// any depth, a leading slash anchors it at the top. "auto" may be
	// combined with patterns.
	WithIgnored []string
	// Warn, if set, receives one call per entry not recorded as it is in
	// git or in the working copy (path relative to the repository top).
	// Calls are serialized.
	Warn func(path, msg string)
	// Progress, if set, is called with the advance of each phase (see
	// snapshot.Progress): PhaseRead for git blobs, then each ignored
	// directory's import, then PhaseWrite for the trees.
	Progress func(snapshot.Progress)
}

// SnapshotResult describes a finished Snapshot.
type SnapshotResult struct {
	// Tree is the root tree; the caller commits it with the Writer.
	Tree store.ID
	// Stats summarize the tree, synthetic .git included (Dirs excludes
	// the root).
	Stats store.CommitStats
	// Rev is the resolved commit (full hex hash).
	Rev string
	// Repo is the working copy's top level (absolute, symlinks resolved);
	// "" for a bare repository.
	Repo string
	// GitDir is the repository's git directory (absolute). Its objects
	// are in ObjectsDir(GitDir).
	GitDir string
	// Branch is the branch the synthetic .git has checked out: the branch
	// REV named or HEAD was on; "" when detached.
	Branch string
	// Ignored lists the ignored directories included (repository-relative).
	Ignored []string
	// BlobsRead counts file blobs read from git and stored; BlobsCached
	// those whose content came from the blob cache. Symlink targets and
	// .gitignore files are read from git every time and not counted.
	BlobsRead, BlobsCached int64
}

// ExportOptions tune ExportGit.
type ExportOptions struct {
	// Branch is the branch to create (required).
	Branch string
	// Force moves Branch if it exists. A branch checked out in a working
	// copy of the repository is never moved.
	Force bool
	// Message is the commit message; default "strata: <short tree id>".
	Message string
	// Author is "Name <email>", default the repository's user (user.name
	// and user.email as git reads them), else "strata <strata@localhost>".
	// It is the committer too.
	Author string
}

// ExportResult describes an exported commit.
type ExportResult struct {
	Commit  string `json:"commit"` // the new commit (full hex hash)
	Branch  string `json:"branch"`
	Parent  string `json:"parent"`  // the parent commit (full hex hash)
	Changed int    `json:"changed"` // paths that differ between parent and commit, as git counts them
	// Skipped lists changed paths git cannot record: FIFOs, devices,
	// sockets, and paths inside a submodule.
	Skipped []string `json:"skipped,omitempty"`
}

// alternatesRoot is the directory under which strata's keeper bind-mounts
// source object directories inside a workspace's mount namespace.
const alternatesRoot = "/tmp/.strata-git"

// AlternatesPath is where the objects directory gitObjectsDir of a source
// repository is visible inside a workspace: the workspace is mounted over
// the source repository, which hides its real .git, so the keeper
// bind-mounts gitObjectsDir read-only at this fixed path and the synthetic
// .git of a snapshot names it in objects/info/alternates. The name depends
// only on gitObjectsDir (the first 16 hex digits of its SHA-256), so the
// keeper and Snapshot agree without talking to each other.
func AlternatesPath(gitObjectsDir string) string {
	sum := sha256.Sum256([]byte(gitObjectsDir))
	return alternatesRoot + "/" + hex.EncodeToString(sum[:])[:16] + "/objects"
}

// ObjectsDir returns the objects directory of the repository whose git
// directory is gitDir: gitDir/objects, or, for a linked worktree (a gitDir
// with a commondir file), the common directory's objects. The result is
// absolute with symlinks resolved, the form AlternatesPath expects.
func ObjectsDir(gitDir string) (string, error) {
	common, err := CommonDir(gitDir)
	if err != nil {
		return "", err
	}
	objects := filepath.Join(common, "objects")
	real, err := filepath.EvalSymlinks(objects)
	if err != nil {
		return "", fmt.Errorf("git objects directory: %w", err)
	}
	st, err := os.Stat(real)
	if err != nil {
		return "", fmt.Errorf("git objects directory: %w", err)
	}
	if !st.IsDir() {
		return "", fmt.Errorf("git objects directory %s: not a directory", real)
	}
	return real, nil
}

// CommonDir resolves gitDir's commondir file (linked worktrees keep their
// objects, refs and config in the main repository's git directory).
func CommonDir(gitDir string) (string, error) {
	abs, err := filepath.Abs(gitDir)
	if err != nil {
		return "", fmt.Errorf("git directory %s: %w", gitDir, err)
	}
	b, err := os.ReadFile(filepath.Join(abs, "commondir"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return abs, nil
	case err != nil:
		return "", fmt.Errorf("git directory %s: %w", gitDir, err)
	}
	c := strings.TrimRight(string(b), "\r\n")
	if c == "" {
		return abs, nil
	}
	if !filepath.IsAbs(c) {
		c = filepath.Join(abs, c)
	}
	return filepath.Clean(c), nil
}
