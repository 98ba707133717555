package gogit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	gogit "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
	"github.com/stratafs/strata/worktree"
)

// blobCacheRoot is the stat-cache root under which Snapshot remembers the
// content id of each git blob (path = blob hex, Content = content id,
// Size = blob size). The store only accepts absolute roots; the double
// slash keeps it apart from any import root, which is always clean.
func blobCacheRoot(objectsDir string) string { return objectsDir + "//git-blobs" }

// maxTreeDepth bounds the nesting of git trees read.
const maxTreeDepth = 4096

// tnode is one entry of the tree being built.
type tnode struct {
	name string
	e    store.TreeEntry
	// kids are the entries of a directory built in memory, sorted by
	// name; mem says the entry is such a directory.
	kids []*tnode
	mem  bool
	// graft, for a directory whose e.Content is an already written tree
	// (an imported ignored directory), holds that tree's statistics.
	graft *store.CommitStats
	// tracked entries: the git object and canonical git mode.
	blob  plumbing.Hash
	gmode filemode.FileMode
}

func (d *tnode) kid(name string) (*tnode, int) {
	i := sort.Search(len(d.kids), func(i int) bool { return d.kids[i].name >= name })
	if i < len(d.kids) && d.kids[i].name == name {
		return d.kids[i], i
	}
	return nil, i
}

func (d *tnode) insert(n *tnode) {
	_, i := d.kid(n.name)
	d.kids = append(d.kids, nil)
	copy(d.kids[i+1:], d.kids[i:])
	d.kids[i] = n
}

// indexItem is a tracked path for the synthetic index.
type indexItem struct {
	path string
	n    *tnode
}

type snapshotter struct {
	ctx      context.Context
	s        *store.Store
	w        *store.Writer
	opts     worktree.SnapshotOptions
	r        *gitRepo
	objects  string
	mtime    int64 // the commit's committer time, ns
	uid, gid uint32
	root     *tnode
	files    map[plumbing.Hash][]*tnode
	links    []*tnode
	tracked  []indexItem
	ignored  []string
	warnMu   sync.Mutex
	res      worktree.SnapshotResult
	stats    store.CommitStats
}

func (sn *snapshotter) warn(p, msg string) {
	if sn.opts.Warn == nil {
		return
	}
	sn.warnMu.Lock()
	defer sn.warnMu.Unlock()
	sn.opts.Warn(p, msg)
}

func (sn *snapshotter) progress(p snapshot.Progress) {
	if sn.opts.Progress != nil {
		sn.opts.Progress(p)
	}
}

// Snapshot records the git commit REV of the repository REPO
// (repoArg = "REPO[@REV]", REV defaulting to HEAD) as a tree through w and
// returns it; the caller writes the commit with w.Finish, with Source
// "git:REPO@REV".
//
// The tree holds REV's tracked files, read from git objects (the working
// copy is not read for them), every mtime the commit's committer time;
// the working copy's ignored dependency directories selected by
// opts.WithIgnored, imported as snapshot.Import does; and a synthetic .git
// that shares the source's objects through objects/info/alternates naming
// worktree.AlternatesPath(worktree.ObjectsDir(GitDir)). See docs/worktree.md.
func Snapshot(ctx context.Context, s *store.Store, w *store.Writer, repoArg string, opts worktree.SnapshotOptions) (*worktree.SnapshotResult, error) {
	res, err := snapshotRepo(ctx, s, w, repoArg, opts)
	if err != nil {
		return nil, fmt.Errorf("snapshot git %s: %w", repoArg, err)
	}
	return res, nil
}

