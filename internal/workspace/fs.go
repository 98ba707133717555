package workspace

import (
	"crypto/rand"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/nsexec"
	"github.com/stratafs/strata/snapshot"
)

// RemoveAll removes a tree that may hold read-only directories (an upper
// copied from a read-only lower, a workdir the kernel made mode 0), and
// files of subordinate ids (nsexec.RemoveAll).
func RemoveAll(dir string) error {
	// A reflink workspace's tree on Btrfs is a subvolume: destroyed at
	// once where the kernel lets this user (root, or a filesystem
	// mounted with user_subvol_rm_allowed); otherwise emptied below and
	// removed by rmdir like a directory.
	if snapshot.IsSubvolume(dir) && snapshot.DestroySubvolume(dir) == nil {
		return nil
	}
	err := os.RemoveAll(dir)
	if err == nil {
		return nil
	}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		} else if err != nil {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	return nsexec.RemoveAll(dir)
}

// CopyDirAttrs gives dst the permission bits and times of src.
func CopyDirAttrs(src, dst string) error {
	var st unix.Stat_t
	if err := unix.Stat(src, &st); err != nil {
		return err
	}
	if err := unix.Chmod(dst, st.Mode&0o7777); err != nil {
		return err
	}
	return unix.UtimesNano(dst, []unix.Timespec{st.Atim, st.Mtim})
}

// DirEmpty reports whether dir holds nothing (or cannot be read).
func DirEmpty(dir string) bool {
	f, err := os.Open(dir)
	if err != nil {
		return true
	}
	defer f.Close()
	names, _ := f.Readdirnames(1)
	return len(names) == 0
}

// DirBytes sums the sizes of the regular files under dir.
func DirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

func mkdirs(perm fs.FileMode, dirs ...string) error {
	for _, d := range dirs {
		if err := os.MkdirAll(d, perm); err != nil {
			return err
		}
	}
	return nil
}

// RandomHex returns n random bytes in hex.
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// RecentlyChanged reports whether p's metadata changed within d.
func RecentlyChanged(p string, d time.Duration) bool {
	return changedWithin(p, d, time.Now())
}

func changedWithin(p string, d time.Duration, now time.Time) bool {
	var st unix.Stat_t
	return unix.Lstat(p, &st) == nil && now.Sub(time.Unix(st.Ctim.Unix())) < d
}

// WriteFileAtomic writes a file through a temporary file renamed over it,
// so that no reader ever sees it half written. durable syncs the file
// and the directory too: for state that must survive a crash, not for
// caches or state a crash makes moot.
func WriteFileAtomic(path string, b []byte, durable bool) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if durable {
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil || !durable {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
