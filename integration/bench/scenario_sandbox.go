package main

import (
	"time"
)

// Issue "sandbox": what Landlock + seccomp (agent), and a private network
// namespace on top (strict), add to `exec -- true` into a live workspace.

var sandboxModes = []string{"none", "agent", "strict"}

func runSandbox(b *Bench) error {
	if err := b.ensureCorpus(); err != nil {
		return err
	}
	if _, _, err := b.st("-q", "ws", "create", "sandbox"); err != nil {
		return err
	}
	defer b.st("-q", "ws", "rm", "--force", "sandbox")
	samples := map[string][]time.Duration{}
	var floor []time.Duration
	// Three unrecorded rounds first; then the modes interleaved, so that
	// drift in the machine hits all alike.
	for i := -3; i < b.cfg.n.exec; i++ {
		if err := b.cancelled(); err != nil {
			return err
		}
		for _, mode := range sandboxModes {
			_, d, err := b.st("exec", "sandbox", "--sandbox", mode, "--", "true")
			if err != nil {
				return err
			}
			if i >= 0 {
				samples[mode] = append(samples[mode], d)
			}
		}
		// The harness's own floor: starting /bin/true the same way.
		_, d, err := b.run("", nil, "/bin/true")
		if err != nil {
			return err
		}
		if i >= 0 {
			floor = append(floor, d)
		}
	}
	for _, mode := range sandboxModes {
		b.record("sandbox", mode, unitNS, durs(samples[mode]), "")
	}
	b.record("sandbox", "floor", unitNS, durs(floor), "")
	return nil
}

func reportSandbox(r *Results) []Table {
	if !r.has("sandbox") {
		return nil
	}
	t := Table{
		Title:  "`strata exec --sandbox MODE -- true` into a live workspace",
		Header: append([]string{"mode", "N"}, passHeader(r.Passes, "p50", "p99", "Δp50 vs none", "Δp99 vs none")...),
	}
	rows := []struct{ key, label string }{
		{"none", "`--sandbox none`"},
		{"agent", "`--sandbox agent` (the default: Landlock + seccomp)"},
		{"strict", "`--sandbox strict` (agent + private network namespace)"},
		{"floor", "(harness floor: spawning `/bin/true` directly)"},
	}
	for _, row := range rows {
		cells := []string{row.label, nOf(r, "sandbox", row.key)}
		for _, p := range r.Passes {
			cells = append(cells, r.cell(p, "sandbox", row.key, "p50"), r.cell(p, "sandbox", row.key, "p99"))
			if row.key == "agent" || row.key == "strict" {
				cells = append(cells,
					deltaCell(r, p, row.key, "none", "p50"),
					deltaCell(r, p, row.key, "none", "p99"))
			} else {
				cells = append(cells, "", "")
			}
		}
		t.Rows = append(t.Rows, cells)
	}
	t.Notes = append([]string{
		"Target from the issue: the sandbox adds under 1 ms. The modes run interleaved (none, agent, strict, none, …) after three unrecorded rounds.",
	}, r.skips("sandbox")...)
	return []Table{t}
}

func deltaCell(r *Results, pass, key, base, stat string) string {
	a, b := r.value(pass, "sandbox", key, stat), r.value(pass, "sandbox", base, stat)
	if a == 0 || b == 0 {
		return "—"
	}
	return fmtDelta(a, b)
}
