package textdiff

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"strconv"
	"sync"
)

// firstFewBytes is how much of a file git inspects for a NUL to call it
// binary (xdiff-interface.c FIRST_FEW_BYTES).
const firstFewBytes = 8000

// IsBinary reports whether git would treat b as binary: a NUL byte in the
// first 8000 bytes (xdiff-interface.c buffer_is_binary).
func IsBinary(b []byte) bool {
	if len(b) > firstFewBytes {
		b = b[:firstFewBytes]
	}
	return bytes.IndexByte(b, 0) >= 0
}

// base85 is git's base85 alphabet (base85.c en85), not Ascii85's.
const base85 = "0123456789" +
	"ABCDEFGHIJKLMNOPQRSTUVWXYZ" +
	"abcdefghijklmnopqrstuvwxyz" +
	"!#$%&()*+-;<=>?@^_`{|}~"

// binaryLineBytes is how many data bytes git encodes per line of a binary
// patch (diff.c emit_binary_diff_body).
const binaryLineBytes = 52

// zlibWriters holds deflaters for reuse: each one allocates about a
// megabyte of state, far more than a small binary file costs to compress.
var zlibWriters = sync.Pool{New: func() any { return zlib.NewWriter(nil) }}

// writeLiteral writes one "literal" block of a GIT binary patch: the size,
// the zlib-deflated data in base85 lines, each led by a letter giving its
// byte count ('A'..'Z' for 1..26, 'a'..'z' for 27..52), and an empty line.
// git emits a "delta" block instead when that is smaller; git apply takes
// either, and literal needs no delta encoder.
func writeLiteral(w *bufio.Writer, data []byte) {
	w.WriteString("literal ")
	w.WriteString(strconv.Itoa(len(data)))
	w.WriteByte('\n')
	var z bytes.Buffer
	zw := zlibWriters.Get().(*zlib.Writer)
	zw.Reset(&z)
	zw.Write(data) // a bytes.Buffer does not fail
	zw.Close()
	zlibWriters.Put(zw)
	deflated := z.Bytes()
	var line [1 + binaryLineBytes/4*5 + 1]byte
	for len(deflated) > 0 {
		n := min(len(deflated), binaryLineBytes)
		l := line[:0]
		if n <= 26 {
			l = append(l, byte('A'+n-1))
		} else {
			l = append(l, byte('a'+n-27))
		}
		l = appendBase85(l, deflated[:n])
		l = append(l, '\n')
		w.Write(l)
		deflated = deflated[n:]
	}
	w.WriteByte('\n')
}

// appendBase85 is base85.c encode_85: each group of 4 bytes, big-endian and
// zero-padded at the end, becomes 5 characters.
func appendBase85(dst, data []byte) []byte {
	for len(data) > 0 {
		var acc uint32
		for k := 0; k < 4; k++ {
			acc <<= 8
			if k < len(data) {
				acc |= uint32(data[k])
			}
		}
		var g [5]byte
		for k := 4; k >= 0; k-- {
			g[k] = base85[acc%85]
			acc /= 85
		}
		dst = append(dst, g[:]...)
		data = data[min(4, len(data)):]
	}
	return dst
}
