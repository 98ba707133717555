package strata

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/stratafs/strata/internal/workspace"
	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
	"github.com/stratafs/strata/worktree"
)

// gitSourcePrefix marks the Source of a commit imported from git:
// "git:REV:REPO", REV the full commit hash and REPO the working copy's
// absolute path (where workspaces of the commit are mounted).
const gitSourcePrefix = "git:"

// gitSource is what a commit's Source says about a git import.
type gitSource struct {
	Rev  string
	Repo string
}

func parseGitSource(source string) (gitSource, bool) {
	rest, ok := strings.CutPrefix(source, gitSourcePrefix)
	if !ok {
		return gitSource{}, false
	}
	rev, repo, ok := strings.Cut(rest, ":")
	if !ok || rev == "" || !filepath.IsAbs(repo) {
		return gitSource{}, false
	}
	return gitSource{Rev: rev, Repo: repo}, true
}

// sourceDir is the directory a commit's tree came from, where its
// workspaces appear: the imported directory, or a git import's working
// copy.
func sourceDir(source string) string {
	if g, ok := parseGitSource(source); ok {
		return g.Repo
	}
	return source
}

// GitLinked reports whether this binary links git support (package
// worktree/gogit, which registers itself when imported): without it,
// ImportGit and ExportGit fail with an error wrapping worktree.ErrNotLinked.
// strata-core built with the strata_lean tag lacks it on purpose and hands
// those verbs to strata-full (docs/hotpath.md).
func GitLinked() bool { return worktree.Linked() }

// GitImportOptions tune ImportGit.
type GitImportOptions struct {
	Branch      string   // default main
	Message     string   // default "import --git REPO@REV"
	WithIgnored []string // "auto" (default), "none", or globs
	Warn        func(path, msg string)
	Progress    func(snapshot.Progress)
}

// ImportGit snapshots the tracked files of a git commit (REPO[@REV], REV
// default HEAD) without touching the repository's working copy, plus the
// dependency directories that exist in the working copy and are ignored by
// git (node_modules, .venv, target, ...), and a working .git whose objects
// are the repository's own (alternates), as a commit on opts.Branch.
func (r *Repo) ImportGit(ctx context.Context, repoArg string, opts GitImportOptions) (*ImportResult, error) {
	start := time.Now()
	branch := opts.Branch
	if branch == "" {
		branch = DefaultBranch
	}
	if err := store.ValidateBranchName(branch); err != nil {
		return nil, err
	}
	st, err := r.db()
	if err != nil {
		return nil, err
	}
	var parent store.ID
	if err := st.View(ctx, func(tx *store.Tx) error {
		id, err := tx.Ref(branch)
		if err != nil && !isNotFound(err) {
			return err
		}
		parent = id
		return nil
	}); err != nil {
		return nil, err
	}
	w, err := st.NewWriter(ctx, "import --git "+repoArg)
	if err != nil {
		return nil, err
	}
	defer w.Abort()
	res, err := worktree.Snapshot(ctx, st, w, repoArg, worktree.SnapshotOptions{
		WithIgnored: opts.WithIgnored, Warn: opts.Warn, Progress: opts.Progress,
	})
	if err != nil {
		return nil, err
	}
	msg := opts.Message
	if msg == "" {
		msg = fmt.Sprintf("import --git %s@%s", res.Repo, res.Rev)
	}
	out := &ImportResult{
		Parent: parent, Branch: branch, Tree: res.Tree, Source: res.Repo, Stats: res.Stats,
		FilesRead: res.BlobsRead, CacheHits: res.BlobsCached,
	}
	err = w.Finish(func(tx *store.Tx) error {
		c := &store.Commit{
			Tree: res.Tree, Message: msg, TimeNs: time.Now().UnixNano(),
			Source: gitSourcePrefix + res.Rev + ":" + res.Repo, Stats: res.Stats,
		}
		if !parent.IsZero() {
			c.Parents = []store.ID{parent}
		}
		id, err := tx.CommitOnBranch(c, branch, parent, store.Op{Kind: "import-git", Detail: res.Repo + "@" + res.Rev})
		if moved := (*store.BranchMovedError)(nil); errors.As(err, &moved) {
			return fmt.Errorf("branch %q moved during import: %w", branch, moved.Err)
		}
		out.Commit = id
		return err
	})
	if err != nil {
		return nil, err
	}
	ws := w.Stats()
	out.NewObjects, out.NewBytes = ws.NewObjects, ws.NewBytes
	out.DurationNs = time.Since(start).Nanoseconds()
	return out, nil
}

// gitBinds are the bind mounts a workspace of a git import needs: the
// repository's objects, at the path its synthetic .git names as
// alternates (the overlay hides the repository itself).
func gitBinds(source string) []workspace.Bind {
	g, ok := parseGitSource(source)
	if !ok {
		return nil
	}
	objects, err := worktree.ObjectsDir(filepath.Join(g.Repo, ".git"))
	if err != nil {
		return nil
	}
	return []workspace.Bind{{Source: objects, Target: worktree.AlternatesPath(objects)}}
}

// ExportGitResult reports export-git.
type ExportGitResult struct {
	Commit string `json:"commit"` // the git commit
	Branch string `json:"branch"`
	Parent string `json:"parent"`
	Repo   string `json:"repo"`
	Files  int    `json:"changed"`
}

// ExportGit writes the change base..REF as a git commit on a new branch of
// the repository the base was imported from (or repo): base is the nearest
// first-parent ancestor of REF imported with import --git. REF may be a
// workspace (its committed state). It refuses to overwrite an existing
// branch unless force, and never touches the repository's working copy,
// index or HEAD.
func (r *Repo) ExportGit(ctx context.Context, ref, repo, branch string, force bool) (*ExportGitResult, error) {
	st, err := r.db()
	if err != nil {
		return nil, err
	}
	t, err := r.parseTarget(ctx, "export-git", ref, false)
	if err != nil {
		return nil, err
	}
	ref = t.Ref
	var tree, baseTree store.ID
	var g gitSource
	if err := st.View(ctx, func(tx *store.Tx) error {
		id, err := resolve(tx, ref)
		if err != nil {
			return err
		}
		c, err := tx.Commit(id)
		if err != nil {
			return err
		}
		tree = c.Tree
		gs, ok := parseGitSource(c.Source)
		if !ok {
			return fmt.Errorf("export-git %s: it does not descend from an import --git (source %q): %w", ref, c.Source, ErrNotFound)
		}
		// Commits made on top of a git import keep its Source; the import
		// itself is the oldest first-parent ancestor that still has it.
		g, baseTree = gs, c.Tree
		for len(c.Parents) > 0 {
			p, err := tx.Commit(c.Parents[0])
			if err != nil {
				return err
			}
			if p.Source != c.Source {
				break
			}
			c, baseTree = p, p.Tree
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if repo == "" {
		repo = g.Repo
	}
	res, err := worktree.ExportGit(ctx, st, baseTree, tree, g.Rev, repo, worktree.ExportOptions{Branch: branch, Force: force})
	if err != nil {
		return nil, err
	}
	return &ExportGitResult{Commit: res.Commit, Branch: res.Branch, Parent: res.Parent, Repo: repo, Files: res.Changed}, nil
}
