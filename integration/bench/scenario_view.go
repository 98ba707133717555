package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Issue "view": what assembling the sandbox's root (the view, built once
// per keeper) costs, measured against a baseline build of strata (-base,
// BENCH_BASE: scripts/bench.sh builds BENCH_BASE_REV, by default the
// merge-base with main) side by side in one run: `exec -- true` into a
// live workspace (the default sandbox) and `ws create --tmpfs` + the
// first `exec -- true` (which starts the keeper and builds its view),
// each binary with a store of its own, interleaved round by round so that
// drift in the machine hits both alike.

func runView(b *Bench) error {
	if b.cfg.base == "" {
		b.skip("view", "new/live", "no baseline binary (-base, BENCH_BASE; scripts/bench.sh builds one from BENCH_BASE_REV)")
		return nil
	}
	if err := b.ensureCorpus(); err != nil {
		return err
	}
	base := &Bench{ctx: b.ctx, cfg: b.cfg, pass: b.pass, strata: b.cfg.base, home: filepath.Join(b.work, "base-store"), work: b.work, log: b.log}
	if err := os.MkdirAll(b.work, 0o700); err != nil {
		return err
	}
	if err := base.ensureCorpus(); err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	defer base.cleanupWorkspaces()
	sides := []struct {
		key string
		b   *Bench
	}{{"base", base}, {"new", b}}
	for _, s := range sides {
		if _, _, err := s.b.st("-q", "ws", "create", "live"); err != nil {
			return err
		}
		defer s.b.st("-q", "ws", "rm", "--force", "live")
	}
	samples := map[string][]time.Duration{}
	for i := -3; i < b.cfg.n.exec; i++ { // three unrecorded rounds
		if err := b.cancelled(); err != nil {
			return err
		}
		for _, s := range sides {
			name := fmt.Sprintf("v%04d", i+3)
			_, dc, err := s.b.st("-q", "ws", "create", name, "--tmpfs")
			if err != nil {
				return err
			}
			_, de, err := s.b.st("exec", name, "--", "true")
			if err != nil {
				return err
			}
			if _, _, err := s.b.st("-q", "ws", "rm", "--force", name); err != nil {
				return err
			}
			_, dl, err := s.b.st("exec", "live", "--", "true")
			if err != nil {
				return err
			}
			if i >= 0 {
				samples[s.key+"/create"] = append(samples[s.key+"/create"], dc+de)
				samples[s.key+"/first"] = append(samples[s.key+"/first"], de)
				samples[s.key+"/live"] = append(samples[s.key+"/live"], dl)
			}
		}
		if (i+1)%50 == 0 && i >= 0 {
			b.logf("view: %d/%d", i+1, b.cfg.n.exec)
		}
	}
	for k, v := range samples {
		b.record("view", k, unitNS, durs(v), "")
	}
	return nil
}

func reportView(r *Results) []Table {
	if !r.has("view") {
		return nil
	}
	baseRev := r.BaseRev
	if baseRev == "" {
		baseRev = "the baseline"
	}
	t := Table{
		Title:  "The sandbox's view: before (" + baseRev + ") and after, side by side",
		Header: append([]string{"operation", "N"}, passHeader(r.Passes, "before p50", "after p50", "Δp50", "before p99", "after p99")...),
	}
	for _, row := range []struct{ label, key string }{
		{"`exec -- true` into a live workspace (`--sandbox agent`)", "live"},
		{"`ws create --tmpfs` + first `exec -- true` (starts the keeper, which builds the view)", "create"},
		{"· of which the first `exec -- true`", "first"},
	} {
		cells := []string{row.label, nOf(r, "view", "new/"+row.key)}
		for _, p := range r.Passes {
			before, after := r.value(p, "view", "base/"+row.key, "p50"), r.value(p, "view", "new/"+row.key, "p50")
			delta := "—"
			if before != 0 && after != 0 {
				delta = fmtDelta(after, before)
			}
			cells = append(cells, r.cell(p, "view", "base/"+row.key, "p50"), r.cell(p, "view", "new/"+row.key, "p50"), delta,
				r.cell(p, "view", "base/"+row.key, "p99"), r.cell(p, "view", "new/"+row.key, "p99"))
		}
		t.Rows = append(t.Rows, cells)
	}
	t.Notes = append([]string{
		"Targets from the issue: the view costs no more than 0.3 ms per exec (it is built once per keeper) and no more than 1 ms per keeper start. Each binary has its own store with the corpus; the two run interleaved (before, after, before, …) after three unrecorded rounds.",
	}, r.skips("view")...)
	return []Table{t}
}
