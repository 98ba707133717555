package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Issue "backends" (BENCH_ONLY=backends): the reflink backend on a real
// XFS (reflink=1) and a real Btrfs, each on a loop device the root parent
// makes for both passes (as scripts/integration.sh does), against the
// overlay backend on the same filesystem and against what people do
// today there: `git worktree add` + `cp -a --reflink=always
// node_modules`. Per filesystem and pass: `ws create` + first `exec --
// true`; reads (`find`, every `.js`) inside a reflink and an overlay
// workspace, with the agent sandbox and without, ÷ native (a copy of the
// corpus on the same filesystem); a one-file `commit`.

// backendFS is a filesystem of the scenario: its mount point's directory
// for the pass (made by the root parent: fsDirs).
type backendFS struct{ name, dir string }

// loopFS is a filesystem made for the scenario: an image file in
// cfg.tmp, mounted through a loop device.
type loopFS struct{ name, img, mnt string }

// makeLoopFS (root) makes and mounts a 6 GiB sparse XFS (reflink=1) and
// Btrfs, each with a directory per pass owned by its user, and returns
// them; unmount removes them. A machine that cannot (no mkfs, no loop
// devices) gets none, with the reason.
func makeLoopFS(base string, uid, gid int) ([]loopFS, string) {
	var out []loopFS
	for _, t := range []struct{ name, mkfs string }{{"xfs", "mkfs.xfs -q -m reflink=1"}, {"btrfs", "mkfs.btrfs -q"}} {
		img := filepath.Join(base, t.name+".img")
		mnt := filepath.Join(base, t.name)
		script := fmt.Sprintf(`set -e; truncate -s 6G %[1]q; %[3]s %[1]q >/dev/null; mkdir -p %[2]q; mount -o loop %[1]q %[2]q;
mkdir -p %[2]q/root %[2]q/rootless; chown %[4]d:%[5]d %[2]q/rootless; chmod 755 %[2]q`, img, mnt, t.mkfs, uid, gid)
		if b, err := exec.Command("sh", "-c", script).CombinedOutput(); err != nil {
			unmountLoopFS(out)
			return nil, fmt.Sprintf("cannot make the %s filesystem: %v: %s", t.name, err, strings.TrimSpace(string(b)))
		}
		out = append(out, loopFS{t.name, img, mnt})
	}
	return out, ""
}

func unmountLoopFS(fss []loopFS) {
	for _, f := range fss {
		if exec.Command("umount", f.mnt).Run() != nil {
			_ = exec.Command("umount", "-l", f.mnt).Run()
		}
		_ = os.Remove(f.mnt)
		_ = os.Remove(f.img)
	}
}

// backendsN is the sample size of the scenario's creates and commits:
// a reflink create on XFS costs about a second, its removal half that.
func (b *Bench) backendsN() int {
	if b.cfg.quick {
		return 3
	}
	return 20
}

func runBackends(b *Bench) error {
	if len(b.cfg.fsDirs) == 0 {
		why := b.cfg.fsSkip
		if why == "" {
			why = "no XFS or Btrfs filesystem (the root parent makes them: run as root)"
		}
		b.skip("backends", "xfs/reflink/total", why)
		b.skip("backends", "btrfs/reflink/total", why)
		return nil
	}
	for _, f := range b.cfg.fsDirs {
		if err := b.cancelled(); err != nil {
			return err
		}
		if err := runBackendsOn(b, backendFS{f[0], filepath.Join(f[1], b.pass)}); err != nil {
			return fmt.Errorf("%s: %w", f[0], err)
		}
	}
	return nil
}

