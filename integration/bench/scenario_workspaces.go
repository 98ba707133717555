package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/stratafs/strata/nsexec"
)

// Issue "workspaces": how long it takes to get a writable copy of the
// corpus, and how fast it reads once you have it.

// runCreate: `ws create` + the first `exec -- true` (which starts the
// keeper), a fresh workspace each time, upper on disk and on tmpfs,
// interleaved so that drift in the machine hits both alike; then
// `exec -- true` into a live workspace.
func runCreate(b *Bench) error {
	if err := b.ensureCorpus(); err != nil {
		return err
	}
	n := b.cfg.n.exec
	type series struct{ create, exec, total, rm []time.Duration }
	modes := []string{"disk", "tmpfs"}
	res := map[string]*series{"disk": {}, "tmpfs": {}, "subids": {}}
	// --subids (tmpfs): the rootless CLI re-executes itself into the
	// namespace of the user's subordinate ids to start the keeper.
	if _, err := nsexec.SubIDMaps(); err == nil || nsexec.RealRoot() {
		modes = append(modes, "subids")
	} else {
		b.skip("create", "subids/total", err.Error())
	}
	for i := 0; i < n; i++ {
		if err := b.cancelled(); err != nil {
			return err
		}
		for _, mode := range modes {
			name := fmt.Sprintf("c%s%04d", mode[:1], i)
			args := []string{"-q", "ws", "create", name}
			switch mode {
			case "tmpfs":
				args = append(args, "--tmpfs")
			case "subids":
				args = append(args, "--tmpfs", "--subids")
			}
			_, dc, err := b.st(args...)
			if err != nil {
				return err
			}
			_, de, err := b.st("exec", name, "--", "true")
			if err != nil {
				return err
			}
			_, dr, err := b.st("-q", "ws", "rm", "--force", name)
			if err != nil {
				return err
			}
			s := res[mode]
			s.create, s.exec, s.total, s.rm = append(s.create, dc), append(s.exec, de), append(s.total, dc+de), append(s.rm, dr)
		}
		if (i+1)%50 == 0 {
			b.logf("create: %d/%d", i+1, n)
		}
	}
	for _, mode := range modes {
		s := res[mode]
		b.record("create", mode+"/total", unitNS, durs(s.total), "")
		b.record("create", mode+"/create", unitNS, durs(s.create), "")
		b.record("create", mode+"/exec", unitNS, durs(s.exec), "")
		b.record("create", mode+"/rm", unitNS, durs(s.rm), "")
	}

	// exec into a live workspace (its keeper already running).
	if _, _, err := b.st("-q", "ws", "create", "live"); err != nil {
		return err
	}
	defer b.st("-q", "ws", "rm", "--force", "live")
	var live []time.Duration
	for i := -3; i < n; i++ { // three unrecorded warm-up runs
		_, d, err := b.st("exec", "live", "--", "true")
		if err != nil {
			return err
		}
		if i >= 0 {
			live = append(live, d)
		}
	}
	b.record("create", "live/exec", unitNS, durs(live), "")
	return nil
}

// runPeers: what people do today to get a writable copy of the corpus.
func runPeers(b *Bench) error {
	src, err := b.copyCorpus()
	if err != nil {
		return err
	}
	// git worktree add + cp -a / cp -al node_modules, alternating.
	n := b.cfg.n.peer
	kinds := []struct{ key, cpFlags string }{{"worktree-cp", "-a"}, {"worktree-cpal", "-al"}}
	samples := map[string][]time.Duration{}
	for i := 0; i < n; i++ {
		for _, k := range kinds {
			if err := b.cancelled(); err != nil {
				return err
			}
			wt := filepath.Join(b.work, fmt.Sprintf("wt-%s-%d", k.key, i))
			start := time.Now()
			if _, err := b.must(src, "git", "worktree", "add", "--detach", "-q", wt); err != nil {
				return err
			}
			if _, err := b.must("", "cp", k.cpFlags, filepath.Join(src, "node_modules"), wt+"/"); err != nil {
				return err
			}
			samples[k.key] = append(samples[k.key], time.Since(start))
			// Untimed: remove, and flush what the copy left dirty.
			if _, err := b.must(src, "git", "worktree", "remove", "--force", wt); err != nil {
				return err
			}
			if err := removeAll(wt); err != nil {
				return err
			}
			syncFS()
		}
	}
	for _, k := range kinds {
		b.record("peers", k.key, unitNS, durs(samples[k.key]), "")
	}
	return runFuseMount(b, src)
}

// fuseUnmount is the unmount command: fusermount3 -u, or fusermount -u.
func fuseUnmount() []string {
	if lookTool("fusermount3") {
		return []string{"fusermount3", "-u"}
	}
	return []string{"fusermount", "-u"}
}

