package registry

import (
	"fmt"
	"net/http"
	"net/url"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func repo(t *testing.T, s string) name.Repository {
	t.Helper()
	r, err := name.NewRepository(s, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestBlobLocations: a push to a repository mounts from the most recent
// other repository of the same registry that holds the blob; never from
// itself or another registry; each blob keeps at most maxLocations.
func TestBlobLocations(t *testing.T) {
	cache := t.TempDir()
	d := v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%064x", 1)}
	other := v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%064x", 2)}
	dest := repo(t, "reg.test:5000/team/agent")
	if got := mountSource(cache, dest, d); got != "" {
		t.Errorf("empty cache: %q", got)
	}
	addLocations(cache, repo(t, "reg.test:5000/team/env"), []v1.Hash{d})
	addLocations(cache, repo(t, "elsewhere.test/team/env"), []v1.Hash{d})
	addLocations(cache, dest, []v1.Hash{d})
	if got := mountSource(cache, dest, d); got != "reg.test:5000/team/env" {
		t.Errorf("mount source %q, want reg.test:5000/team/env", got)
	}
	if got := mountSource(cache, dest, other); got != "" {
		t.Errorf("a blob never seen: %q", got)
	}
	addLocations(cache, repo(t, "reg.test:5000/team/newer"), []v1.Hash{d})
	if got := mountSource(cache, dest, d); got != "reg.test:5000/team/newer" {
		t.Errorf("mount source %q, want the most recent, reg.test:5000/team/newer", got)
	}
	for i := 0; i < 20; i++ {
		addLocations(cache, repo(t, fmt.Sprintf("reg.test:5000/r%d", i)), []v1.Hash{d})
	}
	if locs := readLocations(cache, d); len(locs) != maxLocations || locs[maxLocations-1] != "reg.test:5000/r19" {
		t.Errorf("after 20 more: %v", locs)
	}
}

// TestBlobPathDigest: the digest of a blob request, also through the
// redirect a registry on object storage answers with.
func TestBlobPathDigest(t *testing.T) {
	dg := "sha256:" + fmt.Sprintf("%064x", 3)
	req := func(u string, from *http.Request) *http.Request {
		pu, _ := url.Parse(u)
		r := &http.Request{Method: http.MethodGet, URL: pu}
		if from != nil {
			r.Response = &http.Response{Request: from}
		}
		return r
	}
	blob := req("https://reg.test/v2/team/env/blobs/"+dg, nil)
	for _, c := range []struct {
		r    *http.Request
		want string
	}{
		{blob, dg},
		{req("https://bucket.test/data/3f?sig=x", blob), dg},
		{req("https://reg.test/v2/team/env/manifests/latest", nil), ""},
		{req("https://reg.test/v2/team/env/blobs/uploads/abc", nil), ""},
	} {
		if got := blobPathDigest(c.r); got != c.want {
			t.Errorf("%s: %q, want %q", c.r.URL, got, c.want)
		}
	}
}