func snapshotRepo(ctx context.Context, s *store.Store, w *store.Writer, repoArg string, opts worktree.SnapshotOptions) (*worktree.SnapshotResult, error) {
	sel, err := newSelector(opts.WithIgnored)
	if err != nil {
		return nil, err
	}
	repoDir, rev := splitRepoArg(repoArg)
	r, err := openRepo(repoDir)
	if err != nil {
		return nil, err
	}
	defer r.close()
	objects, err := worktree.ObjectsDir(r.gitDir)
	if err != nil {
		return nil, err
	}
	rs, err := r.resolve(rev)
	if err != nil {
		return nil, err
	}
	commit, err := object.GetCommit(r.repo.Storer, rs.hash)
	if err != nil {
		return nil, fmt.Errorf("commit %s: %w", rs.hash, err)
	}
	sn := &snapshotter{
		ctx: ctx, s: s, w: w, opts: opts, r: r, objects: objects,
		mtime: commit.Committer.When.UnixNano(),
		uid:   uint32(os.Getuid()), gid: uint32(os.Getgid()),
		root:  &tnode{mem: true},
		files: map[plumbing.Hash][]*tnode{},
	}
	sn.res = worktree.SnapshotResult{Rev: rs.hash.String(), Repo: r.top, GitDir: r.gitDir, Branch: rs.branch}

	if err := sn.readTree(commit.TreeHash, sn.root, "", 0); err != nil {
		return nil, err
	}
	if err := sn.readBlobs(); err != nil {
		return nil, err
	}
	if err := sn.readLinks(); err != nil {
		return nil, err
	}
	if r.top != "" && !sel.none() {
		scope := ignoreScope{patterns: basePatterns(r)}
		if err := sn.findIgnored(sel, sn.root, "", scope); err != nil {
			return nil, err
		}
		for _, g := range sel.unmatched() {
			sn.warn("", fmt.Sprintf("--with-ignored %s: matches no directory that git ignores in the working copy %s; nothing added for it", g, r.top))
		}
	}
	dotgit, err := sn.dotGit(rs)
	if err != nil {
		return nil, err
	}
	sn.root.insert(dotgit)

	dirs := countMemDirs(sn.root)
	sn.progress(snapshot.Progress{Phase: snapshot.PhaseWrite, EntriesTotal: dirs})
	var written int64
	tree, err := sn.build(sn.root, &written, dirs)
	if err != nil {
		return nil, err
	}
	sn.progress(snapshot.Progress{Phase: snapshot.PhaseWrite, Entries: dirs, EntriesTotal: dirs})
	sn.res.Tree = tree
	sn.res.Stats = sn.stats
	sn.res.Ignored = sn.ignored
	return &sn.res, nil
}

// readTree reads the git tree h into the in-memory directory dir.
func (sn *snapshotter) readTree(h plumbing.Hash, dir *tnode, rel string, depth int) error {
	if err := sn.ctx.Err(); err != nil {
		return err
	}
	if depth > maxTreeDepth {
		return fmt.Errorf("%s: git trees nested deeper than %d", rel, maxTreeDepth)
	}
	t, err := object.GetTree(sn.r.repo.Storer, h)
	if err != nil {
		return fmt.Errorf("tree %s (%q): %w", h, rel, err)
	}
	for _, te := range t.Entries {
		p := joinRel(rel, te.Name)
		if err := store.ValidateName(te.Name); err != nil {
			sn.warn(p, "name not allowed in a tree; not recorded")
			continue
		}
		if strings.EqualFold(te.Name, ".git") {
			sn.warn(p, "git never checks out a path named .git; not recorded")
			continue
		}
		n := &tnode{name: te.Name, blob: te.Hash, gmode: te.Mode}
		n.e = store.TreeEntry{UID: sn.uid, GID: sn.gid, MtimeNs: sn.mtime}
		switch te.Mode {
		case filemode.Dir:
			n.e.Type, n.e.Mode, n.mem = store.TypeDir, 0o755, true
			if err := sn.readTree(te.Hash, n, p, depth+1); err != nil {
				return err
			}
		case filemode.Regular, filemode.Deprecated:
			n.e.Type, n.e.Mode, n.gmode = store.TypeFile, 0o644, filemode.Regular
			sn.files[te.Hash] = append(sn.files[te.Hash], n)
		case filemode.Executable:
			n.e.Type, n.e.Mode = store.TypeFile, 0o755
			sn.files[te.Hash] = append(sn.files[te.Hash], n)
		case filemode.Symlink:
			n.e.Type, n.e.Mode = store.TypeSymlink, 0o777
			sn.links = append(sn.links, n)
		case filemode.Submodule:
			n.e.Type, n.e.Mode, n.mem = store.TypeDir, 0o755, true
			sn.warn(p, "submodule "+te.Hash.String()+": recorded as an empty directory")
		default:
			sn.warn(p, fmt.Sprintf("unknown git mode %o; not recorded", uint32(te.Mode)))
			continue
		}
		dir.kids = append(dir.kids, n)
		if te.Mode != filemode.Dir {
			sn.tracked = append(sn.tracked, indexItem{path: p, n: n})
		}
	}
	// git sorts a directory's name as if it ended in '/'; trees sort
	// bytewise.
	sort.Slice(dir.kids, func(i, j int) bool { return dir.kids[i].name < dir.kids[j].name })
	return nil
}

