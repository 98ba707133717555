package store

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// TestMeasureChunking prints the figures behind the chunking parameters
// (docs/store.md). Run with STRATA_MEASURE=1 go test -run Measure -v.
func TestMeasureChunking(t *testing.T) {
	if os.Getenv("STRATA_MEASURE") == "" {
		t.Skip("measurement; set STRATA_MEASURE=1")
	}
	const size = 100 << 20
	data := randBytes(42, size)
	text := textBytes(43, 32<<20)
	for _, p := range []struct{ min, avg, max int }{
		{8 << 10, 16 << 10, 64 << 10},
		{16 << 10, 32 << 10, 128 << 10},
		{8 << 10, 32 << 10, 128 << 10},
		{32 << 10, 64 << 10, 256 << 10},
		{64 << 10, 128 << 10, 512 << 10},
	} {
		c := newCDC(p.min, p.avg, p.max)
		s := newStore(t)
		ctx := context.Background()
		write := func(b []byte) (ID, WriterStats, time.Duration) {
			w, err := s.NewWriter(ctx, "m")
			if err != nil {
				t.Fatal(err)
			}
			w.cdc = c
			t0 := time.Now()
			id, _, err := w.WriteContent(bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Finish(nil); err != nil {
				t.Fatal(err)
			}
			return id, w.Stats(), time.Since(t0)
		}
		_, st, d := write(data)
		var growth []int64
		for i, off := range []int{50 << 20, 12345678, 99 << 20, 3 << 20, 77777777} {
			b := bytes.Clone(data)
			b[off] ^= byte(i + 1)
			_, st2, _ := write(b)
			growth = append(growth, st2.NewBytes)
		}
		_, stt, dt := write(text)
		fmt.Printf("min=%3dK avg=%3dK max=%3dK: random 100MB %5.0f MB/s %5d objects; edit growth KiB %v; text 32MB %5.0f MB/s ratio %.3f objects %d\n",
			p.min>>10, p.avg>>10, p.max>>10, float64(size)/d.Seconds()/1e6, st.NewObjects,
			kib(growth), float64(len(text))/dt.Seconds()/1e6, float64(stt.NewBytes)/float64(len(text)), stt.NewObjects)
	}
}

func kib(v []int64) []int64 {
	out := make([]int64, len(v))
	for i, x := range v {
		out[i] = x >> 10
	}
	return out
}

func TestMeasurePageSize(t *testing.T) {
	if os.Getenv("STRATA_MEASURE") == "" {
		t.Skip("measurement; set STRATA_MEASURE=1")
	}
	data := randBytes(1, 64<<20)
	text := textBytes(1, 64<<20)
	defer func(v int) { createPageSize = v }(createPageSize)
	for _, ps := range []int{4096, 8192, 16384, 32768, 65536} {
		createPageSize = ps
		for _, d := range [][]byte{data, text} {
			s := newStore(t)
			t0 := time.Now()
			writeContent(t, s, d)
			el := time.Since(t0)
			var pages, psz int64
			s.db.QueryRow("PRAGMA page_count").Scan(&pages)
			s.db.QueryRow("PRAGMA page_size").Scan(&psz)
			fmt.Printf("page %5d: %5.0f MB/s, db %d MiB\n", psz, float64(len(d))/el.Seconds()/1e6, pages*psz>>20)
		}
	}
}
