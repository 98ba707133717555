package store

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
)

// TestCoderPoolLIFO: a caller alone gets the coder it used last (the warm
// one); callers at once get coders of their own.
func TestCoderPoolLIFO(t *testing.T) {
	made := 0
	p := coderPool[*int]{make: func() *int { made++; v := made; return &v }}
	a := p.get()
	p.put(a)
	for range 3 {
		if b := p.get(); b != a {
			t.Fatalf("a lone caller got coder %d, want the one it used last (%d)", *b, *a)
		} else {
			p.put(b)
		}
	}
	x, y := p.get(), p.get()
	if x == y || made != 2 {
		t.Fatalf("two callers at once: coders %d and %d, %d made", *x, *y, made)
	}
	p.put(y)
	p.put(x)
	if z := p.get(); z != x {
		t.Fatalf("after two put back, got %d, want %d (put last)", *z, *x)
	}
}

// TestCompressConcurrent: compress and decodeAll from many goroutines at
// once give back what went in.
func TestCompressConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				p := bytes.Repeat([]byte(fmt.Sprintf("goroutine %d line %d\n", g, i)), 40+i)
				codec, c := compress(p)
				if codec != codecZstd {
					errs <- fmt.Errorf("payload of %d bytes not compressed", len(p))
					return
				}
				back, err := decodeAll(c, make([]byte, 0, len(p))) // the size column bounds it
				if err != nil || !bytes.Equal(back, p) {
					errs <- fmt.Errorf("round trip of %d bytes: %v", len(p), err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