func joinRel(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// readBlobs gives every tracked file its content id and size: from the
// blob cache when the cached content is still in the store, else by
// reading the blob from git and writing it through the Writer.
func (sn *snapshotter) readBlobs() error {
	root := blobCacheRoot(sn.objects)
	cache, err := sn.s.LoadStatCache(sn.ctx, root)
	if err != nil {
		return err
	}
	hashes := make([]plumbing.Hash, 0, len(sn.files))
	for h := range sn.files {
		hashes = append(hashes, h)
	}
	sort.Slice(hashes, func(i, j int) bool { return bytes.Compare(hashes[i][:], hashes[j][:]) < 0 })

	var cands []plumbing.Hash
	var ids []store.ID
	var misses []plumbing.Hash
	for _, h := range hashes {
		if ce, ok := cache[h.String()]; ok {
			cands = append(cands, h)
			ids = append(ids, ce.Content)
		} else {
			misses = append(misses, h)
		}
	}
	var total int64
	dropped := 0
	if len(ids) > 0 {
		ok, err := sn.w.RetainAll(ids)
		if err != nil {
			return err
		}
		for i, h := range cands {
			if !ok[i] { // the content was collected: read the blob again
				misses = append(misses, h)
				delete(cache, h.String())
				dropped++
				continue
			}
			ce := cache[h.String()]
			sn.setContent(h, ce.Content, ce.Size)
			sn.res.BlobsCached++
			total += ce.Size
		}
	}
	sn.progress(snapshot.Progress{Phase: snapshot.PhaseRead, Entries: sn.res.BlobsCached, EntriesTotal: int64(len(hashes)), Bytes: total})

	fresh := map[string]store.StatEntry{}
	if len(misses) > 0 {
		var err error
		if fresh, err = sn.readMisses(misses, total, int64(len(hashes))); err != nil {
			return err
		}
	}
	sn.res.BlobsRead = int64(len(misses))
	if len(fresh) == 0 && dropped == 0 {
		return nil // nothing new to remember
	}
	// Keep what other revisions of the repository read too, so that
	// switching between revisions reads each blob once; but not without
	// bound: past four times this revision's blobs (at least 50,000),
	// keep this revision's only.
	all := fresh
	if len(cache)+len(fresh) <= max(4*len(hashes), 50000) {
		for k, v := range cache {
			all[k] = v
		}
	} else {
		for _, h := range cands {
			if ce, ok := cache[h.String()]; ok {
				all[h.String()] = ce
			}
		}
	}
	return sn.s.SaveStatCache(sn.ctx, root, all, 1)
}

func (sn *snapshotter) setContent(h plumbing.Hash, id store.ID, size int64) {
	for _, n := range sn.files[h] {
		n.e.Content, n.e.Size = id, size
	}
}

// blobWorkers returns how many goroutines read n blobs from git: each opens
// its own go-git storage (go-git's object storage is not safe for
// concurrent use), which costs more than reading a few blobs.
func blobWorkers(n int) int {
	if blobWorkersOverride > 0 {
		return blobWorkersOverride
	}
	return max(1, min(runtime.GOMAXPROCS(0), n/64))
}

// blobWorkersOverride fixes the number of blob readers when positive; for
// measurements.
var blobWorkersOverride = 0

// readMisses reads blobs from git on several goroutines and stores them.
func (sn *snapshotter) readMisses(misses []plumbing.Hash, doneBytes, total int64) (map[string]store.StatEntry, error) {
	ctx, cancel := context.WithCancel(sn.ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		out      = make(map[string]store.StatEntry, len(misses))
		errOnce  sync.Once
		firstErr error
		done     atomic.Int64
		nbytes   atomic.Int64
		progMu   sync.Mutex
	)
	nbytes.Store(doneBytes)
	done.Store(total - int64(len(misses)))
	fail := func(err error) { errOnce.Do(func() { firstErr = err; cancel() }) }
	jobs := make(chan plumbing.Hash)
	var wg sync.WaitGroup
	workers := blobWorkers(len(misses))
	for i := 0; i < workers; i++ {
		var objs storer.EncodedObjectStorer = sn.r.storage
		if i > 0 {
			st := sn.r.newStorage()
			defer st.Close()
			objs = st
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, store.SmallFileMax)
			for h := range jobs {
				if ctx.Err() != nil {
					continue
				}
				id, size, err := sn.storeBlob(objs, h, buf)
				if err != nil {
					fail(err)
					continue
				}
				mu.Lock()
				out[h.String()] = store.StatEntry{Size: size, Content: id}
				sn.setContent(h, id, size)
				mu.Unlock()
				d, b := done.Add(1), nbytes.Add(size)
				if sn.opts.Progress != nil && (d%256 == 0) {
					progMu.Lock()
					sn.progress(snapshot.Progress{Phase: snapshot.PhaseRead, Entries: d, EntriesTotal: total, Bytes: b})
					progMu.Unlock()
				}
			}
		}()
	}
	for _, h := range misses {
		if ctx.Err() != nil {
			break
		}
		jobs <- h
	}
	close(jobs)
	wg.Wait()
	if firstErr == nil {
		firstErr = sn.ctx.Err()
	}
	if firstErr != nil {
		return nil, firstErr
	}
	sn.progress(snapshot.Progress{Phase: snapshot.PhaseRead, Entries: total, EntriesTotal: total, Bytes: nbytes.Load()})
	return out, nil
}

