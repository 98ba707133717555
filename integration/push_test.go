//go:build integration

package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/image"
	"github.com/stratafs/strata/internal/testutil"
)

// countingProxy sits in front of a registry and counts, from the
// registry's side of the wire, the body bytes of blob uploads sent to it
// and which blobs were downloaded from it.
type countingProxy struct {
	addr string
	mu   sync.Mutex
	up   int64            // request body bytes to /blobs/uploads/
	got  map[string]int   // blob digest → GETs
	gotN map[string]int64 // blob digest → response bytes
}

type countingBody struct {
	r io.ReadCloser
	n *int64
	p *countingProxy
}

func (b countingBody) Read(q []byte) (int, error) {
	n, err := b.r.Read(q)
	b.p.mu.Lock()
	*b.n += int64(n)
	b.p.mu.Unlock()
	return n, err
}
func (b countingBody) Close() error { return b.r.Close() }

func startProxy(t *testing.T, reg *registry) *countingProxy {
	t.Helper()
	u, _ := url.Parse("http://" + reg.addr)
	p := &countingProxy{got: map[string]int{}, gotN: map[string]int64{}}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(resp *http.Response) error {
		r := resp.Request
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/sha256:") && resp.StatusCode == http.StatusOK {
			d := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
			p.mu.Lock()
			p.got[d]++
			n := p.gotN[d]
			p.gotN[d] = n
			p.mu.Unlock()
			var cnt int64
			resp.Body = countingBody{r: resp.Body, n: &cnt, p: p}
			// gotN is updated on Close below
			resp.Body = closeHook{resp.Body, func() {
				p.mu.Lock()
				p.gotN[d] += cnt
				p.mu.Unlock()
			}}
		}
		return nil
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/blobs/uploads/") && r.Body != nil {
			r.Body = countingBody{r: r.Body, n: &p.up, p: p}
		}
		rp.ServeHTTP(w, r)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln) //nolint:errcheck // closed by cleanup
	t.Cleanup(func() { srv.Close() })
	p.addr = ln.Addr().String()
	return p
}

type closeHook struct {
	io.ReadCloser
	fn func()
}

func (c closeHook) Close() error { err := c.ReadCloser.Close(); c.fn(); return err }

func (p *countingProxy) uploaded() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.up
}

// downloads returns the blobs downloaded since the last call.
func (p *countingProxy) downloads() map[string]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.gotN
	p.got, p.gotN = map[string]int{}, map[string]int64{}
	return out
}

// blobs lists the registry's stored blobs and their sizes.
func (r *registry) blobs(t *testing.T) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	root := filepath.Join(r.data, "docker", "registry", "v2", "blobs", "sha256")
	_ = filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Name() == "data" && fi.Mode().IsRegular() {
			out["sha256:"+filepath.Base(filepath.Dir(p))] = fi.Size()
		}
		return nil
	})
	return out
}

