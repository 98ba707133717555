package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Issue "store" (deltas): an agent session of checkpoints, each a 1-line
// edit of one of five source files of 20–200 KiB committed from a
// workspace: how much the store grows, against the pack `git gc` makes of
// the same history and against the baseline build (BENCH_BASE, without
// delta coding); and the latency of those 1-file commits, baseline and
// new interleaved in one run.

var deltaFileSizes = []int{20 << 10, 50 << 10, 80 << 10, 120 << 10, 200 << 10}

// sourceText returns n bytes of source-like text: lines of identifiers,
// numbers and punctuation, 20–70 bytes each.
func sourceText(seed uint64, n int) string {
	r := rand.New(rand.NewPCG(seed, 18))
	words := []string{"func", "return", "err", "nil", "if", "for", "range", "ctx", "store", "tree", "entry", "commit", "id", "size", "path", "name", "fmt.Errorf", "w.put", "tx.Get", ":=", "==", "!=", "{", "}", "(", ")", ",", "//"}
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(strings.Repeat("\t", r.IntN(4)))
		for w := 3 + r.IntN(8); w > 0; w-- {
			b.WriteString(words[r.IntN(len(words))])
			if r.IntN(4) == 0 {
				fmt.Fprintf(&b, "%d", r.IntN(5000))
			}
			b.WriteByte(' ')
		}
		b.WriteByte('\n')
	}
	return b.String()[:n]
}

func runDeltas(b *Bench) error {
	n := 200
	if b.cfg.quick {
		n = 40
	}
	dir := filepath.Join(b.work, "deltas")
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return err
	}
	lines := make([]int, len(deltaFileSizes))
	for i, sz := range deltaFileSizes {
		t := sourceText(uint64(i), sz)
		lines[i] = strings.Count(t, "\n")
		if err := os.WriteFile(filepath.Join(src, fmt.Sprintf("file%d.go", i)), []byte(t), 0o644); err != nil {
			return err
		}
	}
	type side struct {
		key  string
		b    *Bench
		grow int64
		lat  []time.Duration
	}
	sides := []*side{{key: "new", b: &Bench{ctx: b.ctx, cfg: b.cfg, pass: b.pass, strata: b.strata, home: filepath.Join(dir, "store-new"), work: b.work, log: b.log}}}
	if b.cfg.base != "" {
		sides = append([]*side{{key: "base", b: &Bench{ctx: b.ctx, cfg: b.cfg, pass: b.pass, strata: b.cfg.base, home: filepath.Join(dir, "store-base"), work: b.work, log: b.log}}}, sides...)
	} else {
		b.skip("deltas", "base/grow", "no baseline binary (-base, BENCH_BASE)")
	}
	for _, s := range sides {
		if _, _, err := s.b.st("-q", "import", src); err != nil {
			return err
		}
		if _, _, err := s.b.st("-q", "ws", "create", "agent"); err != nil {
			return err
		}
		defer s.b.st("-q", "ws", "rm", "--force", "agent")
	}
	// git: the same edits on a copy, one commit each.
	gitDir := filepath.Join(dir, "git")
	haveGit := lookTool("git")
	gitEnv := []string{"GIT_AUTHOR_NAME=bench", "GIT_AUTHOR_EMAIL=bench@example.invalid", "GIT_COMMITTER_NAME=bench", "GIT_COMMITTER_EMAIL=bench@example.invalid"}
	git := func(args ...string) error {
		_, _, err := b.run(gitDir, gitEnv, append([]string{"git"}, args...)...)
		return err
	}
	var packBefore int64
	if haveGit {
		if _, err := b.must("", "cp", "-a", src, gitDir); err != nil {
			return err
		}
		for _, a := range [][]string{{"init", "-q"}, {"config", "gc.auto", "0"}, {"add", "-A"}, {"commit", "-q", "-m", "import"}, {"gc", "-q", "--prune=now"}} {
			if err := git(a...); err != nil {
				return err
			}
		}
		packBefore = b.packBytes(gitDir)
	} else {
		b.skip("deltas", "git/grow", "git is not installed")
	}
	for i := 0; i < n; i++ {
		if err := b.cancelled(); err != nil {
			return err
		}
		f := i % len(deltaFileSizes)
		line := 1 + (i*7919)%lines[f]
		script := fmt.Sprintf("sed -i '%ds/.*/\\tcheckpoint %d: an edited line/' %s", line, i, filepath.Join(src, fmt.Sprintf("file%d.go", f)))
		for _, s := range sides {
			if _, _, err := s.b.st("exec", "agent", "--sandbox", "none", "--", "/bin/sh", "-ec", script); err != nil {
				return err
			}
			var cr commitResult
			d, err := s.b.stJSON(&cr, "commit", "agent", "-m", fmt.Sprintf("checkpoint %d", i))
			if err != nil {
				return err
			}
			s.grow += cr.NewBytes
			s.lat = append(s.lat, d)
		}
		if haveGit {
			if _, _, err := b.run(gitDir, nil, "/bin/sh", "-ec", strings.ReplaceAll(script, src, gitDir)); err != nil {
				return err
			}
			if err := git("commit", "-q", "-am", fmt.Sprintf("checkpoint %d", i)); err != nil {
				return err
			}
		}
		if (i+1)%50 == 0 {
			b.logf("deltas: %d/%d checkpoints", i+1, n)
		}
	}
	for _, s := range sides {
		b.record("deltas", s.key+"/grow", unitBytes, []float64{float64(s.grow)}, fmt.Sprintf("%d checkpoints", n))
		b.record("deltas", s.key+"/commit", unitNS, durs(s.lat), "")
	}
	if haveGit {
		if err := git("gc", "-q", "--prune=now"); err != nil {
			return err
		}
		b.record("deltas", "git/grow", unitBytes, []float64{float64(b.packBytes(gitDir) - packBefore)}, fmt.Sprintf("%d commits, git gc", n))
	}
	return nil
}