// storeBlob reads the blob h from repo and writes it through the Writer.
func (sn *snapshotter) storeBlob(objs storer.EncodedObjectStorer, h plumbing.Hash, buf []byte) (store.ID, int64, error) {
	obj, err := objs.EncodedObject(plumbing.BlobObject, h)
	if err != nil {
		return store.ZeroID, 0, fmt.Errorf("blob %s (%s): %w", h, sn.pathOf(h), err)
	}
	rd, err := obj.Reader()
	if err != nil {
		return store.ZeroID, 0, fmt.Errorf("blob %s (%s): %w", h, sn.pathOf(h), err)
	}
	defer rd.Close()
	size := obj.Size()
	var id store.ID
	var n int64
	if size <= int64(len(buf)) {
		var m int
		m, err = io.ReadFull(rd, buf[:size])
		n = int64(m)
		if err == nil {
			id, err = sn.w.WriteBytes(buf[:m])
		}
	} else {
		id, n, err = sn.w.WriteContent(rd)
	}
	if err == nil && n != size {
		err = fmt.Errorf("read %d bytes, the object says %d", n, size)
	}
	if err != nil {
		return store.ZeroID, 0, fmt.Errorf("blob %s (%s): %w", h, sn.pathOf(h), err)
	}
	return id, size, nil
}

