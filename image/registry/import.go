package registry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/stratafs/strata/image"
	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
)

// ChainIDs returns the OCI chain IDs of diffIDs (image-spec config.md):
// ChainID(L0) = DiffID(L0), ChainID(L0..n) = sha256(ChainID(L0..n-1) + " "
// + DiffID(Ln)). A chain ID names a layer together with all beneath it.
func ChainIDs(diffIDs []v1.Hash) []v1.Hash {
	out := make([]v1.Hash, len(diffIDs))
	for i, d := range diffIDs {
		if i == 0 {
			out[i] = d
			continue
		}
		out[i] = sha256Hash([]byte(out[i-1].String() + " " + d.String()))
	}
	return out
}

// ImportWith is image.Import (which says what it does) with the
// credentials of kc for a registry source; nil: Keychain().
func ImportWith(ctx context.Context, s *store.Store, srcRef string, opts image.Options, kc authn.Keychain) (*image.Result, error) {
	start := time.Now()
	if err := store.ValidateBranchName(opts.Branch); err != nil {
		return nil, err
	}
	if strings.HasPrefix(opts.Branch, image.LayerRefPrefix) {
		return nil, fmt.Errorf("branch %q: %s is reserved for image layers: %w", opts.Branch, image.LayerRefPrefix, store.ErrInvalidName)
	}
	src, err := ParseSource(srcRef)
	if err != nil {
		return nil, err
	}
	plat, err := Platform(opts.Platform)
	if err != nil {
		return nil, err
	}
	if kc == nil {
		kc = Keychain()
	}
	// The registry's blob bodies, counted per digest as they arrive:
	// the compressed side of each layer's progress.
	var fetchedMu sync.Mutex
	fetched := map[string]int64{}
	watch := &blobWatch{read: func(d string, n int64) {
		fetchedMu.Lock()
		fetched[d] += n
		fetchedMu.Unlock()
	}}
	o, err := open(ctx, src, openOptions{platform: plat, explicit: opts.Platform != "", tlsVerify: opts.TLSVerify, keychain: kc, watch: watch})
	if err != nil {
		return nil, err
	}
	if opts.Progress != nil {
		user := opts.Progress
		opts.Progress = func(p image.LayerProgress) {
			if i := p.Index; i < len(o.manifest.Layers) {
				fetchedMu.Lock()
				p.Fetched = fetched[o.manifest.Layers[i].Digest.String()]
				fetchedMu.Unlock()
			}
			user(p)
		}
	}
	// Decided before anything is fetched: an image commit does not
	// continue a branch's history, so only a branch that already holds
	// an image (an environment being updated) may move to one.
	var parent store.ID
	if err := s.View(ctx, func(tx *store.Tx) error {
		id, err := tx.Ref(opts.Branch)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		c, err := tx.Commit(id)
		if err != nil {
			return err
		}
		if cfg, _ := image.ConfigFromMessage(c.Message); cfg == nil {
			return fmt.Errorf("branch %q holds %s, which is not an image; importing an image there would drop its history: choose another branch with -b: %w",
				opts.Branch, id.Short(), store.ErrExists)
		}
		parent = id
		return nil
	}); err != nil {
		return nil, err
	}

	cf := o.config
	cfg := image.Config{
		Source: src.String(), Digest: o.digest.String(), ConfigDigest: o.manifest.Config.Digest.String(),
		OS: cf.OS, Architecture: cf.Architecture, Variant: cf.Variant,
		Env: cf.Config.Env, WorkingDir: cf.Config.WorkingDir, User: cf.Config.User,
		Entrypoint: cf.Config.Entrypoint, Cmd: cf.Config.Cmd, Labels: cf.Config.Labels,
	}
	for _, d := range cf.RootFS.DiffIDs {
		cfg.DiffIDs = append(cfg.DiffIDs, d.String())
	}
	layers, err := o.img.Layers()
	if err != nil {
		return nil, fmt.Errorf("image %s: layers: %w", src, err)
	}
	res := &image.Result{Parent: parent, Branch: opts.Branch, Config: cfg}
	chains := ChainIDs(cf.RootFS.DiffIDs)
	var below store.ID // the commit of the layers beneath
	var belowCommit *store.Commit
	for i, l := range layers {
		lr, c, err := importLayer(ctx, s, l, i, len(layers), cf.RootFS.DiffIDs[i], chains[i], o.manifest.Layers[i].Size, below, belowCommit, opts)
		if err != nil {
			return nil, fmt.Errorf("image %s: layer %d/%d (%s): %w", src, i+1, len(layers), cf.RootFS.DiffIDs[i], err)
		}
		res.Layers = append(res.Layers, *lr)
		res.NewObjects += lr.NewObjects
		res.NewBytes += lr.NewBytes
		below, belowCommit = lr.Commit, c
	}
	if belowCommit == nil {
		return nil, fmt.Errorf("image %s has no layers", src)
	}
	if opts.CacheDir != "" && o.repo != nil {
		digests := make([]v1.Hash, len(o.manifest.Layers))
		for i, l := range o.manifest.Layers {
			digests[i] = l.Digest
		}
		addLocations(opts.CacheDir, *o.repo, digests)
	}
	res.Tree, res.Stats = belowCommit.Tree, belowCommit.Stats

	js, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	top := &store.Commit{
		Tree:    belowCommit.Tree,
		Parents: []store.ID{below},
		Message: fmt.Sprintf("image %s\n\n%s%s", src, image.ConfigTrailer, js),
		TimeNs:  time.Now().UnixNano(),
		Source:  "image:" + src.String(),
		Stats:   belowCommit.Stats,
	}
	err = s.Update(ctx, func(tx *store.Tx) error {
		if !parent.IsZero() {
			if pc, err := tx.Commit(parent); err == nil && pc.Tree == top.Tree && len(pc.Parents) == 1 && pc.Parents[0] == below && pc.Message == top.Message {
				cur, err := tx.Ref(opts.Branch)
				if err != nil && !errors.Is(err, store.ErrNotFound) {
					return err
				}
				if cur != parent {
					return fmt.Errorf("branch %q moved during import: %w", opts.Branch, store.ErrConflict)
				}
				res.Unchanged, res.Commit = true, parent
				return nil
			}
		}
		id, err := tx.PutCommit(top)
		if err != nil {
			return err
		}
		if err := tx.SetRef(opts.Branch, parent, id); err != nil {
			return fmt.Errorf("branch %q moved during import: %w", opts.Branch, err)
		}
		res.Commit = id
		return tx.AppendOp(store.Op{Kind: "import", Ref: opts.Branch, Old: parent, New: id, Detail: "image " + src.String()})
	})
	if err != nil {
		return nil, err
	}
	res.DurationNs = time.Since(start).Nanoseconds()
	return res, nil
}