// runBackendsOn measures one filesystem with a store of its own there.
func runBackendsOn(b *Bench, fs backendFS) error {
	key := func(k string) string { return fs.name + "/" + k }
	home := filepath.Join(fs.dir, "store")
	st := func(args ...string) (string, time.Duration, error) {
		return b.run("", nil, append([]string{b.strata, "--home", home}, args...)...)
	}
	defer func() {
		// Workspaces first (a Btrfs tree is a subvolume), then the rest;
		// the pass's directory stays (the root parent made it).
		b.cleanupHome(home)
		ents, _ := os.ReadDir(fs.dir)
		for _, e := range ents {
			_ = removeAll(filepath.Join(fs.dir, e.Name()))
		}
	}()
	native := filepath.Join(fs.dir, "corpus")
	b.logf("%s: copying the corpus to %s", fs.name, native)
	if _, err := b.must("", "cp", "-a", b.cfg.corpus, native); err != nil {
		return err
	}
	syncFS()
	_, d, err := st("-q", "import", native, "-b", "main")
	if err != nil {
		return err
	}
	b.record("backends", key("setup/import"), unitNS, []float64{float64(d)}, "")
	// The first workspace of the commit: materializes its layer (and on
	// Btrfs the clone cache's subvolume) once.
	_, d1, err := st("-q", "ws", "create", "first", "--backend", "reflink")
	if err != nil {
		return err
	}
	_, d2, err := st("exec", "first", "--", "true")
	if err != nil {
		return err
	}
	b.record("backends", key("setup/first-reflink"), unitNS, []float64{float64(d1 + d2)}, "")
	if _, _, err := st("-q", "ws", "rm", "--force", "first"); err != nil {
		return err
	}
	syncFS()

	// ws create + first exec, reflink and overlay interleaved; the
	// peer (git worktree add + cp --reflink=always node_modules) after.
	n := b.backendsN()
	type series struct{ create, exec, total, rm []time.Duration }
	res := map[string]*series{"reflink": {}, "overlay": {}}
	for i := 0; i < n; i++ {
		for _, be := range []string{"reflink", "overlay"} {
			if err := b.cancelled(); err != nil {
				return err
			}
			name := fmt.Sprintf("%s%03d", be[:1], i)
			_, dc, err := st("-q", "ws", "create", name, "--backend", be)
			if err != nil {
				return err
			}
			_, de, err := st("exec", name, "--", "true")
			if err != nil {
				return err
			}
			_, dr, err := st("-q", "ws", "rm", "--force", name)
			if err != nil {
				return err
			}
			s := res[be]
			s.create, s.exec, s.total, s.rm = append(s.create, dc), append(s.exec, de), append(s.total, dc+de), append(s.rm, dr)
			syncFS()
		}
	}
	for be, s := range res {
		b.record("backends", key(be+"/total"), unitNS, durs(s.total), "")
		b.record("backends", key(be+"/create"), unitNS, durs(s.create), "")
		b.record("backends", key(be+"/exec"), unitNS, durs(s.exec), "")
		b.record("backends", key(be+"/rm"), unitNS, durs(s.rm), "")
	}
	var peer []time.Duration
	for i := 0; i < min(n, b.cfg.n.peer); i++ {
		wt := filepath.Join(fs.dir, fmt.Sprintf("wt-%d", i))
		start := time.Now()
		if _, err := b.must(native, "git", "worktree", "add", "--detach", "-q", wt); err != nil {
			return err
		}
		if _, err := b.must("", "cp", "-a", "--reflink=always", filepath.Join(native, "node_modules"), wt+"/"); err != nil {
			return err
		}
		peer = append(peer, time.Since(start))
		if _, err := b.must(native, "git", "worktree", "remove", "--force", wt); err != nil {
			return err
		}
		if err := removeAll(wt); err != nil {
			return err
		}
		syncFS()
	}
	b.record("backends", key("peer/worktree-cp-reflink"), unitNS, durs(peer), "")

	// Reads: native, a reflink workspace, an overlay workspace.
	for _, be := range []string{"reflink", "overlay"} {
		if _, _, err := st("-q", "ws", "create", "reads-"+be, "--backend", be); err != nil {
			return err
		}
	}
	if err := backendReads(b, fs, home, native); err != nil {
		return err
	}

	// A one-file commit: a line appended through ws path (the tree
	// itself for reflink), then `strata commit`, N times.
	for _, be := range []string{"reflink", "overlay"} {
		name := "reads-" + be
		p, err := b.wsPathIn(home, name)
		if err != nil {
			return err
		}
		// A file of the workspace's own (the corpus's may be read-only).
		f := filepath.Join(p, "bench-commit.txt")
		if err := os.WriteFile(f, []byte("0\n"), 0o644); err != nil {
			return err
		}
		var commits []time.Duration
		for i := -1; i < n; i++ { // one unrecorded: the first after create scans a cold tree
			if err := appendLine(f, fmt.Sprint(i)); err != nil {
				return err
			}
			_, d, err := st("-q", "commit", name, "-m", fmt.Sprintf("c%d", i))
			if err != nil {
				return err
			}
			if i >= 0 {
				commits = append(commits, d)
			}
		}
		b.record("backends", key(be+"/commit1"), unitNS, durs(commits), "")
	}
	return nil
}

// wsPathIn is `strata ws path NAME` of the store home.
func (b *Bench) wsPathIn(home, name string) (string, error) {
	out, _, err := b.run("", nil, b.strata, "--home", home, "ws", "path", name)
	return strings.TrimSpace(out), err
}

// backendReads times the read commands in long-lived shells: natively in
// the corpus copy, and inside `strata exec` of each workspace.
func backendReads(b *Bench, fs backendFS, home, native string) error {
	type place struct {
		key string
		s   *session
	}
	var places []place
	defer func() {
		for _, p := range places {
			p.s.close()
		}
	}()
	s, err := startSession("native", native, "/bin/sh")
	if err != nil {
		return err
	}
	places = append(places, place{"native", s})
	for _, be := range []string{"reflink", "overlay"} {
		s, err := startSession("strata exec "+be, "", b.strata, "--home", home, "exec", "reads-"+be, "--", "/bin/sh")
		if err != nil {
			return err
		}
		places = append(places, place{be, s})
		// The same workspace without the sandbox: what the backend costs
		// apart from Landlock's checks on each path (and seccomp's).
		s, err = startSession("strata exec --sandbox none "+be, "", b.strata, "--home", home, "exec", "reads-"+be, "--sandbox", "none", "--", "/bin/sh")
		if err != nil {
			return err
		}
		places = append(places, place{be + "-nosandbox", s})
	}
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
			b.record("backends", fs.name+"/reads/"+c.key+"/"+p.key, unitNS, durs(samples[p.key]), "")
		}
	}
	return nil
}

