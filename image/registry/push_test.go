package registry_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stratafs/strata/image"
	"github.com/stratafs/strata/internal/testutil"
	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
)

// commitDir imports dir as a commit on parent (ZeroID: a root commit)
// and returns it and its tree.
func commitDir(t *testing.T, s *store.Store, parent store.ID, dir string) (store.ID, store.ID) {
	t.Helper()
	ctx := context.Background()
	w, err := s.NewWriter(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	r, err := snapshot.Import(ctx, s, w, dir, snapshot.ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var id store.ID
	if err := w.Finish(func(tx *store.Tx) error {
		c := &store.Commit{Tree: r.Tree, Message: "project", TimeNs: 1, Stats: r.Stats}
		if !parent.IsZero() {
			c.Parents = []store.ID{parent}
		}
		id, err = tx.PutCommit(c)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return id, r.Tree
}

// TestPushPullRoundTrip pushes the instance image's commit, and a project
// commit on it, from two stores into OCI layouts: the same digests from
// both; importing the pushed image into a third store gives the same
// tree; the project commit's push shares every layer beneath it.
func TestPushPullRoundTrip(t *testing.T) {
	dir := testutil.Images(t)
	ctx := context.Background()
	src := "oci:" + filepath.Join(dir, "oci") + ":instance"
	a, b := openStore(t), openStore(t)
	ra, rb := importImage(t, a, src, "img"), importImage(t, b, src, "img")
	out := t.TempDir()
	pa, err := image.Push(ctx, a, ra.Commit, "oci:"+filepath.Join(out, "a")+":snap", image.PushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pb, err := image.Push(ctx, b, rb.Commit, "oci:"+filepath.Join(out, "b")+":snap", image.PushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pa.Layers) != len(ra.Layers) {
		t.Errorf("%d layers pushed, the image has %d", len(pa.Layers), len(ra.Layers))
	}
	for i := range pa.Layers {
		if pa.Layers[i].Digest != pb.Layers[i].Digest {
			t.Errorf("layer %d: digest %s from one store, %s from the other", i, pa.Layers[i].Digest, pb.Layers[i].Digest)
		}
	}
	c := openStore(t)
	rc := importImage(t, c, "oci:"+filepath.Join(out, "a")+":snap", "pulled")
	if rc.Tree != ra.Tree {
		t.Fatalf("pulled tree %s, pushed %s", rc.Tree.Short(), ra.Tree.Short())
	}
	if rc.Config.Env == nil || len(rc.Config.Env) != len(ra.Config.Env) {
		t.Errorf("env %q, the image's %q", rc.Config.Env, ra.Config.Env)
	}

	// A project commit on the image: a small directory, so the layer
	// deletes nearly everything (whiteouts) and adds a hard link and an
	// xattr-less file.
	proj := t.TempDir()
	if err := os.WriteFile(filepath.Join(proj, "a.txt"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(proj, "a.txt"), filepath.Join(proj, "b.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(proj, "etc", "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../a.txt", filepath.Join(proj, "etc", "link")); err != nil {
		t.Fatal(err)
	}
	pc, ptree := commitDir(t, a, ra.Commit, proj)
	pp, err := image.Push(ctx, a, pc, "oci:"+filepath.Join(out, "a")+":proj", image.PushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pp.Layers) != len(pa.Layers)+1 {
		t.Fatalf("%d layers, want %d", len(pp.Layers), len(pa.Layers)+1)
	}
	for i := range pa.Layers {
		if pp.Layers[i].Digest != pa.Layers[i].Digest {
			t.Errorf("layer %d differs from the base's push", i)
		}
	}
	rp := importImage(t, c, "oci:"+filepath.Join(out, "a")+":proj", "pulled-proj")
	if rp.Tree != ptree {
		t.Fatalf("pulled project tree %s, pushed %s", rp.Tree.Short(), ptree.Short())
	}
	for i, l := range rp.Layers {
		if want := i < len(pa.Layers); l.Reused != want {
			t.Errorf("layer %d: reused %v, want %v", i, l.Reused, want)
		}
	}

	// With the push cache: the second push takes the digests from it and
	// writes the layers only because the layout asks for them — the same
	// image, and it imports to the same tree.
	cache := t.TempDir()
	var digests []string
	for _, dst := range []string{"cache1", "cache2"} {
		r, err := image.Push(ctx, a, pc, "oci:"+filepath.Join(out, dst)+":proj", image.PushOptions{CacheDir: cache})
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, r.Digest)
	}
	if digests[0] != pp.Digest || digests[1] != pp.Digest {
		t.Errorf("pushes with the cache: %v, without: %s", digests, pp.Digest)
	}
	if rc := importImage(t, openStore(t), "oci:"+filepath.Join(out, "cache2")+":proj", "p"); rc.Tree != ptree {
		t.Errorf("cached push imports to %s, want %s", rc.Tree.Short(), ptree.Short())
	}
}