// TestPushPull: strata push to a real registry (docker-registry on
// 127.0.0.1, behind a proxy that counts bytes from its side) and strata
// pull into other stores.
func TestPushPull(t *testing.T) {
	parallel(t)
	imgs := testImages(t)
	reg := startRegistry(t)
	px := startProxy(t, reg)
	repo := px.addr + "/strata/snap"
	h1 := newHome(t)
	env := importImage(h1, "oci:"+filepath.Join(imgs, "oci")+":env", "-b", "env")

	var p1 image.PushResult
	h1.okJSON(&p1, "push", "env", "docker://"+repo+":env", "--tls-verify=false")
	if len(p1.Layers) != len(env.Layers) || p1.Tree != env.Tree {
		t.Fatalf("push env: %+v, want %d layers, tree %s", p1, len(env.Layers), env.Tree.Short())
	}
	if px.uploaded() == 0 || p1.Uploaded == 0 {
		t.Fatalf("first push uploaded nothing (proxy %d, strata %d)", px.uploaded(), p1.Uploaded)
	}
	for i, l := range p1.Layers {
		if l.State != image.BlobUploaded {
			t.Errorf("first push: layer %d %s, want uploaded", i, l.State)
		}
	}

	// The same commit again: no blob is sent.
	before := px.uploaded()
	var p2 image.PushResult
	h1.okJSON(&p2, "push", "env", "docker://"+repo+":env-again", "--tls-verify=false")
	if d := px.uploaded() - before; d != 0 || p2.Digest != p1.Digest {
		t.Errorf("second push of an unchanged commit: %d blob bytes uploaded, digest %s (first %s); want 0 and the same", d, p2.Digest, p1.Digest)
	}
	for i, l := range p2.Layers {
		if l.State != image.BlobExists {
			t.Errorf("second push: layer %d %s, want exists", i, l.State)
		}
	}

	// A one-file commit on it: one small layer (and the config) reach
	// the registry.
	h1.ok("ws", "create", "w", "--from", "env")
	h1.ok("exec", "w", "--", "sh", "-c", "echo pushed > pushed.txt")
	h1.ok("commit", "w", "-m", "one file")
	blobsBefore := reg.blobs(t)
	before = px.uploaded()
	var p3 image.PushResult
	h1.okJSON(&p3, "push", "ws/w", "docker://"+repo+":one", "--tls-verify=false")
	if len(p3.Layers) != len(p1.Layers)+1 {
		t.Fatalf("push ws/w: %d layers, want %d", len(p3.Layers), len(p1.Layers)+1)
	}
	top := p3.Layers[len(p3.Layers)-1]
	var added []string
	var addedBytes int64
	for d, n := range reg.blobs(t) {
		if _, ok := blobsBefore[d]; !ok {
			added = append(added, d)
			addedBytes += n
		}
	}
	sent := px.uploaded() - before
	// New in the registry: the layer, the config, the manifest (stored
	// as a blob too); sent as blob uploads: the layer and the config.
	if len(added) != 3 || reg.blobs(t)[top.Digest] != top.Size || top.Size > 4096 {
		t.Errorf("one-file push: new blobs %v (%d bytes), top layer %s of %d bytes; want it, the config and the manifest, a layer under 4 KiB", added, addedBytes, top.Digest, top.Size)
	}
	if sent <= top.Size || sent > top.Size+8192 {
		t.Errorf("one-file push: %d bytes uploaded, want the %d-byte layer and a config", sent, top.Size)
	}
	if p3.Uploaded != top.Size {
		t.Errorf("push reports %d layer bytes uploaded, want the %d-byte layer (the registry received %d in all)", p3.Uploaded, top.Size, sent)
	}
	var wtree struct {
		Commit struct {
			Tree string `json:"tree"`
		} `json:"commit"`
	}
	h1.okJSON(&wtree, "show", "ws/w")
	if wtree.Commit.Tree != p3.Tree.String() {
		t.Errorf("pushed tree %s, ws/w's %s", p3.Tree, wtree.Commit.Tree)
	}

	// skopeo sees a standard image with the strata labels and the base.
	out, err := exec.Command(testutil.LookPath(t, "skopeo"), "inspect", "--tls-verify=false", "docker://"+repo+":one").Output()
	if err != nil {
		t.Fatalf("skopeo inspect: %v", err)
	}
	var ins struct {
		Layers []string
		Labels map[string]string
		Env    []string
	}
	if err := json.Unmarshal(out, &ins); err != nil {
		t.Fatal(err)
	}
	if len(ins.Layers) != len(p3.Layers) || ins.Labels[image.LabelTree] != p3.Tree.String() || ins.Labels["org.strata.test"] == "" {
		t.Errorf("skopeo inspect: %s", out)
	}
	raw, err := exec.Command(testutil.LookPath(t, "skopeo"), "inspect", "--raw", "--tls-verify=false", "docker://"+repo+":one").Output()
	if err != nil {
		t.Fatalf("skopeo inspect --raw: %v", err)
	}
	if !strings.Contains(string(raw), image.AnnotationBaseDigest) || !strings.Contains(string(raw), env.Config.Digest) {
		t.Errorf("manifest has no %s naming %s: %s", image.AnnotationBaseDigest, env.Config.Digest, raw)
	}

	// podman runs the pushed snapshot (rootless in the rootless pass): the
	// workspace's file is there, over the base image's files as strata
	// pushed them — its whiteouts (etc/issue.net, the directory
	// var/lib/dpkg/alternatives) and its opaque directory
	// (usr/share/common-licenses holds only ONLY), owners and modes.
	pm := newPodman(t)
	got := pm.runImage(repo+":one", `cat /pushed.txt; test ! -e /etc/issue.net && echo no-issue.net; ls -A /usr/share/common-licenses
test ! -e /var/lib/dpkg/alternatives && echo no-alternatives; stat -c "%a %u %g" /opt/env/secret /opt/env/setuid; test -s /etc/debian_version && echo base`)
	if want := "pushed\nno-issue.net\nONLY\nno-alternatives\n640 1000 1000\n4755 0 0\nbase\n"; got != want {
		t.Errorf("podman run of the pushed snapshot printed\n%s\nwant\n%s", got, want)
	}

	// Another repository of the same registry: every layer is there (in
	// strata/snap), so each is mounted, not uploaded.
	before = px.uploaded()
	blobsBefore = reg.blobs(t)
	var p5 image.PushResult
	h1.okJSON(&p5, "push", "ws/w", "docker://"+px.addr+"/strata/other:one", "--tls-verify=false")
	for i, l := range p5.Layers {
		if l.State != image.BlobMounted || l.MountedFrom != px.addr+"/strata/snap" {
			t.Errorf("push to another repository: layer %d %s, from %q; want mounted from %s/strata/snap", i, l.State, l.MountedFrom, px.addr)
		}
	}
	if d := px.uploaded() - before; p5.Uploaded != 0 || d > 8192 || len(reg.blobs(t)) != len(blobsBefore) {
		t.Errorf("push to another repository: strata sent %d layer bytes, the registry received %d bytes and has %d new blobs; want 0, a config, none",
			p5.Uploaded, d, len(reg.blobs(t))-len(blobsBefore))
	}
	if got := pm.runImage(px.addr+"/strata/other:one", "cat /pushed.txt"); got != "pushed\n" {
		t.Errorf("podman run of the mounted push: %q", got)
	}

	// A store with the base: pulling the one-file snapshot downloads
	// only its new layer (and the config).
	h2 := newHome(t)
	var b2 image.Result
	h2.okJSON(&b2, "pull", "docker://"+repo+":env", "-b", "env", "--tls-verify=false")
	if b2.Tree != env.Tree {
		t.Errorf("pulled env tree %s, pushed %s", b2.Tree.Short(), env.Tree.Short())
	}
	px.downloads()
	var r2 image.Result
	h2.okJSON(&r2, "pull", "docker://"+repo+":one", "-b", "one", "--tls-verify=false")
	if r2.Tree != p3.Tree {
		t.Fatalf("pulled tree %s, pushed %s", r2.Tree.Short(), p3.Tree.Short())
	}
	dl := px.downloads()
	for _, l := range p3.Layers[:len(p3.Layers)-1] {
		if _, ok := dl[l.Digest]; ok {
			t.Errorf("pull with the base present downloaded base layer %s", l.Digest)
		}
	}
	if n, ok := dl[top.Digest]; !ok || n != top.Size {
		t.Errorf("pull downloaded %v; want the new layer %s (%d bytes)", dl, top.Digest, top.Size)
	}
	for i, l := range r2.Layers {
		if want := i < len(r2.Layers)-1; l.Reused != want {
			t.Errorf("pull layer %d: reused %v, want %v", i, l.Reused, want)
		}
	}

	// An empty store: the same tree, the same files, usable at once; and
	// its push of what it pulled has the same digests, so sends nothing.
	h3 := newHome(t)
	var r3 image.Result
	h3.okJSON(&r3, "pull", "docker://"+repo+":one", "-b", "one", "--tls-verify=false")
	if r3.Tree != p3.Tree {
		t.Fatalf("pulled into an empty store: tree %s, pushed %s", r3.Tree.Short(), p3.Tree.Short())
	}
	e1, e3 := filepath.Join(t.TempDir(), "e1"), filepath.Join(t.TempDir(), "e3")
	h1.ok("export", "ws/w", e1)
	h3.ok("export", "one", e3)
	compareTrees(t, "export of the pulled commit", scanTree(t, e1), scanTree(t, e3))
	h3.ok("ws", "create", "x", "--from", "one")
	if got := h3.ok("exec", "x", "--", "cat", "pushed.txt").stdout; got != "pushed\n" {
		t.Errorf("pulled workspace: pushed.txt holds %q", got)
	}
	// It pushes what it pulled to a repository of its own: the store
	// knows where the blobs came from, so all are mounted from there.
	before = px.uploaded()
	var p4 image.PushResult
	h3.okJSON(&p4, "push", "one", "docker://"+px.addr+"/strata/h3:from-h3", "--tls-verify=false")
	for i, l := range p4.Layers {
		if l.State != image.BlobMounted || l.MountedFrom != px.addr+"/strata/snap" {
			t.Errorf("push of a pulled snapshot to another repository: layer %d %s from %q; want mounted from %s/strata/snap", i, l.State, l.MountedFrom, px.addr)
		}
	}
	for i := range p3.Layers {
		if i >= len(p4.Layers) || p4.Layers[i].Digest != p3.Layers[i].Digest {
			t.Fatalf("push from a second store: layers %+v, first store's %+v", p4.Layers, p3.Layers)
		}
	}
	if len(p4.Layers) != len(p3.Layers) {
		t.Errorf("push from a second store: %d layers, want %d", len(p4.Layers), len(p3.Layers))
	}
	if d := px.uploaded() - before; d > 8192 || p4.Uploaded != 0 {
		t.Errorf("push from a second store uploaded %d blob bytes (%d layer bytes); want only a config", d, p4.Uploaded)
	}
	h1.fsckClean()
	h2.fsckClean()
	h3.fsckClean()
}

