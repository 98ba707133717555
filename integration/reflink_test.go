//go:build integration

package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/internal/testutil"
	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
)

// The reflink filesystems (testutil.ReflinkDir: a real XFS made with
// reflink=1 and a real Btrfs, each on a loop device that
// scripts/integration.sh sets up as root for both passes).

// fiemap ioctl (Linux: include/uapi/linux/fiemap.h).
const (
	fsIocFiemap        = 0xC020660B // _IOWR('f', 11, struct fiemap)
	fiemapFlagSync     = 0x1
	fiemapExtentShared = 0x2000
	fiemapMaxExtents   = 64
)

type fiemapExtent struct {
	Logical, Physical, Length uint64
	_                         [2]uint64
	Flags                     uint32
	_                         [3]uint32
}

type fiemapReq struct {
	Start, Length                            uint64
	Flags, MappedExtents, ExtentCount, _unus uint32
	Extents                                  [fiemapMaxExtents]fiemapExtent
}

// extents returns the physical extents of the file at path (synced first).
func extents(t *testing.T, path string) []fiemapExtent {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	req := fiemapReq{Length: ^uint64(0), Flags: fiemapFlagSync, ExtentCount: fiemapMaxExtents}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), fsIocFiemap, uintptr(unsafe.Pointer(&req))); e != 0 {
		t.Fatalf("FIEMAP %s: %v", path, e)
	}
	return append([]fiemapExtent(nil), req.Extents[:req.MappedExtents]...)
}

// physicalAt returns the physical address of the byte at logical offset
// off, and whether its extent is shared.
func physicalAt(t *testing.T, ext []fiemapExtent, off uint64) (uint64, bool) {
	t.Helper()
	for _, e := range ext {
		if off >= e.Logical && off < e.Logical+e.Length {
			return e.Physical + off - e.Logical, e.Flags&fiemapExtentShared != 0
		}
	}
	t.Fatalf("offset %d not mapped in %+v", off, ext)
	return 0, false
}

func pseudoRandom(n int, seed byte) []byte {
	b := make([]byte, n)
	x := uint32(seed)*2654435761 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

// TestReflinkFilesystems proves the test filesystems: on XFS and on
// Btrfs, in both passes, a FICLONE of a 1 MiB file shares its blocks
// (same physical extents, flagged shared); writing 4 KiB into the clone
// moves that block of the clone elsewhere and leaves the original's
// blocks and bytes as they were: no shared block is written through.
func TestReflinkFilesystems(t *testing.T) {
	for _, fs := range []string{"xfs", "btrfs"} {
		t.Run(fs, func(t *testing.T) {
			dir := testutil.ReflinkDir(t, fs)
			orig, clone := filepath.Join(dir, "orig"), filepath.Join(dir, "clone")
			data := pseudoRandom(1<<20, 1)
			if err := os.WriteFile(orig, data, 0o644); err != nil {
				t.Fatal(err)
			}
			before := extents(t, orig)
			src, err := os.Open(orig)
			if err != nil {
				t.Fatal(err)
			}
			dst, err := os.Create(clone)
			if err != nil {
				t.Fatal(err)
			}
			if err := unix.IoctlFileClone(int(dst.Fd()), int(src.Fd())); err != nil {
				t.Fatalf("FICLONE on %s: %v", fs, err)
			}
			src.Close()
			const off = 64 << 10
			po, _ := physicalAt(t, extents(t, orig), off)
			pc, shared := physicalAt(t, extents(t, clone), off)
			if po != pc || !shared {
				t.Fatalf("clone not sharing: original block at %d, clone's at %d, shared %v", po, pc, shared)
			}
			edit := pseudoRandom(4096, 2)
			if _, err := dst.WriteAt(edit, off); err != nil {
				t.Fatal(err)
			}
			if err := dst.Sync(); err != nil {
				t.Fatal(err)
			}
			dst.Close()

			after := extents(t, orig)
			if po2, _ := physicalAt(t, after, off); po2 != po {
				t.Errorf("the original's block moved: %d → %d", po, po2)
			}
			if len(after) == 0 || after[0].Physical != before[0].Physical {
				t.Errorf("the original's extents changed: %+v → %+v", before, after)
			}
			if pc2, _ := physicalAt(t, extents(t, clone), off); pc2 == po {
				t.Errorf("the clone's edited block is still the original's (%d): written through", pc2)
			}
			got, err := os.ReadFile(orig)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, data) {
				t.Errorf("the original's bytes changed")
			}
			gotc, err := os.ReadFile(clone)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(gotc[off:off+4096], edit) || !bytes.Equal(gotc[:off], data[:off]) {
				t.Errorf("the clone does not read as edited")
			}
		})
	}
}

