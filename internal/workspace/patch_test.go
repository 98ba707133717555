package workspace

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestWriteUpper: a patch's files land in an upper in overlay format —
// content and mode, symlinks, a whiteout (char 0/0) for a deletion, new
// parents with the base tree's attributes — and a parent that is a file in
// the base is refused, naming the path.
func TestWriteUpper(t *testing.T) {
	m := testManager(t)
	ctx := context.Background()
	src := t.TempDir()
	write(t, filepath.Join(src, "src", "old.txt"), "old")
	write(t, filepath.Join(src, "file"), "x")
	if err := os.Chmod(filepath.Join(src, "src"), 0o750); err != nil {
		t.Fatal(err)
	}
	_, c := commitDir(t, m, src)
	st, _ := m.DB()
	upper := t.TempDir()
	err := WriteUpper(ctx, st, c.Tree, upper, []UpperFile{
		{Path: "src/new.txt", Content: []byte("new"), Mode: 0o755},
		{Path: "src/old.txt", Delete: true},
		{Path: "lib/deep/link", Content: []byte("../../file"), Mode: ModeSymlink},
	})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(upper, "src", "new.txt")); err != nil || string(b) != "new" {
		t.Errorf("new.txt: %q, %v", b, err)
	}
	var stt unix.Stat_t
	if err := unix.Lstat(filepath.Join(upper, "src", "new.txt"), &stt); err != nil || stt.Mode&0o7777 != 0o755 {
		t.Errorf("new.txt mode %o, %v", stt.Mode&0o7777, err)
	}
	if err := unix.Lstat(filepath.Join(upper, "src", "old.txt"), &stt); err != nil || stt.Mode&unix.S_IFMT != unix.S_IFCHR || stt.Rdev != 0 {
		t.Errorf("old.txt is not a whiteout: mode %o rdev %d, %v", stt.Mode, stt.Rdev, err)
	}
	if err := unix.Lstat(filepath.Join(upper, "src"), &stt); err != nil || stt.Mode&0o7777 != 0o750 {
		t.Errorf("src/ has mode %o; want the base tree's 750 (%v)", stt.Mode&0o7777, err)
	}
	if target, err := os.Readlink(filepath.Join(upper, "lib", "deep", "link")); err != nil || target != "../../file" {
		t.Errorf("link: %q, %v", target, err)
	}
	err = WriteUpper(ctx, st, c.Tree, t.TempDir(), []UpperFile{{Path: "file/x", Content: []byte("y"), Mode: 0o644}})
	var fe *FileError
	if !errors.As(err, &fe) || fe.File != "file/x" {
		t.Errorf("a parent that is a file in the base: %v", err)
	}
}