// TestBatchShards: two stores stand in for two machines. Each pulls the
// environment from a registry and runs one of two shards of a 40-job
// batch (one by K/N, one by --shard auto under Slurm's variables);
// batch-merge finds all 40 exactly once, and refuses a set with a shard
// missing or given twice.
func TestBatchShards(t *testing.T) {
	reg := startRegistry(t)
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "task.txt"), []byte("env-ok\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h0 := newHome(t)
	h0.ok("import", src, "-b", "main")
	h0.ok("push", "main", reg.addr+"/strata/env:v1", "--tls-verify=false")

	dir := t.TempDir()
	var jobs strings.Builder
	for i := 0; i < 40; i++ {
		fmt.Fprintf(&jobs, `{"id":"job-%02d","from":"env","cmd":["sh","-c","cat task.txt"]}`+"\n", i)
	}
	jobsFile := filepath.Join(dir, "jobs.jsonl")
	if err := os.WriteFile(jobsFile, []byte(jobs.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	outs := []string{filepath.Join(dir, "shard0.jsonl"), filepath.Join(dir, "shard1.jsonl")}
	for k, out := range outs {
		h := newHome(t)
		h.ok("pull", reg.addr+"/strata/env:v1", "-b", "env", "--tls-verify=false")
		args := []string{"batch", jobsFile, "--out", out, "-j", "2"}
		if k == 0 {
			args = append(args, "--shard", "0/2")
		} else {
			args = append(args, "--shard", "auto")
			h.env = append(h.env, "SLURM_ARRAY_TASK_ID=1", "SLURM_ARRAY_TASK_COUNT=2")
		}
		h.ok(args...)
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) != 20 {
			t.Fatalf("shard %d: %d results, want 20", k, len(lines))
		}
		for _, l := range lines {
			var r struct {
				ID         string `json:"id"`
				Index      int    `json:"index"`
				Shard      string `json:"shard"`
				ExitCode   int    `json:"exit_code"`
				StdoutTail string `json:"stdout_tail"`
			}
			if err := json.Unmarshal([]byte(l), &r); err != nil {
				t.Fatal(err)
			}
			if r.Shard != fmt.Sprintf("%d/2", k) || (r.Index-1)%2 != k || r.ExitCode != 0 || r.StdoutTail != "env-ok\n" {
				t.Errorf("shard %d: result %s", k, l)
			}
		}
	}
	merged := h0.ok("batch-merge", "--jobs", jobsFile, outs[0], outs[1])
	if n := strings.Count(merged.stdout, "\n"); n != 40 {
		t.Errorf("batch-merge: %d lines, want 40", n)
	}
	if !strings.HasPrefix(merged.stdout, `{"id":"job-00"`) {
		t.Errorf("batch-merge: not in job order: %.80s", merged.stdout)
	}
	r := h0.fails(1, "batch-merge", "--jobs", jobsFile, outs[0])
	if !strings.Contains(r.stderr, "missing 20") || !strings.Contains(r.stderr, "job-01") {
		t.Errorf("batch-merge with a shard missing: %s", r)
	}
	r = h0.fails(1, "batch-merge", "--jobs", jobsFile, outs[0], outs[1], outs[1])
	if !strings.Contains(r.stderr, "duplicate 20") {
		t.Errorf("batch-merge with a shard twice: %s", r)
	}
}

// pushDirs lists the strata-push-* directories in a store.
func pushDirs(t *testing.T, h *home) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(h.dir, "strata-push-*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestPushKilledGC: a push keeps its layer blobs in a strata-push-*
// directory of the store. gc leaves a running push's directory alone (it
// holds the directory's lock); a push killed by SIGKILL leaves its
// directory, and the next gc removes it at once (nobody holds its lock),
// the store intact.
func TestPushKilledGC(t *testing.T) {
	imgs := testImages(t)
	h := newHome(t)
	importImage(h, "oci:"+filepath.Join(imgs, "oci")+":env", "-b", "env")
	dest := "oci:" + filepath.Join(t.TempDir(), "layout") + ":env"
	cmd := exec.Command(bin(t), "--home", h.dir, "push", "env", dest)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// Wait until the push has written part of a layer blob.
	var dir string
	deadline := time.Now().Add(time.Minute)
	for dir == "" {
		if time.Now().After(deadline) {
			t.Fatalf("no strata-push-* directory with a blob after a minute: %s", out.String())
		}
		select {
		case err := <-done:
			t.Fatalf("push ended before it could be killed (%v): %s", err, out.String())
		case <-time.After(20 * time.Millisecond):
		}
		for _, d := range pushDirs(t, h) {
			if m, _ := filepath.Glob(filepath.Join(d, "layer*")); len(m) > 0 {
				dir = d
			}
		}
	}
	// gc while it runs: the directory stays.
	var g struct {
		StaleRemoved []string `json:"stale_removed"`
	}
	h.okJSON(&g, "gc")
	select {
	case err := <-done:
		t.Logf("the push finished during gc (%v): the running-push case was not exercised", err)
	default:
		if _, err := os.Stat(dir); err != nil {
			t.Fatalf("gc removed a running push's directory: %v (removed %v)", err, g.StaleRemoved)
		}
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
		if _, err := os.Stat(dir); err != nil {
			t.Fatalf("the killed push left no directory to collect: %v", err)
		}
		h.okJSON(&g, "gc")
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("gc left the killed push's %s (removed %v): %v", dir, g.StaleRemoved, err)
		}
		if len(g.StaleRemoved) != 1 || g.StaleRemoved[0] != dir {
			t.Errorf("gc reports removed %v, want [%s]", g.StaleRemoved, dir)
		}
	}
	if left := pushDirs(t, h); len(left) != 0 {
		t.Errorf("left after gc: %v", left)
	}
	h.fsckClean()
	// The store still pushes.
	h.ok("push", "env", dest)
}

// openPTY opens a pseudo-terminal pair: the master, read by the test, and
// the slave, a command's terminal.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		testutil.Skip(t, "no pseudo-terminals: "+err.Error())
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		m.Close()
		t.Fatalf("unlockpt: %v", err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		m.Close()
		t.Fatalf("ptsname: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	if err := unix.IoctlSetWinsize(int(s.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 40, Col: 120}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); s.Close() })
	return m, s
}

// onPTY runs strata with stdout on a terminal and returns what it wrote
// there (stderr is not on it).
func onPTY(t *testing.T, h *home, args ...string) string {
	t.Helper()
	m, s := openPTY(t)
	cmd := exec.Command(bin(t), append([]string{"--home", h.dir}, args...)...)
	var errb strings.Builder
	cmd.Stdout, cmd.Stderr = s, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.Close() // the command holds it: EOF (EIO) on the master once it exits
	var out bytes.Buffer
	copied := make(chan struct{})
	go func() { _, _ = io.Copy(&out, m); close(copied) }()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("strata %s on a terminal: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	<-copied
	return out.String()
}

// TestPushProgressTTY: on a terminal, push draws a bar per layer and
// clears them before its summary; --json on a terminal, and output that
// is not a terminal, have no bars.
func TestPushProgressTTY(t *testing.T) {
	src := t.TempDir()
	// A layer large enough to be drawn while it is built (the bars redraw
	// at most every 100 ms, and at once when a layer changes state).
	big := make([]byte, 8<<20)
	for i := range big {
		big[i] = byte(i * 7919 >> 8)
	}
	if err := os.WriteFile(filepath.Join(src, "big.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	h := newHome(t)
	h.ok("import", src, "-b", "main")
	h.ok("ws", "create", "w")
	h.ok("exec", "w", "--", "sh", "-c", "echo two > second.txt")
	h.ok("commit", "w", "-m", "second layer")
	layout := filepath.Join(t.TempDir(), "layout")

	out := onPTY(t, h, "push", "ws/w", "oci:"+layout+":tty")
	for _, want := range []string{"layer 1/2", "layer 2/2", "building", "written", "\x1b[J", "pushed "} {
		if !strings.Contains(out, want) {
			t.Errorf("push on a terminal: no %q in %q", want, out)
		}
	}
	// The summary comes after the bars were cleared, and no bar is left.
	clear := strings.LastIndex(out, "\x1b[J")
	if sum := strings.Index(out, "pushed "); sum < clear {
		t.Errorf("summary at %d, bars cleared at %d: %q", sum, clear, out)
	}
	if tail := out[clear+len("\x1b[J"):]; strings.Contains(tail, "[=") || strings.Contains(tail, "\x1b[") {
		t.Errorf("bars after the clear: %q", tail)
	}
	// The same push piped, and with --json on a terminal: no escape sequences.
	piped := h.ok("push", "ws/w", "oci:"+layout+":piped").stdout
	js := onPTY(t, h, "--json", "push", "ws/w", "oci:"+layout+":json")
	for name, o := range map[string]string{"piped": piped, "--json on a terminal": js} {
		if strings.Contains(o, "\x1b") || strings.Contains(o, "building") {
			t.Errorf("push %s: progress in the output: %q", name, o)
		}
	}
	if !strings.HasPrefix(piped, "pushed ") {
		t.Errorf("piped push printed %q", piped)
	}

	// Pull from a registry on a terminal: a bar per layer, cleared.
	reg := startRegistry(t)
	h.ok("push", "ws/w", "docker://"+reg.addr+"/strata/tty:1", "--tls-verify=false")
	out = onPTY(t, newHome(t), "pull", "docker://"+reg.addr+"/strata/tty:1", "-b", "w", "--tls-verify=false")
	for _, want := range []string{"layer 1/2", "layer 2/2", " done", "\x1b[J", "pulled "} {
		if !strings.Contains(out, want) {
			t.Errorf("pull on a terminal: no %q in %q", want, out)
		}
	}
	if clear, sum := strings.LastIndex(out, "\x1b[J"), strings.Index(out, "pulled "); sum < clear {
		t.Errorf("pull: summary at %d, bars cleared at %d: %q", sum, clear, out)
	}
}
