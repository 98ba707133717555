package workspace

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/internal/workspace/layout"
	"github.com/stratafs/strata/nsexec"
	"github.com/stratafs/strata/overlayfs"
)

// Choice is what ChooseBackend chose, and why.
type Choice struct {
	Backend string `json:"backend"`
	// Why says what decided it, for messages ("user namespaces work").
	Why string `json:"why"`
	// Warning, when set, names a cost the user should know of (the copy
	// backend copies every file).
	Warning string `json:"warning,omitempty"`
	// UserNS is the diagnosis of user namespaces (Cause "" when they
	// work); Reflink whether the store's filesystem can clone files.
	UserNS  nsexec.UserNSCause `json:"userns"`
	Reflink bool               `json:"reflink"`
}

// CheckBackend refuses an unknown backend name ("" is the default).
func CheckBackend(b string) error {
	switch b {
	case "", BackendOverlay, BackendReflink, BackendCopy, BackendAuto:
		return nil
	}
	return Invalidf("--backend %q: want overlay, reflink, copy or auto", b)
}

// ChooseBackend resolves BackendAuto for this process on this store:
// overlay where user namespaces work (always as real root, which needs
// none), otherwise reflink where the store's filesystem clones files
// (XFS with reflink=1, Btrfs), otherwise copy, with a warning naming its
// cost (treeBytes and treeFiles: the base's size). Any other backend is
// returned as it is.
//
// Whether user namespaces work is probed (nsexec.ProbeUserNS, two
// process starts) and the answer kept in the store (layout.UserNSName),
// keyed by what could change it: the boot, the enclosing user namespace
// (a bwrap sandbox has its own), this process's seccomp mode, the
// sysctls and AppArmor, the uid and the binary namespaces are made by.
func (m *Manager) ChooseBackend(ctx context.Context, backend string, treeFiles, treeBytes int64) (Choice, error) {
	if err := CheckBackend(backend); err != nil {
		return Choice{}, err
	}
	if backend != BackendAuto {
		if backend == "" {
			backend = BackendOverlay
		}
		return Choice{Backend: backend, Why: "asked for"}, nil
	}
	c := Choice{}
	d := m.userNS(ctx)
	c.UserNS = d.Cause
	if d.Cause == nsexec.UserNSWorks {
		c.Backend, c.Why = BackendOverlay, "user namespaces work"
		if RealRoot() {
			c.Why = "real root mounts overlays in a mount namespace of its own"
		}
		return c, nil
	}
	c.Reflink = m.canReflink()
	if c.Reflink {
		c.Backend = BackendReflink
		c.Why = fmt.Sprintf("user namespaces are denied here (%s: %s); the store's filesystem clones files", d.Cause, d.Detail)
		return c, nil
	}
	c.Backend = BackendCopy
	c.Why = fmt.Sprintf("user namespaces are denied here (%s: %s), and %s cannot clone files", d.Cause, d.Detail, fsKind(m.Layout.Home()))
	c.Warning = fmt.Sprintf("backend auto chose copy: user namespaces are denied here (%s) and %s cannot clone files (FICLONE), so every workspace copies its base: %d files, %s written again and stored once more per workspace; a store on XFS (reflink=1) or Btrfs makes this a clone (see `strata doctor`)",
		d.Cause, fsKind(m.Layout.Home()), treeFiles, humanBytes(treeBytes))
	return c, nil
}

