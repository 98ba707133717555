package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Issue "environments" (13): container images as workspace roots, against
// rootless podman (Debian's, the runtime the issue names), on the test
// images of `make images` pushed to Debian's docker-registry on
// 127.0.0.1:
//
//   - pull time and storage growth for N images that share a base:
//     `strata pull` of each into one store against `podman pull` of each
//     into one podman storage (du of it), with each image's own layers'
//     tar bytes beside (what a store that shares layers must grow by);
//   - a run in an image: `strata run --from IMAGE -- true` against
//     `podman run --rm IMAGE true`, interleaved, and the floor (fork and
//     exec of /bin/true) to read strata's overhead from;
//   - the SWE-bench example's instances per hour at parallel 1, 2 and 4:
//     the harness's batch of K instances (`strata batch` of the jobs it
//     writes) against the same job scripts run by `podman run --rm` each,
//     N at a time; and the harness end to end once.

// images is the order the pull rows take: the base, then images on it.
var benchImages = []string{"base", "env", "instance", "sweb.env.textkit", "sweb.eval.textkit_1776_textkit-1", "sweb.eval.textkit_1776_textkit-2"}

// benchPodman is Debian's podman with storage of the pass's own (as the
// integration tests run it: runc, cgroupfs, no events, a short runroot).
type benchPodman struct {
	b     *Bench
	flags []string
	env   []string
	root  string
	short string
}

