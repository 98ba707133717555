package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/term"

	"github.com/stratafs/strata/image"
	"github.com/stratafs/strata/snapshot"
)

// progress draws progress bars for long work when stdout is a terminal and
// neither --quiet nor --json is set; otherwise every method is a no-op, so
// output a script reads is never touched. It draws one line per bar (a
// blob of a push, a layer of a pull or an image import; one bar for other
// commands), redrawn in place with ANSI cursor movement at most every
// redrawEvery, and clears them all when done.
//
// A small renderer of our own rather than a library: the progress-bar
// libraries at hand import net/http (schollz/progressbar) or bring
// goroutines and dependencies of their own, and every strata call pays
// for what the binary links (DESIGN.md, costs).
type progress struct {
	mu    sync.Mutex
	on    bool
	w     io.Writer
	width int
	now   func() time.Time
	bars  []*bar
	byKey map[string]*bar
	drawn int // lines on screen, above the cursor
	last  time.Time
	spin  int
}

// bar is one line.
type bar struct {
	key, label  string
	done, total int64 // total <= 0: unknown (a spinner)
	bytes       bool
	status      string // a word after the figures (building, uploading…)
	finished    bool
	start       time.Time
}

const (
	redrawEvery = 100 * time.Millisecond
	maxBarLines = 10 // more bars than this: the oldest finished ones are summed up in one line
	barWidth    = 24
	maxLabel    = 36
)

func (e *env) progress() *progress {
	on := e.tty && !e.quiet && !e.json
	width := 80
	if f, ok := e.stdout.(*os.File); ok && on {
		if w, _, err := term.GetSize(int(f.Fd())); err == nil && w > 20 {
			width = w
		}
	}
	p := newProgress(e.stdout, width, time.Now)
	p.on = on
	return p
}

func newProgress(w io.Writer, width int, now func() time.Time) *progress {
	return &progress{on: true, w: w, width: width, now: now, byKey: map[string]*bar{}}
}

// update sets the command's one bar to done of total for phase; total <= 0
// draws a spinner. Safe to call from many goroutines, and often.
func (p *progress) update(phase string, done, total int64, bytes bool) {
	p.set("", phase, "", done, total, bytes)
}

