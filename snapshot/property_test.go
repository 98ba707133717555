package snapshot

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/stratafs/strata/snapshot/snapshottest"
)

// genEntries draws a random tree of the kinds Import records: files (some
// over the store's one-chunk size), directories (some read-only), symlinks
// with arbitrary targets, hardlinks within and across directories, FIFOs,
// odd names, modes with setuid/setgid/sticky, xattrs with binary values and
// mtimes before and after 1970.
func genEntries(t *rapid.T, caps snapshottest.Capabilities) []snapshottest.Entry {
	namePart := rapid.SampledFrom([]string{"a", "b", "-", " ", "\n", "\xff", "\xfe", "é", ".", "x.tmp", "Z", "%", "\\", "*"})
	nameGen := rapid.Custom(func(t *rapid.T) string {
		parts := rapid.SliceOfN(namePart, 1, 3).Draw(t, "parts")
		n := strings.Join(parts, "")
		if n == "." || n == ".." {
			n += "x"
		}
		return n
	})
	// Unprivileged Import must be able to read back what it built.
	fileModes := []uint32{0o644, 0o600, 0o400, 0o755, 0o4755, 0o2755, 0o6711, 0o1644, 0o444}
	dirModes := []uint32{0o755, 0o700, 0o555, 0o500, 0o1777, 0o2775}
	if caps.Root {
		fileModes = append(fileModes, 0o000, 0o200)
		dirModes = append(dirModes, 0o000, 0o311)
	}
	mtime := rapid.Int64Range(-1_000_000_000_000_000_000, 4_000_000_000_000_000_000)
	xattrs := func(t *rapid.T) map[string][]byte {
		if !caps.Xattrs {
			return nil
		}
		return rapid.MapOfN(
			rapid.SampledFrom([]string{"user.a", "user.b", "user.mime_type", "user.\xff"}),
			rapid.SliceOfN(rapid.Byte(), 0, 40), 0, 2).Draw(t, "xattrs")
	}

	var out []snapshottest.Entry
	var files []string
	var gen func(dir string, depth int)
	gen = func(dir string, depth int) {
		used := map[string]bool{}
		n := rapid.IntRange(0, 5).Draw(t, "entries")
		for range n {
			name := nameGen.Draw(t, "name")
			if used[name] {
				continue
			}
			used[name] = true
			p := name
			if dir != "" {
				p = dir + "/" + name
			}
			kinds := []snapshottest.Kind{snapshottest.File, snapshottest.File, snapshottest.Symlink, snapshottest.FIFO}
			if depth < 3 {
				kinds = append(kinds, snapshottest.Dir, snapshottest.Dir)
			}
			if len(files) > 0 {
				kinds = append(kinds, snapshottest.Hardlink)
			}
			e := snapshottest.Entry{Path: p, Kind: rapid.SampledFrom(kinds).Draw(t, "kind"), MtimeNs: mtime.Draw(t, "mtime")}
			switch e.Kind {
			case snapshottest.File:
				size := rapid.SampledFrom([]int{0, 1, 100, 4096, 70_000}).Draw(t, "size")
				e.Data = []byte(strings.Repeat(fmt.Sprint(rapid.IntRange(0, 9).Draw(t, "fill")), size))
				e.Mode = rapid.SampledFrom(fileModes).Draw(t, "mode")
				e.Xattrs = xattrs(t)
				files = append(files, p)
			case snapshottest.Dir:
				e.Mode = rapid.SampledFrom(dirModes).Draw(t, "mode")
				e.Xattrs = xattrs(t)
			case snapshottest.Symlink:
				e.Target = rapid.SampledFrom([]string{"a", "../b", "/etc", "dangling/x", "\xff\n", "."}).Draw(t, "target")
			case snapshottest.FIFO:
				e.Mode = rapid.SampledFrom(fileModes).Draw(t, "mode")
			case snapshottest.Hardlink:
				e.Target = rapid.SampledFrom(files).Draw(t, "link")
				e.MtimeNs = 0
			}
			out = append(out, e)
			if e.Kind == snapshottest.Dir {
				gen(p, depth+1)
			}
		}
	}
	gen("", 0)
	return out
}

// TestPropertyRoundTrip: for any tree, materialize(import(tree)) is the
// same tree, and importing the copy gives the same tree id.
func TestPropertyRoundTrip(t *testing.T) {
	base := t.TempDir()
	caps := snapshottest.Probe(base)
	i := 0
	rapid.Check(t, func(rt *rapid.T) {
		es := genEntries(rt, caps)
		i++
		dir := filepath.Join(base, fmt.Sprint(i))
		src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
		defer removeAll(dir)
		if err := os.MkdirAll(src, 0o755); err != nil {
			rt.Fatal(err)
		}
		if err := snapshottest.BuildErr(src, es); err != nil {
			rt.Fatal(err)
		}
		m := newMemStore()
		ctx := context.Background()
		res, err := importDir(ctx, m, m.writer(), src, ImportOptions{}, testCfg())
		if err != nil {
			rt.Fatal(err)
		}
		if err := materialize(ctx, m, res.Tree, dst, MaterializeOptions{Chown: caps.Root}, matConfig{}); err != nil {
			rt.Fatal(err)
		}
		diffs, err := snapshottest.Differences(src, dst)
		if err != nil {
			rt.Fatal(err)
		}
		if len(diffs) > 0 {
			rt.Fatalf("round trip differs:\n%s", strings.Join(diffs, "\n"))
		}
		again, err := importDir(ctx, m, m.writer(), dst, ImportOptions{}, testCfg())
		if err != nil {
			rt.Fatal(err)
		}
		if again.Tree != res.Tree {
			ch, _ := diffTrees(ctx, m, res.Tree, again.Tree)
			rt.Fatalf("the copy imports as another tree: %+v", ch)
		}
	})
}

// removeAll removes a tree that may hold directories without write or
// search permission.
func removeAll(dir string) {
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			os.Chmod(p, 0o700)
		}
		return nil
	})
	os.RemoveAll(dir)
}
