package registry_test

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"

	"github.com/stratafs/strata/image"
	"github.com/stratafs/strata/image/registry"
	"github.com/stratafs/strata/store"
)

// TestRegistered: linking image/registry installs its Import and Push
// behind image's: image.Linked, and each reaches the implementation (its
// own refusal of a bad source or destination, not ErrNotLinked).
func TestRegistered(t *testing.T) {
	if !image.Linked() {
		t.Fatal("image.Linked() is false with image/registry linked")
	}
	ctx := context.Background()
	s := openStore(t)
	_, err := image.Import(ctx, s, "oci:"+filepath.Join(t.TempDir(), "none"), image.Options{Branch: "b"})
	if err == nil || errors.Is(err, image.ErrNotLinked) || !strings.Contains(err.Error(), "not an OCI layout") {
		t.Errorf("Import of a missing layout: %v, want the layout's refusal", err)
	}
	_, err = image.Push(ctx, s, store.ZeroID, "docker-archive:"+filepath.Join(t.TempDir(), "x.tar"), image.PushOptions{})
	if err == nil || errors.Is(err, image.ErrNotLinked) || !strings.Contains(err.Error(), "not a push destination") {
		t.Errorf("Push to a docker archive: %v, want the destination's refusal", err)
	}
}

// recordingKeychain answers anonymous and remembers which registries it
// was asked about.
type recordingKeychain struct {
	mu    sync.Mutex
	asked []string
}

func (k *recordingKeychain) Resolve(r authn.Resource) (authn.Authenticator, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.asked = append(k.asked, r.RegistryStr())
	return authn.Anonymous, nil
}

func (k *recordingKeychain) wasAsked(host string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Contains(k.asked, host)
}

// TestKeychain: PushWith and ImportWith take a registry's credentials
// from the keychain they are given (image's options carry none: the
// lean package does not link authn), over a registry served in process;
// the pulled image is the pushed tree.
func TestKeychain(t *testing.T) {
	srv := httptest.NewServer(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	ctx := context.Background()

	s := openStore(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("keychain\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	commit, tree := commitDir(t, s, store.ZeroID, dir)

	dest := host + "/strata/kc:v1"
	pk := &recordingKeychain{}
	if _, err := registry.PushWith(ctx, s, commit, dest, image.PushOptions{}, pk); err != nil {
		t.Fatal(err)
	}
	if !pk.wasAsked(host) {
		t.Errorf("push: the keychain was asked about %v, not %s", pk.asked, host)
	}
	ik := &recordingKeychain{}
	res, err := registry.ImportWith(ctx, openStore(t), "docker://"+dest, image.Options{Branch: "kc"}, ik)
	if err != nil {
		t.Fatal(err)
	}
	if !ik.wasAsked(host) {
		t.Errorf("import: the keychain was asked about %v, not %s", ik.asked, host)
	}
	if res.Tree != tree {
		t.Errorf("pulled tree %s, pushed %s", res.Tree.Short(), tree.Short())
	}
}
