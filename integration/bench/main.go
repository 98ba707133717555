// Command bench is strata's benchmark harness (`make bench`,
// scripts/bench.sh). It measures strata against the tools people use today
// for the same jobs — git worktree + cp, fuse-overlayfs, restic, git —
// side by side in one run, as root and rootless, and prints markdown tables
// of absolute figures and ratios. It asserts nothing about timings:
// benchmarks are measurements (STYLE.md).
//
// Terms: a *pass* is one run of the scenarios as one user with its own
// store and scratch directory ("root", then "rootless": the unprivileged
// user, through setpriv). A *scenario* measures one thing (create, peers,
// reads, commit, sandbox, runs) and records *Measures*: the summary
// (N, p50, p99, …) of a quantity's samples. The rootless pass runs this
// same binary with -worker and hands its Measures back as JSON.
//
// Environment (scripts/bench.sh passes it on):
//
//	BENCH_QUICK=1        small N everywhere, no 100k tree: a smoke run (a few minutes)
//	BENCH_ONLY=a,b       only these scenarios (create, peers, reads, commit, sandbox,
//	                     runs, view, mcp, deltas, push, floor, images, backends) or
//	                     issues (workspaces = create,peers,reads; store = deltas;
//	                     share = push; hotpath = floor; environments = images;
//	                     backends: XFS and Btrfs on loop devices, root)
//	BENCH_BASE=BIN       a baseline strata (beside its strata-init) for the view
//	                     scenario's before/after rows; BENCH_BASE_REV names it
//	BENCH_OUT=FILE       the results file (default /tmp/strata-bench/results.md)
//	BENCH_USER=NAME      the rootless user (default strata-test, else nobody)
//	BENCH_ROOTLESS=0     skip the rootless pass
//	BENCH_CACHE=DIR      generated trees (default /var/tmp/strata-cache/bench-trees)
//	BENCH_TMP=DIR        where the scratch directories go (default /var/tmp: a disk)
//	STRATA_CORPUS=DIR    the shared corpus (make corpus)
//	STRATA_IMAGES=DIR    the test images (make images), for the images scenario
//	BENCH_SRC=DIR        a copy of examples/swebench and python/src readable by the
//	                     rootless user (scripts/bench.sh makes it)
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// counts are the sample sizes of a run.
type counts struct {
	exec       int // ws create + exec, live exec, sandbox modes, fuse mounts
	peer       int // git worktree + cp (seconds each), bare npm test
	readWarm   int
	readCold   int
	commit     int // strata commits per tree
	peerCommit int // restic / git commits per tree (seconds each)
	big        int // 100 MB commits per kind
	runs       int // runs per parallelism level
}

var (
	fullCounts  = counts{exec: 200, peer: 7, readWarm: 10, readCold: 3, commit: 20, peerCommit: 10, big: 3, runs: 100}
	quickCounts = counts{exec: 20, peer: 2, readWarm: 3, readCold: 1, commit: 5, peerCommit: 2, big: 1, runs: 4}
)

type config struct {
	strata, corpus, cache, tmp, out, doc string
	user                                 string
	only                                 map[string]bool
	quick, rootless                      bool
	n                                    counts
	peersPass                            string // the pass that runs the commit peers
	command, rev                         string
	base, baseRev                        string // the view scenario's baseline strata binary, and its revision
	// fsDirs are the backends scenario's filesystems ({"xfs", mount point}),
	// made by the root parent; fsSkip says why there are none.
	fsDirs [][2]string
	fsSkip string

	// worker mode (the rootless pass, started by the root parent)
	worker, cleanupOnly bool
	home, work, jsonOut string
}

func (c config) peersHere(pass string) bool { return pass == c.peersPass }

// A scenario is one measured job; see the package comment.
type scenario struct {
	name, issue string
	run         func(*Bench) error
	report      func(*Results) []Table
}