func reportBackends(r *Results) []Table {
	if !r.has("backends") {
		return nil
	}
	var out []Table
	for _, fs := range []string{"xfs", "btrfs"} {
		k := func(s string) string { return fs + "/" + s }
		t := Table{
			Title:  fmt.Sprintf("Backends on %s (a loop device; the corpus, 22,914 entries, 511 MB)", map[string]string{"xfs": "XFS (reflink=1)", "btrfs": "Btrfs"}[fs]),
			Header: append([]string{"operation", "N"}, passHeader(r.Passes, "p50", "p99")...),
		}
		rows := []struct{ label, key string }{
			{"**reflink** `ws create --backend reflink` + first `exec -- true`", "reflink/total"},
			{"· of which `ws create`", "reflink/create"},
			{"· of which first `exec -- true`", "reflink/exec"},
			{"**overlay** `ws create --backend overlay` + first `exec -- true`", "overlay/total"},
			{"`git worktree add` + `cp -a --reflink=always node_modules`", "peer/worktree-cp-reflink"},
			{"1-file `commit`, reflink", "reflink/commit1"},
			{"1-file `commit`, overlay", "overlay/commit1"},
			{"(not timed above) `ws rm --force`, reflink", "reflink/rm"},
			{"(not timed above) `ws rm --force`, overlay", "overlay/rm"},
			{"(setup, once) first reflink workspace of the commit: its layer" + map[string]string{"btrfs": " and the clone cache's subvolume", "xfs": ""}[fs], "setup/first-reflink"},
			{"(setup, once) `strata import` of the corpus", "setup/import"},
		}
		for _, row := range rows {
			cells := []string{row.label, nOf(r, "backends", k(row.key))}
			for _, p := range r.Passes {
				cells = append(cells, r.cell(p, "backends", k(row.key), "p50"), r.cell(p, "backends", k(row.key), "p99"))
			}
			t.Rows = append(t.Rows, cells)
		}
		t.Notes = append(t.Notes, "Timed: from starting the first command to the exit of the last; `ws rm` after, untimed (a sync between runs). reflink and overlay are interleaved. The peer: `git worktree add --detach` of the corpus copy on the same filesystem + `cp -a --reflink=always node_modules` into it.",
			"1-file commit: a line appended to a file through `ws path` (the tree itself for reflink, the keeper's view for overlay), then `strata commit`; one unrecorded commit first (it adds the file).")
		rt := Table{
			Title:  fmt.Sprintf("Backends on %s: ratios (p50 over p50, same pass)", fs),
			Header: []string{"", "pass", "reflink", "overlay"},
		}
		for _, p := range r.Passes {
			rt.Rows = append(rt.Rows,
				[]string{"`ws create` + first exec ÷ worktree + `cp --reflink`", p,
					crossRatio(r, p, "backends", k("reflink/total"), "backends", k("peer/worktree-cp-reflink")),
					crossRatio(r, p, "backends", k("overlay/total"), "backends", k("peer/worktree-cp-reflink"))})
			for _, c := range readCmds {
				rt.Rows = append(rt.Rows, []string{"reads " + c.key + " (warm) ÷ native", p,
					r.ratio(p, "backends", k("reads/"+c.key+"/reflink"), k("reads/"+c.key+"/native"), "p50"),
					r.ratio(p, "backends", k("reads/"+c.key+"/overlay"), k("reads/"+c.key+"/native"), "p50")})
				rt.Rows = append(rt.Rows, []string{"· the same with `--sandbox none` ÷ native", p,
					r.ratio(p, "backends", k("reads/"+c.key+"/reflink-nosandbox"), k("reads/"+c.key+"/native"), "p50"),
					r.ratio(p, "backends", k("reads/"+c.key+"/overlay-nosandbox"), k("reads/"+c.key+"/native"), "p50")})
			}
			rt.Rows = append(rt.Rows, []string{"1-file commit, reflink ÷ overlay", p,
				crossRatio(r, p, "backends", k("reflink/commit1"), "backends", k("overlay/commit1")), ""})
		}
		rt.Notes = []string{"Reads: warm, each command in a long-lived shell (natively in the corpus copy on this filesystem, in `strata exec NAME -- sh` with the default agent sandbox, and in `strata exec NAME --sandbox none -- sh`: the backend without Landlock's and seccomp's checks), after one unrecorded run; all places interleaved."}
		out = append(out, t, rt)
	}
	out[len(out)-1].Notes = append(out[len(out)-1].Notes, r.skips("backends")...)
	return out
}
