package registry

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/stratafs/strata/store"
)

// Transports, named as skopeo names them.
const (
	TransportDocker        = "docker"         // docker://HOST/REPO:TAG, or a bare HOST/REPO:TAG
	TransportOCI           = "oci"            // oci:DIR[:TAG], an OCI image layout
	TransportDockerArchive = "docker-archive" // docker-archive:FILE[:REF], docker save / podman save
)

// Source is a parsed image reference.
type Source struct {
	Transport string
	// Ref is the registry reference (docker), the directory (oci) or the
	// file (docker-archive).
	Ref string
	// Tag selects an image of an OCI layout (its
	// org.opencontainers.image.ref.name) or of a docker archive (its
	// repo tag); empty: the only one.
	Tag string
}

// String is the reference in skopeo's syntax.
func (s Source) String() string {
	switch s.Transport {
	case TransportDocker:
		return "docker://" + s.Ref
	default:
		if s.Tag != "" {
			return s.Transport + ":" + s.Ref + ":" + s.Tag
		}
		return s.Transport + ":" + s.Ref
	}
}

// ParseSource parses SRC: docker://HOST/REPO[:TAG|@DIGEST] or a bare
// HOST/REPO[:TAG|@DIGEST], oci:DIR[:TAG], docker-archive:FILE[:REF].
func ParseSource(src string) (Source, error) {
	if src == "" {
		return Source{}, errors.New("empty image reference")
	}
	if rest, ok := strings.CutPrefix(src, "docker://"); ok {
		if rest == "" {
			return Source{}, fmt.Errorf("image %q: no registry reference after docker://", src)
		}
		return Source{Transport: TransportDocker, Ref: rest}, nil
	}
	for _, t := range []string{TransportOCI, TransportDockerArchive} {
		rest, ok := strings.CutPrefix(src, t+":")
		if !ok {
			continue
		}
		if rest == "" {
			return Source{}, fmt.Errorf("image %q: no path after %s:", src, t)
		}
		s := Source{Transport: t, Ref: rest}
		// An OCI tag follows the last ':' (a tag has none), unless what
		// follows holds a '/' (then the ':' belongs to the path); a
		// docker-archive's REPO:TAG follows the first. A path that exists
		// as given has no tag.
		i := strings.LastIndexByte(rest, ':')
		if t == TransportDockerArchive {
			i = strings.IndexByte(rest, ':')
		}
		if i > 0 {
			if _, err := os.Stat(rest); err != nil {
				tag := rest[i+1:]
				if t == TransportOCI && strings.Contains(tag, "/") {
					return s, nil
				}
				s.Ref, s.Tag = rest[:i], tag
			}
		}
		return s, nil
	}
	if i := strings.Index(src, ":"); i > 0 && otherTransports[src[:i]] {
		return Source{}, fmt.Errorf("image %q: transport %q is not supported (docker://, oci:, docker-archive:)", src, src[:i])
	}
	return Source{Transport: TransportDocker, Ref: src}, nil
}

// otherTransports are skopeo's transports strata does not read.
var otherTransports = map[string]bool{
	"containers-storage": true, "dir": true, "docker-daemon": true, "oci-archive": true, "sif": true, "ostree": true,
}

// Platform parses OS/ARCH[/VARIANT]; empty: this machine's.
func Platform(s string) (v1.Platform, error) {
	if s == "" {
		p := v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
		if runtime.GOARCH == "arm64" {
			p.Variant = "v8"
		}
		return p, nil
	}
	p, err := v1.ParsePlatform(s)
	if err != nil || p.OS == "" || p.Architecture == "" {
		return v1.Platform{}, fmt.Errorf("platform %q: want OS/ARCH[/VARIANT], e.g. linux/amd64", s)
	}
	return *p, nil
}

// openOptions tune open.
type openOptions struct {
	platform  v1.Platform
	explicit  bool // the platform was asked for
	tlsVerify bool
	keychain  authn.Keychain
	watch     *blobWatch // if set, sees a registry's requests (its rt is set here)
}

// opened is an image ready to read, with what was verified about it.
type opened struct {
	img      v1.Image
	digest   v1.Hash // the manifest's
	manifest *v1.Manifest
	config   *v1.ConfigFile
	repo     *name.Repository // a registry source's repository
}

