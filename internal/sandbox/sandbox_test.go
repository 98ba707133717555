package sandbox

import (
	"testing"

	"golang.org/x/sys/unix"
)

func TestBPFCodec(t *testing.T) {
	progs := [][]unix.SockFilter{{{Code: 0x20, K: 4}, {Code: 0x15, Jt: 1, Jf: 2, K: 0xc000003e}}, {{Code: 6, K: 0x7fff0000}}}
	got, ok := decodeBPF(encodeBPF(progs))
	if !ok || len(got) != 2 || got[0][1] != progs[0][1] || got[1][0] != progs[1][0] {
		t.Fatalf("round trip: %v %v", got, ok)
	}
	b := encodeBPF(progs)
	for i := 0; i < len(b); i++ {
		if _, ok := decodeBPF(b[:i]); ok {
			t.Fatalf("a truncated cache (%d of %d bytes) decodes", i, len(b))
		}
	}
}