// pathOf names one path of blob h, for error messages.
func (sn *snapshotter) pathOf(h plumbing.Hash) string {
	for _, it := range sn.tracked {
		if it.n.blob == h {
			return it.path
		}
	}
	return "?"
}

// readLinks reads the targets of tracked symlinks.
func (sn *snapshotter) readLinks() error {
	for _, n := range sn.links {
		b, err := readBlob(sn.r.repo, n.blob, 1<<20)
		if err != nil {
			return fmt.Errorf("symlink %s: %w", n.name, err)
		}
		n.e.Target, n.e.Size = string(b), int64(len(b))
	}
	return nil
}

// readBlob reads a small blob whole; larger than limit is an error.
func readBlob(repo *gogit.Repository, h plumbing.Hash, limit int64) ([]byte, error) {
	obj, err := repo.Storer.EncodedObject(plumbing.BlobObject, h)
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", h, err)
	}
	if obj.Size() > limit {
		return nil, fmt.Errorf("blob %s: %d bytes, more than %d", h, obj.Size(), limit)
	}
	rd, err := obj.Reader()
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", h, err)
	}
	defer rd.Close()
	b, err := io.ReadAll(rd)
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", h, err)
	}
	return b, nil
}

// findIgnored looks in the working copy, under the tracked directory dir
// (at rel), for directories git ignores that sel selects, and grafts each
// into the tree. It descends only into directories REV tracks: what git
// ignores is not descended into (git does not either), nor are untracked
// directories.
func (sn *snapshotter) findIgnored(sel *selector, dir *tnode, rel string, sc ignoreScope) error {
	if err := sn.ctx.Err(); err != nil {
		return err
	}
	elems := splitElems(rel)
	abs := filepath.Join(sn.r.top, filepath.FromSlash(rel))
	// The working copy's .gitignore, tracked or not, is what git itself
	// obeys (`git check-ignore`); REV's is the fallback when the working
	// copy has none (a file deleted there, or a directory not checked out).
	if b, err := readRegular(filepath.Join(abs, ".gitignore"), 16<<20); err == nil {
		sc = sc.with(parseIgnore(b, elems), false)
	} else if gi, _ := dir.kid(".gitignore"); gi != nil && gi.e.Type == store.TypeFile {
		b, err := readBlob(sn.r.repo, gi.blob, 16<<20)
		if err != nil {
			return fmt.Errorf("%s: %w", joinRel(rel, ".gitignore"), err)
		}
		sc = sc.with(parseIgnore(b, elems), false)
	}
	ents, err := os.ReadDir(abs)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			sn.warn(rel, "cannot list the working copy ("+err.Error()+"); its ignored directories are not included")
		}
		return nil
	}
	for _, de := range ents {
		if !de.IsDir() { // symlinks to directories too: not followed
			continue
		}
		name := de.Name()
		if strings.EqualFold(name, ".git") {
			continue
		}
		p := joinRel(rel, name)
		kid, _ := dir.kid(name)
		if kid != nil && (kid.e.Type != store.TypeDir || kid.gmode == filemode.Submodule) {
			continue // tracked wins
		}
		pe := append(elems[:len(elems):len(elems)], name)
		ign := sc.ignores(pe, true)
		switch {
		case ign && sel.selects(p, filepath.Join(abs, name)):
			if err := sn.graft(dir, kid, name, p); err != nil {
				return err
			}
		case kid != nil:
			if err := sn.findIgnored(sel, kid, p, sc.with(nil, ign)); err != nil {
				return err
			}
		}
	}
	return nil
}

// readRegular reads a regular file (not through a symlink) of at most
// limit bytes.
func readRegular(p string, limit int64) ([]byte, error) {
	fi, err := os.Lstat(p)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Size() > limit {
		return nil, fmt.Errorf("%s: not a regular file of at most %d bytes", p, limit)
	}
	return os.ReadFile(p)
}