// packBytes is the size of a repository's objects after gc: its packs
// plus anything left loose (`git count-objects -v`, in KiB).
func (b *Bench) packBytes(repo string) int64 {
	out, _, err := b.run(repo, nil, "git", "count-objects", "-v")
	if err != nil {
		return 0
	}
	var n int64
	for _, line := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if ok && (k == "size" || k == "size-pack") {
			var kib int64
			fmt.Sscan(v, &kib)
			n += kib << 10
		}
	}
	return n
}

func reportDeltas(r *Results) []Table {
	if !r.has("deltas") {
		return nil
	}
	baseRev := r.BaseRev
	if baseRev == "" {
		baseRev = "the baseline"
	}
	t := Table{
		Title:  "Delta coding: a session of 1-line checkpoints over five 20–200 KiB files",
		Header: append([]string{"measure", "N"}, passHeader(r.Passes, "git gc pack", "before ("+baseRev+")", "after", "after ÷ git, or Δ")...),
	}
	cells := []string{"store growth over the session", nOf(r, "deltas", "new/commit")}
	for _, p := range r.Passes {
		cells = append(cells, r.cell(p, "deltas", "git/grow", "p50"), r.cell(p, "deltas", "base/grow", "p50"), r.cell(p, "deltas", "new/grow", "p50"),
			r.ratio(p, "deltas", "new/grow", "git/grow", "p50"))
	}
	t.Rows = append(t.Rows, cells)
	for _, st := range []string{"p50", "p99"} {
		cells := []string{"1-file commit latency " + st, nOf(r, "deltas", "new/commit")}
		for _, p := range r.Passes {
			before, after := r.value(p, "deltas", "base/commit", st), r.value(p, "deltas", "new/commit", st)
			delta := "—"
			if before != 0 && after != 0 {
				delta = fmtDelta(after, before)
			}
			cells = append(cells, "—", r.cell(p, "deltas", "base/commit", st), r.cell(p, "deltas", "new/commit", st), delta)
		}
		t.Rows = append(t.Rows, cells)
	}
	t.Notes = append([]string{
		"Targets from the issue: store growth ≤ 1.5× git's pack of the same history; the 1-file commit no more than 1 ms slower. Growth is the sum of the commits' new_bytes (objects as stored); git's is the growth of its objects (packs and loose, `git count-objects -v`) after `git gc --prune=now`, with auto-gc off. Each checkpoint edits one line (`sed -i` in the workspace) and commits; baseline and new run interleaved, each on its own store.",
	}, r.skips("deltas")...)
	return []Table{t}
}