// open resolves src to one image of the wanted platform and verifies its
// manifest and config by digest. Layers are verified as they are read.
func open(ctx context.Context, src Source, o openOptions) (*opened, error) {
	var img v1.Image
	var repo *name.Repository
	var want *v1.Hash // the manifest digest the source vouches for
	switch src.Transport {
	case TransportDocker:
		var nopts []name.Option
		if !o.tlsVerify {
			nopts = append(nopts, name.Insecure)
		}
		ref, err := name.ParseReference(src.Ref, nopts...)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", src, err)
		}
		t := remote.DefaultTransport.(*http.Transport).Clone()
		if !o.tlsVerify {
			t.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // --tls-verify=false asks for it
		}
		var rt http.RoundTripper = t
		if o.tlsVerify {
			rt = httpsOnly{t}
		}
		if o.watch != nil {
			o.watch.rt, rt = rt, o.watch
		}
		r := ref.Context()
		repo = &r
		img, err = remote.Image(ref, remote.WithContext(ctx), remote.WithAuthFromKeychain(o.keychain),
			remote.WithPlatform(o.platform), remote.WithTransport(rt))
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", src, err)
		}
		if d, ok := ref.(name.Digest); ok {
			h, err := v1.NewHash(d.DigestStr())
			if err != nil {
				return nil, err
			}
			want = &h
		}
	case TransportOCI:
		var err error
		if img, want, err = fromLayout(src, o); err != nil {
			return nil, err
		}
	case TransportDockerArchive:
		var tag *name.Tag
		if src.Tag != "" {
			t, err := name.NewTag(src.Tag)
			if err != nil {
				return nil, fmt.Errorf("image %s: %w", src, err)
			}
			tag = &t
		}
		var err error
		if img, err = tarball.ImageFromPath(src.Ref, tag); err != nil {
			return nil, fmt.Errorf("image %s: %w", src, err)
		}
	default:
		return nil, fmt.Errorf("image %s: unknown transport %q", src, src.Transport)
	}

	raw, err := img.RawManifest()
	if err != nil {
		return nil, fmt.Errorf("image %s: manifest: %w", src, err)
	}
	got := sha256Hash(raw)
	if want != nil && *want != got {
		return nil, fmt.Errorf("image %s: manifest digest %s, expected %s", src, got, want)
	}
	m, err := img.Manifest()
	if err != nil {
		return nil, fmt.Errorf("image %s: manifest: %w", src, err)
	}
	rawCfg, err := img.RawConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image %s: config: %w", src, err)
	}
	if h := sha256Hash(rawCfg); h != m.Config.Digest {
		return nil, fmt.Errorf("image %s: config digest %s, manifest says %s", src, h, m.Config.Digest)
	}
	cf, err := v1.ParseConfigFile(strings.NewReader(string(rawCfg)))
	if err != nil {
		return nil, fmt.Errorf("image %s: config: %w", src, err)
	}
	if len(cf.RootFS.DiffIDs) != len(m.Layers) {
		return nil, fmt.Errorf("image %s: %d layers in the manifest, %d diff IDs in the config", src, len(m.Layers), len(cf.RootFS.DiffIDs))
	}
	if cf.OS != "" && cf.Architecture != "" &&
		(cf.OS != o.platform.OS || cf.Architecture != o.platform.Architecture) {
		hint := "; choose one with --platform OS/ARCH"
		if o.explicit {
			hint = ""
		}
		return nil, fmt.Errorf("image %s is %s/%s, not %s/%s%s", src, cf.OS, cf.Architecture, o.platform.OS, o.platform.Architecture, hint)
	}
	return &opened{img: img, digest: got, manifest: m, config: cf, repo: repo}, nil
}

