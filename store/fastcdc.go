package store

// FastCDC content-defined chunking, after Xia et al., "FastCDC: a Fast and
// Efficient Content-Defined Chunking Approach for Data Deduplication"
// (USENIX ATC 2016): a Gear rolling hash, cut-point skipping below the
// minimum size, and normalized chunking at level 2 (a mask with two more
// bits before the average size, two fewer after it), which narrows the
// chunk size distribution around the average.

import "math/bits"

// Chunking parameters. docs/store.md has the measurements behind them.
const (
	// SmallFileMax is the largest content stored whole as one chunk.
	SmallFileMax = 64 << 10
	// ChunkMin, ChunkAvg and ChunkMax bound the chunks of larger files.
	ChunkMin = 16 << 10
	ChunkAvg = 32 << 10
	ChunkMax = 128 << 10
)

// gearSeed fixes the Gear table. Changing it changes every chunk boundary,
// and so every large file's id: it is part of the format.
const gearSeed = 0x5354524154414344 // "STRATACD"

// gear maps each byte value to a pseudo-random 64-bit value (splitmix64
// from gearSeed).
var gear = func() (g [256]uint64) {
	x := uint64(gearSeed)
	for i := range g {
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		g[i] = z ^ z>>31
	}
	return g
}()

// cdc holds one set of chunking parameters.
type cdc struct {
	min, avg, max int
	// maskS is tested before the average size, maskL after. Both select
	// the top bits of the hash: with a shift-left Gear hash, bit k depends
	// on the last k+1 bytes, so the top bits see the full 64-byte window.
	maskS, maskL uint64
}

func newCDC(min, avg, max int) cdc {
	b := bits.Len(uint(avg)) - 1 // log2(avg)
	return cdc{
		min: min, avg: avg, max: max,
		maskS: ^uint64(0) << (64 - (b + 2)),
		maskL: ^uint64(0) << (64 - (b - 2)),
	}
}

var defaultCDC = newCDC(ChunkMin, ChunkAvg, ChunkMax)

// cut returns the length of the first chunk of b. b holds at least max
// bytes unless it is the end of the content, in which case a tail with
// no cut point is one chunk.
func (c *cdc) cut(b []byte) int {
	n := len(b)
	if n <= c.min {
		return n
	}
	if n > c.max {
		n = c.max
	}
	normal := c.avg
	if n < normal {
		normal = n
	}
	var fp uint64
	i := c.min
	for ; i < normal; i++ {
		fp = fp<<1 + gear[b[i]]
		if fp&c.maskS == 0 {
			return i + 1
		}
	}
	for ; i < n; i++ {
		fp = fp<<1 + gear[b[i]]
		if fp&c.maskL == 0 {
			return i + 1
		}
	}
	return n
}
