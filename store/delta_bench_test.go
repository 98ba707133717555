package store

import "testing"

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