func splitElems(rel string) []string {
	if rel == "" {
		return nil
	}
	return strings.Split(rel, "/")
}

// graft imports the working copy's directory at p into dir under name.
// kid is the tracked directory already there, if any: tracked entries win
// over imported ones at the same path.
func (sn *snapshotter) graft(dir, kid *tnode, name, p string) error {
	abs := filepath.Join(sn.r.top, filepath.FromSlash(p))
	var st unix.Stat_t
	if err := unix.Lstat(abs, &st); err != nil {
		return fmt.Errorf("ignored directory %s: %w", p, &os.PathError{Op: "lstat", Path: abs, Err: err})
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil // replaced since it was listed
	}
	res, err := snapshot.Import(sn.ctx, sn.s, sn.w, abs, snapshot.ImportOptions{
		SkipUnreadable: true,
		Warn:           func(q, msg string) { sn.warn(joinRel(p, q), msg) },
		Progress:       sn.opts.Progress,
	})
	if err != nil {
		return fmt.Errorf("ignored directory %s: %w", p, err)
	}
	tree := res.Tree
	// Import keys hardlink groups by the path of their first member
	// relative to its root; here the root is p. Files count each member,
	// FilesRead and CacheHits each group once: equal means no group.
	if res.FilesRead+res.CacheHits != res.Stats.Files {
		if tree, err = sn.prefixLinkGroups(tree, p); err != nil {
			return fmt.Errorf("ignored directory %s: %w", p, err)
		}
	}
	sn.ignored = append(sn.ignored, p)
	if kid != nil {
		// merge reads the trees from the store: write what is buffered.
		if err := sn.w.Flush(); err != nil {
			return fmt.Errorf("ignored directory %s: %w", p, err)
		}
		return sn.merge(kid, tree, p)
	}
	stats := res.Stats
	dir.insert(&tnode{name: name, graft: &stats, e: store.TreeEntry{
		Type: store.TypeDir, Mode: st.Mode & 0o7777, UID: st.Uid, GID: st.Gid,
		MtimeNs: st.Mtim.Sec*1e9 + st.Mtim.Nsec, Content: tree,
	}})
	return nil
}

// prefixLinkGroups rewrites the trees under root whose entries carry a
// LinkGroup, prefixing the keys with prefix + "/" (keys are relative to
// the commit's root).
func (sn *snapshotter) prefixLinkGroups(root store.ID, prefix string) (store.ID, error) {
	trees := map[store.ID]*store.Tree{}
	err := sn.s.View(sn.ctx, func(tx *store.Tx) error {
		var load func(id store.ID, depth int) error
		load = func(id store.ID, depth int) error {
			if _, ok := trees[id]; ok || id.IsZero() {
				return nil
			}
			if depth > maxTreeDepth {
				return fmt.Errorf("trees nested deeper than %d", maxTreeDepth)
			}
			t, err := tx.Tree(id)
			if err != nil {
				return err
			}
			trees[id] = t
			for i := range t.Entries {
				if t.Entries[i].Type == store.TypeDir {
					if err := load(t.Entries[i].Content, depth+1); err != nil {
						return err
					}
				}
			}
			return nil
		}
		return load(root, 0)
	})
	if err != nil {
		return store.ZeroID, err
	}
	done := map[store.ID]store.ID{}
	var rewrite func(id store.ID) (store.ID, error)
	rewrite = func(id store.ID) (store.ID, error) {
		if nid, ok := done[id]; ok {
			return nid, nil
		}
		t := trees[id]
		if t == nil {
			return id, nil // the empty tree
		}
		changed := false
		nt := store.Tree{Entries: append([]store.TreeEntry(nil), t.Entries...)}
		for i := range nt.Entries {
			e := &nt.Entries[i]
			if e.LinkGroup != "" {
				e.LinkGroup = prefix + "/" + e.LinkGroup
				changed = true
			}
			if e.Type == store.TypeDir {
				c, err := rewrite(e.Content)
				if err != nil {
					return store.ZeroID, err
				}
				if c != e.Content {
					e.Content, changed = c, true
				}
			}
		}
		nid := id
		if changed {
			var err error
			if nid, err = sn.w.PutTree(&nt); err != nil {
				return store.ZeroID, err
			}
		}
		done[id] = nid
		return nid, nil
	}
	return rewrite(root)
}

