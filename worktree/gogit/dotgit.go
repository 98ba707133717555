package gogit

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	format "github.com/go-git/go-git/v5/plumbing/format/config"
	"github.com/go-git/go-git/v5/plumbing/format/index"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/stratafs/strata/store"
	"github.com/stratafs/strata/worktree"
)

// indexLag is how much later than the files the synthetic index's own
// mtime is. git treats an entry whose file is not older than the index
// file as "racily clean" and re-reads the file to compare it; with every
// file at the commit time and the index one second later, `git status`
// trusts every entry (core.checkStat=minimal compares whole seconds).
const indexLag = time.Second

// dotGit builds the synthetic .git directory of a snapshot (see
// docs/worktree.md for the layout).
func (sn *snapshotter) dotGit(rs *resolved) (*tnode, error) {
	b := &dirBuilder{sn: sn}
	root := b.dir(".git")

	head := rs.hash.String() + "\n"
	if rs.branch != "" {
		head = "ref: refs/heads/" + rs.branch + "\n"
		refs := b.path(root, "refs/heads/"+rs.branch)
		if err := b.file(refs.dir, refs.name, []byte(rs.hash.String()+"\n"), sn.mtime); err != nil {
			return nil, err
		}
	}
	b.mkdirs(root, "refs/tags")
	if err := b.file(root, "HEAD", []byte(head), sn.mtime); err != nil {
		return nil, err
	}

	cfg, err := sn.config()
	if err != nil {
		return nil, err
	}
	if err := b.file(root, "config", cfg, sn.mtime); err != nil {
		return nil, err
	}

	objects := b.path(root, "objects/info/alternates")
	b.mkdirs(root, "objects/pack")
	if err := b.file(objects.dir, objects.name, sn.alternates(), sn.mtime); err != nil {
		return nil, err
	}

	idx, err := sn.index()
	if err != nil {
		return nil, err
	}
	if err := b.file(root, "index", idx, sn.mtime+int64(indexLag)); err != nil {
		return nil, err
	}

	if pr, err := sn.packedRefs(); err != nil {
		return nil, err
	} else if pr != nil {
		if err := b.file(root, "packed-refs", pr, sn.mtime); err != nil {
			return nil, err
		}
	}
	// What the source's git directory says about ignoring, attributes
	// and a shallow history holds for the snapshot too.
	for _, name := range []string{"info/exclude", "info/attributes", "shallow"} {
		data, err := os.ReadFile(filepath.Join(sn.r.common, filepath.FromSlash(name)))
		if err != nil {
			continue
		}
		at := b.path(root, name)
		if err := b.file(at.dir, at.name, data, sn.mtime); err != nil {
			return nil, err
		}
	}
	return root, nil
}

// dirBuilder makes in-memory directories and files of the synthetic .git.
type dirBuilder struct{ sn *snapshotter }

func (b *dirBuilder) dir(name string) *tnode {
	return &tnode{name: name, mem: true, e: store.TreeEntry{
		Type: store.TypeDir, Mode: 0o755, UID: b.sn.uid, GID: b.sn.gid, MtimeNs: b.sn.mtime,
	}}
}

type location struct {
	dir  *tnode
	name string
}

// path creates the directories of the slash-separated p under root and
// returns where its last element goes.
func (b *dirBuilder) path(root *tnode, p string) location {
	elems := strings.Split(p, "/")
	d := root
	for _, e := range elems[:len(elems)-1] {
		k, _ := d.kid(e)
		if k == nil {
			k = b.dir(e)
			d.insert(k)
		}
		d = k
	}
	return location{d, elems[len(elems)-1]}
}

// mkdirs creates the directories of the slash-separated p under root.
func (b *dirBuilder) mkdirs(root *tnode, p string) {
	b.path(root, p+"/-")
}

func (b *dirBuilder) file(d *tnode, name string, data []byte, mtime int64) error {
	id, err := b.sn.w.WriteBytes(data)
	if err != nil {
		return fmt.Errorf(".git/%s: %w", name, err)
	}
	d.insert(&tnode{name: name, e: store.TreeEntry{
		Type: store.TypeFile, Mode: 0o644, UID: b.sn.uid, GID: b.sn.gid, MtimeNs: mtime,
		Size: int64(len(data)), Content: id,
	}})
	return nil
}

