package registry_test

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/stratafs/strata/image"
)

// platformImage is a one-layer image for os/arch holding the file arch.
func platformImage(t *testing.T, os, arch string) v1.Image {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "arch", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(arch))}); err != nil {
		t.Fatal(err)
	}
	io.WriteString(tw, arch)
	tw.Close()
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
	cf.OS, cf.Architecture = os, arch
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// TestImportPlatform: an OCI layout whose tag names an index gives the
// manifest of --platform; a platform the index lacks, or a single image
// of another platform, is refused with a hint at --platform.
func TestImportPlatform(t *testing.T) {
	dir := t.TempDir()
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: platformImage(t, "linux", "amd64"), Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
		mutate.IndexAddendum{Add: platformImage(t, "linux", "arm64"), Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}}},
	)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "multi"})); err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(platformImage(t, "linux", "s390x"), layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "s390x"})); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s := openStore(t)
	for _, arch := range []string{"amd64", "arm64"} {
		res, err := image.Import(ctx, s, "oci:"+dir+":multi", image.Options{Branch: arch, Platform: "linux/" + arch})
		if err != nil {
			t.Fatalf("linux/%s: %v", arch, err)
		}
		if res.Config.Architecture != arch {
			t.Errorf("linux/%s: imported %s", arch, res.Config.Architecture)
		}
		if e := lookup(t, s, res.Tree, "arch"); e == nil || e.Size != int64(len(arch)) {
			t.Errorf("linux/%s: tree holds %+v", arch, e)
		}
	}
	if _, err := image.Import(ctx, s, "oci:"+dir+":multi", image.Options{Branch: "x", Platform: "linux/riscv64"}); err == nil || !strings.Contains(err.Error(), "--platform") {
		t.Errorf("a platform the index lacks: %v", err)
	}
	if _, err := image.Import(ctx, s, "oci:"+dir+":s390x", image.Options{Branch: "y", Platform: "linux/amd64"}); err == nil || !strings.Contains(err.Error(), "s390x") {
		t.Errorf("an image of another platform: %v", err)
	}
	if _, err := image.Import(ctx, s, "oci:"+dir, image.Options{Branch: "z"}); err == nil || !strings.Contains(err.Error(), "name one") {
		t.Errorf("a layout of several images without a tag: %v", err)
	}
}
