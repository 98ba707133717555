package overlayfs

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// procUserInitIno is the inode number of the initial user namespace.
const procUserInitIno = 0xEFFFFFFD // Linux: include/linux/proc_ns.h PROC_USER_INIT_INO

// KernelRelease returns the running kernel's release (uname -r).
func KernelRelease() (string, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", fmt.Errorf("uname: %w", err)
	}
	return unix.ByteSliceToString(u.Release[:]), nil
}

// CurrentKey returns the Key of the calling process: the kernel release,
// its effective uid, and whether it runs in a user namespace other than
// the initial one.
func CurrentKey() (Key, error) {
	rel, err := KernelRelease()
	if err != nil {
		return Key{}, err
	}
	userns, err := inUserNS()
	if err != nil {
		return Key{}, err
	}
	return Key{Kernel: rel, Euid: os.Geteuid(), UserNS: userns}, nil
}

func inUserNS() (bool, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/user", &st); err != nil {
		return false, fmt.Errorf("user namespace: %w", err)
	}
	return st.Ino != procUserInitIno, nil
}

// ProbeCached returns the Features cached in cacheFile for the calling
// process's Key, probing under dir and saving the result when there are
// none. A failure to save is returned along with the probed Features.
func ProbeCached(cacheFile, dir string) (Features, error) {
	key, err := CurrentKey()
	if err != nil {
		return Features{}, err
	}
	if feat, ok, err := LoadFeatures(cacheFile, key); err == nil && ok {
		return feat, nil
	}
	feat, err := Probe(dir)
	if err != nil {
		return feat, err
	}
	return feat, SaveFeatures(cacheFile, feat)
}

// Probe finds out what the kernel allows in the caller's current user and
// mount namespaces, by mounting throwaway overlays under a scratch
// directory it creates in dir and removes afterwards. dir should be on the
// filesystem that will hold upper and work directories: the filesystem
// probes (whiteouts, O_TMPFILE, xattrs) are about it.
//
// An unprivileged caller must call Probe inside a user namespace that owns
// its mount namespace (the kernel allows unprivileged overlay mounts
// nowhere else), and should make the mount tree private first so the probe
// mounts do not propagate.
//
// A failed probe is a false field with its reason in Features.Errors; the
// error is for failures of the probing itself (no scratch directory).
func Probe(dir string) (Features, error) {
	key, err := CurrentKey()
	if err != nil {
		return Features{}, err
	}
	feat := Features{Key: key, Errors: map[string]string{}, ProbedAt: time.Now().UTC()}
	cleanStaleProbes(dir)
	scratch, err := os.MkdirTemp(dir, probePrefix)
	if err != nil {
		return feat, fmt.Errorf("overlayfs probe: %w", err)
	}
	defer removeAll(scratch)
	feat.FSType = fsType(scratch)

	p := prober{dir: scratch, feat: &feat}
	p.filesystem()
	if err := p.layers(); err != nil {
		return feat, fmt.Errorf("overlayfs probe: %w", err)
	}
	// Rootless mounts need userxattr; real root gets the trusted flavour.
	base := Config{UserXattr: key.UserNS || key.Euid != 0}
	p.check("overlay", &feat.Overlay, p.mount("base", base, Legacy))
	p.check("userxattr", &feat.UserXattr, p.mount("userxattr", Config{UserXattr: true}, Legacy))
	p.check("redirect_dir", &feat.RedirectDir, p.mount("redirect", Config{RedirectDir: true}, Legacy))
	vol := base
	vol.Volatile = true
	p.check("volatile", &feat.Volatile, p.mount("volatile", vol, Legacy))
	p.check("lowerdir_plus", &feat.LowerdirPlus, p.mount("fsconfig", base, Fsconfig))
	p.check("layer_fds", &feat.LayerFDs, p.mount("fsconfig-fd", base, FsconfigFD))
	if len(feat.Errors) == 0 {
		feat.Errors = nil
	}
	return feat, nil
}

const probePrefix = ".overlay-probe-"

