package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// ─── EXTENSION POINT: issue "runs" ──────────────────────────────────────
//
// The harness-runner job: fork the base, apply a patch, run the tests,
// record, discard — many times, in parallel. `strata run`, `strata batch`
// and `strata import --git` do not exist yet; each part below checks for
// its command (`strata run --help`, `strata import --help` mentioning
// --git) and records a skip with a note until it does, so the scenario
// lights up by itself when they land. To extend it:
//
//   - the CLI contract is ../shared/CLI.md (`run [--from REF] [--patch
//     FILE] [--tmpfs] … -- CMD`); adjust runArgv if the flags differ;
//   - `strata batch FILE.jsonl --parallel N` is the other way to reach
//     parallelism; measure it beside the N concurrent `strata run`
//     processes below once its JSON line format is settled;
//   - rows go in reportRuns; keys are "<what>/p<N>".

// runsParallel are the parallelism levels measured.
var runsParallel = []int{1, 2, 4}

// runsPatch adds a file to the corpus; npm test still passes with it.
const runsPatch = `diff --git a/src/bench-extra.js b/src/bench-extra.js
new file mode 100644
--- /dev/null
+++ b/src/bench-extra.js
@@ -0,0 +1,3 @@
+'use strict';
+// added by the strata benchmark's "runs" scenario
+module.exports = { extra: true };
`

// runArgv is one `strata run`: fork main, apply the patch, npm test,
// discard.
func (b *Bench) runArgv(patch string) []string {
	return []string{b.strata, "--home", b.home, "run", "--from", "main", "--patch", patch, "--", "npm", "test"}
}