var scenarios = []scenario{
	{name: "create", issue: "workspaces", run: runCreate},
	{name: "peers", issue: "workspaces", run: runPeers, report: reportWorkspaces},
	{name: "reads", issue: "workspaces", run: runReads, report: reportReads},
	{name: "commit", issue: "commit", run: runCommit, report: reportCommit},
	{name: "sandbox", issue: "sandbox", run: runSandbox, report: reportSandbox},
	{name: "runs", issue: "runs", run: runRuns, report: reportRuns},
	{name: "view", issue: "view", run: runView, report: reportView},
	{name: "mcp", issue: "mcp", run: runMCP, report: reportMCP},
	{name: "deltas", issue: "store", run: runDeltas, report: reportDeltas},
	{name: "push", issue: "share", run: runPush, report: reportPush},
	{name: "floor", issue: "hotpath", run: runFloor, report: reportFloor},
	{name: "images", issue: "environments", run: runImages, report: reportImages},
	{name: "backends", issue: "backends", run: runBackends, report: reportBackends},
}

func (c config) selected(s scenario) bool {
	return len(c.only) == 0 || c.only[s.name] || c.only[s.issue]
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func parseConfig() config {
	var c config
	var only string
	flag.StringVar(&c.strata, "strata", envOr("STRATA_BIN", "bin/strata"), "the strata binary")
	flag.StringVar(&c.corpus, "corpus", envOr("STRATA_CORPUS", "/var/tmp/strata-cache/corpus"), "the shared corpus")
	flag.StringVar(&c.cache, "cache", envOr("BENCH_CACHE", "/var/tmp/strata-cache/bench-trees"), "cache of generated trees")
	flag.StringVar(&c.tmp, "tmp", envOr("BENCH_TMP", "/var/tmp"), "where scratch directories go")
	flag.StringVar(&c.out, "out", envOr("BENCH_OUT", "/tmp/strata-bench/results.md"), "results file")
	flag.StringVar(&c.doc, "doc", os.Getenv("BENCH_DOC"), "a markdown file whose results section to replace (docs/bench.md)")
	flag.StringVar(&c.user, "user", envOr("BENCH_USER", defaultUser()), "the rootless user")
	flag.StringVar(&only, "only", os.Getenv("BENCH_ONLY"), "comma-separated scenarios or issues")
	flag.BoolVar(&c.quick, "quick", os.Getenv("BENCH_QUICK") == "1", "small N: a smoke run")
	flag.BoolVar(&c.rootless, "rootless", os.Getenv("BENCH_ROOTLESS") != "0", "run the rootless pass")
	flag.StringVar(&c.command, "command", envOr("BENCH_COMMAND", "make bench"), "the command shown in the results")
	flag.StringVar(&c.rev, "rev", os.Getenv("BENCH_REV"), "the strata revision shown in the results")
	flag.StringVar(&c.base, "base", os.Getenv("BENCH_BASE"), "a baseline strata binary (with its strata-init) for the view scenario")
	flag.StringVar(&c.baseRev, "base-rev", os.Getenv("BENCH_BASE_REV"), "the baseline's revision, shown in the results")
	flag.StringVar(&c.peersPass, "peers-pass", "", "the pass that runs the commit peers (internal)")
	var fsDirs string
	flag.StringVar(&fsDirs, "fs", "", "the backends scenario's filesystems: NAME=DIR,... (internal)")
	flag.StringVar(&c.fsSkip, "fs-skip", "", "why the backends scenario has no filesystem (internal)")
	flag.BoolVar(&c.worker, "worker", false, "run the rootless pass and write its Measures as JSON (internal)")
	flag.BoolVar(&c.cleanupOnly, "cleanup", false, "remove every workspace of -home (internal)")
	flag.StringVar(&c.home, "home", "", "the pass's store (internal)")
	flag.StringVar(&c.work, "work", "", "the pass's scratch directory (internal)")
	flag.StringVar(&c.jsonOut, "json", "", "where the worker writes its Measures (internal)")
	flag.Parse()
	c.n = fullCounts
	if c.quick {
		c.n = quickCounts
	}
	for _, f := range strings.Split(fsDirs, ",") {
		if name, dir, ok := strings.Cut(f, "="); ok {
			c.fsDirs = append(c.fsDirs, [2]string{name, dir})
		}
	}
	c.only = map[string]bool{}
	for _, s := range strings.Split(only, ",") {
		if s = strings.TrimSpace(s); s != "" {
			c.only[s] = true
		}
	}
	if abs, err := filepath.Abs(c.strata); err == nil {
		c.strata = abs
	}
	if c.base != "" {
		if abs, err := filepath.Abs(c.base); err == nil {
			c.base = abs
		}
	}
	return c
}

func defaultUser() string {
	if _, err := user.Lookup("strata-test"); err == nil {
		return "strata-test"
	}
	return "nobody"
}

func main() {
	cfg := parseConfig()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	switch {
	case cfg.cleanupOnly:
		b := &Bench{ctx: ctx, cfg: cfg, pass: "rootless", strata: cfg.strata, home: cfg.home, log: os.Stderr}
		b.cleanupWorkspaces()
	case cfg.worker:
		os.Exit(worker(ctx, cfg))
	default:
		os.Exit(orchestrate(ctx, cfg))
	}
}

// unknownOnly lists BENCH_ONLY names that match nothing.
func unknownOnly(cfg config) []string {
	var bad []string
	for name := range cfg.only {
		ok := false
		for _, s := range scenarios {
			ok = ok || s.name == name || s.issue == name
		}
		if !ok {
			bad = append(bad, name)
		}
	}
	return bad
}

// runPass runs the selected scenarios in one pass; a failing scenario is
// reported and the others still run.
func runPass(b *Bench) []string {
	var errs []string
	defer b.cleanupWorkspaces()
	for _, s := range scenarios {
		if !b.cfg.selected(s) {
			continue
		}
		if b.ctx.Err() != nil {
			errs = append(errs, fmt.Sprintf("%s (%s): interrupted", s.name, b.pass))
			break
		}
		b.logf("== scenario %s", s.name)
		start := time.Now()
		if err := s.run(b); err != nil {
			b.logf("scenario %s FAILED: %v", s.name, err)
			errs = append(errs, fmt.Sprintf("%s (%s): %v", s.name, b.pass, err))
			b.cleanupWorkspaces()
			continue
		}
		b.logf("== scenario %s done in %s", s.name, time.Since(start).Round(time.Second))
	}
	return errs
}

// worker is the rootless pass, run by the root parent through setpriv.
func worker(ctx context.Context, cfg config) int {
	b := &Bench{ctx: ctx, cfg: cfg, pass: "rootless", strata: cfg.strata, home: cfg.home, work: cfg.work, log: os.Stderr}
	if os.Getenv("BENCH_DROP_FDS") == "3,4" {
		req, resp := os.NewFile(3, "drop-request"), os.NewFile(4, "drop-response")
		b.drop = func() error {
			syncFS()
			if _, err := req.Write([]byte{'d'}); err != nil {
				return err
			}
			var r [1]byte
			if _, err := resp.Read(r[:]); err != nil {
				return err
			}
			if r[0] != 'k' {
				return errNoDrop
			}
			return nil
		}
	}
	errs := runPass(b)
	out := struct {
		Measures []Measure `json:"measures"`
		Errors   []string  `json:"errors"`
	}{b.measures, errs}
	data, err := json.Marshal(out)
	if err == nil {
		err = os.WriteFile(cfg.jsonOut, data, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench worker:", err)
		return 1
	}
	return 0
}

// baseline says what the view scenario compares with.
func baseline(cfg config) string {
	switch {
	case cfg.base == "":
		return "none (BENCH_BASE unset)"
	case cfg.baseRev != "":
		return cfg.baseRev
	}
	return cfg.base
}

// dropAsRoot empties the page cache; nil when this process may not.
func dropAsRoot() func() error {
	drop := func() error {
		syncFS()
		return os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0)
	}
	if os.Geteuid() != 0 || drop() != nil {
		return nil
	}
	return drop
}

func orchestrate(ctx context.Context, cfg config) int {
	started := time.Now()
	if bad := unknownOnly(cfg); len(bad) > 0 {
		fmt.Fprintf(os.Stderr, "bench: BENCH_ONLY names no scenario: %s (have create, peers, reads, commit, sandbox, runs, view, mcp, deltas, push, floor, backends; workspaces, commit, sandbox, runs, view, mcp, store, share, hotpath, backends)\n", strings.Join(bad, ", "))
		return 2
	}
	if _, err := os.Stat(filepath.Join(cfg.corpus, "node_modules")); err != nil {
		fmt.Fprintf(os.Stderr, "bench: no corpus at %s: run `make corpus`\n", cfg.corpus)
		return 1
	}
	info := machineInfo(cfg)
	res := &Results{PassNotes: map[string]string{}, BaseRev: cfg.baseRev}
	var errs []string

	base, err := os.MkdirTemp(cfg.tmp, "strata-bench.")
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	defer removeAll(base)
	if err := os.Chmod(base, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	// Fixtures both passes read: generated as the invoking user, before
	// any pass.
	if cfg.selected(scenarios[3]) {
		b := &Bench{ctx: ctx, cfg: cfg, pass: "setup", log: os.Stderr}
		if _, err := tree1k.ensure(cfg.cache, b.logf); err != nil {
			errs = append(errs, "generating trees: "+err.Error())
		} else if !cfg.quick {
			if _, err := tree100k.ensure(cfg.cache, b.logf); err != nil {
				errs = append(errs, "generating trees: "+err.Error())
			}
			if _, err := tree100kWide.ensure(cfg.cache, b.logf); err != nil {
				errs = append(errs, "generating trees: "+err.Error())
			}
		}
	}

	isRoot := os.Geteuid() == 0
	// The backends scenario's XFS and Btrfs, made as root for both passes.
	if cfg.selected(scenarios[len(scenarios)-1]) {
		if !isRoot {
			cfg.fsSkip = "making an XFS and a Btrfs on loop devices needs root (run `make bench` as root)"
		} else {
			uid, gid := 0, 0
			if u, err := user.Lookup(cfg.user); err == nil {
				uid, _ = strconv.Atoi(u.Uid)
				gid, _ = strconv.Atoi(u.Gid)
			}
			fss, why := makeLoopFS(base, uid, gid)
			defer unmountLoopFS(fss)
			cfg.fsSkip = why
			for _, f := range fss {
				cfg.fsDirs = append(cfg.fsDirs, [2]string{f.name, f.mnt})
			}
		}
	}
	if isRoot {
		cfg.peersPass = "root"
		res.Passes = append(res.Passes, "root")
		work := filepath.Join(base, "root")
		b := &Bench{ctx: ctx, cfg: cfg, pass: "root", strata: cfg.strata, home: filepath.Join(work, "store"), work: work, log: os.Stderr, drop: dropAsRoot()}
		if err := os.MkdirAll(work, 0o700); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		errs = append(errs, runPass(b)...)
		res.Measures = append(res.Measures, b.measures...)
		_ = removeAll(work) // free the disk before the next pass
		if cfg.rootless && ctx.Err() == nil {
			res.Passes = append(res.Passes, "rootless")
			ms, e := rootlessPass(ctx, cfg, base)
			res.Measures = append(res.Measures, ms...)
			errs = append(errs, e...)
		} else if !cfg.rootless {
			res.PassNotes["rootless"] = "skipped (BENCH_ROOTLESS=0)"
		}
	} else {
		cfg.peersPass = "rootless"
		res.Passes = []string{"rootless"}
		res.PassNotes["root"] = "skipped: not running as root (run `make bench` as root for both passes)"
		me, _ := user.Current()
		if me != nil {
			cfg.user = me.Username
		}
		work := filepath.Join(base, "rootless")
		b := &Bench{ctx: ctx, cfg: cfg, pass: "rootless", strata: cfg.strata, home: filepath.Join(work, "store"), work: work, log: os.Stderr}
		if err := os.MkdirAll(work, 0o700); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		errs = append(errs, runPass(b)...)
		res.Measures = append(res.Measures, b.measures...)
	}

	md := render(cfg, info, res, errs, time.Since(started))
	fmt.Print(md)
	// The results, and beside them every measure with its raw samples.
	jsonOut := strings.TrimSuffix(cfg.out, filepath.Ext(cfg.out)) + ".json"
	data, _ := json.MarshalIndent(res, "", " ")
	if err := os.MkdirAll(filepath.Dir(cfg.out), 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
	} else if err := os.WriteFile(cfg.out, []byte(md), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
	} else if err := os.WriteFile(jsonOut, data, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
	} else {
		fmt.Fprintf(os.Stderr, "bench: results written to %s (raw samples: %s)\n", cfg.out, jsonOut)
	}
	if cfg.doc != "" {
		if err := updateDoc(cfg.doc, md); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "bench: results section of %s updated\n", cfg.doc)
	}
	if len(errs) > 0 || ctx.Err() != nil {
		return 1
	}
	return 0
}

// rootlessPass runs this binary as cfg.user through setpriv, with HOME and
// TMPDIR in a directory of its own, and a pipe pair through which it asks
// the root parent to drop the page cache.
func rootlessPass(ctx context.Context, cfg config, base string) ([]Measure, []string) {
	u, err := user.Lookup(cfg.user)
	if err != nil {
		return nil, []string{"rootless pass: " + err.Error()}
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	home := filepath.Join(base, "rootless")
	if err := os.MkdirAll(home, 0o700); err != nil {
		return nil, []string{"rootless pass: " + err.Error()}
	}
	if err := os.Chown(home, uid, gid); err != nil {
		return nil, []string{"rootless pass: " + err.Error()}
	}
	self, err := os.Executable()
	if err != nil {
		return nil, []string{"rootless pass: " + err.Error()}
	}
	jsonOut := filepath.Join(home, "measures.json")
	store := filepath.Join(home, "store")
	asUser := func(args ...string) *exec.Cmd {
		argv := append([]string{"--reuid=" + u.Uid, "--regid=" + u.Gid, "--init-groups",
			"env", "HOME=" + home, "TMPDIR=" + home, "XDG_DATA_HOME=" + home + "/.local/share",
			"XDG_CACHE_HOME=" + home + "/.cache", "PATH=" + os.Getenv("PATH"), self}, args...)
		cmd := exec.Command("setpriv", argv...)
		cmd.Dir = home
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		return cmd
	}
	args := []string{"-worker", "-strata", cfg.strata, "-corpus", cfg.corpus, "-cache", cfg.cache,
		"-home", store, "-work", home, "-json", jsonOut, "-peers-pass", cfg.peersPass,
		"-only", strings.Join(keys(cfg.only), ","), "-base", cfg.base, "-fs-skip", cfg.fsSkip}
	var fsArg []string
	for _, f := range cfg.fsDirs {
		fsArg = append(fsArg, f[0]+"="+f[1])
	}
	args = append(args, "-fs", strings.Join(fsArg, ","))
	if cfg.quick {
		args = append(args, "-quick")
	}
	cmd := asUser(args...)

	// The drop-cache service: the worker writes a byte on fd 3 and reads
	// the answer on fd 4 ('k' done, 'n' refused).
	reqR, reqW, err1 := os.Pipe()
	respR, respW, err2 := os.Pipe()
	drop := dropAsRoot()
	if err1 == nil && err2 == nil && drop != nil {
		cmd.ExtraFiles = []*os.File{reqW, respR}
		cmd.Env = append(os.Environ(), "BENCH_DROP_FDS=3,4")
		go func() {
			var b [1]byte
			for {
				if _, err := reqR.Read(b[:]); err != nil {
					return
				}
				ans := byte('k')
				if drop() != nil {
					ans = 'n'
				}
				if _, err := respW.Write([]byte{ans}); err != nil {
					return
				}
			}
		}()
	}
	fmt.Fprintf(os.Stderr, "bench: rootless pass as %s (uid %s)\n", cfg.user, u.Uid)
	runErr := cmd.Start()
	if runErr == nil {
		if reqW != nil {
			reqW.Close()
			respR.Close()
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case runErr = <-done:
		case <-ctx.Done():
			_ = cmd.Process.Signal(syscall.SIGTERM)
			runErr = <-done
		}
	}
	if reqR != nil {
		reqR.Close()
		respW.Close()
	}
	// Whatever happened, no keeper of the pass outlives it.
	cl := asUser("-cleanup", "-strata", cfg.strata, "-home", store)
	_ = cl.Run()

	var out struct {
		Measures []Measure `json:"measures"`
		Errors   []string  `json:"errors"`
	}
	data, err := os.ReadFile(jsonOut)
	if err == nil {
		err = json.Unmarshal(data, &out)
	}
	if err != nil {
		return nil, []string{fmt.Sprintf("rootless pass: %v (worker: %v)", err, runErr)}
	}
	return out.Measures, out.Errors
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// machineInfo describes where and how the run happens.
func machineInfo(cfg config) [][2]string {
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	cpu := "?"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	var si unix.Sysinfo_t
	_ = unix.Sysinfo(&si)
	mem := float64(si.Totalram) * float64(si.Unit) / (1 << 30)
	rev := cfg.rev
	if rev == "" {
		rev = "?"
	}
	mode := "full"
	if cfg.quick {
		mode = "quick (BENCH_QUICK=1: small N, no 100k tree)"
	}
	only := "all"
	if len(cfg.only) > 0 {
		only = strings.Join(keys(cfg.only), ",")
	}
	n := cfg.n
	return [][2]string{
		{"date", time.Now().UTC().Format("2006-01-02 15:04 UTC")},
		{"command", "`" + cfg.command + "`"},
		{"machine", fmt.Sprintf("%s, %d vCPU, %.0f GiB RAM", cpu, runtime.NumCPU(), mem)},
		{"kernel", unix.ByteSliceToString(uts.Release[:])},
		{"scratch and stores", fmt.Sprintf("%s (%s)", cfg.tmp, fsType(cfg.tmp))},
		{"strata", rev},
		{"baseline (view scenario)", baseline(cfg)},
		{"peers", peerVersions()},
		{"mode", mode + "; scenarios: " + only},
		{"N", fmt.Sprintf("exec/create/sandbox/fuse %d, worktree+cp %d, reads warm %d cold %d, strata commits %d per tree, restic/git commits %d, 100 MB commits %d per kind", n.exec, n.peer, n.readWarm, n.readCold, n.commit, n.peerCommit, n.big)},
		{"load average at start", loadavg()},
	}
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func fsType(dir string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return "?"
	}
	switch st.Type {
	case unix.EXT4_SUPER_MAGIC:
		return "ext4"
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.XFS_SUPER_MAGIC:
		return "xfs"
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlayfs"
	}
	return fmt.Sprintf("fs 0x%x", st.Type)
}

func peerVersions() string {
	var out []string
	for _, t := range [][]string{
		{"git", "--version"}, {"fuse-overlayfs", "--version"}, {"restic", "version"}, {"zstd", "--version"}, {"skopeo", "--version"},
	} {
		b, err := exec.Command(t[0], t[1:]...).CombinedOutput()
		if err != nil {
			out = append(out, t[0]+" missing")
			continue
		}
		line := strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0])
		if t[0] == "fuse-overlayfs" { // "fusermount3 version: …" comes first
			for _, l := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(l, "fuse-overlayfs") {
					line = strings.TrimSpace(l)
				}
			}
		}
		if t[0] == "zstd" { // "*** Zstandard CLI (64-bit) v1.5.4, by Yann Collet ***"
			for _, f := range strings.Fields(line) {
				if strings.HasPrefix(f, "v") {
					line = "zstd " + strings.TrimSuffix(f, ",")
				}
			}
		}
		if t[0] == "restic" {
			line = strings.Join(strings.Fields(line)[:2], " ")
		}
		out = append(out, line)
	}
	return strings.Join(out, "; ")
}

