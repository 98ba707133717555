package store

// Object records: how one object's payload is stored in a row of the
// objects table (kind, codec, size, data) and verified when read back.

import (
	"fmt"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// Codecs of the objects.codec column.
const (
	codecNone = 0 // data is the payload
	codecZstd = 1 // data is one zstd frame of the payload
	// codecDelta: data is a chain depth (1 byte), the id of a base chunk
	// (32 bytes) and one zstd frame of the payload compressed with the
	// base's payload as raw dictionary (delta.go).
	codecDelta = 2
)

// minCompress is the payload size below which compression is not tried:
// a zstd frame costs about a dozen bytes of header, and rows this small
// share a page with their neighbours anyway.
const minCompress = 128

// Encoders and decoders are kept on last-in-first-out free lists of
// single-goroutine coders rather than in one zstd.Encoder and Decoder
// with GOMAXPROCS coders inside: those hand their coders out in turn, so
// a process that compresses a few small objects — a one-file commit's
// trees — paid the first use of each (an encoder's 256 KiB match table
// faulted in: ~1 ms on the VM of docs/hotpath.md) where one would do. A
// caller takes the coder used last; a new one is made only when every
// one is busy (parallel imports make as many as they have workers).
var (
	encoders = coderPool[*zstd.Encoder]{make: func() *zstd.Encoder {
		e, err := zstd.NewWriter(nil,
			zstd.WithEncoderLevel(zstd.SpeedFastest),
			zstd.WithEncoderConcurrency(1),
			// The object id already covers the payload.
			zstd.WithEncoderCRC(false),
		)
		if err != nil {
			panic(err) // constant options
		}
		return e
	}}
	decoders = coderPool[*zstd.Decoder]{make: func() *zstd.Decoder {
		d, err := zstd.NewReader(nil,
			zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderMaxMemory(maxObjectSize),
			// Bound the output by the size column, so that a damaged
			// frame cannot allocate more than the object claims to be.
			zstd.WithDecodeAllCapLimit(true),
		)
		if err != nil {
			panic(err) // constant options
		}
		return d
	}}
)

// coderPool is a free list of coders, the last one put back first out.
type coderPool[T any] struct {
	mu   sync.Mutex
	free []T
	make func() T
}

func (p *coderPool[T]) get() T {
	p.mu.Lock()
	if n := len(p.free); n > 0 {
		c := p.free[n-1]
		p.free = p.free[:n-1]
		p.mu.Unlock()
		return c
	}
	p.mu.Unlock()
	return p.make()
}

func (p *coderPool[T]) put(c T) {
	p.mu.Lock()
	p.free = append(p.free, c)
	p.mu.Unlock()
}

// encodeAll appends p compressed as one zstd frame to dst.
func encodeAll(p, dst []byte) []byte {
	e := encoders.get()
	defer encoders.put(e)
	return e.EncodeAll(p, dst)
}

// decodeAll appends the payload of zstd frame c to dst.
func decodeAll(c, dst []byte) ([]byte, error) {
	d := decoders.get()
	defer decoders.put(d)
	return d.DecodeAll(c, dst)
}

// compress returns the codec and stored bytes for payload p. It keeps p
// as is when compression saves less than 10%: decompressing costs time on
// every read, and random or already-compressed data does not shrink.
// The returned slice aliases p when the codec is codecNone.
func compress(p []byte) (int, []byte) {
	if len(p) < minCompress {
		return codecNone, p
	}
	if len(p) >= sampleMin && !worthCompressing(p) {
		return codecNone, p
	}
	c := encodeAll(p, make([]byte, 0, len(p)/2))
	if len(c) >= len(p)-len(p)/10 {
		return codecNone, p
	}
	return codecZstd, c
}

// sampleMin is the size from which compress first tries a sample: a
// chunk of random bytes is then rejected for the price of compressing a
// sixteenth of it.
const (
	sampleMin  = 32 << 10
	sampleSize = 2 << 10
)

// worthCompressing compresses sampleSize bytes from the start, middle and
// end of p and reports whether they shrank by at least 10%.
func worthCompressing(p []byte) bool {
	var buf [3 * sampleSize]byte
	s := buf[:0]
	s = append(s, p[:sampleSize]...)
	mid := len(p)/2 - sampleSize/2
	s = append(s, p[mid:mid+sampleSize]...)
	s = append(s, p[len(p)-sampleSize:]...)
	var out [3*sampleSize + 64]byte
	c := encodeAll(s, out[:0])
	return len(c) < len(s)-len(s)/10
}

// baseReader returns the payload of a delta's base. The links of a delta
// chain are decoded without re-hashing each (decodeRow with verify false):
// the end of the chain is verified, and a damaged link cannot give it a
// payload that hashes right.
type baseReader func(ID) ([]byte, error)

// decodeRecord returns the payload of a stored row, verified: the codec is
// known, the payload has the recorded size and hashes to id. Any failure
// is ErrCorrupt. base reads the base of a delta-coded row; nil refuses
// delta-coded rows.
func decodeRecord(id ID, kind Kind, codec int64, size int64, data []byte, base baseReader) ([]byte, error) {
	return decodeRow(id, kind, codec, size, data, base, true)
}

// decodeRow is decodeRecord; verify false skips the hash (a delta chain's
// inner links only).
func decodeRow(id ID, kind Kind, codec int64, size int64, data []byte, base baseReader, verify bool) ([]byte, error) {
	if !validKind(kind) {
		return nil, fmt.Errorf("object %s: unknown kind %d: %w", id.Short(), kind, ErrCorrupt)
	}
	if size < 0 || size > maxObjectSize {
		return nil, fmt.Errorf("object %s: bad size %d: %w", id.Short(), size, ErrCorrupt)
	}
	var p []byte
	switch codec {
	case codecNone:
		p = data
	case codecZstd:
		var err error
		p, err = decodeAll(data, make([]byte, 0, size))
		if err != nil {
			return nil, fmt.Errorf("object %s: decompress: %v: %w", id.Short(), err, ErrCorrupt)
		}
	case codecDelta:
		var err error
		if p, err = decodeDelta(id, kind, size, data, base); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("object %s: unknown codec %d: %w", id.Short(), codec, ErrCorrupt)
	}
	if int64(len(p)) != size {
		return nil, fmt.Errorf("object %s: %d bytes, recorded %d: %w", id.Short(), len(p), size, ErrCorrupt)
	}
	if verify && HashObject(kind, p) != id {
		return nil, fmt.Errorf("object %s: hash mismatch: %w", id.Short(), ErrCorrupt)
	}
	if p == nil {
		p = []byte{}
	}
	return p, nil
}
