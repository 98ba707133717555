package registry

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Blob locations: which repositories of which registries hold a blob, as
// far as this store knows (it pushed the blob there, or pulled it from
// there). A registry stores a blob once but links it into each repository
// separately, so a push to a repository that lacks a blob would upload it
// again although the registry has it; the distribution spec's
// cross-repository mount (POST /v2/REPO/blobs/uploads/?mount=D&from=R)
// links it instead, when the client names a repository R that holds it
// and the registry (and the credentials) allow reading R. A registry that
// refuses answers 202 and the blob is uploaded as usual.
//
// Kept in the push cache as blobs/HEX, one repository ("host/path") a
// line, newest last: a cache — losing it costs only uploads.

// maxLocations bounds each blob's list (the oldest go first).
const maxLocations = 8

func locationsFile(cache string, d v1.Hash) string {
	return filepath.Join(cache, "blobs", d.Algorithm+"-"+d.Hex)
}

func readLocations(cache string, d v1.Hash) []string {
	b, err := os.ReadFile(locationsFile(cache, d))
	if err != nil {
		return nil
	}
	return strings.Fields(string(b))
}

// mountSource returns a repository of dest's registry other than dest
// that holds d (the most recently recorded), or "".
func mountSource(cache string, dest name.Repository, d v1.Hash) string {
	locs := readLocations(cache, d)
	for i := len(locs) - 1; i >= 0; i-- {
		r, err := name.NewRepository(locs[i], name.Insecure)
		if err != nil {
			continue
		}
		if r.RegistryStr() == dest.RegistryStr() && r.RepositoryStr() != dest.RepositoryStr() {
			return r.Name()
		}
	}
	return ""
}

// addLocations records that repo holds each of digests.
func addLocations(cache string, repo name.Repository, digests []v1.Hash) {
	dir := filepath.Join(cache, "blobs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return
	}
	at := repo.Name()
	for _, d := range digests {
		var keep []string
		for _, l := range readLocations(cache, d) {
			if l != at {
				keep = append(keep, l)
			}
		}
		keep = append(keep, at)
		if len(keep) > maxLocations {
			keep = keep[len(keep)-maxLocations:]
		}
		p := locationsFile(cache, d)
		tmp, err := os.CreateTemp(dir, ".loc-")
		if err != nil {
			return
		}
		_, err = tmp.WriteString(strings.Join(keep, "\n") + "\n")
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err != nil || os.Rename(tmp.Name(), p) != nil {
			_ = os.Remove(tmp.Name()) // a cache: failing to keep it costs only uploads
		}
	}
}
