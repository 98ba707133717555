//go:build integration

package integration

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"runtime"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
)

// storeOf opens the test home's store (no strata process is running).
func storeOf(h *home) (*store.Store, error) {
	s, err := store.Open(h.dir, store.Options{})
	if err == nil {
		h.t.Cleanup(func() { s.Close() })
	}
	return s, err
}

// layerStack builds commit's layer stack (trusted flavour, owners kept:
// the root pass) in a cache of its own and returns the lowerdirs,
// topmost first.
func layerStack(t *testing.T, h *home, s *store.Store, commit store.ID) []string {
	t.Helper()
	c := snapshot.NewLayerCache(t.TempDir())
	ls, err := c.Stack(context.Background(), s, commit, snapshot.LayerOptions{Flavour: snapshot.FlavourTrusted, Chown: true})
	if err != nil {
		t.Fatal(err)
	}
	return ls
}

// writeEvilArchive writes a docker-archive whose one layer holds a
// harmless file and then a member named ../../escaped.
func writeEvilArchive(t *testing.T, path string) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range []string{"ok.txt", "../../escaped"} {
		if err := tw.WriteHeader(&tar.Header{Name: n, Typeflag: tar.TypeReg, Mode: 0o644, Size: 3}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte("hi\n")); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag("strata.test/evil:latest")
	if err != nil {
		t.Fatal(err)
	}
	if err := tarball.WriteToFile(path, tag, img); err != nil {
		t.Fatal(err)
	}
}