// merge adds the entries of the imported tree to the tracked directory d
// (at p) where d has none: tracked entries win.
func (sn *snapshotter) merge(d *tnode, tree store.ID, p string) error {
	var t *store.Tree
	err := sn.s.View(sn.ctx, func(tx *store.Tx) error {
		var err error
		t, err = tx.Tree(tree)
		return err
	})
	if err != nil {
		return fmt.Errorf("ignored directory %s: %w", p, err)
	}
	for _, ie := range t.Entries {
		q := joinRel(p, ie.Name)
		k, _ := d.kid(ie.Name)
		switch {
		case k == nil:
			n := &tnode{name: ie.Name, e: ie}
			if ie.Type == store.TypeDir {
				st, err := sn.countTree(ie.Content)
				if err != nil {
					return fmt.Errorf("ignored directory %s: %w", q, err)
				}
				n.graft = &st
			}
			d.insert(n)
		case k.mem && k.gmode == filemode.Dir && ie.Type == store.TypeDir:
			if err := sn.merge(k, ie.Content, q); err != nil {
				return err
			}
		default:
			if ie.LinkGroup != "" {
				sn.warn(q, "tracked, and a hardlink in the ignored directory: the tracked file wins, the link group keeps a stale key")
			}
		}
	}
	return nil
}

// countTree counts the entries of an imported subtree.
func (sn *snapshotter) countTree(id store.ID) (store.CommitStats, error) {
	var st store.CommitStats
	err := snapshot.Walk(sn.ctx, sn.s, id, func(_ string, e *store.TreeEntry) error {
		switch e.Type {
		case store.TypeFile:
			st.Files++
			st.Bytes += e.Size
		case store.TypeDir:
			st.Dirs++
		default:
			st.Other++
		}
		return nil
	})
	return st, err
}

func countMemDirs(d *tnode) int64 {
	n := int64(1)
	for _, k := range d.kids {
		if k.mem {
			n += countMemDirs(k)
		}
	}
	return n
}

// build writes the in-memory directory d and everything under it,
// bottom-up, and counts the statistics.
func (sn *snapshotter) build(d *tnode, written *int64, total int64) (store.ID, error) {
	if err := sn.ctx.Err(); err != nil {
		return store.ZeroID, err
	}
	t := store.Tree{Entries: make([]store.TreeEntry, 0, len(d.kids))}
	for _, k := range d.kids {
		e := k.e
		e.Name = k.name
		switch {
		case k.mem:
			id, err := sn.build(k, written, total)
			if err != nil {
				return store.ZeroID, err
			}
			e.Content = id
			sn.stats.Dirs++
		case k.graft != nil:
			sn.stats.Dirs++
			sn.stats.Files += k.graft.Files
			sn.stats.Dirs += k.graft.Dirs
			sn.stats.Other += k.graft.Other
			sn.stats.Bytes += k.graft.Bytes
		case e.Type == store.TypeFile:
			sn.stats.Files++
			sn.stats.Bytes += e.Size
		case e.Type == store.TypeDir:
			sn.stats.Dirs++
		default:
			sn.stats.Other++
		}
		t.Entries = append(t.Entries, e)
	}
	id, err := sn.w.PutTree(&t)
	if err != nil {
		return store.ZeroID, err
	}
	*written++
	if *written%256 == 0 {
		sn.progress(snapshot.Progress{Phase: snapshot.PhaseWrite, Entries: *written, EntriesTotal: total})
	}
	return id, nil
}
