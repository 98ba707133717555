package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Results are the Measures of every pass of one run.
type Results struct {
	Passes   []string  `json:"passes"`
	Measures []Measure `json:"measures"`
	// PassNotes say why a pass did not run, or what it could not do.
	PassNotes map[string]string `json:"pass_notes,omitempty"`
	// BaseRev names the baseline build of the view scenario.
	BaseRev string `json:"base_rev,omitempty"`
}

func (r *Results) get(pass, scenario, key string) (Measure, bool) {
	for _, m := range r.Measures {
		if m.Pass == pass && m.Scenario == scenario && m.Key == key {
			return m, true
		}
	}
	return Measure{}, false
}

// has reports whether anything of scenario was recorded in any pass.
func (r *Results) has(scenario string) bool {
	for _, m := range r.Measures {
		if m.Scenario == scenario {
			return true
		}
	}
	return false
}

// cell prints one statistic of a Measure: "p50", "p99", "mean", "sum",
// "min", "max" or "n"; "—" when absent, "n/a" when skipped.
func (r *Results) cell(pass, scenario, key, stat string) string {
	m, ok := r.get(pass, scenario, key)
	switch {
	case !ok:
		return "—"
	case m.Skip != "":
		return "n/a"
	}
	if stat == "n" {
		return fmt.Sprint(m.N)
	}
	if stat == "p99" && m.N < 2 {
		return ""
	}
	v := m.stat(stat)
	switch m.Unit {
	case unitNS:
		return fmtDur(v)
	case unitBytes:
		return fmtBytes(v)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}

func (m Measure) stat(stat string) float64 {
	switch stat {
	case "p50":
		return m.P50
	case "p99":
		return m.P99
	case "mean":
		return m.Mean
	case "sum":
		return m.Sum
	case "first":
		return m.First
	case "min":
		return m.Min
	case "max":
		return m.Max
	}
	panic("bench: unknown statistic " + stat)
}

// value is a statistic of a Measure, 0 when absent or skipped.
func (r *Results) value(pass, scenario, key, stat string) float64 {
	m, ok := r.get(pass, scenario, key)
	if !ok || m.Skip != "" || m.N == 0 {
		return 0
	}
	return m.stat(stat)
}

// ratio prints key/base of one statistic within one pass.
func (r *Results) ratio(pass, scenario, key, base, stat string) string {
	return fmtRatio(r.value(pass, scenario, key, stat), r.value(pass, scenario, base, stat))
}

// skips lists, once each, why measures of scenario were skipped, with
// the passes each reason applies to.
func (r *Results) skips(scenario string) []string {
	var reasons []string
	passes := map[string][]string{}
	for _, m := range r.Measures {
		if m.Scenario != scenario || m.Skip == "" {
			continue
		}
		ps, seen := passes[m.Skip]
		if !seen {
			reasons = append(reasons, m.Skip)
		}
		if !slices.Contains(ps, m.Pass) {
			passes[m.Skip] = append(ps, m.Pass)
		}
	}
	var out []string
	for _, why := range reasons {
		out = append(out, fmt.Sprintf("n/a (%s): %s", strings.Join(passes[why], ", "), why))
	}
	return out
}

// measured reports whether anything of scenario was measured (not only
// skipped) in any pass.
func (r *Results) measured(scenario string) bool {
	for _, m := range r.Measures {
		if m.Scenario == scenario && m.Skip == "" {
			return true
		}
	}
	return false
}

// notes lists the notes recorded with measures of scenario.
func (r *Results) notes(scenario string) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range r.Measures {
		if m.Scenario != scenario || m.Note == "" || seen[m.Note] {
			continue
		}
		seen[m.Note] = true
		out = append(out, m.Note)
	}
	return out
}

// A Table is one markdown table with a title and notes under it.
type Table struct {
	Title  string
	Header []string
	Rows   [][]string
	Notes  []string
}

func (t Table) markdown() string {
	var sb strings.Builder
	if t.Title != "" {
		fmt.Fprintf(&sb, "#### %s\n\n", t.Title)
	}
	sb.WriteString("| " + strings.Join(t.Header, " | ") + " |\n")
	seps := make([]string, len(t.Header))
	for i := range seps {
		if i == 0 {
			seps[i] = "---"
		} else {
			seps[i] = "---:"
		}
	}
	sb.WriteString("|" + strings.Join(seps, "|") + "|\n")
	for _, row := range t.Rows {
		sb.WriteString("| " + strings.Join(row, " | ") + " |\n")
	}
	if len(t.Notes) > 0 {
		sb.WriteString("\n")
		for _, n := range t.Notes {
			sb.WriteString("- " + n + "\n")
		}
	}
	sb.WriteString("\n")
	return sb.String()
}

// passHeader makes "root p50 | root p99 | rootless p50 | …" column names.
func passHeader(passes []string, stats ...string) []string {
	var h []string
	for _, p := range passes {
		for _, s := range stats {
			h = append(h, p+" "+s)
		}
	}
	return h
}

// updateDoc replaces the text between the results markers of a markdown
// file (docs/bench.md) with the results, leaving the rest as written.
func updateDoc(path, results string) error {
	const begin, end = "<!-- bench:results:begin -->", "<!-- bench:results:end -->"
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(b)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		return fmt.Errorf("%s: no %s … %s markers", path, begin, end)
	}
	s = s[:i+len(begin)] + "\n\n" + results + "\n" + s[j:]
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(s), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