func (b *Bench) newPodman(dir string) (*benchPodman, error) {
	short, err := os.MkdirTemp("/tmp", "pmb")
	if err != nil {
		return nil, err
	}
	p := &benchPodman{b: b, root: filepath.Join(dir, "root"), short: short}
	for _, d := range []string{filepath.Join(short, "xdg"), filepath.Join(dir, "config")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	p.flags = []string{"--root", p.root, "--runroot", filepath.Join(short, "run"), "--storage-driver", "overlay",
		"--runtime", "runc", "--cgroup-manager", "cgroupfs", "--events-backend", "none"}
	p.env = []string{"XDG_RUNTIME_DIR=" + filepath.Join(short, "xdg"), "XDG_CONFIG_HOME=" + filepath.Join(dir, "config")}
	return p, nil
}

func (p *benchPodman) run(args ...string) (string, time.Duration, error) {
	return p.b.run("", p.env, append(append([]string{"podman"}, p.flags...), args...)...)
}

// runArgs are podman run's flags of every container here: no network
// (no slirp4netns or pasta to set up, as strata's jobs need none), and
// explicit limits (root's podman raises them past what a root without
// CAP_SYS_RESOURCE may).
var podmanRunArgs = []string{"run", "--rm", "--network", "none", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"}

// storage is the apparent size of podman's storage; rootless, read from
// its user namespace (its files belong to subordinate ids).
func (p *benchPodman) storage() (int64, error) {
	if _, err := os.Stat(p.root); err != nil {
		return 0, nil // nothing pulled yet
	}
	var out string
	var err error
	if os.Geteuid() == 0 {
		out, _, err = p.b.run("", nil, "du", "-sb", p.root)
	} else {
		out, _, err = p.run("unshare", "du", "-sb", p.root)
	}
	if err != nil {
		return 0, err
	}
	f := strings.Fields(out)
	if len(f) == 0 {
		return 0, fmt.Errorf("du: %q", out)
	}
	return strconv.ParseInt(f[0], 10, 64)
}

func (p *benchPodman) close() {
	_, _, _ = p.run("system", "reset", "--force")
	_ = os.RemoveAll(p.short)
}

func runImages(b *Bench) error {
	imgs := envOr("STRATA_IMAGES", "/var/tmp/strata-cache/images")
	if _, err := os.Stat(filepath.Join(imgs, ".key")); err != nil {
		b.skip("images", "strata/run", "the test images are missing at "+imgs+": make images (as root)")
		return nil
	}
	for _, tool := range []string{"docker-registry", "skopeo"} {
		if !lookTool(tool) {
			b.skip("images", "strata/run", tool+" is not installed (bash scripts/deps.sh installs it)")
			return nil
		}
	}
	havePodman := lookTool("podman") && lookTool("runc")
	dir := filepath.Join(b.work, "images")
	reg, err := b.startRegistry(filepath.Join(dir, "reg"))
	if err != nil {
		return err
	}
	defer reg.stop()
	b.logf("images: pushing the test images to %s (untimed)", reg.addr)
	ref := func(tag string) string { return reg.addr + "/strata-test/" + tag + ":latest" }
	for _, tag := range benchImages {
		if _, err := b.must("", "skopeo", "copy", "-q", "--dest-tls-verify=false", "oci:"+filepath.Join(imgs, "oci")+":"+tag, "docker://"+ref(tag)); err != nil {
			return err
		}
	}
	var pm *benchPodman
	if havePodman {
		if pm, err = b.newPodman(filepath.Join(dir, "podman")); err != nil {
			return err
		}
		defer pm.close()
	} else {
		b.skip("images", "podman/run", "podman or runc is not installed (bash scripts/deps.sh installs them)")
	}

	// Pull N images sharing a base, one by one, each tool into storage
	// of its own.
	st := &Bench{ctx: b.ctx, cfg: b.cfg, pass: b.pass, strata: b.strata, home: filepath.Join(dir, "store"), work: b.work, log: b.log}
	for i, tag := range benchImages {
		var out pullOut
		syncFS()
		before := duBytes(st.home)
		d, err := st.stJSON(&out, "pull", "docker://"+ref(tag), "-b", "img/"+tag, "--tls-verify=false")
		if err != nil {
			return err
		}
		var unique int64
		for _, l := range out.Layers {
			if !l.Reused {
				unique += l.ReadBytes
			}
		}
		key := fmt.Sprintf("pull/%d", i)
		b.record("images", key+"/strata/time", unitNS, []float64{float64(d)}, "")
		b.record("images", key+"/strata/bytes", unitBytes, []float64{float64(duBytes(st.home) - before)}, "")
		b.record("images", key+"/unique", unitBytes, []float64{float64(unique)}, "")
		if pm == nil {
			continue
		}
		pb, err := pm.storage()
		if err != nil {
			return err
		}
		syncFS()
		_, pd, err := pm.run("pull", "-q", "--tls-verify=false", ref(tag))
		if err != nil {
			return err
		}
		pa, err := pm.storage()
		if err != nil {
			return err
		}
		b.record("images", key+"/podman/time", unitNS, []float64{float64(pd)}, "")
		b.record("images", key+"/podman/bytes", unitBytes, []float64{float64(pa - pb)}, "")
	}
	b.record("images", "pull/total/strata/bytes", unitBytes, []float64{float64(duBytes(st.home))}, "")
	if pm != nil {
		if n, err := pm.storage(); err == nil {
			b.record("images", "pull/total/podman/bytes", unitBytes, []float64{float64(n)}, "")
		}
	}

	// A run in an image, interleaved with podman's and the floor.
	img := "sweb.eval.textkit_1776_textkit-1"
	if _, _, err := st.st("-q", "run", "--from", "img/"+img, "--", "true"); err != nil { // its layers, once
		return err
	}
	if pm != nil {
		if _, _, err := pm.run(append(podmanRunArgs, ref(img), "true")...); err != nil {
			return err
		}
	}
	// The host view's run of a one-file project, for reference.
	tiny := filepath.Join(dir, "tiny")
	if err := os.MkdirAll(tiny, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tiny, "f"), []byte("f\n"), 0o644); err != nil {
		return err
	}
	if _, _, err := st.st("-q", "import", tiny, "-b", "tiny"); err != nil {
		return err
	}
	if _, _, err := st.st("-q", "run", "--from", "tiny", "--", "true"); err != nil {
		return err
	}
	n := b.cfg.n.exec / 4
	if n < 5 {
		n = 5
	}
	var sr, hr, pr, fr []time.Duration
	phases := map[string][]float64{}
	for i := 0; i < n; i++ {
		var res struct {
			Durations map[string]float64 `json:"durations_ns"`
		}
		d, err := st.stJSON(&res, "run", "--from", "img/"+img, "--", "true")
		if err != nil {
			return err
		}
		sr = append(sr, d)
		for _, ph := range []string{"fork", "run", "total"} {
			phases[ph] = append(phases[ph], res.Durations[ph])
		}
		if d, err = st.stJSON(&res, "run", "--from", "tiny", "--", "true"); err != nil {
			return err
		}
		hr = append(hr, d)
		if pm != nil {
			_, d, err := pm.run(append(podmanRunArgs, ref(img), "true")...)
			if err != nil {
				return err
			}
			pr = append(pr, d)
		}
		_, d, err = b.run("", nil, "/bin/true")
		if err != nil {
			return err
		}
		fr = append(fr, d)
	}
	b.record("images", "run/strata", unitNS, durs(sr), "")
	b.record("images", "run/host", unitNS, durs(hr), "")
	b.record("images", "run/floor", unitNS, durs(fr), "")
	for ph, v := range phases {
		b.record("images", "run/phase/"+ph, unitNS, v, "")
	}
	if pm != nil {
		b.record("images", "run/podman", unitNS, durs(pr), "")
	}

	return b.imagesSWEBench(st, pm, imgs, dir, ref)
}

// imagesSWEBench measures the SWE-bench example's throughput.
func (b *Bench) imagesSWEBench(st *Bench, pm *benchPodman, imgs, dir string, ref func(string) string) error {
	src := os.Getenv("BENCH_SRC")
	harness := filepath.Join(src, "examples", "swebench", "harness.py")
	if _, err := os.Stat(harness); src == "" || err != nil {
		b.skip("images", "swe/strata/1", "BENCH_SRC (scripts/bench.sh's copy of examples/swebench) is not set")
		return nil
	}
	// K instances: copies of the dataset's rows under new ids, so that
	// every job is a whole instance of its own.
	var rows []map[string]any
	data, err := os.ReadFile(filepath.Join(imgs, "swebench", "dataset.json"))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, &rows); err != nil {
		return err
	}
	k := 8
	if b.cfg.quick {
		k = 4
	}
	var set []map[string]any
	for i := 0; i < k; i++ {
		r := map[string]any{}
		for key, v := range rows[i%len(rows)] {
			r[key] = v
		}
		r["instance_id"] = fmt.Sprintf("%s-c%d", r["instance_id"], i)
		set = append(set, r)
	}
	dataset := filepath.Join(dir, "dataset.json")
	db, _ := json.Marshal(set)
	if err := os.WriteFile(dataset, db, 0o644); err != nil {
		return err
	}
	work := filepath.Join(dir, "swe")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	harnessRun := func(runID string, par int) (time.Duration, error) {
		_, d, err := b.run(work, nil, "python3", harness, "--dataset", dataset, "--predictions", "gold", "--run-id", runID,
			"--image-source", "docker://"+ref("{image}"), "--tls-verify", "false", "--home", st.home, "--strata", b.strata,
			"-j", strconv.Itoa(par), "--log-dir", filepath.Join(work, "logs"), "--report-dir", filepath.Join(work, "reports"))
		return d, err
	}
	b.logf("images: the SWE-bench harness over %d instances (setup)", k)
	if _, err := harnessRun("setup", 1); err != nil {
		return err
	}
	var rep struct {
		Resolved []string `json:"resolved_ids"`
	}
	if rb, err := os.ReadFile(filepath.Join(work, "reports", "gold.setup.json")); err == nil {
		_ = json.Unmarshal(rb, &rep)
	}
	note := fmt.Sprintf("the harness resolved %d of %d instances", len(rep.Resolved), k)
	runDir := filepath.Join(work, "logs", "strata", "setup")
	jobsFile, files := filepath.Join(runDir, "jobs.jsonl"), filepath.Join(runDir, "files")
	type job struct {
		ID   string   `json:"id"`
		From string   `json:"from"`
		Cmd  []string `json:"cmd"`
	}
	var jobs []job
	jf, err := os.Open(jobsFile)
	if err != nil {
		return err
	}
	sc := bufio.NewScanner(jf)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var j job
		if err := json.Unmarshal(sc.Bytes(), &j); err != nil {
			jf.Close()
			return err
		}
		jobs = append(jobs, j)
	}
	jf.Close()
	image := func(j job) string { return strings.TrimPrefix(j.From, "swebench/image/") }

	for _, par := range []int{1, 2, 4} {
		out := filepath.Join(work, fmt.Sprintf("out-%d.jsonl", par))
		_ = os.Remove(out)
		_ = removeAll(filepath.Join(work, fmt.Sprintf("output-%d", par)))
		syncFS()
		_, d, err := st.st("-q", "batch", jobsFile, "-j", strconv.Itoa(par), "--out", out,
			"--output", filepath.Join(work, fmt.Sprintf("output-%d", par)), "--ro", files)
		if err != nil && !strings.Contains(err.Error(), "exit status 4") {
			return err
		}
		b.record("images", fmt.Sprintf("swe/strata/%d", par), unitNS, []float64{float64(d)}, note)
		if pm == nil {
			continue
		}
		// The same job scripts, each in a container of its own, par at a
		// time, the files bound read-only where the jobs read them.
		syncFS()
		start := time.Now()
		var wg sync.WaitGroup
		var mu sync.Mutex
		var firstErr error
		todo := make(chan job)
		for w := 0; w < par; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range todo {
					args := append(append([]string{}, podmanRunArgs...), "-v", files+":"+files+":ro", "-w", "/testbed",
						ref(image(j)), "bash", "-c", j.Cmd[2])
					if _, _, err := pm.run(args...); err != nil {
						mu.Lock()
						if firstErr == nil {
							firstErr = err
						}
						mu.Unlock()
					}
				}
			}()
		}
		for _, j := range jobs {
			todo <- j
		}
		close(todo)
		wg.Wait()
		if firstErr != nil {
			return fmt.Errorf("podman loop: %w", firstErr)
		}
		b.record("images", fmt.Sprintf("swe/podman/%d", par), unitNS, []float64{float64(time.Since(start))}, "")
	}
	b.record("images", "swe/instances", unitCount, []float64{float64(k)}, "")
	d, err := harnessRun("e2e", 4)
	if err != nil {
		return err
	}
	b.record("images", "swe/harness/4", unitNS, []float64{float64(d)}, "")
	return nil
}