// cleanStaleProbes removes what probes killed midway left in dir: scratch
// directories older than ten minutes, after detaching any mount a probe
// in this mount namespace left on them.
func cleanStaleProbes(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), probePrefix) {
			continue
		}
		fi, err := e.Info()
		if err != nil || time.Since(fi.ModTime()) < 10*time.Minute {
			continue
		}
		p := filepath.Join(dir, e.Name())
		merged, _ := filepath.Glob(filepath.Join(p, "*", "merged"))
		for _, m := range merged {
			_ = unix.Unmount(m, unix.MNT_DETACH)
		}
		_ = removeAll(p)
	}
}

type prober struct {
	dir  string
	feat *Features
}

func (p *prober) check(name string, field *bool, err error) {
	*field = err == nil
	if err != nil {
		p.feat.Errors[name] = err.Error()
	}
}

// filesystem probes what the scratch directory's filesystem supports.
func (p *prober) filesystem() {
	wh := filepath.Join(p.dir, "whiteout")
	p.check("whiteout", &p.feat.Whiteout, wrapPath("mknod", wh, unix.Mknod(wh, unix.S_IFCHR, 0)))

	fd, err := unix.Open(p.dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err == nil {
		unix.Close(fd)
	}
	p.check("tmpfile", &p.feat.Tmpfile, wrapPath("open(O_TMPFILE)", p.dir, err))

	f := filepath.Join(p.dir, "xattr")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		p.feat.Errors["user_xattrs"] = err.Error()
		p.feat.Errors["trusted_xattrs"] = err.Error()
		return
	}
	p.check("user_xattrs", &p.feat.UserXattrs, wrapPath("setxattr user.*", f, unix.Lsetxattr(f, "user.strata.probe", []byte("1"), 0)))
	p.check("trusted_xattrs", &p.feat.TrustedXattrs, wrapPath("setxattr trusted.*", f, unix.Lsetxattr(f, "trusted.strata.probe", []byte("1"), 0)))
}

func wrapPath(op, path string, err error) error {
	if err == nil {
		return nil
	}
	return &fs.PathError{Op: op, Path: path, Err: err}
}

func (p *prober) layers() error {
	for _, d := range []string{"l1", "l2"} {
		if err := os.Mkdir(filepath.Join(p.dir, d), 0o755); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(p.dir, "l1", "probe"), []byte("strata"), 0o644)
}

// mount mounts cfg over the probe layers with fresh upper and work
// directories, reads through it, and unmounts.
func (p *prober) mount(name string, cfg Config, m Method) error {
	d := filepath.Join(p.dir, name)
	for _, sub := range []string{"upper", "work", "merged"} {
		if err := os.MkdirAll(filepath.Join(d, sub), 0o755); err != nil {
			return err
		}
	}
	cfg.Lowers = []string{filepath.Join(p.dir, "l1"), filepath.Join(p.dir, "l2")}
	cfg.Upper, cfg.Work = filepath.Join(d, "upper"), filepath.Join(d, "work")
	plan, err := NewPlan(cfg, m)
	if err != nil {
		return err
	}
	target := filepath.Join(d, "merged")
	if err := mountPlan(target, cfg, plan, false); err != nil {
		return err
	}
	defer Unmount(target, true)
	if _, err := os.Stat(filepath.Join(target, "probe")); err != nil {
		return fmt.Errorf("mounted, but the lower layer is not visible: %w", err)
	}
	if err := os.WriteFile(filepath.Join(target, "written"), nil, 0o644); err != nil {
		return fmt.Errorf("mounted, but not writable: %w", err)
	}
	return nil
}

// fsType names the filesystem holding path.
func fsType(path string) string {
	var s unix.Statfs_t
	if err := unix.Statfs(path, &s); err != nil {
		return ""
	}
	switch int64(s.Type) {
	case unix.EXT4_SUPER_MAGIC:
		return "ext4"
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.XFS_SUPER_MAGIC:
		return "xfs"
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlay"
	case unix.FUSE_SUPER_MAGIC:
		return "fuse"
	case unix.NFS_SUPER_MAGIC:
		return "nfs"
	case unix.F2FS_SUPER_MAGIC:
		return "f2fs"
	case 0x2fc12fc1:
		return "zfs"
	}
	return fmt.Sprintf("%#x", s.Type)
}
