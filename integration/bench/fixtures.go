package main

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// A genTree is a generated source-like tree of small text files, built
// deterministically (same names, contents and mtimes every time) into the
// cache directory, outside the repository, and reused across runs.
type genTree struct {
	name        string // directory name under the cache, versioned
	files       int
	top, mid    int    // fan-out: top × mid directories ...
	perDir      int    // ... of perDir files each
	wide        int    // and a directory "wide" of this many files
	editRel     string // the file the commit scenario edits
	description string
}

var (
	tree1k   = genTree{name: "t1k-v1", files: 1000, top: 10, mid: 10, perDir: 10, editRel: "d005/e05/f005.txt", description: "1k files"}
	tree100k = genTree{name: "t100k-v1", files: 100000, top: 100, mid: 10, perDir: 100, editRel: "d050/e05/f050.txt", description: "100k files"}
	// tree100kWide has one directory of 4,000 entries, which a commit of
	// one of them rewrites whole (issue 14: 70 ms before its unchanged
	// entries were retained through the previous tree).
	tree100kWide = genTree{name: "t100k-wide-v1", files: 100000, top: 96, mid: 10, perDir: 100, wide: 4000, editRel: "wide/f2000.txt", description: "100k files, one directory of 4k"}
)

// treeEpoch is every generated file's mtime.
var treeEpoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// words make the generated text compressible like source code is.
var words = []string{
	"const", "let", "function", "return", "if", "else", "for", "while", "import", "export",
	"module", "require", "value", "index", "item", "items", "result", "error", "options", "config",
	"server", "request", "response", "handler", "router", "path", "name", "length", "push", "map",
	"filter", "reduce", "this", "null", "undefined", "true", "false", "new", "class", "extends",
	"async", "await", "promise", "then", "catch", "throw", "try", "typeof", "object", "string",
}

// writeText writes about n bytes of source-like lines from rng to w.
func writeText(w io.Writer, rng *rand.Rand, n int64) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	var written int64
	line := make([]byte, 0, 256)
	for lineNo := 1; written < n; lineNo++ {
		line = line[:0]
		line = fmt.Appendf(line, "%*s", 2*rng.IntN(4), "")
		k := 3 + rng.IntN(9)
		for i := 0; i < k; i++ {
			if i > 0 {
				line = append(line, ' ')
			}
			line = append(line, words[rng.IntN(len(words))]...)
			if rng.IntN(6) == 0 {
				line = fmt.Appendf(line, "%d", rng.IntN(10000))
			}
		}
		line = fmt.Appendf(line, "; // %d\n", lineNo)
		if rem := n - written; int64(len(line)) > rem {
			line = line[:rem]
		}
		m, err := bw.Write(line)
		written += int64(m)
		if err != nil {
			return err
		}
	}
	return bw.Flush()
}

// ensure builds the tree under cache unless it is there, and returns its
// path. It is built in a temporary directory and renamed into place, so
// an interrupted build leaves nothing half-made under the final name.
func (t genTree) ensure(cache string, logf func(string, ...any)) (string, error) {
	dst := filepath.Join(cache, t.name)
	if _, err := os.Stat(filepath.Join(dst, ".complete")); err == nil {
		return dst, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", fmt.Errorf("%w (set BENCH_CACHE to a writable directory)", err)
	}
	logf("generating %s (%d files) in %s (once; cached)", t.description, t.files, dst)
	tmp, err := os.MkdirTemp(cache, ".tmp-"+t.name+"-")
	if err != nil {
		return "", fmt.Errorf("%w (set BENCH_CACHE to a writable directory)", err)
	}
	defer os.RemoveAll(tmp)
	rng := rand.New(rand.NewPCG(uint64(t.files), 0x5eed))
	var dirs []string
	for i := 0; i < t.top; i++ {
		for j := 0; j < t.mid; j++ {
			dir := filepath.Join(tmp, fmt.Sprintf("d%03d", i), fmt.Sprintf("e%02d", j))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return "", err
			}
			dirs = append(dirs, dir)
			for k := 0; k < t.perDir; k++ {
				if err := writeGenFile(filepath.Join(dir, fmt.Sprintf("f%03d.txt", k)), rng); err != nil {
					return "", err
				}
			}
		}
	}
	if t.wide > 0 {
		dir := filepath.Join(tmp, "wide")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", err
		}
		dirs = append(dirs, dir)
		for k := 0; k < t.wide; k++ {
			p := filepath.Join(dir, fmt.Sprintf("f%04d.txt", k))
			if err := writeGenFile(p, rng); err != nil {
				return "", err
			}
		}
	}
	// Directory mtimes last (creating files moves them).
	for _, d := range dirs {
		_ = os.Chtimes(d, treeEpoch, treeEpoch)
		_ = os.Chtimes(filepath.Dir(d), treeEpoch, treeEpoch)
	}
	if err := os.WriteFile(filepath.Join(tmp, ".complete"), []byte(t.description+"\n"), 0o644); err != nil {
		return "", err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	_ = os.Chtimes(tmp, treeEpoch, treeEpoch)
	if err := os.Rename(tmp, dst); err != nil {
		return "", err
	}
	syncFS()
	return dst, nil
}

// writeGenFile writes one generated file of 100 to 2,000 bytes.
func writeGenFile(p string, rng *rand.Rand) error {
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	size := int64(100 + rng.IntN(1900))
	if err := writeText(f, rng, size); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Chtimes(p, treeEpoch, treeEpoch)
}

// writeBig writes a new file of n bytes: random data (incompressible) or
// source-like text, deterministic for a seed.
func writeBig(path string, n int64, text bool, seed uint64) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if text {
		err = writeText(f, rand.New(rand.NewPCG(seed, 0x7e47)), n)
	} else {
		var key [32]byte
		for i := range key {
			key[i] = byte(seed >> (8 * (i % 8)))
		}
		_, err = io.CopyN(f, rand.NewChaCha8(key), n)
	}
	if err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// compressedSize is the size of path compressed with zstd -3, or with
// gzip -6 when the zstd command is missing; it also names the method.
func compressedSize(path string) (int64, string, error) {
	if lookTool("zstd") {
		out, err := exec.Command("sh", "-c", `zstd -3 -q -c -- "$1" | wc -c`, "sh", path).Output()
		if err != nil {
			return 0, "", fmt.Errorf("zstd %s: %w", path, err)
		}
		var n int64
		if _, err := fmt.Sscan(string(out), &n); err != nil {
			return 0, "", err
		}
		return n, "zstd -3", nil
	}
	f, err := os.Open(path)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	var cw countWriter
	zw, _ := gzip.NewWriterLevel(&cw, 6)
	if _, err := io.Copy(zw, f); err != nil {
		return 0, "", err
	}
	if err := zw.Close(); err != nil {
		return 0, "", err
	}
	return cw.n, "gzip -6", nil
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }
