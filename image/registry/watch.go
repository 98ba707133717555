package registry

import (
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/stratafs/strata/image"
)

// blobWatch is a registry transport that tells, from the registry's own
// answers, what became of each blob: go-containerregistry decides per
// blob whether to upload, skip or mount it and reports only an aggregate,
// while a progress bar per blob (and image.PushedLayer.State) needs the
// decision of each. Every hook is optional and is called with the digest
// ("sha256:…") the request names.
type blobWatch struct {
	rt http.RoundTripper
	// exists: HEAD …/blobs/D answered 200 (the registry has the blob).
	exists func(digest string)
	// mounted: POST …/blobs/uploads/?mount=D&from=R answered 201.
	mounted func(digest string)
	// stored: the upload's closing PUT …?digest=D answered 201.
	stored func(digest string)
	// read: n more bytes of GET …/blobs/D's body were read.
	read func(digest string, n int64)
}

func (w *blobWatch) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := w.rt.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	switch req.Method {
	case http.MethodHead:
		if d := blobPathDigest(req); d != "" && resp.StatusCode == http.StatusOK && w.exists != nil {
			w.exists(d)
		}
	case http.MethodPost:
		if d := req.URL.Query().Get("mount"); d != "" && req.URL.Query().Get("from") != "" &&
			resp.StatusCode == http.StatusCreated && w.mounted != nil {
			w.mounted(d)
		}
	case http.MethodPut:
		if d := req.URL.Query().Get("digest"); d != "" && strings.Contains(req.URL.Path, "/blobs/uploads/") &&
			resp.StatusCode == http.StatusCreated && w.stored != nil {
			w.stored(d)
		}
	case http.MethodGet:
		if d := blobPathDigest(req); d != "" && resp.StatusCode == http.StatusOK && w.read != nil {
			resp.Body = &watchedBody{ReadCloser: resp.Body, fn: func(n int64) { w.read(d, n) }}
		}
	}
	return resp, nil
}

// blobPathDigest is the digest of a /v2/REPO/blobs/DIGEST request, or of
// the blob request that redirected to this one (registries backed by
// object storage answer a blob GET with a redirect to a URL that does
// not name the digest); "" for other requests.
func blobPathDigest(req *http.Request) string {
	for r := req; r != nil; {
		if i := strings.LastIndex(r.URL.Path, "/blobs/"); i >= 0 {
			if d := r.URL.Path[i+len("/blobs/"):]; strings.HasPrefix(d, "sha256:") && !strings.Contains(d, "/") {
				return d
			}
		}
		if r.Response == nil {
			break
		}
		r = r.Response.Request
	}
	return ""
}

type watchedBody struct {
	io.ReadCloser
	fn func(int64)
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.fn(int64(n))
	}
	return n, err
}

// blobStates collects what a blobWatch saw, by digest.
type blobStates struct {
	mu sync.Mutex
	m  map[string]image.BlobState
}

func (s *blobStates) set(d string, st image.BlobState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]image.BlobState{}
	}
	s.m[d] = st
}

func (s *blobStates) get(d string) image.BlobState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[d]
}