// set updates (or adds) the bar key.
func (p *progress) set(key, label, status string, done, total int64, bytes bool) {
	if !p.on {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	b, ok := p.byKey[key]
	if !ok {
		b = &bar{key: key, start: p.now()}
		p.bars = append(p.bars, b)
		p.byKey[key] = b
	}
	changed := !ok || b.label != label || b.status != status || b.finished
	b.label, b.status, b.done, b.total, b.bytes, b.finished = label, status, done, total, bytes, false
	p.render(changed)
}

// finish marks the bar key finished with status (drawn at once).
func (p *progress) finish(key, label, status string, done int64, bytes bool) {
	if !p.on {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	b, ok := p.byKey[key]
	if !ok {
		b = &bar{key: key, start: p.now()}
		p.bars = append(p.bars, b)
		p.byKey[key] = b
	}
	b.label, b.status, b.done, b.bytes, b.finished = label, status, done, bytes, true
	if b.total <= 0 || b.total < done {
		b.total = done
	}
	p.render(true)
}

// snapshot adapts to snapshot.Progress.
func (p *progress) snapshot(sp snapshot.Progress) {
	if sp.BytesTotal > 0 {
		p.update(sp.Phase, sp.Bytes, sp.BytesTotal, true)
		return
	}
	p.update(sp.Phase, sp.Entries, sp.EntriesTotal, false)
}

// layer adapts to image.LayerProgress: a bar per layer of a pull or an
// image import, of compressed bytes received where the source is a
// registry, else of the layer's tar bytes read.
func (p *progress) layer(lp image.LayerProgress) {
	key := strconv.Itoa(lp.Index)
	label := fmt.Sprintf("layer %d/%d %.19s", lp.Index+1, lp.Count, lp.DiffID)
	switch {
	case lp.Reused:
		p.finish(key, label, "in the store", 0, true)
	case lp.Finished && lp.Fetched > 0:
		p.finish(key, label, "done", lp.Fetched, true) // the bytes received, as while it ran
	case lp.Finished:
		p.finish(key, label, "done", lp.Done, true)
	case lp.Fetched > 0 && lp.Size > 0:
		p.set(key, label, "", lp.Fetched, lp.Size, true)
	default:
		p.set(key, label, "", lp.Done, -1, true)
	}
}

// blob adapts to image.BlobProgress: a bar per layer of a push.
func (p *progress) blob(bp image.BlobProgress) {
	key := strconv.Itoa(bp.Index)
	label := fmt.Sprintf("layer %d/%d", bp.Index+1, bp.Count)
	if bp.Digest != "" {
		label += fmt.Sprintf(" %.19s", bp.Digest)
	}
	switch bp.State {
	case image.BlobBuilding, image.BlobUploading:
		p.set(key, label, string(bp.State), bp.Done, bp.Size, true)
	default:
		p.finish(key, label, string(bp.State), bp.Size, true)
	}
}

// done clears the bars.
func (p *progress) done() {
	if !p.on {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drawn > 0 {
		fmt.Fprintf(p.w, "\x1b[%dA\r\x1b[J", p.drawn)
	}
	p.drawn, p.bars, p.byKey = 0, nil, map[string]*bar{}
}

// render redraws every visible bar, unless the last redraw was less than
// redrawEvery ago and nothing but figures changed. Called with mu held.
func (p *progress) render(force bool) {
	now := p.now()
	if !force && p.drawn > 0 && now.Sub(p.last) < redrawEvery {
		return
	}
	p.last = now
	p.spin++
	lines := p.lines(now, p.width-1)
	var sb strings.Builder
	if p.drawn > 0 {
		fmt.Fprintf(&sb, "\x1b[%dA", p.drawn) // back to the first line drawn
	}
	for _, l := range lines {
		sb.WriteString("\r\x1b[K")
		sb.WriteString(truncate(l, p.width-1)) // a wrapped line would break the cursor arithmetic
		sb.WriteString("\n")
	}
	if len(lines) < p.drawn {
		sb.WriteString("\x1b[J") // fewer lines than before: clear the rest
	}
	p.drawn = len(lines)
	_, _ = io.WriteString(p.w, sb.String())
}

// lines is what render draws: at most maxBarLines bars in the order they
// came, every unfinished one first, the rest the latest finished ones,
// and a line counting the finished ones left out. Labels are cut so that
// the figures fit in width.
func (p *progress) lines(now time.Time, width int) []string {
	show := p.bars
	hidden := 0
	if len(p.bars) > maxBarLines {
		keep := map[*bar]bool{}
		room := maxBarLines - 1
		for _, b := range p.bars {
			if !b.finished && room > 0 {
				keep[b] = true
				room--
			}
		}
		for i := len(p.bars) - 1; i >= 0 && room > 0; i-- {
			if b := p.bars[i]; !keep[b] {
				keep[b] = true
				room--
			}
		}
		show = nil
		for _, b := range p.bars {
			if keep[b] {
				show = append(show, b)
			}
		}
		hidden = len(p.bars) - len(show)
	}
	labelW := 0
	for _, b := range show {
		labelW = max(labelW, min(utf8.RuneCountInString(b.label), maxLabel))
	}
	var out []string
	if hidden > 0 {
		out = append(out, fmt.Sprintf("… %d more finished", hidden))
	}
	for _, b := range show {
		rest := b.figures(now, p.spin)
		lw := min(labelW, max(width-1-utf8.RuneCountInString(rest), 8))
		label := truncate(b.label, lw)
		out = append(out, label+strings.Repeat(" ", max(0, lw-utf8.RuneCountInString(label)))+" "+rest)
	}
	return out
}

// figures is a bar's line after its label:
// "[=====>    ] 3.0 MiB / 12 MiB 1.5 MiB/s status".
func (b *bar) figures(now time.Time, spin int) string {
	var sb strings.Builder
	amount := func(n int64) string {
		if b.bytes {
			return ibytes(n)
		}
		return strconv.FormatInt(n, 10)
	}
	switch {
	case b.finished:
		sb.WriteString("[" + strings.Repeat("=", barWidth) + "] " + amount(b.done))
	case b.total > 0:
		done := min(max(b.done, 0), b.total)
		fill := int(done * barWidth / b.total)
		sb.WriteString("[" + strings.Repeat("=", fill))
		if fill < barWidth {
			sb.WriteString(">" + strings.Repeat(" ", barWidth-fill-1))
		}
		sb.WriteString("] " + amount(done) + " / " + amount(b.total))
	default:
		// Unknown total: a block that moves back and forth.
		pos := spin % (2 * (barWidth - 3))
		if pos >= barWidth-3 {
			pos = 2*(barWidth-3) - pos
		}
		sb.WriteString("[" + strings.Repeat(" ", pos) + "<=>" + strings.Repeat(" ", barWidth-3-pos) + "] " + amount(b.done))
	}
	if el := now.Sub(b.start); b.bytes && !b.finished && el >= time.Second && b.done > 0 {
		sb.WriteString(" " + ibytes(int64(float64(b.done)/el.Seconds())) + "/s")
	}
	if b.status != "" {
		sb.WriteString(" " + b.status)
	}
	return sb.String()
}

// truncate cuts s to at most n runes, marking the cut with "…".
func truncate(s string, n int) string {
	if n <= 0 || utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
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