// fromLayout picks the image tagged src.Tag (or the only one) of an OCI
// layout, descending into an index for the platform.
func fromLayout(src Source, o openOptions) (v1.Image, *v1.Hash, error) {
	p, err := layout.FromPath(src.Ref)
	if err != nil {
		return nil, nil, fmt.Errorf("image %s: not an OCI layout: %w", src, err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return nil, nil, fmt.Errorf("image %s: %w", src, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, nil, fmt.Errorf("image %s: index.json: %w", src, err)
	}
	var found []v1.Descriptor
	var tags []string
	for _, d := range im.Manifests {
		tag := d.Annotations["org.opencontainers.image.ref.name"]
		tags = append(tags, tag)
		if src.Tag == "" || tag == src.Tag {
			found = append(found, d)
		}
	}
	switch {
	case len(found) == 0:
		return nil, nil, fmt.Errorf("image %s: no image tagged %q in the layout (tags: %s): %w", src, src.Tag, strings.Join(tags, ", "), store.ErrNotFound)
	case len(found) > 1 && src.Tag == "":
		return nil, nil, fmt.Errorf("image %s: the layout holds %d images; name one: oci:%s:TAG (tags: %s)", src, len(found), src.Ref, strings.Join(tags, ", "))
	}
	d := found[0]
	if d.MediaType.IsIndex() {
		sub, err := idx.ImageIndex(d.Digest)
		if err != nil {
			return nil, nil, fmt.Errorf("image %s: %w", src, err)
		}
		sm, err := sub.IndexManifest()
		if err != nil {
			return nil, nil, fmt.Errorf("image %s: %w", src, err)
		}
		var pick *v1.Descriptor
		for i := range sm.Manifests {
			if sm.Manifests[i].Platform != nil && sm.Manifests[i].Platform.Satisfies(o.platform) {
				pick = &sm.Manifests[i]
				break
			}
		}
		if pick == nil {
			return nil, nil, fmt.Errorf("image %s: no manifest for %s/%s in its index; choose one with --platform: %w", src, o.platform.OS, o.platform.Architecture, store.ErrNotFound)
		}
		img, err := sub.Image(pick.Digest)
		if err != nil {
			return nil, nil, fmt.Errorf("image %s: %w", src, err)
		}
		return img, &pick.Digest, nil
	}
	img, err := idx.Image(d.Digest)
	if err != nil {
		return nil, nil, fmt.Errorf("image %s: %w", src, err)
	}
	return img, &d.Digest, nil
}

// httpsOnly refuses plain HTTP. go-containerregistry falls back to HTTP
// for a loopback or private-network registry by itself; skopeo does not
// without --tls-verify=false, and strata keeps skopeo's contract.
type httpsOnly struct{ rt http.RoundTripper }

func (h httpsOnly) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "https" {
		return nil, fmt.Errorf("registry %s: refusing plain HTTP (%s); pass --tls-verify=false to allow it", req.URL.Host, req.URL.Redacted())
	}
	return h.rt.RoundTrip(req)
}

func sha256Hash(b []byte) v1.Hash {
	s := sha256.Sum256(b)
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(s[:])}
}

// Keychain is go-containerregistry's default keychain (the Docker config:
// $DOCKER_CONFIG or ~/.docker/config.json, with its credential helpers),
// preceded by $REGISTRY_AUTH_FILE (the containers-auth.json format of
// podman and skopeo) when that is set.
func Keychain() authn.Keychain {
	if f := os.Getenv("REGISTRY_AUTH_FILE"); f != "" {
		return authn.NewMultiKeychain(authFile(f), authn.DefaultKeychain)
	}
	return authn.DefaultKeychain
}

// authFile reads a containers-auth.json: {"auths": {"HOST[/PATH]":
// {"auth": base64("user:password")}}}, the most specific key first.
type authFile string

func (f authFile) Resolve(r authn.Resource) (authn.Authenticator, error) {
	b, err := os.ReadFile(string(f))
	if err != nil {
		return nil, fmt.Errorf("REGISTRY_AUTH_FILE: %w", err)
	}
	var doc struct {
		Auths map[string]struct {
			Auth string `json:"auth"`
		} `json:"auths"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("REGISTRY_AUTH_FILE %s: %w", f, err)
	}
	keys := []string{r.RegistryStr()}
	if repo, ok := r.(name.Repository); ok {
		full := repo.Name()
		for full != r.RegistryStr() && full != "" {
			keys = append([]string{full}, keys...)
			i := strings.LastIndexByte(full, '/')
			if i < 0 {
				break
			}
			full = full[:i]
		}
	}
	for _, k := range keys {
		for _, cand := range []string{k, "https://" + k, "http://" + k} {
			a, ok := doc.Auths[cand]
			if !ok || a.Auth == "" {
				continue
			}
			dec, err := base64.StdEncoding.DecodeString(a.Auth)
			if err != nil {
				return nil, fmt.Errorf("REGISTRY_AUTH_FILE %s: %q: auth is not base64", f, cand)
			}
			user, pass, ok := strings.Cut(string(dec), ":")
			if !ok {
				return nil, fmt.Errorf("REGISTRY_AUTH_FILE %s: %q: auth is not user:password", f, cand)
			}
			return authn.FromConfig(authn.AuthConfig{Username: user, Password: pass}), nil
		}
	}
	return authn.Anonymous, nil
}
