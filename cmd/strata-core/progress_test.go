package main

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stratafs/strata/image"
)

// screen is a terminal as far as the progress renderer drives one: it
// interprets \r, \n, ESC[nA (cursor up), ESC[K (clear to end of line) and
// ESC[J (clear to end of screen), so tests see what a person would.
type screen struct {
	rows     [][]rune
	row, col int
}

func (s *screen) Write(p []byte) (int, error) {
	r := []rune(string(p))
	for i := 0; i < len(r); i++ {
		for s.row >= len(s.rows) {
			s.rows = append(s.rows, nil)
		}
		switch c := r[i]; {
		case c == '\r':
			s.col = 0
		case c == '\n':
			s.row++
			s.col = 0
		case c == 0x1b && i+1 < len(r) && r[i+1] == '[':
			j := i + 2
			for j < len(r) && r[j] >= '0' && r[j] <= '9' {
				j++
			}
			n := 1
			if j > i+2 {
				n, _ = strconv.Atoi(string(r[i+2 : j]))
			}
			switch r[j] {
			case 'A':
				s.row = max(0, s.row-n)
			case 'K':
				if s.col < len(s.rows[s.row]) {
					s.rows[s.row] = s.rows[s.row][:s.col]
				}
			case 'J':
				if s.col < len(s.rows[s.row]) {
					s.rows[s.row] = s.rows[s.row][:s.col]
				}
				s.rows = s.rows[:s.row+1]
			default:
				panic(fmt.Sprintf("screen: unexpected escape %q", string(r[i:j+1])))
			}
			i = j
		default:
			for len(s.rows[s.row]) <= s.col {
				s.rows[s.row] = append(s.rows[s.row], ' ')
			}
			s.rows[s.row][s.col] = c
			s.col++
		}
	}
	return len(p), nil
}

// lines is the screen's non-empty lines, right-trimmed.
func (s *screen) lines() []string {
	var out []string
	for _, r := range s.rows {
		if l := strings.TrimRight(string(r), " "); l != "" {
			out = append(out, l)
		}
	}
	return out
}

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func newTestProgress(width int) (*progress, *screen, *fakeClock) {
	s := &screen{}
	c := &fakeClock{t: time.Unix(1e9, 0)}
	return newProgress(s, width, c.now), s, c
}

// TestProgressBlobs: a push's layers each get a line, redrawn in place;
// finished ones say how they ended; done() leaves the screen empty.
func TestProgressBlobs(t *testing.T) {
	p, s, clk := newTestProgress(100)
	p.blob(image.BlobProgress{Index: 0, Count: 3, State: image.BlobBuilding, Done: 0, Size: 4 << 20})
	p.blob(image.BlobProgress{Index: 1, Count: 3, Digest: "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", State: image.BlobExists, Size: 1 << 20})
	clk.advance(time.Second)
	p.blob(image.BlobProgress{Index: 0, Count: 3, Digest: "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbb", State: image.BlobUploading, Done: 2 << 20, Size: 4 << 20})
	p.blob(image.BlobProgress{Index: 2, Count: 3, Digest: "sha256:cccccccccccccccccccccccccccc", State: image.BlobMounted, Size: 3 << 10})
	got := s.lines()
	want := []string{
		"layer 1/3 sha256:bbbbbbbbbbbb [============>           ] 2.0 MiB / 4.0 MiB 2.0 MiB/s uploading",
		"layer 2/3 sha256:aaaaaaaaaaaa [========================] 1.0 MiB exists",
		"layer 3/3 sha256:cccccccccccc [========================] 3.0 KiB mounted",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("screen:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	p.done()
	if l := s.lines(); len(l) != 0 {
		t.Errorf("after done: %q", l)
	}
}

// TestProgressThrottle: figures alone redraw at most every 100 ms; a new
// bar or a change of state redraws at once.
func TestProgressThrottle(t *testing.T) {
	var buf bytes.Buffer
	clk := &fakeClock{t: time.Unix(1e9, 0)}
	p := newProgress(&buf, 80, clk.now)
	p.update("import", 1, 100, false)
	n := buf.Len()
	for i := 2; i < 50; i++ {
		p.update("import", int64(i), 100, false)
	}
	if buf.Len() != n {
		t.Errorf("48 updates within the same instant wrote %d more bytes", buf.Len()-n)
	}
	clk.advance(redrawEvery)
	p.update("import", 60, 100, false)
	if buf.Len() == n {
		t.Errorf("an update after %s drew nothing", redrawEvery)
	}
	n = buf.Len()
	p.set("x", "another", "", 0, 10, false)
	if buf.Len() == n {
		t.Errorf("a new bar was not drawn at once")
	}
}

// TestProgressManyLayers: more bars than fit keep every unfinished one
// and the latest finished ones, and count the rest on one line.
func TestProgressManyLayers(t *testing.T) {
	p, s, _ := newTestProgress(120)
	for i := 0; i < 30; i++ {
		lp := image.LayerProgress{Index: i, Count: 30, DiffID: fmt.Sprintf("sha256:%064d", i)}
		if i < 27 {
			lp.Reused = true
		} else {
			lp.Fetched, lp.Size = 10, 100
		}
		p.layer(lp)
	}
	got := s.lines()
	if len(got) != maxBarLines {
		t.Fatalf("%d lines, want %d:\n%s", len(got), maxBarLines, strings.Join(got, "\n"))
	}
	if got[0] != "… 21 more finished" {
		t.Errorf("first line %q", got[0])
	}
	for i, l := range got[1:] {
		if want := fmt.Sprintf("layer %d/30 ", 22+i); !strings.HasPrefix(l, want) {
			t.Errorf("line %d: %q, want it to start %q", i+1, l, want)
		}
	}
	if !strings.Contains(got[9], "10 B / 100 B") || !strings.Contains(got[1], "in the store") {
		t.Errorf("lines:\n%s", strings.Join(got, "\n"))
	}
}

// TestProgressWidth: no line is longer than the terminal (a wrapped line
// would break the cursor arithmetic), and an unknown total spins.
func TestProgressWidth(t *testing.T) {
	p, s, clk := newTestProgress(40)
	p.set("a", strings.Repeat("very long label ", 5), "building", 5<<20, -1, true)
	clk.advance(time.Second)
	p.set("a", strings.Repeat("very long label ", 5), "building", 6<<20, -1, true)
	for _, l := range s.lines() {
		if n := len([]rune(l)); n > 39 {
			t.Errorf("line of %d runes on a 40-column terminal: %q", n, l)
		}
		if !strings.Contains(l, "<=>") {
			t.Errorf("unknown total without a spinner: %q", l)
		}
	}
}

// TestProgressOff: not a terminal (or --quiet/--json): nothing is written.
func TestProgressOff(t *testing.T) {
	var buf bytes.Buffer
	e := &env{stdout: &buf, tty: false}
	p := e.progress()
	p.update("x", 1, 2, false)
	p.blob(image.BlobProgress{Count: 1, State: image.BlobUploading, Done: 1, Size: 2})
	p.layer(image.LayerProgress{Count: 1, Finished: true})
	p.done()
	e = &env{stdout: &buf, tty: true, json: true}
	p = e.progress()
	p.update("x", 1, 2, false)
	p.done()
	if buf.Len() != 0 {
		t.Errorf("progress wrote %q", buf.String())
	}
}
