//go:build integration

package integration

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"math/rand"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/crypto/bcrypt"
	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/image"
	"github.com/stratafs/strata/internal/testutil"
)

// imported is `strata --json import --image`'s output.
type imported = image.Result

func testImages(t testing.TB) string {
	t.Helper()
	return testutil.Images(t)
}

func importImage(h *home, src string, extra ...string) imported {
	h.t.Helper()
	var res imported
	h.okJSON(&res, append([]string{"import", "--image", src}, extra...)...)
	return res
}

// registry is a CNCF distribution server (Debian's docker-registry) on
// 127.0.0.1, plain HTTP, for one test.
type registry struct {
	addr string
	data string // its storage directory
}

// startRegistry starts docker-registry on a free port with a temporary
// config and storage; the test's cleanup stops it.
func startRegistry(t *testing.T, extraConfig ...string) *registry {
	t.Helper()
	exe := testutil.LookPath(t, "docker-registry")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: %s
http:
  addr: %s
%s`, filepath.Join(dir, "data"), addr, strings.Join(extraConfig, ""))), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "serve", cfg)
	log, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		log.Close()
	})
	// Ready when /v2/ answers; a registry that never does fails the test
	// (a guard against hanging, not a timing assertion).
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusUnauthorized {
				break
			}
		}
		select {
		case err := <-exited:
			b, _ := os.ReadFile(filepath.Join(dir, "registry.log"))
			t.Fatalf("docker-registry exited: %v\n%s", err, b)
		default:
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, "registry.log"))
			t.Fatalf("docker-registry on %s did not answer: %v\n%s", addr, err, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return &registry{addr: addr, data: filepath.Join(dir, "data")}
}

// push copies the image tagged tag of the OCI layout to the registry as
// REPO:latest and returns the reference.
func (r *registry) push(t *testing.T, layoutDir, tag, repo string) string {
	t.Helper()
	return r.pushAuth(t, layoutDir, tag, repo, "", "")
}

// pushAuth is push with a user and password (none if user is empty).
func (r *registry) pushAuth(t *testing.T, layoutDir, tag, repo, user, pass string) string {
	t.Helper()
	var opts []remote.Option
	if user != "" {
		opts = append(opts, remote.WithAuth(&authn.Basic{Username: user, Password: pass}))
	}
	p, err := layout.FromPath(layoutDir)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range im.Manifests {
		if d.Annotations["org.opencontainers.image.ref.name"] != tag {
			continue
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := name.ParseReference(r.addr+"/"+repo+":latest", name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(ref, img, opts...); err != nil {
			t.Fatalf("push %s: %v", ref, err)
		}
		return ref.String()
	}
	t.Fatalf("no image tagged %s in %s", tag, layoutDir)
	return ""
}

// TestImageImportTransports imports the instance image from each
// transport — an OCI layout, a docker-archive, a registry on 127.0.0.1
// over plain HTTP — into one store: each gives the same tree and the same
// layer commits (the layers are keyed by diff ID, whatever the
// transport's manifest), and show prints the config.
func TestImageImportTransports(t *testing.T) {
	imgs := testImages(t)
	reg := startRegistry(t)
	ref := reg.push(t, filepath.Join(imgs, "oci"), "instance", "strata/instance")
	h := newHome(t)

	fromOCI := importImage(h, "oci:"+filepath.Join(imgs, "oci")+":instance", "-b", "oci")
	fromArchive := importImage(h, "docker-archive:"+filepath.Join(imgs, "instance.tar"), "-b", "archive")
	// Plain HTTP is refused unless asked for, with a message that says how.
	r := h.fails(1, "import", "--image", "docker://"+ref, "-b", "reg")
	if !strings.Contains(r.stderr, "--tls-verify=false") {
		t.Errorf("plain-HTTP registry without --tls-verify=false: want a hint at the flag, got %s", r)
	}
	fromRegistry := importImage(h, "docker://"+ref, "-b", "reg", "--tls-verify=false")
	bare := importImage(h, ref, "-b", "bare", "--tls-verify=false")

	for _, res := range []imported{fromArchive, fromRegistry, bare} {
		if res.Tree != fromOCI.Tree {
			t.Errorf("%s: tree %s, the OCI layout's is %s", res.Config.Source, res.Tree.Short(), fromOCI.Tree.Short())
		}
		if len(res.Layers) != 3 {
			t.Fatalf("%s: %d layers", res.Config.Source, len(res.Layers))
		}
		for i, l := range res.Layers {
			if l.Commit != fromOCI.Layers[i].Commit || !l.Reused || l.ReadBytes != 0 {
				t.Errorf("%s: layer %d %+v, want the OCI import's commit %s, reused, not read", res.Config.Source, i, l, fromOCI.Layers[i].Commit.Short())
			}
		}
	}
	if fromRegistry.Config.Digest != fromOCI.Config.Digest {
		t.Errorf("registry digest %s, layout's %s (the manifest was pushed as is)", fromRegistry.Config.Digest, fromOCI.Config.Digest)
	}
	var shown struct {
		Image *image.Config `json:"image"`
	}
	h.okJSON(&shown, "show", "reg")
	c := shown.Image
	if c == nil || c.WorkingDir != "/testbed" || c.User != "root" || strings.Join(c.Entrypoint, " ") != "/bin/sh -c" ||
		strings.Join(c.Cmd, " ") != "echo hi" || c.Labels["org.strata.test"] != "instance" || len(c.DiffIDs) != 3 ||
		!strings.Contains(strings.Join(c.Env, "\n"), "TESTBED=1") {
		t.Errorf("show --json reg: image config %+v", c)
	}
	text := h.ok("show", "archive").stdout
	for _, want := range []string{"workdir /testbed", "env    TESTBED=1", "label  org.strata.test=instance", `entrypoint ["/bin/sh" "-c"]`} {
		if !strings.Contains(text, want) {
			t.Errorf("show archive: no %q in\n%s", want, text)
		}
	}
	// A branch that holds a project, not an image, is not replaced.
	proj := t.TempDir()
	if err := os.WriteFile(filepath.Join(proj, "main.go"), []byte("package main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.ok("import", proj, "-b", "project")
	before := h.ok("log", "project").stdout
	r = h.fails(1, "import", "--image", "oci:"+filepath.Join(imgs, "oci")+":instance", "-b", "project")
	if !strings.Contains(r.stderr, "not an image") {
		t.Errorf("image onto a project branch: %s", r)
	}
	if after := h.ok("log", "project").stdout; after != before {
		t.Errorf("project branch moved:\n%s\n%s", before, after)
	}
	// Layer refs are not branches.
	if out := h.ok("branch", "list").stdout; strings.Contains(out, image.LayerRefPrefix) {
		t.Errorf("branch list shows layer refs:\n%s", out)
	}
	// A second import of the same image changes nothing.
	again := importImage(h, "oci:"+filepath.Join(imgs, "oci")+":instance", "-b", "oci")
	if !again.Unchanged || again.Commit != fromOCI.Commit || again.NewObjects != 0 {
		t.Errorf("re-import: %+v, want unchanged at %s with no new objects", again, fromOCI.Commit.Short())
	}
	h.fsckClean()
}

// TestImageSharedLayers: an image that shares its base with one already
// imported reads and stores only its own layer, and the layers it shares
// are the same commits. The byte counts are checked against an import of
// the same image into an empty store.
func TestImageSharedLayers(t *testing.T) {
	imgs := testImages(t)
	oci := "oci:" + filepath.Join(imgs, "oci")
	h := newHome(t)
	env := importImage(h, oci+":env", "-b", "env")
	inst := importImage(h, oci+":instance", "-b", "instance")
	fresh := importImage(newHome(t), oci+":instance", "-b", "instance")

	if len(env.Layers) != 2 || len(inst.Layers) != 3 {
		t.Fatalf("layers: env %d, instance %d", len(env.Layers), len(inst.Layers))
	}
	for i := 0; i < 2; i++ {
		l := inst.Layers[i]
		if !l.Reused || l.Commit != env.Layers[i].Commit || l.ReadBytes != 0 || l.NewObjects != 0 || l.NewBytes != 0 {
			t.Errorf("instance layer %d: %+v, want env's commit %s, not read, nothing stored", i, l, env.Layers[i].Commit.Short())
		}
		if f := fresh.Layers[i]; f.NewBytes != env.Layers[i].NewBytes || f.Commit != l.Commit {
			t.Errorf("layer %d in an empty store: %d new bytes, commit %s; in env's import: %d, %s", i, f.NewBytes, f.Commit.Short(), env.Layers[i].NewBytes, env.Layers[i].Commit.Short())
		}
	}
	own := inst.Layers[2]
	if own.Reused || own.ReadBytes == 0 || own.NewBytes == 0 {
		t.Fatalf("instance's own layer: %+v, want read and stored", own)
	}
	// What the second image stored is its own layer (and its image
	// commit), no more: the same bytes its layer costs in an empty store,
	// while the shared base costs megabytes.
	if inst.NewBytes != own.NewBytes || own.NewBytes != fresh.Layers[2].NewBytes {
		t.Errorf("instance after env stored %d bytes (its layer %d); its layer in an empty store %d", inst.NewBytes, own.NewBytes, fresh.Layers[2].NewBytes)
	}
	if fresh.NewBytes < 1000*inst.NewBytes {
		t.Errorf("an empty store took %d bytes for instance, the shared one %d: the base was not shared", fresh.NewBytes, inst.NewBytes)
	}
	t.Logf("instance: %d bytes alone, %d after env (its layer only)", fresh.NewBytes, inst.NewBytes)
	h.fsckClean()
}

// TestImageUnsafeLayer: a layer whose member walks out of the root is
// refused with a clear error, and nothing is committed: no branch, no
// layer ref.
func TestImageUnsafeLayer(t *testing.T) {
	dir := t.TempDir()
	tarPath := filepath.Join(dir, "evil.tar")
	writeEvilArchive(t, tarPath)
	h := newHome(t)
	r := h.fails(1, "import", "--image", "docker-archive:"+tarPath, "-b", "evil")
	if !strings.Contains(r.stderr, "..") || !strings.Contains(r.stderr, "unsafe path") {
		t.Errorf("want the unsafe member named, got %s", r)
	}
	if out := h.run("--json", "branch", "list").stdout; strings.Contains(out, "evil") {
		t.Errorf("branch created: %s", out)
	}
	h.fsckClean()
}

// TestImageConformance compares the tree strata materializes for each
// test image with what `umoci unpack` makes of it (the OCI reference
// unpacker): content, type, mode, owner, symlink target, device number,
// hard links, user.* xattrs, whiteouts and opaque directories applied.
// Two of strata's trees are compared: the full tree `strata export`
// writes, and the kernel's merged overlay view of the commit's layer
// stack (each layer a delta with its own whiteouts), which is what a
// workspace on the image sees. Owners need root.
func TestImageConformance(t *testing.T) {
	parallel(t)
	testutil.AsRoot(t)
	umoci := testutil.LookPath(t, "umoci")
	imgs := testImages(t)
	h := newHome(t)
	for _, tag := range []string{"env", "instance"} { // base is the bottom of both
		t.Run(tag, func(t *testing.T) {
			res := importImage(h, "oci:"+filepath.Join(imgs, "oci")+":"+tag, "-b", tag)
			work := t.TempDir()
			bundle := filepath.Join(work, "bundle")
			if out, err := exec.Command(umoci, "unpack", "--image", filepath.Join(imgs, "oci")+":"+tag, bundle).CombinedOutput(); err != nil {
				t.Fatalf("umoci unpack: %v\n%s", err, out)
			}
			want := scanTree(t, filepath.Join(bundle, "rootfs"))
			exp := filepath.Join(work, "export")
			h.ok("export", tag, exp)
			compareTrees(t, "export", want, scanTree(t, exp))

			// The layer stack, merged by the kernel.
			st, err := storeOf(h)
			if err != nil {
				t.Fatal(err)
			}
			lowers := layerStack(t, h, st, res.Commit)
			merged := filepath.Join(work, "merged")
			if err := os.Mkdir(merged, 0o755); err != nil {
				t.Fatal(err)
			}
			opts := "lowerdir=" + strings.Join(lowers, ":")
			if len(lowers) == 1 {
				// One lower and no upper: overlay wants two; bind instead.
				if err := unix.Mount(lowers[0], merged, "", unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
					t.Fatal(err)
				}
			} else if err := unix.Mount("overlay", merged, "overlay", unix.MS_RDONLY, opts); err != nil {
				t.Fatalf("mount overlay %s: %v", opts, err)
			}
			defer unix.Unmount(merged, unix.MNT_DETACH)
			compareTrees(t, "layer stack", want, scanTree(t, merged))
		})
	}
}

// node is what the conformance test compares of one path.
type node struct {
	typ    uint32      // S_IFMT bits
	mode   fs.FileMode // permission, setuid, setgid, sticky
	uid    uint32
	gid    uint32
	size   int64
	sum    string // regular files: sha256 of the content
	target string // symlinks
	rdev   uint64
	xattrs string // user.* name=value, sorted
	links  string // regular files with nlink > 1: the sorted paths of the inode
	ino    [2]uint64
}

func scanTree(t *testing.T, root string) map[string]*node {
	t.Helper()
	out := map[string]*node{}
	inodes := map[[2]uint64][]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		n := &node{
			typ: st.Mode & unix.S_IFMT, mode: fs.FileMode(st.Mode & 0o7777),
			uid: st.Uid, gid: st.Gid, ino: [2]uint64{st.Dev, st.Ino},
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			n.size = st.Size
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			h := sha256.New()
			_, err = io.Copy(h, f)
			f.Close()
			if err != nil {
				return err
			}
			n.sum = hex.EncodeToString(h.Sum(nil))
			if st.Nlink > 1 {
				inodes[n.ino] = append(inodes[n.ino], rel)
			}
		case unix.S_IFLNK:
			n.target, err = os.Readlink(p)
			if err != nil {
				return err
			}
		case unix.S_IFCHR, unix.S_IFBLK:
			n.rdev = st.Rdev
		}
		if st.Mode&unix.S_IFMT != unix.S_IFLNK {
			n.xattrs = userXattrs(t, p)
		}
		out[rel] = n
		return nil
	})
	if err != nil {
		t.Fatalf("scan %s: %v", root, err)
	}
	for _, ps := range inodes {
		sort.Strings(ps)
		for _, p := range ps {
			out[p].links = strings.Join(ps, " ")
		}
	}
	return out
}

func userXattrs(t *testing.T, p string) string {
	buf := make([]byte, 64<<10)
	n, err := unix.Llistxattr(p, buf)
	if err != nil {
		return "listxattr: " + err.Error()
	}
	var out []string
	for _, name := range strings.Split(string(buf[:n]), "\x00") {
		if !strings.HasPrefix(name, "user.") {
			continue
		}
		v := make([]byte, 64<<10)
		m, err := unix.Lgetxattr(p, name, v)
		if err != nil {
			out = append(out, name+": "+err.Error())
			continue
		}
		out = append(out, name+"="+string(v[:m]))
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

func compareTrees(t *testing.T, what string, want, got map[string]*node) {
	t.Helper()
	var diffs []string
	for p, w := range want {
		g, ok := got[p]
		if !ok {
			diffs = append(diffs, fmt.Sprintf("%s: missing", p))
			continue
		}
		if w.typ != g.typ || w.mode != g.mode || w.uid != g.uid || w.gid != g.gid || w.size != g.size ||
			w.sum != g.sum || w.target != g.target || w.rdev != g.rdev || w.xattrs != g.xattrs || w.links != g.links {
			diffs = append(diffs, fmt.Sprintf("%s:\n  umoci  %+v\n  strata %+v", p, *w, *g))
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: extra (type %#o)", p, got[p].typ))
		}
	}
	sort.Strings(diffs)
	if len(diffs) > 0 {
		if len(diffs) > 30 {
			diffs = append(diffs[:30], fmt.Sprintf("... and %d more", len(diffs)-30))
		}
		t.Errorf("%s differs from umoci unpack in %d paths:\n%s", what, len(diffs), strings.Join(diffs, "\n"))
	}
	if len(want) < 1000 {
		t.Errorf("umoci's tree has only %d paths: not the Debian root", len(want))
	}
}

// TestImageRegistryAuth: a registry that wants a password (htpasswd) is
// read with the credentials of $REGISTRY_AUTH_FILE (podman's auth.json)
// or of the Docker config ($DOCKER_CONFIG/config.json); without them the
// import fails and says the registry refused.
func TestImageRegistryAuth(t *testing.T) {
	imgs := testImages(t)
	dir := t.TempDir()
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.DefaultCost)
	if err != nil {
		t.Fatal(err)
	}
	htpasswd := filepath.Join(dir, "htpasswd")
	if err := os.WriteFile(htpasswd, []byte("agent:"+string(hash)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	reg := startRegistry(t, "auth:\n  htpasswd:\n    realm: strata-test\n    path: "+htpasswd+"\n")
	ref := reg.pushAuth(t, filepath.Join(imgs, "oci"), "env", "private/env", "agent", "s3cret")
	h := newHome(t)

	r := h.fails(1, "import", "--image", ref, "-b", "anon", "--tls-verify=false")
	if !strings.Contains(strings.ToLower(r.stderr), "unauthorized") {
		t.Errorf("no credentials: want the registry's refusal, got %s", r)
	}
	auth := base64.StdEncoding.EncodeToString([]byte("agent:s3cret"))
	authFile := filepath.Join(dir, "auth.json")
	if err := os.WriteFile(authFile, []byte(`{"auths":{"`+reg.addr+`":{"auth":"`+auth+`"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	h.env = []string{"REGISTRY_AUTH_FILE=" + authFile, "DOCKER_CONFIG=" + filepath.Join(dir, "none")}
	a := importImage(h, ref, "-b", "authfile", "--tls-verify=false")
	docker := filepath.Join(dir, "docker")
	if err := os.MkdirAll(docker, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(docker, "config.json"), []byte(`{"auths":{"`+reg.addr+`":{"auth":"`+auth+`"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	h2 := newHome(t)
	h2.env = []string{"DOCKER_CONFIG=" + docker}
	d := importImage(h2, ref, "-b", "docker", "--tls-verify=false")
	if a.Tree != d.Tree || len(a.Layers) != 2 {
		t.Errorf("auth.json and docker config imports differ: %s %s", a.Tree.Short(), d.Tree.Short())
	}
}

// TestImageCrash kills `import --image` at random instants inside it,
// with gc between some of them: after each, fsck is
// clean, and a finished import gives the same tree and layer commits as
// an import that was never interrupted (layers finished before a kill are
// kept and reused; a half-read layer leaves nothing gc or fsck trips on).
func TestImageCrash(t *testing.T) {
	imgs := testImages(t)
	src := "oci:" + filepath.Join(imgs, "oci") + ":instance"
	clean := importImage(newHome(t), src, "-b", "env")
	kills := 4
	if v, err := strconv.Atoi(os.Getenv("STRATA_CRASH_KILLS")); err == nil && v > 0 {
		kills = min(v, 50)
	}
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	h := newHome(t)
	dur := time.Duration(clean.DurationNs)
	for i, killed := 0, 0; killed < kills; i++ {
		// Within an uninterrupted import's duration: nearly every run is
		// killed somewhere inside (make crash runs more kills).
		delay := time.Duration(rng.Int63n(int64(dur) + 1))
		r, _, wasKilled := runKilled(t, h, delay, "--json", "import", "--image", src, "-b", "env")
		if !wasKilled && r.code != 0 {
			t.Fatalf("import (not killed): %s", r)
		}
		if wasKilled {
			killed++
		} else {
			// Start again from nothing, so that kills land in every layer.
			h.ok("branch", "delete", "env")
			for _, l := range clean.Layers {
				h.run("branch", "delete", image.LayerRefPrefix+strings.TrimPrefix(l.ChainID, "sha256:"))
			}
		}
		if rng.Intn(2) == 0 {
			h.ok("gc", "--prune", "0s")
		}
		if r := h.run("fsck"); r.code != 0 {
			t.Fatalf("after import (killed=%v after %s): fsck: %s", wasKilled, delay, r)
		}
	}
	res := importImage(h, src, "-b", "env")
	if res.Tree != clean.Tree {
		t.Errorf("after the kills: tree %s, an uninterrupted import's %s", res.Tree.Short(), clean.Tree.Short())
	}
	for i, l := range res.Layers {
		if l.Commit != clean.Layers[i].Commit {
			t.Errorf("layer %d: commit %s, an uninterrupted import's %s", i, l.Commit.Short(), clean.Layers[i].Commit.Short())
		}
	}
	h.ok("gc", "--prune", "0s")
	h.fsckClean()
}