// layerRef is the ref that indexes the layer commit of chain.
func layerRef(chain v1.Hash) string { return image.LayerRefPrefix + chain.Hex }

// importLayer returns the commit of layer l (index i) on below, reading
// it only if no earlier import made it.
func importLayer(ctx context.Context, s *store.Store, l v1.Layer, i, n int, diffID, chain v1.Hash, size int64,
	below store.ID, belowCommit *store.Commit, opts image.Options) (*image.LayerResult, *store.Commit, error) {
	lr := &image.LayerResult{DiffID: diffID.String(), ChainID: chain.String()}
	ref := layerRef(chain)
	var existing *store.Commit
	if err := s.View(ctx, func(tx *store.Tx) error {
		id, err := tx.Ref(ref)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		c, err := tx.Commit(id)
		if err != nil {
			return fmt.Errorf("layer ref %s: %w", ref, err)
		}
		if !sameParent(c, below) {
			return fmt.Errorf("layer ref %s: commit %s does not sit on %s: %w", ref, id.Short(), below.Short(), store.ErrCorrupt)
		}
		lr.Commit, existing = id, c
		return nil
	}); err != nil {
		return nil, nil, err
	}
	report := func(done int64, reused, finished bool) {
		if opts.Progress != nil {
			opts.Progress(image.LayerProgress{Index: i, Count: n, DiffID: diffID.String(), Done: done, Size: size, Reused: reused, Finished: finished})
		}
	}
	if existing != nil {
		lr.Reused = true
		report(0, true, true)
		return lr, existing, nil
	}

	rc, err := l.Uncompressed()
	if err != nil {
		return nil, nil, err
	}
	defer rc.Close()
	h := sha256.New()
	cr := &countingReader{r: io.TeeReader(rc, h), report: func(n int64) { report(n, false, false) }}

	w, err := s.NewWriter(ctx, "import image layer "+diffID.String())
	if err != nil {
		return nil, nil, err
	}
	defer w.Abort() // after Finish, a no-op
	var baseTree store.ID
	baseStats := &store.CommitStats{}
	if belowCommit != nil {
		baseTree, baseStats = belowCommit.Tree, &belowCommit.Stats
	}
	lower := newLowerCache(ctx, s, baseTree)
	changes, err := layerChanges(cr, w, lower.lookup)
	if err != nil {
		return nil, nil, err
	}
	// The rest of the stream (tar padding, trailing blocks) is part of
	// the digest.
	if _, err := io.Copy(io.Discard, cr); err != nil {
		return nil, nil, fmt.Errorf("read layer: %w", err)
	}
	if err := verifyHash(h, diffID); err != nil {
		return nil, nil, err
	}
	lr.ReadBytes = cr.n
	report(cr.n, false, false)
	ar, err := snapshot.ApplyUpper(ctx, s, w, baseTree, changes, snapshot.ApplyOptions{BaseStats: baseStats, Warn: opts.Warn})
	if err != nil {
		return nil, nil, err
	}
	lr.Changes = ar.Changed
	c := &store.Commit{
		Tree:    ar.Tree,
		Message: "image layer " + diffID.String() + "\n\nchain " + chain.String() + "\n",
		Source:  "image-layer:" + chain.String(),
		Stats:   ar.Stats,
	}
	if !below.IsZero() {
		c.Parents = []store.ID{below}
	}
	err = w.Finish(func(tx *store.Tx) error {
		id, err := tx.PutCommit(c)
		if err != nil {
			return err
		}
		cur, err := tx.Ref(ref)
		switch {
		case errors.Is(err, store.ErrNotFound):
			if err := tx.SetRef(ref, store.ZeroID, id); err != nil {
				return err
			}
		case err != nil:
			return err
		case cur != id:
			// Another import made this chain meanwhile, differently: the
			// same layer must give the same commit.
			return fmt.Errorf("layer ref %s points at %s, this import made %s: %w", ref, cur.Short(), id.Short(), store.ErrConflict)
		}
		lr.Commit = id
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	ws := w.Stats()
	lr.NewObjects, lr.NewBytes = ws.NewObjects, ws.NewBytes
	report(cr.n, false, true)
	return lr, c, nil
}

func sameParent(c *store.Commit, below store.ID) bool {
	if below.IsZero() {
		return len(c.Parents) == 0
	}
	return len(c.Parents) == 1 && c.Parents[0] == below
}

func verifyHash(h hash.Hash, want v1.Hash) error {
	if want.Algorithm != "sha256" {
		return fmt.Errorf("diff ID %s: only sha256 is supported", want)
	}
	got := hex.EncodeToString(h.Sum(nil))
	if got != want.Hex {
		return fmt.Errorf("uncompressed layer is sha256:%s, the config's diff ID is %s: refusing it", got, want)
	}
	return nil
}

// countingReader counts what is read and reports it now and then.
type countingReader struct {
	r      io.Reader
	n      int64
	last   int64
	report func(n int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.n-c.last >= 1<<20 {
		c.last = c.n
		c.report(c.n)
	}
	return n, err
}

// lowerCache looks paths up in the tree beneath a layer, remembering
// directories read.
type lowerCache struct {
	ctx   context.Context
	s     *store.Store
	root  store.ID
	trees map[string]*store.Tree // directory path → its tree (nil: not a directory / absent)
}

func newLowerCache(ctx context.Context, s *store.Store, root store.ID) *lowerCache {
	return &lowerCache{ctx: ctx, s: s, root: root, trees: map[string]*store.Tree{}}
}

func (c *lowerCache) dir(p string) (*store.Tree, error) {
	if t, ok := c.trees[p]; ok {
		return t, nil
	}
	var id store.ID
	if p == "" {
		if c.root.IsZero() {
			c.trees[p] = nil
			return nil, nil
		}
		id = c.root
	} else {
		e, err := c.lookup(p)
		if err != nil || e == nil || e.Type != store.TypeDir {
			c.trees[p] = nil
			return nil, err
		}
		id = e.Content
	}
	var t *store.Tree
	if id.IsZero() {
		t = &store.Tree{}
	} else if err := c.s.View(c.ctx, func(tx *store.Tx) error {
		var err error
		t, err = tx.Tree(id)
		return err
	}); err != nil {
		return nil, fmt.Errorf("tree beneath at %q: %w", p, err)
	}
	c.trees[p] = t
	return t, nil
}

// lookup returns the entry at p beneath the layer, nil if none.
func (c *lowerCache) lookup(p string) (*store.TreeEntry, error) {
	d, name := path.Split(p)
	t, err := c.dir(strings.TrimSuffix(d, "/"))
	if err != nil || t == nil {
		return nil, err
	}
	lo, hi := 0, len(t.Entries)
	for lo < hi {
		m := (lo + hi) / 2
		if t.Entries[m].Name < name {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(t.Entries) && t.Entries[lo].Name == name {
		e := t.Entries[lo]
		return &e, nil
	}
	return nil, nil
}
