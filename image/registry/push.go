package registry

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/image"
	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
)

// PushWith is image.Push (which says what it does) with the credentials
// of kc for a registry destination; nil: Keychain().
func PushWith(ctx context.Context, s *store.Store, commit store.ID, dest string, opts image.PushOptions, kc authn.Keychain) (*image.PushResult, error) {
	start := time.Now()
	dst, err := ParseSource(dest)
	if err != nil {
		return nil, err
	}
	if dst.Transport == TransportDockerArchive {
		return nil, fmt.Errorf("push %s: docker-archive: is not a push destination (docker://, oci:)", dst)
	}
	// Decided before any blob is written: the chain, its image config
	// and the destination's reference.
	var chain []*store.Commit
	var ids []store.ID
	var base *image.Config
	if err := s.View(ctx, func(tx *store.Tx) error {
		for id := commit; !id.IsZero(); {
			c, err := tx.Commit(id)
			if err != nil {
				return fmt.Errorf("commit %s: %w", id.Short(), err)
			}
			if base == nil {
				if cfg, _ := image.ConfigFromMessage(c.Message); cfg != nil {
					base = cfg
				}
			}
			chain = append(chain, c)
			ids = append(ids, id)
			if len(c.Parents) == 0 {
				break
			}
			id = c.Parents[0]
		}
		return nil
	}); err != nil {
		return nil, err
	}
	slicesReverse(chain)
	slicesReverse(ids)
	var ref name.Reference
	if dst.Transport == TransportDocker {
		var nopts []name.Option
		if !opts.TLSVerify {
			nopts = append(nopts, name.Insecure)
		}
		if ref, err = name.ParseReference(dst.Ref, nopts...); err != nil {
			return nil, fmt.Errorf("push %s: %w", dst, err)
		}
	}
	pd, err := image.NewPushDir(opts.TempDir)
	if err != nil {
		return nil, fmt.Errorf("push %s: %w", dst, err)
	}
	defer pd.Release()
	tmp := pd.Path

	res := &image.PushResult{Dest: dst.String(), Commit: commit, Tree: chain[len(chain)-1].Tree}
	count := 0
	for i, c := range chain {
		if i == 0 || c.Tree != chain[i-1].Tree {
			count++
		}
	}
	var progressMu sync.Mutex
	report := func(p image.BlobProgress) {
		if opts.Progress != nil {
			p.Count = count
			progressMu.Lock()
			defer progressMu.Unlock()
			opts.Progress(p)
		}
	}
	var layers []*blobLayer
	var history []v1.History
	var prevTree store.ID
	for i, c := range chain {
		if c.Tree == prevTree {
			continue
		}
		li := len(layers)
		building := func(digest string, done, size int64) {
			report(image.BlobProgress{Index: li, Digest: digest, State: image.BlobBuilding, Done: done, Size: size})
		}
		l, err := layerBlob(ctx, s, prevTree, c.Tree, tmp, fmt.Sprintf("layer%d", i), opts.CacheDir, building)
		if err != nil {
			return nil, fmt.Errorf("push %s: layer of commit %s: %w", dst, ids[i].Short(), err)
		}
		layers = append(layers, l)
		history = append(history, v1.History{
			Created:   v1.Time{Time: time.Unix(0, c.TimeNs).UTC()},
			CreatedBy: "strata commit " + ids[i].String(),
			Comment:   firstLine(c.Message),
		})
		res.Layers = append(res.Layers, image.PushedLayer{Commit: ids[i], DiffID: l.diffID.String(), Digest: l.digest.String(), Size: l.size, Tar: l.tarSize})
		prevTree = c.Tree
	}
	if len(layers) == 0 {
		return nil, fmt.Errorf("push %s: commit %s has an empty tree: an image needs a layer", dst, commit.Short())
	}

	// A layer that another repository of the destination's registry
	// holds is offered to remote.Write as mountable from there.
	mountFrom := make([]string, len(layers))
	if ref != nil && opts.CacheDir != "" {
		for i, l := range layers {
			mountFrom[i] = mountSource(opts.CacheDir, ref.Context(), l.digest)
		}
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	adds := make([]mutate.Addendum, len(layers))
	for i, l := range layers {
		var layer v1.Layer = l
		if mountFrom[i] != "" {
			var nopts []name.Option
			if !opts.TLSVerify {
				nopts = append(nopts, name.Insecure)
			}
			if from, err := name.ParseReference(mountFrom[i]+"@"+l.digest.String(), nopts...); err == nil {
				layer = &remote.MountableLayer{Layer: l, Reference: from}
			}
		}
		adds[i] = mutate.Addendum{Layer: layer, History: history[i], MediaType: types.OCILayer}
	}
	if img, err = mutate.Append(img, adds...); err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	top := chain[len(chain)-1]
	cf.Created = v1.Time{Time: time.Unix(0, top.TimeNs).UTC()}
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config.Labels = map[string]string{}
	ann := map[string]string{}
	if base != nil {
		if base.OS != "" {
			cf.OS, cf.Architecture, cf.Variant = base.OS, base.Architecture, base.Variant
		}
		cf.Config.Env, cf.Config.WorkingDir, cf.Config.User = base.Env, base.WorkingDir, base.User
		cf.Config.Entrypoint, cf.Config.Cmd = base.Entrypoint, base.Cmd
		for k, v := range base.Labels {
			cf.Config.Labels[k] = v
		}
		if base.Digest != "" {
			ann[image.AnnotationBaseDigest] = base.Digest
		}
		if base.Source != "" {
			ann[image.AnnotationBaseName] = base.Source
		}
	}
	cf.Config.Labels[image.LabelCommit] = commit.String()
	if base != nil && base.IsRoot() {
		cf.Config.Labels[image.LabelRoot] = "image"
	} else {
		delete(cf.Config.Labels, image.LabelRoot)
	}
	cf.Config.Labels[image.LabelTree] = res.Tree.String()
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, err
	}
	if len(ann) > 0 {
		img = mutate.Annotations(img, ann).(v1.Image)
	}
	dg, err := img.Digest()
	if err != nil {
		return nil, err
	}
	res.Digest = dg.String()

	switch dst.Transport {
	case TransportDocker:
		if kc == nil {
			kc = Keychain()
		}
		byDigest := map[string]int{}
		for i, l := range layers {
			byDigest[l.digest.String()] = i
		}
		var mu sync.Mutex
		sent := make([]int64, len(layers))
		states := &blobStates{}
		settle := func(st image.BlobState) func(string) {
			return func(d string) {
				if i, ok := byDigest[d]; ok {
					states.set(d, st)
					report(image.BlobProgress{Index: i, Digest: d, State: st, Done: layers[i].size, Size: layers[i].size})
				}
			}
		}
		for i, l := range layers {
			l.read = func(n int64) {
				mu.Lock()
				res.Uploaded += n
				sent[i] += n
				done := min(sent[i], l.size)
				mu.Unlock()
				report(image.BlobProgress{Index: i, Digest: l.digest.String(), State: image.BlobUploading, Done: done, Size: l.size})
			}
		}
		watch := &blobWatch{rt: transport(opts.TLSVerify), exists: settle(image.BlobExists), mounted: settle(image.BlobMounted), stored: settle(image.BlobUploaded)}
		// remote.Write asks the registry for each blob first, and asks it
		// to mount a MountableLayer from its repository; a layer's
		// Compressed is opened only to upload it.
		err = remote.Write(ref, img, remote.WithContext(ctx), remote.WithAuthFromKeychain(kc),
			remote.WithTransport(watch))
		if err != nil {
			return nil, fmt.Errorf("push %s: %w", dst, err)
		}
		for i, l := range layers {
			st := states.get(l.digest.String())
			if st == "" {
				// The registry took it without a closing PUT we saw
				// (a monolithic upload): it was sent if it was read.
				st = image.BlobExists
				if sent[i] > 0 {
					st = image.BlobUploaded
				}
			}
			res.Layers[i].State = st
			if st == image.BlobMounted {
				res.Layers[i].MountedFrom = mountFrom[i]
			}
		}
		if opts.CacheDir != "" {
			digests := make([]v1.Hash, len(layers))
			for i, l := range layers {
				digests[i] = l.digest
			}
			addLocations(opts.CacheDir, ref.Context(), digests)
		}
	case TransportOCI:
		p, err := layout.FromPath(dst.Ref)
		if err != nil {
			if p, err = layout.Write(dst.Ref, empty.Index); err != nil {
				return nil, fmt.Errorf("push %s: %w", dst, err)
			}
		}
		var lopts []layout.Option
		if dst.Tag != "" {
			lopts = append(lopts, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": dst.Tag}))
		}
		if err := p.AppendImage(img, lopts...); err != nil {
			return nil, fmt.Errorf("push %s: %w", dst, err)
		}
		for i, l := range layers {
			res.Layers[i].State = image.BlobWritten
			report(image.BlobProgress{Index: i, Digest: l.digest.String(), State: image.BlobWritten, Done: l.size, Size: l.size})
		}
	}
	res.DurationNs = time.Since(start).Nanoseconds()
	return res, nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

func slicesReverse[T any](s []T) {
	for i, j := 0, len(s)-1; i < j; i, j = i+1, j-1 {
		s[i], s[j] = s[j], s[i]
	}
}

// blobLayer is a layer whose gzip blob is a file, digests known.
type blobLayer struct {
	file           string
	digest, diffID v1.Hash
	size, tarSize  int64
	read           func(n int64) // if set, told of the bytes of Compressed read
	// make, if set, writes the file (the digests came from the cache);
	// called once, by the first Compressed or Uncompressed.
	make func() error
	once sync.Once
	err  error
}

func (l *blobLayer) ensure() error {
	if l.make != nil {
		l.once.Do(func() { l.err = l.make() })
	}
	return l.err
}

// cachedLayer is what the push cache keeps of a layer.
type cachedLayer struct {
	Digest, DiffID v1.Hash
	Size, Tar      int64
}

// layerBlob returns the layer from lower to upper: from the cache (the
// file written only if the registry asks for it) or written now.
func layerBlob(ctx context.Context, s *store.Store, lower, upper store.ID, dir, name, cache string, building func(digest string, done, size int64)) (*blobLayer, error) {
	if cache == "" {
		return writeLayerBlob(ctx, s, lower, upper, dir, name, building)
	}
	key := sha256.Sum256([]byte("strata layer v1 " + runtime.Version() + " " + lower.String() + " " + upper.String()))
	cp := path.Join(cache, hex.EncodeToString(key[:]))
	if b, err := os.ReadFile(cp); err == nil {
		var c cachedLayer
		if json.Unmarshal(b, &c) == nil && c.Size > 0 {
			l := &blobLayer{file: path.Join(dir, name), digest: c.Digest, diffID: c.DiffID, size: c.Size, tarSize: c.Tar}
			l.make = func() error {
				w, err := writeLayerBlob(ctx, s, lower, upper, dir, name, func(_ string, done, size int64) { building(c.Digest.String(), done, size) })
				if err != nil {
					return err
				}
				if w.digest != l.digest || w.diffID != l.diffID {
					return fmt.Errorf("layer %s: written again it is %s: the push cache %s is stale, remove it", l.digest, w.digest, cache)
				}
				return nil
			}
			return l, nil
		}
	}
	l, err := writeLayerBlob(ctx, s, lower, upper, dir, name, building)
	if err != nil {
		return nil, err
	}
	b, _ := json.Marshal(cachedLayer{Digest: l.digest, DiffID: l.diffID, Size: l.size, Tar: l.tarSize})
	if err := os.MkdirAll(cache, 0o755); err == nil {
		tmp := cp + ".tmp"
		if os.WriteFile(tmp, b, 0o644) == nil {
			_ = os.Rename(tmp, cp) // a cache: failing to keep it costs only time
		}
	}
	return l, nil
}

func (l *blobLayer) Digest() (v1.Hash, error)            { return l.digest, nil }
func (l *blobLayer) DiffID() (v1.Hash, error)            { return l.diffID, nil }
func (l *blobLayer) Size() (int64, error)                { return l.size, nil }
func (l *blobLayer) MediaType() (types.MediaType, error) { return types.OCILayer, nil }
func (l *blobLayer) Compressed() (io.ReadCloser, error) {
	if err := l.ensure(); err != nil {
		return nil, err
	}
	f, err := os.Open(l.file)
	if err != nil || l.read == nil {
		return f, err
	}
	return struct {
		io.Reader
		io.Closer
	}{readCounter{f, l.read}, f}, nil
}

type readCounter struct {
	r  io.Reader
	fn func(int64)
}

func (c readCounter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.fn(int64(n))
	return n, err
}
func (l *blobLayer) Uncompressed() (io.ReadCloser, error) {
	if err := l.ensure(); err != nil {
		return nil, err
	}
	return gunzipFile(l.file)
}

func gunzipFile(p string) (io.ReadCloser, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	z, err := gzip.NewReader(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{z, f}, nil
}

type hashCounter struct {
	h interface {
		io.Writer
		Sum([]byte) []byte
	}
	n int64
}

func (c *hashCounter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return c.h.Write(p)
}

func (c *hashCounter) hash() v1.Hash {
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(c.h.Sum(nil))}
}

// writeLayerBlob writes the layer from tree lower to tree upper as a gzip
// file in dir, hashing both forms as it goes; building (if set) is told
// the tar bytes written of about how many.
func writeLayerBlob(ctx context.Context, s *store.Store, lower, upper store.ID, dir, name string, building func(digest string, done, size int64)) (*blobLayer, error) {
	f, err := os.Create(path.Join(dir, name))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	comp := &hashCounter{h: sha256.New()}
	raw := &hashCounter{h: sha256.New()}
	z, _ := gzip.NewWriterLevel(io.MultiWriter(f, comp), gzip.BestSpeed)
	var tw io.Writer = io.MultiWriter(z, raw)
	var sized func(int64)
	if building != nil {
		bw := &buildWriter{w: tw, fn: building}
		tw, sized = bw, func(n int64) { bw.size = n; building("", 0, n) }
	}
	if err := layerTar(ctx, s, lower, upper, tw, sized); err != nil {
		return nil, err
	}
	if err := z.Close(); err != nil {
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	return &blobLayer{file: f.Name(), digest: comp.hash(), diffID: raw.hash(), size: comp.n, tarSize: raw.n}, nil
}

// walkLess orders paths as a tree walk visits them (a directory, then
// what is under it, then its next sibling): '/' sorts before every byte.
func walkLess(a, b string) bool {
	return strings.ReplaceAll(a, "/", "\x00") < strings.ReplaceAll(b, "/", "\x00")
}

// LayerTar writes the OCI layer that turns tree lower into tree upper
// (either may be ZeroID, the empty tree) to w: deletions as .wh.NAME
// whiteouts, then every added or modified entry and its directories, in
// tree-walk order, as PAX headers holding exactly what the tree records
// (mode, owner, mtime to the nanosecond, user.* xattrs, symlink target,
// device number; no user or group names, access or change times). A file
// of a link group whose first member the layer holds, or the tree
// beneath holds unchanged, is a hard link to it. The same two trees give
// the same bytes.
func LayerTar(ctx context.Context, s *store.Store, lower, upper store.ID, w io.Writer) error {
	return layerTar(ctx, s, lower, upper, w, nil)
}

// buildWriter reports a layer's tar bytes as they are written, at most
// once per MiB.
type buildWriter struct {
	w       io.Writer
	fn      func(digest string, done, size int64)
	n, last int64
	size    int64
}

func (b *buildWriter) Write(p []byte) (int, error) {
	n, err := b.w.Write(p)
	b.n += int64(n)
	if b.n-b.last >= 1<<20 {
		b.last = b.n
		b.fn("", b.n, max(b.size, b.n))
	}
	return n, err
}

// layerTar is LayerTar; sized, if set, is first told about how many tar
// bytes the layer holds (its files' sizes and a header each).
func layerTar(ctx context.Context, s *store.Store, lower, upper store.ID, w io.Writer, sized func(int64)) error {
	changes, err := snapshot.Diff(ctx, s, lower, upper)
	if err != nil {
		return err
	}
	type item struct {
		p        string
		e        *store.TreeEntry
		whiteout bool
	}
	var items []item
	gone := map[string]bool{} // deleted directories (whose contents need no whiteout)
	wanted := map[string]bool{}
	under := func(p string) bool {
		for q := path.Dir(p); q != "."; q = path.Dir(q) {
			if gone[q] {
				return true
			}
		}
		return false
	}
	for _, c := range changes {
		switch {
		case c.Op == snapshot.Deleted:
			if !under(c.Path) {
				items = append(items, item{p: c.Path, whiteout: true})
			}
			if c.Old.Type == store.TypeDir {
				gone[c.Path] = true
			}
		default:
			if c.Old != nil && c.Old.Type == store.TypeDir && c.New.Type != store.TypeDir {
				gone[c.Path] = true // its contents go with it: the new entry replaces the directory
			}
			items = append(items, item{p: c.Path, e: c.New})
			wanted[c.Path] = true
		}
	}
	// The directories of every entry, as the upper tree records them.
	for _, it := range items {
		if it.whiteout {
			continue
		}
		for q := path.Dir(it.p); q != "."; q = path.Dir(q) {
			if wanted[q] {
				break
			}
			e, err := snapshot.Lookup(ctx, s, upper, q)
			if err != nil {
				return err
			}
			items = append(items, item{p: q, e: e})
			wanted[q] = true
		}
	}
	sort.SliceStable(items, func(i, j int) bool {
		// whiteouts first (within a directory), so a tool that applies
		// members in order never deletes what this layer adds
		if items[i].whiteout != items[j].whiteout {
			return items[i].whiteout
		}
		return walkLess(items[i].p, items[j].p)
	})
	if sized != nil {
		var n int64
		for _, it := range items {
			n += 512
			if it.e != nil && it.e.Type == store.TypeFile {
				n += (it.e.Size + 511) &^ 511
			}
		}
		sized(n)
	}
	tw := tar.NewWriter(w)
	written := map[string]bool{} // link group keys this layer holds
	for _, it := range items {
		if err := ctx.Err(); err != nil {
			return err
		}
		if it.whiteout {
			h := &tar.Header{Typeflag: tar.TypeReg, Name: path.Join(path.Dir(it.p), ".wh."+path.Base(it.p)), Mode: 0o644, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			continue
		}
		e := it.e
		h := &tar.Header{
			Name: it.p, Mode: int64(e.Mode & 0o7777), Uid: int(e.UID), Gid: int(e.GID),
			ModTime: time.Unix(0, e.MtimeNs), Format: tar.FormatPAX,
		}
		if h.ModTime.Nanosecond() == 0 && e.MtimeNs >= 0 && len(e.Xattrs) == 0 {
			h.Format = tar.FormatUnknown // ustar or PAX as needed
		}
		for _, x := range e.Xattrs {
			if h.PAXRecords == nil {
				h.PAXRecords = map[string]string{}
			}
			h.PAXRecords["SCHILY.xattr."+x.Name] = string(x.Value)
			h.Format = tar.FormatPAX
		}
		var content store.ID
		switch e.Type {
		case store.TypeDir:
			h.Typeflag, h.Name = tar.TypeDir, it.p+"/"
		case store.TypeSymlink:
			h.Typeflag, h.Linkname = tar.TypeSymlink, e.Target
		case store.TypeCharDev, store.TypeBlockDev:
			h.Typeflag = tar.TypeChar
			if e.Type == store.TypeBlockDev {
				h.Typeflag = tar.TypeBlock
			}
			h.Devmajor, h.Devminor = int64(unix.Major(e.Rdev)), int64(unix.Minor(e.Rdev))
		case store.TypeFIFO:
			h.Typeflag = tar.TypeFifo
		case store.TypeSocket:
			continue // a tar has no sockets; neither does a container image
		default:
			h.Typeflag, h.Size, content = tar.TypeReg, e.Size, e.Content
			if g := e.LinkGroup; g != "" && g != it.p {
				if written[g] {
					h.Typeflag, h.Size, h.Linkname, content = tar.TypeLink, 0, g, store.ZeroID
				} else if !wanted[g] {
					if lo, err := snapshot.Lookup(ctx, s, lower, g); err == nil && lo != nil && lo.LinkGroup == g {
						h.Typeflag, h.Size, h.Linkname, content = tar.TypeLink, 0, g, store.ZeroID
					}
				}
			}
			if e.LinkGroup != "" && h.Typeflag == tar.TypeReg {
				written[e.LinkGroup] = true
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("%s: %w", it.p, err)
		}
		if h.Typeflag == tar.TypeReg && h.Size > 0 {
			n, err := s.ReadContentTo(ctx, content, tw)
			if err != nil {
				return fmt.Errorf("%s: %w", it.p, err)
			}
			if n != h.Size {
				return fmt.Errorf("%s: content is %d bytes, the entry says %d: %w", it.p, n, h.Size, store.ErrCorrupt)
			}
		}
	}
	return tw.Close()
}

// transport is the registry transport: HTTPS only unless !tlsVerify,
// which allows plain HTTP and skips certificate verification.
func transport(tlsVerify bool) http.RoundTripper {
	t := remote.DefaultTransport.(*http.Transport).Clone()
	if !tlsVerify {
		t.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // --tls-verify=false asks for it
		return t
	}
	return httpsOnly{t}
}