// config is the synthetic .git/config: the source's repository format,
// stat checks git can trust (see indexLag), and the source's user.
func (sn *snapshotter) config() ([]byte, error) {
	raw := format.New()
	core := raw.Section("core")
	ver := string(sn.r.local.Core.RepositoryFormatVersion)
	if ver == "" {
		ver = "0"
	}
	core.SetOption("repositoryformatversion", ver)
	core.SetOption("filemode", "true")
	core.SetOption("bare", "false")
	core.SetOption("logallrefupdates", "true")
	// Only the whole seconds of mtime and the size decide whether a file
	// changed: inode numbers, owners and ctimes differ in a workspace.
	core.SetOption("checkStat", "minimal")
	core.SetOption("trustctime", "false")
	if f := sn.r.local.Extensions.ObjectFormat; f != "" {
		raw.Section("extensions").SetOption("objectformat", string(f))
	}
	if u := sn.r.local.User; u.Name != "" || u.Email != "" {
		user := raw.Section("user")
		if u.Name != "" {
			user.SetOption("name", u.Name)
		}
		if u.Email != "" {
			user.SetOption("email", u.Email)
		}
	}
	var buf bytes.Buffer
	if err := format.NewEncoder(&buf).Encode(raw); err != nil {
		return nil, fmt.Errorf(".git/config: %w", err)
	}
	return buf.Bytes(), nil
}

// alternates is the synthetic objects/info/alternates: the source's
// objects where the keeper mounts them, then the source's own alternates
// (resolved to absolute paths), which git follows from there.
func (sn *snapshotter) alternates() []byte {
	var buf bytes.Buffer
	buf.WriteString(worktree.AlternatesPath(sn.objects) + "\n")
	data, err := os.ReadFile(filepath.Join(sn.objects, "info", "alternates"))
	if err != nil {
		return buf.Bytes()
	}
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !filepath.IsAbs(line) {
			line = filepath.Join(sn.objects, line)
		}
		buf.WriteString(filepath.Clean(line) + "\n")
	}
	return buf.Bytes()
}

// index is the synthetic .git/index (version 2): every tracked path with
// its mode, object id, size and mtime = ctime = the commit time, so that
// `git status` finds the workspace clean without reading a file.
func (sn *snapshotter) index() ([]byte, error) {
	idx := &index.Index{Version: 2}
	t := time.Unix(0, max(sn.mtime, 0))
	for _, it := range sn.tracked {
		e := idx.Add(it.path)
		e.Hash = it.n.blob
		e.Mode = it.n.gmode
		e.CreatedAt, e.ModifiedAt = t, t
		e.UID, e.GID = sn.uid, sn.gid
		if it.n.gmode != filemode.Submodule {
			e.Size = uint32(it.n.e.Size) // git keeps the size modulo 2^32
		}
	}
	var buf bytes.Buffer
	if err := index.NewEncoder(&buf).Encode(idx); err != nil {
		return nil, fmt.Errorf(".git/index: %w", err)
	}
	return buf.Bytes(), nil
}

// packedRefs lists the source's tags (peeled, as `git pack-refs` writes
// them), or nil when it has none.
func (sn *snapshotter) packedRefs() ([]byte, error) {
	iter, err := sn.r.repo.Tags()
	if err != nil {
		return nil, fmt.Errorf("tags: %w", err)
	}
	type tag struct {
		name         string
		hash, peeled plumbing.Hash
	}
	var tags []tag
	err = iter.ForEach(func(ref *plumbing.Reference) error {
		t := tag{name: ref.Name().String(), hash: ref.Hash()}
		h := ref.Hash()
		for range 16 { // peel nested tag objects
			to, err := object.GetTag(sn.r.repo.Storer, h)
			if err != nil {
				break
			}
			h = to.Target
			t.peeled = h
		}
		tags = append(tags, t)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("tags: %w", err)
	}
	if len(tags) == 0 {
		return nil, nil
	}
	sort.Slice(tags, func(i, j int) bool { return tags[i].name < tags[j].name })
	var buf bytes.Buffer
	buf.WriteString("# pack-refs with: peeled fully-peeled sorted \n")
	for _, t := range tags {
		fmt.Fprintf(&buf, "%s %s\n", t.hash, t.name)
		if !t.peeled.IsZero() {
			fmt.Fprintf(&buf, "^%s\n", t.peeled)
		}
	}
	return buf.Bytes(), nil
}
