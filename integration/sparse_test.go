//go:build integration

package integration

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// holeMap returns the data extents of path (SEEK_DATA/SEEK_HOLE) and the
// bytes it has allocated on disk.
func holeMap(t *testing.T, path string) ([][2]int64, int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	var m [][2]int64
	for off := int64(0); off < st.Size; {
		d, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
		if err == unix.ENXIO {
			break
		}
		if err != nil {
			t.Fatalf("%s: SEEK_DATA: %v", path, err)
		}
		h, err := unix.Seek(int(f.Fd()), d, unix.SEEK_HOLE)
		if err != nil {
			t.Fatalf("%s: SEEK_HOLE: %v", path, err)
		}
		m = append(m, [2]int64{d, h})
		off = h
	}
	return m, st.Blocks * 512
}

// duBytes is the disk space of the files under dir (what du counts),
// skipping directories the test cannot read (a rootless workspace's
// work/work).
func duBytes(t *testing.T, dir string) int64 {
	t.Helper()
	if _, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	}
	var n int64
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		var st syscall.Stat_t
		if syscall.Lstat(p, &st) == nil {
			n += st.Blocks * 512
		}
		return nil
	})
	return n
}

// TestSparseRoundTrip: a 2 GiB sparse file with two 4 KiB data blocks
// goes import → workspace → (1-byte append) commit → export, costing
// under 1 MiB on disk at every step (store, layer cache, upper, export),
// its holes where they were (the SEEK_HOLE maps compared).
func TestSparseRoundTrip(t *testing.T) {
	parallel(t)
	const size = 2 << 30
	const maxDisk = 1 << 20
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "proj")
	os.MkdirAll(src, 0o755)
	big := filepath.Join(src, "big.img")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	block := []byte(strings.Repeat("strata sparse\n", 293)[:4096])
	for _, off := range []int64{0, 1 << 30} {
		if _, err := f.WriteAt(block, off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	f.Close()
	os.WriteFile(filepath.Join(src, "small.txt"), []byte("hi\n"), 0o644)
	srcMap, srcDisk := holeMap(t, big)
	if len(srcMap) != 2 || srcDisk > 64<<10 {
		t.Fatalf("the source file is not sparse here: extents %v, %d bytes on disk", srcMap, srcDisk)
	}

	h.ok("import", src)
	t.Logf("source: extents %v, %d bytes on disk", srcMap, srcDisk)
	t.Logf("store after import: %d bytes on disk", duBytes(t, h.dir))
	if d := duBytes(t, h.dir); d > maxDisk+512<<10 { // the empty store's database is ~0.3 MiB
		t.Errorf("store after import: %d bytes on disk", d)
	}
	out := filepath.Join(t.TempDir(), "main")
	h.ok("export", "main", out)
	if m, d := holeMap(t, filepath.Join(out, "big.img")); !slices.Equal(m, srcMap) || d > maxDisk {
		t.Errorf("export of main: extents %v (source %v), %d bytes on disk", m, srcMap, d)
	} else {
		t.Logf("export of main: extents %v, %d bytes on disk", m, d)
	}

	h.ok("ws", "create", "sp")
	defer h.run("ws", "rm", "--force", "sp")
	h.ok("exec", "sp", "--sandbox", "none", "--", "/bin/sh", "-ec", "printf x >> big.img")
	merged := strings.TrimSpace(h.ok("ws", "path", "sp").stdout)
	upMap, upDisk := holeMap(t, filepath.Join(merged, "big.img"))
	t.Logf("workspace (copied up): extents %v, %d bytes on disk", upMap, upDisk)
	// Overlayfs copies a lower file up in 1 MiB pieces, skipping the
	// pieces that are holes: one MiB per data block here.
	if upDisk > 2*maxDisk+64<<10 {
		t.Errorf("the copied-up file in the workspace: %d bytes on disk, extents %v", upDisk, upMap)
	}
	// diff --stat decides binary from the first 8000 bytes of each side
	// and reads no further.
	if r := h.ok("diff", "--stat", "sp"); !strings.Contains(r.stdout, "big.img | Bin") {
		t.Errorf("diff --stat: %s", r.stdout)
	}
	sparseDiffPatch(t, h, big, filepath.Join(merged, "big.img"))
	h.ok("commit", "sp", "-m", "append")
	// The store without the workspace's upper directory (checked above).
	t.Logf("store after the commit, without the workspace: %d bytes on disk", duBytes(t, h.dir)-duBytes(t, filepath.Join(h.dir, "workspaces")))
	if d := duBytes(t, h.dir) - duBytes(t, filepath.Join(h.dir, "workspaces")); d > maxDisk+512<<10 {
		t.Errorf("store after the workspace and commit: %d bytes on disk", d)
	}
	out2 := filepath.Join(t.TempDir(), "ws")
	h.ok("export", "ws/sp", out2)
	m, d := holeMap(t, filepath.Join(out2, "big.img"))
	t.Logf("export of the commit: extents %v, %d bytes on disk", m, d)
	// The commit stores the zero runs of the upper file's 1 MiB pieces as
	// holes too: the export's data extents lie within the workspace's, and
	// cover the source's data blocks and the appended byte.
	if d > maxDisk || !within(m, upMap) || !within(srcMap, m) || len(m) == 0 || m[len(m)-1][1] != size+1 {
		t.Errorf("export of the commit: extents %v (workspace %v, source %v), %d bytes on disk", m, upMap, srcMap, d)
	}
	got := make([]byte, 1)
	ef, err := os.Open(filepath.Join(out2, "big.img"))
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	for off, want := range map[int64]byte{0: 's', 1<<30 + 7: block[7], size: 'x', 5000: 0, 1<<31 - 1: 0} {
		if _, err := ef.ReadAt(got, off); err != nil || got[0] != want {
			t.Errorf("export byte %d: %q, %v; want %q", off, got, err, want)
		}
	}
	h.fsckClean()
}

// within reports whether every extent of a lies inside one of b.
func within(a, b [][2]int64) bool {
	for _, x := range a {
		if !slices.ContainsFunc(b, func(y [2]int64) bool { return y[0] <= x[0] && x[1] <= y[1] }) {
			return false
		}
	}
	return true
}

// sparseDiffPatch: `strata diff sp` (a patch) of the 1-byte append to the
// 2 GiB file shows it as git shows a file above core.bigFileThreshold —
// the index line (git blob ids of both sides, computed here by streaming
// the files) and "Binary files ... differ" — with a warning naming the
// file on stderr, and reads neither side into memory: the process's peak
// RSS (getrusage of the child, no cgroup needed) stays far below the
// file's size.
func sparseDiffPatch(t *testing.T, h *home, oldPath, newPath string) {
	t.Helper()
	blobID := func(path string) string {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		fi, _ := f.Stat()
		s := sha1.New()
		fmt.Fprintf(s, "blob %d\x00", fi.Size())
		if _, err := io.Copy(s, f); err != nil {
			t.Fatal(err)
		}
		return hex.EncodeToString(s.Sum(nil))
	}
	cmd := exec.Command(bin(t), "--home", h.dir, "diff", "sp")
	cmd.Env = append(os.Environ(), h.env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("strata diff sp: %v\n%s", err, errb.String())
	}
	want := "diff --git a/big.img b/big.img\nindex " + blobID(oldPath)[:7] + ".." + blobID(newPath)[:7] + " 100644\nBinary files a/big.img and b/big.img differ\n"
	if out.String() != want {
		t.Errorf("strata diff sp:\n%s\nwant:\n%s", out.String(), want)
	}
	if !strings.Contains(errb.String(), "big.img: above the big-file threshold") {
		t.Errorf("no warning naming the summarized file:\n%s", errb.String())
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		t.Fatalf("no rusage for the diff process")
	}
	peak := ru.Maxrss << 10 // KiB on Linux
	t.Logf("diff sp (patch): peak RSS %d MiB", peak>>20)
	if peak > 256<<20 {
		t.Errorf("diff of a 2 GiB file: peak RSS %d MiB; want it bounded (< 256 MiB), not the file's size", peak>>20)
	}
}
