package snapshot

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Btrfs subvolumes: a snapshot of a subvolume is a new subvolume sharing
// every block and every inode with it, made in O(1) — the one way on
// Linux to get a writable copy of a directory tree without visiting its
// entries. The clone cache (clonecache.go) keeps a commit's tree in a
// subvolume so that a reflink workspace of it is a snapshot.
//
// What an unprivileged user may do (Linux 6.18, measured on a loop
// Btrfs): create a subvolume in a directory it can write
// (BTRFS_IOC_SUBVOL_CREATE); snapshot a subvolume it owns
// (BTRFS_IOC_SNAP_CREATE_V2, since 4.18); delete one with
// BTRFS_IOC_SNAP_DESTROY only when the filesystem is mounted with
// user_subvol_rm_allowed (EPERM otherwise) — but rmdir(2) of an emptied
// subvolume it owns works (since 4.18), so removal falls back to emptying
// it. Root may always destroy.

// The ioctls, Linux: include/uapi/linux/btrfs.h. Both argument structs
// are 4096 bytes: _IOW(0x94, nr, 4096).
const (
	btrfsIocSubvolCreate = 0x5000940e // BTRFS_IOC_SUBVOL_CREATE, struct btrfs_ioctl_vol_args
	btrfsIocSnapCreateV2 = 0x50009417 // BTRFS_IOC_SNAP_CREATE_V2, struct btrfs_ioctl_vol_args_v2
	btrfsIocSnapDestroy  = 0x5000940f // BTRFS_IOC_SNAP_DESTROY, struct btrfs_ioctl_vol_args

	// btrfsFirstFreeObjectID is the inode number of every subvolume's
	// root directory (BTRFS_FIRST_FREE_OBJECTID).
	btrfsFirstFreeObjectID = 256
)

// btrfsVolArgs is struct btrfs_ioctl_vol_args.
type btrfsVolArgs struct {
	fd   int64
	name [4088]byte
}

// btrfsVolArgsV2 is struct btrfs_ioctl_vol_args_v2 (the union of size and
// qgroup pointer with unused[4] is 32 bytes; name is 4040).
type btrfsVolArgsV2 struct {
	fd      int64
	transid uint64
	flags   uint64
	unused  [4]uint64
	name    [4040]byte
}

func init() {
	// The layouts must be the kernel's (4096 bytes each), or the ioctl
	// numbers above are wrong.
	if unsafe.Sizeof(btrfsVolArgs{}) != 4096 || unsafe.Sizeof(btrfsVolArgsV2{}) != 4096 {
		panic("snapshot: btrfs ioctl argument sizes")
	}
}

// IsBtrfs reports whether p is on a Btrfs filesystem.
func IsBtrfs(p string) bool { return isBtrfs(p) }

// IsSubvolume reports whether p is the root of a Btrfs subvolume (a
// snapshot included).
func IsSubvolume(p string) bool {
	var st unix.Stat_t
	if unix.Lstat(p, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Ino != btrfsFirstFreeObjectID {
		return false
	}
	return isBtrfs(p)
}

// parentAndName opens p's parent directory and returns p's last element,
// which must fit the ioctls' name fields.
func parentAndName(p string, max int) (int, string, error) {
	p = filepath.Clean(p)
	dir, name := filepath.Split(p)
	if name == "" || name == "." || name == ".." || len(name) >= max {
		return -1, "", &fs.PathError{Op: "subvolume", Path: p, Err: unix.EINVAL}
	}
	if dir == "" {
		dir = "."
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, "", &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	return fd, name, nil
}

// CreateSubvolume makes a new, empty Btrfs subvolume at p (which must not
// exist), owned by the caller, mode 0755.
func CreateSubvolume(p string) error {
	pfd, name, err := parentAndName(p, 4088)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	var a btrfsVolArgs
	copy(a.name[:], name)
	if err := ioctlPtr(pfd, btrfsIocSubvolCreate, unsafe.Pointer(&a)); err != nil {
		return &fs.PathError{Op: "create subvolume", Path: p, Err: err}
	}
	return nil
}

// SnapshotSubvolume makes dst (which must not exist) a writable snapshot
// of the subvolume src, on the same filesystem: every inode of src, with
// its number, metadata and blocks, shared until either side writes. The
// snapshot has a device number of its own.
func SnapshotSubvolume(src, dst string) error {
	sfd, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: src, Err: err}
	}
	defer unix.Close(sfd)
	pfd, name, err := parentAndName(dst, 4040)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	var a btrfsVolArgsV2
	a.fd = int64(sfd)
	copy(a.name[:], name)
	if err := ioctlPtr(pfd, btrfsIocSnapCreateV2, unsafe.Pointer(&a)); err != nil {
		return &fs.PathError{Op: "snapshot " + src, Path: dst, Err: err}
	}
	return nil
}

// DestroySubvolume deletes the subvolume p at once, whatever it holds
// (BTRFS_IOC_SNAP_DESTROY; the blocks are freed in the background). An
// unprivileged caller gets EPERM unless the filesystem is mounted with
// user_subvol_rm_allowed; RemoveSubvolume then empties it instead.
func DestroySubvolume(p string) error {
	if !IsSubvolume(p) {
		return &fs.PathError{Op: "destroy subvolume", Path: p, Err: unix.EINVAL}
	}
	pfd, name, err := parentAndName(p, 4088)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	var a btrfsVolArgs
	copy(a.name[:], name)
	if err := ioctlPtr(pfd, btrfsIocSnapDestroy, unsafe.Pointer(&a)); err != nil {
		return &fs.PathError{Op: "destroy subvolume", Path: p, Err: err}
	}
	return nil
}

// RemoveSubvolume removes the subvolume p: DestroySubvolume where
// allowed, otherwise by removing everything in it and then rmdir(2),
// which deletes an empty subvolume its owner may write (Linux 4.18+).
// Read-only directories in it are made writable on the way.
func RemoveSubvolume(p string) error {
	if err := DestroySubvolume(p); err == nil {
		return nil
	} else if !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EACCES) {
		return err
	}
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: p, Err: err}
	}
	unix.Fchmod(fd, 0o700)
	removeContents(fd, 0)
	unix.Close(fd)
	if err := unix.Rmdir(p); err != nil {
		return &fs.PathError{Op: "remove subvolume", Path: p, Err: err}
	}
	return nil
}

func ioctlPtr(fd int, req uint, arg unsafe.Pointer) error {
	for {
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(arg))
		switch e {
		case 0:
			return nil
		case unix.EINTR:
			continue
		}
		return e
	}
}

// dirIsEmpty reports whether the directory p holds no entry.
func dirIsEmpty(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	names, _ := f.Readdirnames(1)
	return len(names) == 0
}

// errNotBtrfs: the clone cache needs Btrfs.
var errNotBtrfs = fmt.Errorf("not a Btrfs filesystem: %w", errors.ErrUnsupported)
