package image

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A push keeps the layer blobs it builds in a directory of its own under
// PushOptions.TempDir (the store's directory): strata-push-XXXX. It holds
// an exclusive flock on the directory's lock file for as long as it runs,
// so a process killed mid-push (SIGKILL, power loss) leaves a directory
// whose lock nobody holds, which RemoveStalePushDirs (called by gc) can
// tell from a push in flight at once, without waiting for an age. The
// directory is made as .strata-push-new-XXXX and renamed once locked, so
// that no strata-push-* directory is ever seen without its lock taken.
const (
	pushDirPrefix    = "strata-push-"
	pushNewDirPrefix = ".strata-push-new-"
	pushLockName     = "lock"
)

// PushDir is a push's private directory, locked until Release. It is
// here, with RemoveStalePushDirs, rather than in image/registry, which
// pushes: gc removes what killed pushes left, and the lean build links
// gc; the lock protocol is both halves.
type PushDir struct {
	Path string
	lock *os.File
}

// NewPushDir makes and locks a push directory in parent ("": os.TempDir()).
func NewPushDir(parent string) (*PushDir, error) {
	if parent == "" {
		parent = os.TempDir()
	}
	tmp, err := os.MkdirTemp(parent, pushNewDirPrefix)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(tmp, pushLockName), os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err == nil {
		err = flock(f, unix.LOCK_EX)
		if err != nil {
			f.Close()
		}
	}
	if err != nil {
		_ = os.RemoveAll(tmp)
		return nil, err
	}
	final := filepath.Join(parent, pushDirPrefix+strings.TrimPrefix(filepath.Base(tmp), pushNewDirPrefix))
	if err := os.Rename(tmp, final); err != nil {
		f.Close()
		_ = os.RemoveAll(tmp)
		return nil, err
	}
	return &PushDir{Path: final, lock: f}, nil
}

// Release removes the directory, then drops the lock.
func (d *PushDir) Release() {
	_ = os.RemoveAll(d.Path)
	d.lock.Close()
}

func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// RemoveStalePushDirs removes what killed pushes left in dir (a store's
// directory): every strata-push-* directory whose lock no process holds,
// and, once older than age, a half-made .strata-push-new-* one or a
// strata-push-* one without a lock file (from a strata before the lock).
// A push in flight holds its lock and is left alone. It returns the
// directories removed.
func RemoveStalePushDirs(dir string, age time.Duration) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var removed []string
	for _, e := range ents {
		name := e.Name()
		isPush, isNew := strings.HasPrefix(name, pushDirPrefix), strings.HasPrefix(name, pushNewDirPrefix)
		if !e.IsDir() || (!isPush && !isNew) {
			continue
		}
		p := filepath.Join(dir, name)
		stale := false
		if isPush {
			switch f, err := os.OpenFile(filepath.Join(p, pushLockName), os.O_RDWR|unix.O_CLOEXEC, 0); {
			case err == nil:
				// Removed while still locked by us, so that no push can
				// be handed this directory meanwhile.
				if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
					if os.RemoveAll(p) == nil {
						removed = append(removed, p)
					}
				}
				f.Close()
				continue
			case errors.Is(err, os.ErrNotExist):
				stale = olderThan(p, age)
			}
		} else {
			stale = olderThan(p, age)
		}
		if stale && os.RemoveAll(p) == nil {
			removed = append(removed, p)
		}
	}
	return removed
}

// olderThan reports whether p last changed (ctime) more than age ago.
func olderThan(p string, age time.Duration) bool {
	var st unix.Stat_t
	return unix.Lstat(p, &st) == nil && time.Since(time.Unix(st.Ctim.Unix())) > age
}