// render is the whole markdown report.
func render(cfg config, info [][2]string, res *Results, errs []string, took time.Duration) string {
	var sb strings.Builder
	sb.WriteString("### Run\n\n| | |\n|---|---|\n")
	info = append(info, [2]string{"load average at end", loadavg()}, [2]string{"wall time", took.Round(time.Second).String()})
	for _, kv := range info {
		fmt.Fprintf(&sb, "| %s | %s |\n", kv[0], kv[1])
	}
	for _, p := range []string{"root", "rootless"} {
		if n, ok := res.PassNotes[p]; ok {
			fmt.Fprintf(&sb, "| %s pass | %s |\n", p, n)
		}
	}
	var passes []string
	for _, p := range res.Passes {
		switch {
		case p == "root":
			passes = append(passes, "**root** (real root: no user namespace; strata uses `trusted.*` overlay xattrs)")
		case len(res.Passes) > 1:
			passes = append(passes, fmt.Sprintf("**rootless** (as %s through `setpriv`, with its own store; the main path)", cfg.user))
		default:
			passes = append(passes, fmt.Sprintf("**rootless** (as %s, the invoking user)", cfg.user))
		}
	}
	fmt.Fprintf(&sb, "\nPasses: %s. Times are wall-clock, from the harness starting a command to its exit. Ratios are p50 ÷ p50 within one pass. Nothing here is asserted: the targets from the issues are quoted beside the figures.\n\n", strings.Join(passes, " and "))
	sections := []struct{ issue, title string }{
		{"workspaces", "Issue \"workspaces\": a writable copy, and reading it"},
		{"commit", "Issue \"commit\": commit cost and store growth"},
		{"sandbox", "Issue \"sandbox\": what the sandbox adds to exec"},
		{"runs", "Issue \"runs\": fork + patch + test + discard"},
		{"view", "Issue \"view\": the sandbox's assembled root, before and after"},
		{"mcp", "Issue \"mcp\": the MCP server's exec against the CLI's"},
		{"store", "Issue \"store\" (18): delta-coded edits, before and after"},
		{"share", "Issue \"share\" (16): snapshots through an OCI registry, against skopeo"},
		{"hotpath", "Issue \"hotpath\" (14): the hot path beside the floor"},
		{"environments", "Issue \"environments\" (13): container images as roots, against podman"},
		{"backends", "Issue \"backends\" (17): reflink workspaces on XFS and Btrfs, beside overlay and `cp --reflink`"},
	}
	for _, sec := range sections {
		var tables []Table
		for _, s := range scenarios {
			if s.issue == sec.issue && s.report != nil {
				tables = append(tables, s.report(res)...)
			}
		}
		if len(tables) == 0 {
			continue
		}
		fmt.Fprintf(&sb, "### %s\n\n", sec.title)
		for _, t := range tables {
			if len(t.Rows) == 0 && len(t.Notes) == 0 {
				continue
			}
			if len(t.Rows) == 0 {
				fmt.Fprintf(&sb, "#### %s\n\n", t.Title)
				for _, n := range t.Notes {
					sb.WriteString("- " + n + "\n")
				}
				sb.WriteString("\n")
				continue
			}
			sb.WriteString(t.markdown())
		}
	}
	if len(errs) > 0 {
		sb.WriteString("### Errors\n\n")
		for _, e := range errs {
			sb.WriteString("- " + strings.ReplaceAll(e, "\n", " ") + "\n")
		}
		sb.WriteString("\n")
	}
	return sb.String()
}