func reportImages(r *Results) []Table {
	if !r.has("images") {
		return nil
	}
	var out []Table
	run := Table{
		Title:  "A run in an image: `strata run --from IMAGE -- true` against rootless `podman run --rm IMAGE true`",
		Header: append([]string{"what", "N"}, passHeader(r.Passes, "p50", "p99", "÷ podman")...),
	}
	for _, row := range []struct{ label, key string }{
		{"`strata run --from IMAGE -- true`", "run/strata"},
		{"· its `durations_ns.fork`: run directory, layer stack, image config", "run/phase/fork"},
		{"· its `durations_ns.run`: namespaces, the root's mounts, `true`, teardown", "run/phase/run"},
		{"· its `durations_ns.total`: the run as the library sees it (CLI start and store open excluded)", "run/phase/total"},
		{"`strata run --from PROJECT -- true` (host view, a one-file project)", "run/host"},
		{"`podman run --rm --network none IMAGE true`", "run/podman"},
		{"floor: fork + exec of `/bin/true`", "run/floor"},
	} {
		cells := []string{row.label, nOf(r, "images", row.key)}
		for _, p := range r.Passes {
			ratio := ""
			if row.key != "run/podman" && !strings.HasPrefix(row.key, "run/phase/") {
				ratio = r.ratio(p, "images", row.key, "run/podman", "p50")
			}
			cells = append(cells, r.cell(p, "images", row.key, "p50"), r.cell(p, "images", row.key, "p99"), ratio)
		}
		run.Rows = append(run.Rows, cells)
	}
	over := []string{"strata's overhead over the floor (p50 − p50)", ""}
	for _, p := range r.Passes {
		s, f := r.value(p, "images", "run/strata", "p50"), r.value(p, "images", "run/floor", "p50")
		cell := "—"
		if s > 0 && f > 0 {
			cell = fmtDur(s - f)
		}
		over = append(over, cell, "", "")
	}
	run.Rows = append(run.Rows, over)
	run.Notes = []string{"Target from the issue: a run's overhead under 10 ms (podman's is hundreds). The image is `sweb.eval.textkit_1776_textkit-1` (Debian bookworm with python3, pytest, git), pulled from a docker-registry on 127.0.0.1 into each tool's storage first; its layers are materialized once, before the samples. strata's run is a tmpfs upper, its own PID namespace, the image's /proc, /dev, /tmp, resolv.conf and hosts; podman's is runc with `--network none`. Interleaved: strata, podman, floor, strata, …"}
	out = append(out, run)

	k := 0.0
	for _, p := range r.Passes {
		if v := r.value(p, "images", "swe/instances", "p50"); v > 0 {
			k = v
		}
	}
	rate := func(p, key string) (float64, string) {
		d := r.value(p, "images", key, "p50")
		if d <= 0 || k == 0 {
			return 0, r.cell(p, "images", key, "p50")
		}
		v := k * 3600 / (d / 1e9)
		return v, fmt.Sprintf("%.0f", v)
	}
	swe := Table{
		Title:  fmt.Sprintf("The SWE-bench example: instances per hour (%.0f instances, gold patches)", k),
		Header: append([]string{"parallel"}, passHeader(r.Passes, "strata", "podman", "strata ÷ podman")...),
	}
	for _, par := range []int{1, 2, 4} {
		cells := []string{strconv.Itoa(par)}
		for _, p := range r.Passes {
			s, sc := rate(p, fmt.Sprintf("swe/strata/%d", par))
			q, pc := rate(p, fmt.Sprintf("swe/podman/%d", par))
			ratio := ""
			if s > 0 && q > 0 {
				ratio = fmtRatio(s, q)
			}
			cells = append(cells, sc, pc, ratio)
		}
		swe.Rows = append(swe.Rows, cells)
	}
	e2e := []string{"4, the harness end to end"}
	for _, p := range r.Passes {
		_, c := rate(p, "swe/harness/4")
		e2e = append(e2e, c, "", "")
	}
	swe.Rows = append(swe.Rows, e2e)
	swe.Notes = append([]string{"strata: `strata batch` of the jobs examples/swebench/harness.py writes (each: apply the patch in /testbed with SWE-bench's fallbacks, run the instance's eval.sh), `-j N`, each job a one-shot run in the instance image with the run's files bound read-only; podman: the same job scripts, each `podman run --rm --network none -v FILES:FILES:ro -w /testbed IMAGE bash -c SCRIPT`, N at a time. Grading is the same Python for both and is not in these figures; the last row is the harness's whole run (imports checked, files written, batch, grading)."},
		r.notes("images")...)
	out = append(out, swe)

	pull := Table{
		Title:  "N images sharing a base: pull time and storage growth, strata against podman",
		Header: append([]string{"image"}, passHeader(r.Passes, "strata time", "podman time", "its own layers", "strata growth", "podman growth", "strata growth ÷ own layers")...),
	}
	for i, tag := range benchImages {
		key := fmt.Sprintf("pull/%d", i)
		cells := []string{fmt.Sprintf("%d. %s", i+1, tag)}
		for _, p := range r.Passes {
			cells = append(cells, r.cell(p, "images", key+"/strata/time", "p50"), r.cell(p, "images", key+"/podman/time", "p50"),
				r.cell(p, "images", key+"/unique", "p50"), r.cell(p, "images", key+"/strata/bytes", "p50"), r.cell(p, "images", key+"/podman/bytes", "p50"),
				smallRatio(r.value(p, "images", key+"/strata/bytes", "p50"), r.value(p, "images", key+"/unique", "p50")))
		}
		pull.Rows = append(pull.Rows, cells)
	}
	total := []string{"all, storage at the end"}
	for _, p := range r.Passes {
		total = append(total, "", "", "", r.cell(p, "images", "pull/total/strata/bytes", "p50"), r.cell(p, "images", "pull/total/podman/bytes", "p50"), "")
	}
	pull.Rows = append(pull.Rows, total)
	pull.Notes = append([]string{"Target from the issue: store growth per extra image = only its unique layers. Each image is pulled (`strata pull`, `podman pull`) from a docker-registry on 127.0.0.1 into storage that holds the images above it; \"its own layers\" are the uncompressed tar bytes of the layers the store did not have (strata's pull reports them), so a growth well under them is compression and deduplicated chunks, and a growth near zero an image of shared layers. strata stores chunks compressed (zstd); podman stores each layer unpacked (overlay driver). Sizes: strata the store directory's apparent size, podman `du -sb` of its storage (rootless: in its user namespace)."},
		r.skips("images")...)
	out = append(out, pull)
	return out
}
