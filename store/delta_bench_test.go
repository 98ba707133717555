package store

import (
	"context"
	"fmt"
	"testing"
)

func BenchmarkDeltaEncode(b *testing.B) {
	base := textBytes(1, 50<<10)
	p := editLine(base, 10, "changed")
	var id ID
	for b.Loop() {
		if _, err := encodeDelta(p, base, id, 1); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDeltaDecode(b *testing.B) {
	base := textBytes(1, 50<<10)
	p := editLine(base, 10, "changed")
	var id ID
	d, _ := encodeDelta(p, base, id, 1)
	pid := HashObject(KindChunk, p)
	for b.Loop() {
		if _, err := decodeDelta(pid, KindChunk, int64(len(p)), d, func(ID) ([]byte, error) { return base, nil }); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCompress50K(b *testing.B) {
	p := textBytes(1, 50<<10)
	for b.Loop() {
		compress(p)
	}
}

// BenchmarkWriteEdit: what storing a 1-line edit of a 50 KiB file costs,
// whole (WriteBytes) and as a delta against its previous version at the
// middle of a chain (WriteBytesLike): the delta's extra work is reading
// the base through its chain.
func BenchmarkWriteEdit(b *testing.B) {
	for _, like := range []bool{false, true} {
		name := "whole"
		if like {
			name = "delta"
		}
		b.Run(name, func(b *testing.B) {
			s := newStore(b)
			ctx := context.Background()
			v := textBytes(1, 50<<10)
			var prev ID
			for i := range maxDeltaDepth / 2 { // a chain of half the depth
				if i > 0 {
					v = editLine(v, i*13, fmt.Sprintf("setup %d", i))
				}
				w, _ := s.NewWriter(ctx, "b")
				prev, _ = w.WriteBytesLike(v, prev)
				w.Finish(nil)
			}
			i := 0
			for b.Loop() {
				i++
				p := editLine(v, 500+i%300, fmt.Sprintf("bench %d", i))
				w, _ := s.NewWriter(ctx, "b")
				var err error
				if like {
					_, err = w.WriteBytesLike(p, prev)
				} else {
					_, err = w.WriteBytes(p)
				}
				if err != nil {
					b.Fatal(err)
				}
				w.Abort()
			}
		})
	}
}
