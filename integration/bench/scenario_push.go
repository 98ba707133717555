package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Issue "share" (16): snapshots through an OCI registry. strata push of the
// corpus snapshot to an empty registry (Debian's docker-registry on
// 127.0.0.1) against `skopeo copy` of the same content as an image (the
// same layers, from an OCI layout) to another empty registry; an unchanged
// re-push; a push after a 1-file commit against `skopeo copy` of the image
// rebuilt with the change (one layer, as a `COPY . .` rebuild makes it);
// strata pull into an empty store, and with the base present. Time is the
// command's wall clock; bytes are the growth of the registry's blob
// storage (push, copy) or the gzip bytes of the layers a pull had to
// download (the pushed layers' sizes, by digest).

// regServer is a docker-registry serving one directory.
type regServer struct {
	addr, data string
	cmd        *exec.Cmd
}

func (b *Bench) startRegistry(dir string) (*regServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "config.yml")
	data := filepath.Join(dir, "data")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("version: 0.1\nlog: {level: error}\nstorage: {filesystem: {rootdirectory: %s}}\nhttp: {addr: %s}\n", data, addr)), 0o644); err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("docker-registry", "serve", cfg)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, err
	}
	log.Close()
	r := &regServer{addr: addr, data: data, cmd: cmd}
	for i := 0; i < 200; i++ {
		if resp, err := http.Get("http://" + addr + "/v2/"); err == nil {
			resp.Body.Close()
			return r, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.stop()
	return nil, fmt.Errorf("docker-registry on %s did not answer in 10 s (see %s)", addr, filepath.Join(dir, "registry.log"))
}

func (r *regServer) stop() {
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
}

// blobBytes is the size of the registry's blob storage.
func (r *regServer) blobBytes() int64 {
	return duBytes(filepath.Join(r.data, "docker", "registry", "v2", "blobs"))
}

type pushOut struct {
	Layers []struct {
		DiffID string `json:"diff_id"`
		Digest string `json:"digest"`
		Size   int64  `json:"size"`
		State  string `json:"state"`
	} `json:"layers"`
	Uploaded int64 `json:"uploaded_bytes"`
}

type pullOut struct {
	Layers []struct {
		DiffID    string `json:"diff_id"`
		Reused    bool   `json:"reused"`
		ReadBytes int64  `json:"read_bytes"`
	} `json:"layers"`
}

func runPush(b *Bench) error {
	for _, tool := range []string{"docker-registry", "skopeo"} {
		if !lookTool(tool) {
			b.skip("push", "strata/first", tool+" is not installed (bash scripts/deps.sh installs it)")
			return nil
		}
	}
	if err := b.ensureCorpus(); err != nil {
		return err
	}
	dir := filepath.Join(b.work, "push")
	reg, err := b.startRegistry(filepath.Join(dir, "reg"))
	if err != nil {
		return err
	}
	defer reg.stop()
	// skopeo gets a registry of its own, so that neither finds the
	// other's blobs.
	sreg, err := b.startRegistry(filepath.Join(dir, "sreg"))
	if err != nil {
		return err
	}
	defer sreg.stop()
	insecure := "--tls-verify=false"

	// push: time and registry growth, one sample per destination.
	push := func(key string, st *Bench, ref string, dests ...string) (pushOut, error) {
		var out pushOut
		var ts, bs []float64
		for _, dest := range dests {
			before := reg.blobBytes()
			syncFS()
			d, err := st.stJSON(&out, "push", ref, "docker://"+reg.addr+"/"+dest, insecure)
			if err != nil {
				return out, err
			}
			ts, bs = append(ts, float64(d)), append(bs, float64(reg.blobBytes()-before))
		}
		b.record("push", key+"/time", unitNS, ts, "")
		b.record("push", key+"/bytes", unitBytes, bs, "")
		return out, nil
	}
	copyImage := func(key, layout, dest string) error {
		before := sreg.blobBytes()
		syncFS()
		_, d, err := b.run("", nil, "skopeo", "copy", "-q", "--dest-tls-verify=false", "oci:"+layout, "docker://"+sreg.addr+"/"+dest)
		if err != nil {
			return err
		}
		b.record("push", key+"/time", unitNS, []float64{float64(d)}, "")
		b.record("push", key+"/bytes", unitBytes, []float64{float64(sreg.blobBytes() - before)}, "")
		return nil
	}
	// skopeo's pull: the image from its registry into one OCI layout
	// (blobs the layout has are not downloaded again).
	pulled := filepath.Join(dir, "skopeo-pulled")
	copyDown := func(key, src, tag string) error {
		before := duBytes(pulled)
		syncFS()
		_, d, err := b.run("", nil, "skopeo", "copy", "-q", "--src-tls-verify=false", "docker://"+sreg.addr+"/"+src, "oci:"+pulled+":"+tag)
		if err != nil {
			return err
		}
		b.record("push", key+"/time", unitNS, []float64{float64(d)}, "")
		b.record("push", key+"/bytes", unitBytes, []float64{float64(duBytes(pulled) - before)}, "")
		return nil
	}
	// pull: time, and the gzip bytes of the layers it downloaded.
	sizes := map[string]int64{} // diff ID → gzip size, from the pushes
	pull := func(key string, st *Bench, src, branch string) error {
		var out pullOut
		syncFS()
		d, err := st.stJSON(&out, "pull", "docker://"+reg.addr+"/"+src, "-b", branch, insecure)
		if err != nil {
			return err
		}
		var n int64
		for _, l := range out.Layers {
			if !l.Reused {
				n += sizes[l.DiffID]
			}
		}
		b.record("push", key+"/time", unitNS, []float64{float64(d)}, "")
		b.record("push", key+"/bytes", unitBytes, []float64{float64(n)}, "")
		return nil
	}
	note := func(o pushOut) {
		for _, l := range o.Layers {
			sizes[l.DiffID] = l.Size
		}
	}

	b.logf("push: strata push of the corpus to an empty registry")
	first, err := push("strata/first", b, "main", "strata/corpus:1")
	if err != nil {
		return err
	}
	note(first)
	reps := 5
	if b.cfg.quick {
		reps = 2
	}
	var again []string
	for i := 0; i < reps; i++ {
		again = append(again, fmt.Sprintf("strata/corpus:again%d", i))
	}
	if _, err := push("strata/again", b, "main", again...); err != nil {
		return err
	}
	// The same content as an image: the layout strata writes (untimed),
	// copied by skopeo.
	layout := filepath.Join(dir, "layout")
	if _, _, err := b.st("-q", "push", "main", "oci:"+layout+":1"); err != nil {
		return err
	}
	b.logf("push: skopeo copy of the same image")
	if err := copyImage("skopeo/first", layout+":1", "skopeo/corpus:1"); err != nil {
		return err
	}

	b.logf("push: strata pull into an empty store")
	empty := &Bench{ctx: b.ctx, cfg: b.cfg, pass: b.pass, strata: b.strata, home: filepath.Join(dir, "store-empty"), work: b.work, log: b.log}
	if err := pull("strata/pull-empty", empty, "strata/corpus:1", "main"); err != nil {
		return err
	}
	b.logf("push: skopeo copy from the registry into an empty OCI layout")
	if err := copyDown("skopeo/pull-empty", "skopeo/corpus:1", "1"); err != nil {
		return err
	}

	// A 1-file commit. The workspace appends a line to a file of the
	// corpus; the rebuilt image is the corpus with the same change.
	var rel string
	_ = filepath.WalkDir(b.cfg.corpus, func(p string, d os.DirEntry, err error) error {
		if err == nil && rel == "" && d.Type().IsRegular() && strings.HasSuffix(p, ".js") {
			rel, _ = filepath.Rel(b.cfg.corpus, p)
		}
		return nil
	})
	if rel == "" {
		return fmt.Errorf("no .js file in the corpus %s", b.cfg.corpus)
	}
	if _, _, err := b.st("-q", "ws", "create", "push-w"); err != nil {
		return err
	}
	defer b.st("-q", "ws", "rm", "--force", "push-w")
	if _, _, err := b.st("exec", "push-w", "--sandbox", "none", "--", "/bin/sh", "-ec", "echo '// changed' >> '"+rel+"'"); err != nil {
		return err
	}
	if _, _, err := b.st("-q", "commit", "push-w", "-m", "one file"); err != nil {
		return err
	}
	b.logf("push: strata push after a 1-file commit")
	inc, err := push("strata/inc", b, "ws/push-w", "strata/corpus:2")
	if err != nil {
		return err
	}
	note(inc)
	// The rebuilt image: the changed tree imported into a store of its
	// own and written as a one-layer OCI image (untimed, as a docker
	// build would be), then copied by skopeo.
	changed, err := b.copyCorpus()
	if err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(changed, rel), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString("// changed\n")
	f.Close()
	if err != nil {
		return err
	}
	rebuilt := &Bench{ctx: b.ctx, cfg: b.cfg, pass: b.pass, strata: b.strata, home: filepath.Join(dir, "store-rebuilt"), work: b.work, log: b.log}
	if _, _, err := rebuilt.st("-q", "import", changed, "-b", "main"); err != nil {
		return err
	}
	if _, _, err := rebuilt.st("-q", "push", "main", "oci:"+layout+":2"); err != nil {
		return err
	}
	b.corpusCopy = "" // changed: no other scenario may take it for the corpus
	if err := removeAll(changed); err != nil {
		return err
	}
	b.logf("push: skopeo copy of the rebuilt image")
	if err := copyImage("skopeo/inc", layout+":2", "skopeo/corpus:2"); err != nil {
		return err
	}

	b.logf("push: strata pull with the base present")
	if err := pull("strata/pull-base", empty, "strata/corpus:2", "w"); err != nil {
		return err
	}
	b.logf("push: skopeo copy of the rebuilt image into that layout")
	return copyDown("skopeo/pull-base", "skopeo/corpus:2", "2")
}

// smallRatio is fmtRatio, except that a ratio under 1/1000 reads as
// "1/N" (a few KiB against a whole image).
func smallRatio(a, b float64) string {
	if a > 0 && b > 0 && a/b < 0.001 {
		return fmt.Sprintf("1/%.0f", b/a)
	}
	return fmtRatio(a, b)
}

func reportPush(r *Results) []Table {
	if !r.has("push") {
		return nil
	}
	t := Table{
		Title:  "Snapshots through a registry: strata push/pull of the corpus against skopeo copy of the same image",
		Header: append([]string{"what"}, passHeader(r.Passes, "time", "bytes", "skopeo time", "skopeo bytes", "time ÷ skopeo", "bytes ÷ skopeo")...),
	}
	rows := []struct{ key, peer, label string }{
		{"strata/first", "skopeo/first", "push to an empty registry (skopeo: copy of the same image)"},
		{"strata/again", "", "push again, unchanged (p50)"},
		{"strata/inc", "skopeo/inc", "push after a 1-file commit (skopeo: copy of the image rebuilt with the change)"},
		{"strata/pull-empty", "skopeo/pull-empty", "pull into an empty store (skopeo: copy from its registry into an empty OCI layout)"},
		{"strata/pull-base", "skopeo/pull-base", "pull of the 1-file commit, base present (skopeo: the rebuilt image into that layout)"},
	}
	for _, row := range rows {
		cells := []string{row.label}
		for _, p := range r.Passes {
			cells = append(cells, r.cell(p, "push", row.key+"/time", "p50"), r.cell(p, "push", row.key+"/bytes", "p50"))
			if row.peer == "" {
				cells = append(cells, "", "", "", "")
				continue
			}
			cells = append(cells, r.cell(p, "push", row.peer+"/time", "p50"), r.cell(p, "push", row.peer+"/bytes", "p50"),
				r.ratio(p, "push", row.key+"/time", row.peer+"/time", "p50"), smallRatio(r.value(p, "push", row.key+"/bytes", "p50"), r.value(p, "push", row.peer+"/bytes", "p50")))
		}
		t.Rows = append(t.Rows, cells)
	}
	t.Notes = append([]string{
		"From the issue: push/pull time and bytes of the corpus snapshot against `skopeo copy` of the same content as an image; an incremental push after a 1-file change against the same with a rebuilt image. Registries: Debian's docker-registry on 127.0.0.1, plain HTTP, one for strata and one for skopeo. Push and copy bytes are the growth of the registry's blob storage (layers, config, manifest); pull bytes are the gzip bytes of the layers the pull downloaded (skopeo's: the growth of its OCI layout). strata's pull also imports into the store (hashing, chunking, compressing with zstd); skopeo's only writes the blobs. skopeo copies blobs that exist (an OCI layout strata wrote, untimed); strata builds each layer's tar and gzip from the store, so a first push pays for compression that skopeo's copy does not. The rebuilt image is one layer, as `COPY . .` makes it.",
	}, r.skips("push")...)
	return []Table{t}
}