// userNS diagnoses user namespaces — for real root, which needs none,
// whether it may make a mount namespace and mount an overlay in it (a
// container's seccomp profile refuses both) — from the store's cache when
// its key still holds.
func (m *Manager) userNS(ctx context.Context) nsexec.UserNSDiagnosis {
	key := userNSKey()
	file := filepath.Join(m.Layout.Home(), layout.UserNSName)
	var cached struct {
		Key       string                 `json:"key"`
		Diagnosis nsexec.UserNSDiagnosis `json:"diagnosis"`
	}
	if b, err := os.ReadFile(file); err == nil && json.Unmarshal(b, &cached) == nil && cached.Key == key {
		return cached.Diagnosis
	}
	var d nsexec.UserNSDiagnosis
	if RealRoot() {
		d = m.rootNamespaces(ctx)
	} else {
		d = nsexec.DiagnoseUserNS(nsexec.ProbeUserNS(ctx))
	}
	cached.Key, cached.Diagnosis = key, d
	if b, err := json.Marshal(cached); err == nil {
		_ = WriteFileAtomic(file, b, false) // a cache: losing it costs a probe
	}
	return d
}

// rootNamespaces probes, as real root, a mount namespace with an overlay
// in it (nsexec.ProbeOverlay): what root's workspaces need.
func (m *Manager) rootNamespaces(ctx context.Context) nsexec.UserNSDiagnosis {
	p := nsexec.ReadUserNSFacts("/")
	d := nsexec.UserNSDiagnosis{Probe: p, Detail: "real root makes mount namespaces and overlays"}
	scratch, err := os.MkdirTemp(m.Layout.Home(), ".probe-")
	if err == nil {
		defer os.RemoveAll(scratch)
		var f overlayfs.Features
		if f, err = nsexec.ProbeOverlay(ctx, scratch, false); err == nil && !f.Overlay {
			err = fmt.Errorf("the kernel refuses the overlay: %s", f.Errors["overlay"])
		}
	}
	if err == nil {
		return d
	}
	d.Cause = nsexec.UserNSUnknown
	if p.Seccomp == 2 {
		d.Cause = nsexec.UserNSSeccomp
	}
	d.Detail = fmt.Sprintf("as real root, a mount namespace with an overlay cannot be made here (%v)", err)
	return d
}

// userNSKey names what a user-namespace verdict depends on.
func userNSKey() string {
	h := sha256.New()
	for _, p := range []string{"/proc/sys/kernel/random/boot_id"} {
		b, _ := os.ReadFile(p)
		h.Write(b)
	}
	ns, _ := os.Readlink("/proc/self/ns/user")
	facts, _ := json.Marshal(nsexec.ReadUserNSFacts("/"))
	fmt.Fprintf(h, "\x00%s\x00%s\x00%d\x00%s", ns, facts, os.Getuid(), nsexec.InitPath())
	return hex.EncodeToString(h.Sum(nil))
}

// canReflink reports whether the store's filesystem clones a file within
// it (FICLONE between two files in the home, where layers and workspaces
// live).
func (m *Manager) canReflink() bool {
	home := m.Layout.Home()
	src, err := os.CreateTemp(home, layout.TempPrefix+"reflink-probe-")
	if err != nil {
		return false
	}
	defer os.Remove(src.Name())
	defer src.Close()
	if _, err := src.Write([]byte("strata reflink probe\n")); err != nil {
		return false
	}
	dst, err := os.CreateTemp(home, layout.TempPrefix+"reflink-probe-")
	if err != nil {
		return false
	}
	defer os.Remove(dst.Name())
	defer dst.Close()
	return unix.IoctlFileClone(int(dst.Fd()), int(src.Fd())) == nil
}

// fsKind names the filesystem p is on, for messages.
func fsKind(p string) string {
	var s unix.Statfs_t
	if unix.Statfs(p, &s) != nil {
		return "the store's filesystem"
	}
	switch s.Type {
	case unix.EXT4_SUPER_MAGIC:
		return "ext4"
	case unix.XFS_SUPER_MAGIC:
		return "this XFS (made without reflink=1)"
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlayfs"
	case unix.NFS_SUPER_MAGIC:
		return "NFS"
	}
	return fmt.Sprintf("the store's filesystem (type %#x)", s.Type)
}

// humanBytes formats n bytes for messages (1.5 MiB).
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return strings.TrimSuffix(fmt.Sprintf("%.1f", float64(n)/float64(div)), ".0") + " " + string("KMGTPE"[exp]) + "iB"
}