// mountFuse mounts fuse-overlayfs over lower with fresh upper/work
// directories under dir, at dir/mnt. Creating the directories is not
// part of the returned duration.
func (b *Bench) mountFuse(dir, lower string) (string, time.Duration, error) {
	mnt := filepath.Join(dir, "mnt")
	for _, d := range []string{"upper", "work", "mnt"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return "", 0, err
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", lower, filepath.Join(dir, "upper"), filepath.Join(dir, "work"))
	_, d, err := b.run("", nil, "fuse-overlayfs", "-o", opts, mnt)
	return mnt, d, err
}

// unmountFuse unmounts a mount made by mountFuse and removes its
// directory; the returned duration is the unmount's. When the unmount
// fails the directory is left alone (removing it would delete through the
// mount) and a lazy unmount is requested instead.
func (b *Bench) unmountFuse(dir, mnt string) (time.Duration, error) {
	_, d, err := b.run("", nil, append(fuseUnmount(), mnt)...)
	if err != nil {
		_, _, _ = b.run("", nil, append(fuseUnmount(), "-z", mnt)...)
		return d, fmt.Errorf("unmounting %s: %w (left in place)", mnt, err)
	}
	return d, removeAll(dir)
}

// fuseSkip says why fuse-overlayfs cannot be measured in this pass, or "".
func (b *Bench) fuseSkip() string {
	if !lookTool("fuse-overlayfs") {
		return "fuse-overlayfs is not installed (bash scripts/deps.sh --bench)"
	}
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return fmt.Sprintf("this user cannot open /dev/fuse (%v); fuse-overlayfs needs it", err)
	}
	f.Close()
	return ""
}

// runFuseMount: fuse-overlayfs mount + unmount over the full copy of the
// corpus, upper on disk (fresh upper and work directories each time,
// created outside the timed part).
func runFuseMount(b *Bench, lower string) error {
	if why := b.fuseSkip(); why != "" {
		b.skip("peers", "fuse", why)
		return nil
	}
	var samples []time.Duration
	for i := 0; i < b.cfg.n.exec; i++ {
		if err := b.cancelled(); err != nil {
			return err
		}
		dir := filepath.Join(b.work, fmt.Sprintf("fuse-%d", i))
		mnt, dm, err := b.mountFuse(dir, lower)
		if err != nil {
			return err
		}
		du, err := b.unmountFuse(dir, mnt)
		if err != nil {
			return err
		}
		samples = append(samples, dm+du)
	}
	b.record("peers", "fuse", unitNS, durs(samples), "")
	return nil
}

func reportWorkspaces(r *Results) []Table {
	if !r.has("create") && !r.has("peers") && !r.has("setup") {
		return nil
	}
	t := Table{
		Title:  "A writable copy of the corpus (22,914 entries, 511 MB)",
		Header: append([]string{"operation", "N"}, passHeader(r.Passes, "p50", "p99")...),
	}
	rows := []struct{ label, sc, key string }{
		{"**strata** `ws create` + first `exec -- true` (upper on disk)", "create", "disk/total"},
		{"· of which `ws create`", "create", "disk/create"},
		{"· of which first `exec -- true` (starts the keeper)", "create", "disk/exec"},
		{"**strata** `ws create --tmpfs` + first `exec -- true`", "create", "tmpfs/total"},
		{"· of which `ws create --tmpfs`", "create", "tmpfs/create"},
		{"· of which first `exec -- true`", "create", "tmpfs/exec"},
		{"**strata** `ws create --tmpfs --subids` + first `exec -- true` (rootless: the CLI re-executes into the subordinate-id namespace to start the keeper; root: no difference)", "create", "subids/total"},
		{"**strata** `exec -- true` into a live workspace", "create", "live/exec"},
		{"`git worktree add` + `cp -a node_modules`", "peers", "worktree-cp"},
		{"`git worktree add` + `cp -al node_modules`", "peers", "worktree-cpal"},
		{"`fuse-overlayfs` mount + `fusermount -u` (upper on disk)", "peers", "fuse"},
		{"(not timed above) `ws rm --force`, upper on disk", "create", "disk/rm"},
		{"(not timed above) `ws rm --force`, tmpfs", "create", "tmpfs/rm"},
		{"(setup, once) first workspace of a commit: materializes its layer", "setup", "first-create"},
		{"(setup, once) `strata import` of the corpus", "setup", "import"},
	}
	for _, row := range rows {
		if !r.has(row.sc) {
			continue
		}
		cells := []string{row.label, nOf(r, row.sc, row.key)}
		for _, p := range r.Passes {
			cells = append(cells, r.cell(p, row.sc, row.key, "p50"), r.cell(p, row.sc, row.key, "p99"))
		}
		t.Rows = append(t.Rows, cells)
	}
	t.Notes = append(t.Notes,
		"Timed: from starting the first command to the exit of the last. `ws rm` (and, for the peers, `git worktree remove` + `rm -rf`) runs after, outside the timed part.",
		"The copies made by `cp` are in the page cache when `cp` exits; their writeback is flushed (sync) between runs, outside the timed part. `cp -al` shares inodes with the original: writing a file in place changes both.",
		"fuse-overlayfs: fresh upper and work directories each run, created outside the timed part; the lower is a full `cp -a` copy of the corpus.")
	t.Notes = append(t.Notes, r.skips("create")...)
	t.Notes = append(t.Notes, r.skips("peers")...)

	// Ratios: strata p50 ÷ peer p50, within each pass.
	rt := Table{
		Title:  "strata ÷ peer (p50 over p50, same pass; below 1 means strata is faster)",
		Header: []string{"strata", "pass", "÷ worktree + cp -a", "÷ worktree + cp -al", "÷ fuse-overlayfs mount+umount"},
	}
	if r.has("create") && r.has("peers") {
		for _, s := range []struct{ label, key string }{
			{"`ws create` + first exec (disk)", "disk/total"},
			{"`ws create --tmpfs` + first exec", "tmpfs/total"},
		} {
			for _, p := range r.Passes {
				rt.Rows = append(rt.Rows, []string{s.label, p,
					crossRatio(r, p, "create", s.key, "peers", "worktree-cp"),
					crossRatio(r, p, "create", s.key, "peers", "worktree-cpal"),
					crossRatio(r, p, "create", s.key, "peers", "fuse"),
				})
			}
		}
	}
	out := []Table{t}
	if len(rt.Rows) > 0 {
		out = append(out, rt)
	}
	return out
}