// TestReflinkClone: snapshot.Clone of a project (the corpus without
// node_modules, and a 1 MiB file) on XFS and on Btrfs, in both passes,
// clones every file from the layer cache (no byte copied); the clone
// scans as unchanged; editing a cloned file in place leaves the layer's
// copy, bytes and blocks, as it was, and the scan finds that one file.
func TestReflinkClone(t *testing.T) {
	src := corpus(t)
	for _, fs := range []string{"xfs", "btrfs"} {
		t.Run(fs, func(t *testing.T) {
			ctx := context.Background()
			root := testutil.ReflinkDir(t, fs)
			s, err := store.Open(filepath.Join(root, "store"), store.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			// The project (the corpus without node_modules), plus a file
			// big enough to span extents.
			proj := filepath.Join(root, "proj")
			if err := os.MkdirAll(proj, 0o755); err != nil {
				t.Fatal(err)
			}
			ents, err := os.ReadDir(src)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range ents {
				if e.Name() == "node_modules" {
					continue
				}
				if out, err := exec.Command("cp", "-a", filepath.Join(src, e.Name()), proj).CombinedOutput(); err != nil {
					t.Fatalf("cp: %v\n%s", err, out)
				}
			}
			if err := os.WriteFile(filepath.Join(proj, "big.bin"), pseudoRandom(1<<20, 3), 0o644); err != nil {
				t.Fatal(err)
			}
			w, err := s.NewWriter(ctx, "import")
			if err != nil {
				t.Fatal(err)
			}
			defer w.Abort()
			res, err := snapshot.Import(ctx, s, w, proj, snapshot.ImportOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var commit store.ID
			err = w.Finish(func(tx *store.Tx) error {
				commit, err = tx.PutCommit(&store.Commit{Tree: res.Tree, TimeNs: time.Now().UnixNano(), Stats: res.Stats})
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			lo := snapshot.LayerOptions{Flavour: snapshot.FlavourUser}
			if os.Geteuid() == 0 {
				lo = snapshot.LayerOptions{Flavour: snapshot.FlavourTrusted, Chown: true}
			}
			cache := snapshot.NewLayerCache(filepath.Join(root, "layers"))
			ws := filepath.Join(root, "ws")
			cr, err := snapshot.Clone(ctx, s, cache, commit, ws, snapshot.CloneOptions{Mode: snapshot.CloneReflink, Layers: lo, Index: ws + ".index"})
			if err != nil {
				t.Fatal(err)
			}
			if cr.Method != "reflink" || cr.Copied != 0 || cr.FromStore != 0 || cr.Cloned < 1<<20 || !cr.SameFS {
				t.Fatalf("clone: %+v", cr)
			}
			t.Logf("clone: %d files, %d bytes cloned; index %+v", cr.Files, cr.Cloned, *cr.Index)
			stack, err := cache.Stack(ctx, s, commit, lo)
			if err != nil {
				t.Fatal(err)
			}
			layerFile := filepath.Join(stack[0], "big.bin")
			layerSum := sha256.Sum256(readFile(t, layerFile))
			layerExt := extents(t, layerFile)
			if p, shared := physicalAt(t, extents(t, filepath.Join(ws, "big.bin")), 0); !shared || p != layerExt[0].Physical {
				t.Fatalf("the clone does not share the layer's blocks")
			}

			f, err := os.OpenFile(filepath.Join(ws, "big.bin"), os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte("edited in the workspace"), 4096); err != nil {
				t.Fatal(err)
			}
			f.Close()
			if sha256.Sum256(readFile(t, layerFile)) != layerSum {
				t.Fatal("editing the clone changed the layer's file")
			}
			if after := extents(t, layerFile); after[0].Physical != layerExt[0].Physical {
				t.Fatalf("the layer's blocks moved: %+v → %+v", layerExt, after)
			}
			idx, err := snapshot.ReadIndex(ws + ".index")
			if err != nil {
				t.Fatal(err)
			}
			scan, err := snapshot.ScanWorkspace(ctx, s, ws, idx)
			if err != nil {
				t.Fatal(err)
			}
			if len(scan.Changes) != 1 || scan.Changes[0].Path != "big.bin" || scan.Changes[0].Kind != snapshot.UpperModified {
				t.Fatalf("scan: %+v", scan.Changes)
			}
		})
	}
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
