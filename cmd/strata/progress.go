package main

import (
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/schollz/progressbar/v3"

	"github.com/stratafs/strata/snapshot"
)

// progress draws a bar for long work when stdout is a terminal and neither
// --quiet nor --json is set; otherwise every method is a no-op.
type progress struct {
	mu    sync.Mutex
	on    bool
	e     *env
	bar   *progressbar.ProgressBar
	phase string
	max   int64
}

func (e *env) progress() *progress {
	return &progress{on: e.tty && !e.quiet && !e.json, e: e}
}

// update sets the bar to done of total for phase; total <= 0 draws a
// spinner. Safe to call from many goroutines, and often.
func (p *progress) update(phase string, done, total int64, bytes bool) {
	if !p.on {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar == nil || phase != p.phase || (total > 0 && total != p.max) {
		if p.bar != nil {
			_ = p.bar.Finish()
		}
		max := total
		if max <= 0 {
			max = -1
		}
		p.bar = progressbar.NewOptions64(max,
			progressbar.OptionSetWriter(p.e.stdout),
			progressbar.OptionSetDescription(phase),
			progressbar.OptionShowBytes(bytes),
			progressbar.OptionShowCount(),
			progressbar.OptionSetWidth(30),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
			progressbar.OptionUseIECUnits(true),
		)
		p.phase, p.max = phase, total
	}
	_ = p.bar.Set64(done)
}

// snapshot adapts to snapshot.Progress.
func (p *progress) snapshot(sp snapshot.Progress) {
	if sp.BytesTotal > 0 {
		p.update(sp.Phase, sp.Bytes, sp.BytesTotal, true)
		return
	}
	p.update(sp.Phase, sp.Entries, sp.EntriesTotal, false)
}

// done clears the bar.
func (p *progress) done() {
	if !p.on {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil {
		_ = p.bar.Clear()
		_ = p.bar.Finish()
		p.bar = nil
	}
}

// quotePath prints a path the way git quotes names: as is when it is
// printable UTF-8, else as a C-style quoted string.
func quotePath(p string) string {
	if !utf8.ValidString(p) {
		return strconv.QuoteToASCII(p)
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f || r == '"' || r == '\\' {
			return strconv.Quote(p)
		}
	}
	return p
}