// nOf is the N of a measure in whichever pass has it.
func nOf(r *Results, sc, key string) string {
	for _, p := range r.Passes {
		if m, ok := r.get(p, sc, key); ok && m.Skip == "" {
			return fmt.Sprint(m.N)
		}
	}
	return "—"
}

// crossRatio is p50(sc/key) ÷ p50(baseSc/baseKey) within one pass.
func crossRatio(r *Results, pass, sc, key, baseSc, baseKey string) string {
	return fmtRatio(r.value(pass, sc, key, "p50"), r.value(pass, baseSc, baseKey, "p50"))
}

// Reads: the same two commands inside a workspace, in the native corpus,
// and through fuse-overlayfs, each in a long-lived shell so that only the
// command is timed.

var readCmds = []struct{ key, label, script string }{
	{"find", "`find node_modules | wc -l`", "find node_modules | wc -l"},
	{"catjs", "read every `.js` file (`find node_modules -name '*.js' -type f -print0 | xargs -0 cat > /dev/null`)", "find node_modules -name '*.js' -type f -print0 | xargs -0 cat > /dev/null"},
}

func runReads(b *Bench) error {
	if err := b.ensureCorpus(); err != nil {
		return err
	}
	type place struct {
		key string
		s   *session
	}
	var (
		places  []place
		wsMade  bool
		unmount func()
	)
	// Teardown in order: the shells first (a shell in a mount keeps it
	// busy), then the mount, then the workspace.
	defer func() {
		for _, p := range places {
			p.s.close()
		}
		if unmount != nil {
			unmount()
		}
		if wsMade {
			_, _, _ = b.st("-q", "ws", "rm", "--force", "reads")
		}
	}()

	native, err := startSession("native", b.cfg.corpus, "/bin/sh")
	if err != nil {
		return err
	}
	places = append(places, place{"native", native})

	if _, _, err := b.st("-q", "ws", "create", "reads"); err != nil {
		return err
	}
	wsMade = true
	inside, err := startSession("strata exec", "", b.strata, "--home", b.home, "exec", "reads", "--", "/bin/sh")
	if err != nil {
		return err
	}
	places = append(places, place{"strata", inside})

	if why := b.fuseSkip(); why != "" {
		for _, c := range readCmds {
			b.skip("reads", c.key+"/cold/fuse", why)
			b.skip("reads", c.key+"/warm/fuse", why)
		}
	} else {
		lower, err := b.copyCorpus()
		if err != nil {
			return err
		}
		dir := filepath.Join(b.work, "fuse-reads")
		mnt, _, err := b.mountFuse(dir, lower)
		if err != nil {
			return err
		}
		unmount = func() {
			if _, err := b.unmountFuse(dir, mnt); err != nil {
				b.logf("reads: %v", err)
			}
		}
		fs, err := startSession("fuse-overlayfs", mnt, "/bin/sh")
		if err != nil {
			return err
		}
		places = append(places, place{"fuse", fs})
	}

	// The entry count must agree everywhere, or the comparison is void.
	counts := map[string]string{}
	for _, p := range places {
		out, _, err := p.s.run(readCmds[0].script)
		if err != nil {
			return err
		}
		counts[p.key] = strings.TrimSpace(out)
	}
	for k, c := range counts {
		if c != counts["native"] {
			return fmt.Errorf("reads: find counts %s entries in %s, %s natively", c, k, counts["native"])
		}
	}

	// Cold: the page cache dropped (after a sync) before each command.
	if b.drop == nil {
		for _, c := range readCmds {
			b.skip("reads", c.key+"/cold", "not permitted to drop the page cache: warm only")
		}
	} else {
		for _, c := range readCmds {
			samples := map[string][]time.Duration{}
			for i := 0; i < b.cfg.n.readCold; i++ {
				for _, p := range places {
					if err := b.drop(); err != nil {
						return err
					}
					_, d, err := p.s.run(c.script)
					if err != nil {
						return err
					}
					samples[p.key] = append(samples[p.key], d)
				}
			}
			for _, p := range places {
				b.record("reads", c.key+"/cold/"+p.key, unitNS, durs(samples[p.key]), "")
			}
		}
	}
	// Warm: one unrecorded run each, then N, interleaved.
	for _, c := range readCmds {
		samples := map[string][]time.Duration{}
		for i := -1; i < b.cfg.n.readWarm; i++ {
			if err := b.cancelled(); err != nil {
				return err
			}
			for _, p := range places {
				_, d, err := p.s.run(c.script)
				if err != nil {
					return err
				}
				if i >= 0 {
					samples[p.key] = append(samples[p.key], d)
				}
			}
		}
		for _, p := range places {
			b.record("reads", c.key+"/warm/"+p.key, unitNS, durs(samples[p.key]), "")
		}
	}
	b.record("reads", "entries", unitCount, []float64{atof(counts["native"])}, "")
	return nil
}