func runRuns(b *Bench) error {
	haveRun := runAsOK(b.strata, "--home", b.home, "run", "--help")
	importHelp, _, _ := b.run("", nil, b.strata, "import", "--help")
	haveGitImport := strings.Contains(importHelp, "--git")
	if !haveRun {
		b.skip("runs", "strata-run", "`strata run --help` fails: `strata run` does not exist yet (this scenario lights up when it does)")
	}
	if !haveGitImport {
		b.skip("runs", "import-git", "`strata import --help` has no --git yet")
	}
	if !haveRun && !haveGitImport {
		return nil
	}
	if err := b.ensureCorpus(); err != nil {
		return err
	}
	src, err := b.copyCorpus()
	if err != nil {
		return err
	}
	patch := filepath.Join(b.work, "runs.patch")
	if err := os.WriteFile(patch, []byte(runsPatch), 0o644); err != nil {
		return err
	}
	if haveRun {
		// Bare npm test in a plain copy: the floor.
		var bare []time.Duration
		for i := 0; i < b.cfg.n.peer; i++ {
			_, d, err := b.run(src, nil, "npm", "test")
			if err != nil {
				return err
			}
			bare = append(bare, d)
		}
		b.record("runs", "bare", unitNS, durs(bare), "")

		for _, par := range runsParallel {
			total := b.cfg.n.runs
			lat, wall, err := b.parallel(par, total, func(int) error {
				_, _, err := b.run("", nil, b.runArgv(patch)...)
				return err
			})
			if err != nil {
				return err
			}
			b.record("runs", fmt.Sprintf("strata/p%d", par), unitNS, durs(lat), "")
			b.record("runs", fmt.Sprintf("strata-wall/p%d", par), unitNS, []float64{float64(wall)}, "")

			lat, wall, err = b.parallel(par, total, func(i int) error {
				wt := filepath.Join(b.work, fmt.Sprintf("runs-wt-%d-%d", par, i))
				defer removeAll(wt)
				for _, step := range []struct {
					dir  string
					argv []string
				}{
					{src, []string{"git", "worktree", "add", "--detach", "-q", wt}},
					{"", []string{"cp", "-al", filepath.Join(src, "node_modules"), wt + "/"}},
					{wt, []string{"git", "apply", patch}},
					{wt, []string{"npm", "test"}},
					{src, []string{"git", "worktree", "remove", "--force", wt}},
				} {
					if _, _, err := b.run(step.dir, nil, step.argv...); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				return err
			}
			b.record("runs", fmt.Sprintf("worktree/p%d", par), unitNS, durs(lat), "")
			b.record("runs", fmt.Sprintf("worktree-wall/p%d", par), unitNS, []float64{float64(wall)}, "")
		}
	}
	if haveGitImport {
		var imp, wt []time.Duration
		for i := 0; i < b.cfg.n.peer; i++ {
			_, d, err := b.st("-q", "import", "--git", src, "-b", fmt.Sprintf("runs-git-%d", i))
			if err != nil {
				return err
			}
			imp = append(imp, d)
			dir := filepath.Join(b.work, fmt.Sprintf("runs-gitwt-%d", i))
			_, d, err = b.run(src, nil, "git", "worktree", "add", "--detach", "-q", dir)
			if err != nil {
				return err
			}
			wt = append(wt, d)
			if _, _, err := b.run(src, nil, "git", "worktree", "remove", "--force", dir); err != nil {
				return err
			}
		}
		b.record("runs", "import-git", unitNS, durs(imp), "")
		b.record("runs", "worktree-add", unitNS, durs(wt), "")
	}
	return nil
}

// parallel runs total jobs on par workers and returns each job's latency
// and the wall time of all of them.
func (b *Bench) parallel(par, total int, job func(i int) error) ([]time.Duration, time.Duration, error) {
	var (
		mu   sync.Mutex
		lat  []time.Duration
		errs []error
		wg   sync.WaitGroup
		next = make(chan int)
	)
	start := time.Now()
	for w := 0; w < par; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				t := time.Now()
				err := job(i)
				mu.Lock()
				lat = append(lat, time.Since(t))
				if err != nil {
					errs = append(errs, err)
				}
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < total && b.ctx.Err() == nil; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	if len(errs) > 0 {
		return nil, 0, errs[0]
	}
	return lat, time.Since(start), b.ctx.Err()
}

func reportRuns(r *Results) []Table {
	if !r.has("runs") {
		return nil
	}
	t := Table{
		Title:  "Runs: fork + patch + `npm test` + discard",
		Header: []string{"how", "parallel"},
	}
	if !r.measured("runs") {
		t.Notes = append([]string{"Not measured yet: the scenario is written (integration/bench/scenario_runs.go) and runs as soon as the commands exist."}, r.skips("runs")...)
		return []Table{t}
	}
	for _, p := range r.Passes {
		t.Header = append(t.Header, p+" p50 per run", p+" runs/min")
	}
	for _, kind := range []struct{ key, label string }{
		{"strata", "`strata run --patch P -- npm test`"},
		{"worktree", "`git worktree add` + `cp -al node_modules` + `git apply` + `npm test` + remove"},
	} {
		for _, par := range runsParallel {
			cells := []string{kind.label, fmt.Sprint(par)}
			for _, p := range r.Passes {
				cells = append(cells, r.cell(p, "runs", fmt.Sprintf("%s/p%d", kind.key, par), "p50"),
					perMinute(r, p, fmt.Sprintf("%s/p%d", kind.key, par), fmt.Sprintf("%s-wall/p%d", kind.key, par)))
			}
			t.Rows = append(t.Rows, cells)
		}
	}
	bare := []string{"bare `npm test` in a plain copy", "1"}
	gi := []string{"`strata import --git` (vs `git worktree add` below)", "1"}
	gw := []string{"`git worktree add --detach`", "1"}
	for _, p := range r.Passes {
		bare = append(bare, r.cell(p, "runs", "bare", "p50"), "")
		gi = append(gi, r.cell(p, "runs", "import-git", "p50"), "")
		gw = append(gw, r.cell(p, "runs", "worktree-add", "p50"), "")
	}
	t.Rows = append(t.Rows, bare, gi, gw)
	t.Notes = r.skips("runs")
	return []Table{t}
}

// perMinute is runs per minute: N runs over the wall time of all of them.
func perMinute(r *Results, pass, latKey, wallKey string) string {
	m, ok := r.get(pass, "runs", latKey)
	wall := r.value(pass, "runs", wallKey, "p50")
	if !ok || m.Skip != "" || wall == 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f", float64(m.N)/(wall/60e9))
}
