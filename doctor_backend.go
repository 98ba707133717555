package strata

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// backendCheck says which backend `--backend auto` chooses here (the
// lifecycle's rule: overlay where user namespaces work, else reflink
// where the store's filesystem clones files, else copy) and why, probing
// FICLONE in scratch, a directory on the store's filesystem.
//
// cause is the user-namespace diagnosis's cause ("" when they work) and
// seccomp this process's seccomp mode; as real root, rootErr is the error
// of probing a mount namespace with an overlay (nil: it works).
func backendCheck(scratch, cause string, seccomp int, realRoot bool, rootErr error) (Check, string) {
	c := Check{Name: "workspace backend", Optional: true, OK: true}
	reflink := cloneWorks(scratch)
	fsDetail := "the store's filesystem cannot clone files (FICLONE): the reflink backend is not available; copy is"
	if reflink {
		fsDetail = "the store's filesystem clones files (FICLONE): the reflink backend is available"
	}
	switch {
	case realRoot && rootErr == nil:
		c.Detail = "auto chooses overlay: real root mounts overlays without a user namespace; " + fsDetail
		return c, BackendOverlay
	case realRoot:
		cause = "unknown"
		if seccomp == 2 {
			cause = "seccomp"
		}
	case cause == "":
		c.Detail = "auto chooses overlay: user namespaces work; " + fsDetail
		return c, BackendOverlay
	case reflink:
		c.Detail = "auto chooses reflink: namespaces are denied here, and the store's filesystem clones files; commands run without namespaces, fenced by Landlock and seccomp (below: what holds)"
		return c, BackendReflink
	}
	c.OK = false
	c.Detail = fmt.Sprintf("auto chooses copy: namespaces are denied here (%s) and the store's filesystem cannot clone files, so every workspace copies its base's files", cause)
	c.Disables = "cheap workspaces: each one costs its base's size in time and disk"
	c.Fix = []string{"keep the store (--home) on XFS made with reflink=1 or on Btrfs: workspaces are then clones (reflink), or fix user namespaces (above)"}
	return c, BackendCopy
}

// cloneWorks reports whether FICLONE works between two files in dir.
func cloneWorks(dir string) bool {
	src := filepath.Join(dir, "reflink-src")
	if err := os.WriteFile(src, []byte("strata reflink probe\n"), 0o600); err != nil {
		return false
	}
	defer os.Remove(src)
	a, err := os.Open(src)
	if err != nil {
		return false
	}
	defer a.Close()
	b, err := os.Create(filepath.Join(dir, "reflink-dst"))
	if err != nil {
		return false
	}
	defer os.Remove(b.Name())
	defer b.Close()
	return unix.IoctlFileClone(int(b.Fd()), int(a.Fd())) == nil
}
