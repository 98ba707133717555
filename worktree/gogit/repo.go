package gogit

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-billy/v5/osfs"
	gogit "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	format "github.com/go-git/go-git/v5/plumbing/format/config"
	"github.com/go-git/go-git/v5/plumbing/hash"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/storage/filesystem/dotgit"
	"github.com/stratafs/strata/worktree"
)

// gitRepo is an opened source repository.
type gitRepo struct {
	repo    *gogit.Repository
	storage *filesystem.Storage
	top     string // the working copy's top level; "" for a bare repository
	gitDir  string // absolute, symlinks resolved
	common  string // the common git directory (gitDir unless a linked worktree)
	local   *config.Config
}

// openRepo finds the repository that contains dir (dir itself or a parent:
// a working copy with a .git directory or file, or a bare repository) and
// opens it with go-git.
func openRepo(dir string) (*gitRepo, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("repository %s: %w", dir, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("repository: %w", err)
	}
	r := &gitRepo{}
	for d := real; ; d = filepath.Dir(d) {
		dotgit := filepath.Join(d, ".git")
		st, err := os.Lstat(dotgit)
		if err == nil && st.IsDir() {
			r.top, r.gitDir = d, dotgit
			break
		}
		if err == nil && st.Mode().IsRegular() {
			gd, err := readGitFile(dotgit)
			if err != nil {
				return nil, err
			}
			r.top, r.gitDir = d, gd
			break
		}
		if isBare(d) {
			r.gitDir = d
			break
		}
		if d == filepath.Dir(d) {
			return nil, fmt.Errorf("%s: not in a git repository: %w", dir, gogit.ErrRepositoryNotExists)
		}
	}
	if r.gitDir, err = filepath.EvalSymlinks(r.gitDir); err != nil {
		return nil, fmt.Errorf("git directory: %w", err)
	}
	if r.common, err = worktree.CommonDir(r.gitDir); err != nil {
		return nil, err
	}
	open := r.top
	if open == "" {
		open = r.gitDir
	}
	r.storage = r.newStorage()
	var wt billy.Filesystem
	if r.top != "" {
		wt = osfs.New(r.top)
	}
	if r.repo, err = gogit.Open(r.storage, wt); err != nil {
		r.storage.Close()
		return nil, fmt.Errorf("open repository %s: %w", open, err)
	}
	if r.local, err = r.repo.Config(); err != nil {
		r.storage.Close()
		return nil, fmt.Errorf("repository %s: config: %w", open, err)
	}
	// go-git reads one object format per build (SHA-1 unless built with
	// the sha256 tag); a repository in the other format cannot be read.
	want := format.SHA1
	if hash.Size == 32 {
		want = format.SHA256
	}
	if f := r.local.Extensions.ObjectFormat; f != "" && f != want {
		r.storage.Close()
		return nil, fmt.Errorf("repository %s uses object format %s; this strata reads %s only", open, f, want)
	}
	return r, nil
}

// newStorage opens go-git's storage of the repository, as PlainOpen does
// (a linked worktree's git directory over its common directory) but
// keeping pack files open: by default go-git opens and closes the pack
// for every object it reads. Absolute alternates resolve from "/". The
// storage is not safe for concurrent use; Close it.
func (r *gitRepo) newStorage() *filesystem.Storage {
	var fs billy.Filesystem = osfs.New(r.gitDir)
	if r.common != r.gitDir {
		fs = dotgit.NewRepositoryFilesystem(fs, osfs.New(r.common))
	}
	return filesystem.NewStorageWithOptions(fs, cache.NewObjectLRUDefault(), filesystem.Options{
		KeepDescriptors: true,
		AlternatesFS:    osfs.New("/"),
	})
}

// close releases the repository's open files.
func (r *gitRepo) close() {
	if r.storage != nil {
		r.storage.Close()
	}
}

// readGitFile parses a ".git" file ("gitdir: PATH", relative to the file).
func readGitFile(p string) (string, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", p, err)
	}
	s := strings.TrimRight(string(b), "\r\n")
	gd, ok := strings.CutPrefix(s, "gitdir: ")
	if !ok || gd == "" {
		return "", fmt.Errorf("%s: not a gitdir file", p)
	}
	if !filepath.IsAbs(gd) {
		gd = filepath.Join(filepath.Dir(p), gd)
	}
	return filepath.Clean(gd), nil
}

// isBare reports whether d looks like a bare repository: HEAD, objects/
// and refs/, like git's is_git_directory.
func isBare(d string) bool {
	if st, err := os.Stat(filepath.Join(d, "HEAD")); err != nil || !st.Mode().IsRegular() {
		return false
	}
	for _, sub := range []string{"objects", "refs"} {
		if st, err := os.Stat(filepath.Join(d, sub)); err != nil || !st.IsDir() {
			return false
		}
	}
	return true
}

// splitRepoArg splits "REPO[@REV]". An argument that is an existing
// directory is all repository (its name may contain '@'); otherwise the
// first prefix before an '@' that is an existing directory is the
// repository and the rest the revision, which may itself contain '@'. An
// empty REPO is the current directory, an empty REV is HEAD.
func splitRepoArg(arg string) (repo, rev string) {
	if st, err := os.Stat(arg); err == nil && st.IsDir() {
		return arg, "HEAD"
	}
	for i := 0; i < len(arg); i++ {
		if arg[i] != '@' {
			continue
		}
		prefix := arg[:i]
		if prefix == "" {
			prefix = "."
		}
		if st, err := os.Stat(prefix); err == nil && st.IsDir() {
			rev = arg[i+1:]
			if rev == "" {
				rev = "HEAD"
			}
			return prefix, rev
		}
	}
	return arg, "HEAD"
}

// resolved is a revision resolved to a commit.
type resolved struct {
	hash   plumbing.Hash
	branch string // the branch REV names, or HEAD is on; "" when detached
}

// resolve resolves rev to a commit and finds the branch it came from: rev
// naming a local branch (that resolves to the same commit), or HEAD
// attached to a branch.
func (r *gitRepo) resolve(rev string) (*resolved, error) {
	h, err := r.repo.ResolveRevision(plumbing.Revision(rev))
	if err != nil {
		return nil, fmt.Errorf("revision %q: %w", rev, err)
	}
	res := &resolved{hash: *h}
	name := strings.TrimPrefix(rev, "refs/heads/")
	if rev == "HEAD" {
		head, err := r.repo.Reference(plumbing.HEAD, false)
		if err == nil && head.Type() == plumbing.SymbolicReference && head.Target().IsBranch() {
			name = head.Target().Short()
		}
	}
	ref, err := r.repo.Reference(plumbing.NewBranchReferenceName(name), true)
	if err == nil && ref.Hash() == res.hash {
		res.branch = name
	}
	return res, nil
}
