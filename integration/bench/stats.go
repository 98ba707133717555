package main

import (
	"fmt"
	"math"
	"sort"
	"time"
)

// Units of a Measure.
const (
	unitNS    = "ns"    // a duration, in nanoseconds
	unitBytes = "bytes" // a size
	unitCount = "count" // a plain number
)

// A Measure is one measured quantity in one pass: the summary of its
// samples. It is what a pass hands back (as JSON from the rootless worker)
// and what the tables are built from.
type Measure struct {
	Pass     string  `json:"pass"`
	Scenario string  `json:"scenario"`
	Key      string  `json:"key"`
	Unit     string  `json:"unit"`
	N        int     `json:"n"`
	P50      float64 `json:"p50"`
	P99      float64 `json:"p99"`
	Min      float64 `json:"min"`
	Max      float64 `json:"max"`
	Mean     float64 `json:"mean"`
	Sum      float64 `json:"sum"`
	First    float64 `json:"first"` // the first sample, in the order taken
	// Samples are the raw samples in the order taken (in the JSON a
	// rootless pass hands back; not rendered).
	Samples []float64 `json:"samples,omitempty"`
	Note    string    `json:"note,omitempty"`
	// Skip says why the quantity was not measured in this pass; the
	// statistics are then zero.
	Skip string `json:"skip,omitempty"`
}

// summarize fills the statistics of m from samples. Percentiles are
// nearest-rank: p99 of 200 samples is the 198th smallest, of fewer than
// 100 samples it is the largest.
func summarize(m *Measure, samples []float64) {
	m.N = len(samples)
	if m.N == 0 {
		return
	}
	m.First = samples[0]
	m.Samples = append([]float64(nil), samples...)
	s := append([]float64(nil), samples...)
	sort.Float64s(s)
	m.Min, m.Max = s[0], s[len(s)-1]
	m.P50 = rank(s, 0.50)
	m.P99 = rank(s, 0.99)
	for _, v := range s {
		m.Sum += v
	}
	m.Mean = m.Sum / float64(len(s))
}

func rank(sorted []float64, p float64) float64 {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	if i < 0 {
		i = 0
	}
	return sorted[i]
}

// durs converts durations to float64 nanoseconds.
func durs(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = float64(d)
	}
	return out
}

// fmtDur prints a duration in nanoseconds with three significant digits.
func fmtDur(ns float64) string {
	if ns < 0 {
		return "−" + fmtDur(-ns)
	}
	switch {
	case ns >= 10e9:
		return fmt.Sprintf("%.1f s", ns/1e9)
	case ns >= 1e9:
		return fmt.Sprintf("%.2f s", ns/1e9)
	case ns >= 100e6:
		return fmt.Sprintf("%.0f ms", ns/1e6)
	case ns >= 10e6:
		return fmt.Sprintf("%.1f ms", ns/1e6)
	case ns >= 1e6:
		return fmt.Sprintf("%.2f ms", ns/1e6)
	default:
		return fmt.Sprintf("%.0f µs", ns/1e3)
	}
}

// fmtBytes prints a size in binary units with three significant digits.
func fmtBytes(b float64) string {
	neg := b < 0
	if neg {
		b = -b
	}
	units := []string{"B", "KiB", "MiB", "GiB"}
	i := 0
	for b >= 1024 && i < len(units)-1 {
		b /= 1024
		i++
	}
	var s string
	switch {
	case i == 0:
		s = fmt.Sprintf("%.0f B", b)
	case b >= 100:
		s = fmt.Sprintf("%.0f %s", b, units[i])
	case b >= 10:
		s = fmt.Sprintf("%.1f %s", b, units[i])
	default:
		s = fmt.Sprintf("%.2f %s", b, units[i])
	}
	if neg {
		s = "−" + s
	}
	return s
}

// fmtRatio prints a/b as "2.3×"; "—" when either is missing.
func fmtRatio(a, b float64) string {
	if a <= 0 || b <= 0 {
		return "—"
	}
	r := a / b
	switch {
	case r >= 100:
		return fmt.Sprintf("%.0f×", r)
	case r >= 10:
		return fmt.Sprintf("%.1f×", r)
	case r >= 0.1:
		return fmt.Sprintf("%.2f×", r)
	case r >= 0.01:
		return fmt.Sprintf("%.3f×", r)
	default:
		return fmt.Sprintf("%.4f×", r)
	}
}

// fmtDelta prints a-b as a signed duration.
func fmtDelta(a, b float64) string {
	d := a - b
	if d < 0 {
		return "−" + fmtDur(-d)
	}
	return "+" + fmtDur(d)
}