func atof(s string) float64 {
	var f float64
	fmt.Sscan(s, &f)
	return f
}

func reportReads(r *Results) []Table {
	if !r.has("reads") {
		return nil
	}
	places := []struct{ key, label string }{
		{"native", "native (the corpus directory)"},
		{"strata", "inside `strata exec` (kernel overlay)"},
		{"fuse", "through `fuse-overlayfs`"},
	}
	var out []Table
	for _, c := range readCmds {
		t := Table{
			Title:  "Reads: " + c.label,
			Header: []string{"where"},
		}
		for _, p := range r.Passes {
			t.Header = append(t.Header, p+" cold p50", p+" warm p50", p+" warm p99", p+" warm ÷ native")
		}
		for _, pl := range places {
			row := []string{pl.label}
			for _, p := range r.Passes {
				row = append(row,
					r.cell(p, "reads", c.key+"/cold/"+pl.key, "p50"),
					r.cell(p, "reads", c.key+"/warm/"+pl.key, "p50"),
					r.cell(p, "reads", c.key+"/warm/"+pl.key, "p99"),
					r.ratio(p, "reads", c.key+"/warm/"+pl.key, c.key+"/warm/native", "p50"))
			}
			t.Rows = append(t.Rows, row)
		}
		out = append(out, t)
	}
	var ns []string
	for _, p := range r.Passes {
		if m, ok := r.get(p, "reads", "find/warm/native"); ok && m.Skip == "" {
			ns = append(ns, fmt.Sprintf("%s: warm N=%d", p, m.N))
		}
		if m, ok := r.get(p, "reads", "find/cold/native"); ok && m.Skip == "" {
			ns = append(ns, fmt.Sprintf("%s: cold N=%d", p, m.N))
		}
	}
	entries := r.value(r.Passes[0], "reads", "entries", "p50")
	notes := []string{
		fmt.Sprintf("Each command runs in a long-lived `sh` (on the host, in the mount, or `strata exec NAME -- sh` with the default `agent` sandbox); the time is from sending the command line to reading its end marker, so process and namespace start-up are not in it. `find` counts %.0f entries in every place. %s.", entries, strings.Join(ns, ", ")),
		"Cold: `sync; echo 3 > /proc/sys/vm/drop_caches` before each command (for the rootless pass the root parent drops the cache on request). Warm: after one unrecorded run. The three places read three distinct copies of the same files on the same disk: the corpus itself, strata's materialized layer in its store, and a `cp -a` copy under fuse-overlayfs.",
	}
	out[len(out)-1].Notes = append(notes, r.skips("reads")...)
	return out
}

// runAsOK reports whether a command exits 0 (used to probe for commands
// that do not exist yet).
func runAsOK(argv ...string) bool {
	return exec.Command(argv[0], argv[1:]...).Run() == nil
}
