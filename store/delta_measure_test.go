package store

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// TestMeasureDeltas (STRATA_MEASURE=1) prints where deltas pay: the
// stored size of a 1-line edit, full and as a delta, by file size; and
// the cost of reading a chunk at the end of a chain, by depth. The
// thresholds of delta.go (minDelta, maxDeltaDepth) come from it.
func TestMeasureDeltas(t *testing.T) {
	if os.Getenv("STRATA_MEASURE") == "" {
		t.Skip("STRATA_MEASURE=1 runs the measurement")
	}
	var zero ID
	for _, n := range []int{256, 512, 1 << 10, 4 << 10, 16 << 10, 64 << 10} {
		base := textBytes(uint64(n), n)
		p := editLine(base, n/120, "a changed line")
		_, full := compress(p)
		d, _ := encodeDelta(p, base, zero, 1)
		t.Logf("%6d bytes: full %6d, delta %4d (%.0f%%)", n, len(full), len(d), 100*float64(len(d))/float64(len(full)))
	}
	s := newStore(t)
	ctx := context.Background()
	v := textBytes(3, 50<<10)
	var prev ID
	var ids []ID
	for i := 0; i <= 40; i++ {
		if i > 0 {
			v = editLine(v, i*31, fmt.Sprintf("edit %d", i))
		}
		w, _ := s.NewWriter(ctx, "m")
		// A fake chain without restarts: depth i (the writer would restart
		// at maxDeltaDepth; here encodeDelta is called directly).
		id := HashObject(KindChunk, v)
		if i == 0 {
			id, _ = w.WriteBytes(v)
		} else {
			_, bp, _ := s.getObject(ctx, prev)
			d, _ := encodeDelta(v, bp, prev, min(i, 255))
			d[0] = 1 // depth is not checked against the chain on reads
			w.enqueue(pendingObject{id: id, kind: KindChunk, size: len(v), codec: codecDelta, data: d})
		}
		w.Finish(nil)
		prev = id
		ids = append(ids, id)
	}
	for _, depth := range []int{0, 1, 5, 10, 20, 40} {
		start := time.Now()
		const reps = 50
		for range reps {
			if got := readContent(t, s, ids[depth]); len(got) != len(v) {
				t.Fatalf("depth %d: read %d bytes, want %d", depth, len(got), len(v))
			}
		}
		t.Logf("read a 50 KiB chunk at chain depth %2d: %v", depth, time.Since(start)/reps)
	}
}
