package overlayfs

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// Features is what Probe found the kernel allows in the namespaces it ran
// in, and what the filesystem holding the probe directory supports. A false
// field has its reason in Errors under the field's JSON name.
type Features struct {
	Key
	// FSType names the filesystem of the probed directory ("ext4", "tmpfs",
	// or its magic number in hex), the one upper and work should live on.
	FSType string `json:"fs_type"`

	// Overlay: an overlay can be mounted at all (legacy mount(2), with
	// userxattr when in a user namespace).
	Overlay bool `json:"overlay"`
	// UserXattr: the userxattr option is accepted (Linux 5.11+).
	UserXattr bool `json:"userxattr"`
	// RedirectDir: redirect_dir=on is accepted (real root only).
	RedirectDir bool `json:"redirect_dir"`
	// Volatile: the volatile option is accepted (Linux 5.10+).
	Volatile bool `json:"volatile"`
	// LowerdirPlus: fsopen("overlay") with fsconfig "lowerdir+" strings
	// mounts (Linux 6.8+).
	LowerdirPlus bool `json:"lowerdir_plus"`
	// LayerFDs: layers can be passed as file descriptors with
	// FSCONFIG_SET_FD (Linux 6.13+).
	LayerFDs bool `json:"layer_fds"`

	// Whiteout: mknod(S_IFCHR, 0/0) works on the probed filesystem, as it
	// must for strata to write whiteouts into a layer (unprivileged since
	// Linux 5.8, fs/namei.c vfs_mknod).
	Whiteout bool `json:"whiteout"`
	// Tmpfile: open(O_TMPFILE) works on the probed filesystem.
	Tmpfile bool `json:"tmpfile"`
	// UserXattrs: user.* xattrs can be set on the probed filesystem, which
	// a userxattr upper needs (tmpfs since Linux 6.6).
	UserXattrs bool `json:"user_xattrs"`
	// TrustedXattrs: trusted.* xattrs can be set (real root only).
	TrustedXattrs bool `json:"trusted_xattrs"`

	// Errors maps a false field's JSON name to why the probe failed.
	Errors map[string]string `json:"errors,omitempty"`
	// ProbedAt is when Probe ran.
	ProbedAt time.Time `json:"probed_at"`
}

// Key identifies the situation a Features value is valid for: a kernel
// release and the identity the probe ran with. A kernel upgrade or a switch
// between root and rootless selects another cache entry.
type Key struct {
	// Kernel is the kernel release (uname -r).
	Kernel string `json:"kernel"`
	// Euid is the effective uid inside the probing process's user
	// namespace: 0 for a child mapped to root, the user's own uid for a
	// child mapped to itself.
	Euid int `json:"euid"`
	// UserNS is whether that namespace is not the initial user namespace.
	UserNS bool `json:"userns"`
}

func (k Key) String() string {
	return fmt.Sprintf("%s/euid=%d/userns=%t", k.Kernel, k.Euid, k.UserNS)
}

// Method returns the best way to hand options to this kernel.
func (f Features) Method() Method {
	switch {
	case f.LayerFDs:
		return FsconfigFD
	case f.LowerdirPlus:
		return Fsconfig
	}
	return Legacy
}

// featureCache is the on-disk form of the feature cache.
type featureCache struct {
	Version int                 `json:"version"`
	Entries map[string]Features `json:"entries"`
}

const cacheVersion = 1

// LoadFeatures returns the cached Features for key from cacheFile. ok is
// false when the file does not exist or holds nothing for key (for example
// after a kernel upgrade); the caller then probes and calls SaveFeatures.
func LoadFeatures(cacheFile string, key Key) (feat Features, ok bool, err error) {
	c, err := readCache(cacheFile)
	if err != nil {
		return Features{}, false, err
	}
	feat, ok = c.Entries[key.String()]
	if ok && feat.Key != key {
		return Features{}, false, nil
	}
	return feat, ok, nil
}

// SaveFeatures stores feat in cacheFile under feat.Key, keeping entries for
// other keys. The file is replaced atomically.
func SaveFeatures(cacheFile string, feat Features) error {
	c, err := readCache(cacheFile)
	if err != nil {
		// A corrupt cache is only a cache: start over.
		c = featureCache{Version: cacheVersion}
	}
	if c.Entries == nil {
		c.Entries = map[string]Features{}
	}
	c.Entries[feat.Key.String()] = feat
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("feature cache %s: %w", cacheFile, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(cacheFile), filepath.Base(cacheFile)+".tmp-")
	if err != nil {
		return fmt.Errorf("feature cache: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("feature cache: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("feature cache: %w", err)
	}
	if err := os.Rename(tmp.Name(), cacheFile); err != nil {
		return fmt.Errorf("feature cache: %w", err)
	}
	return nil
}

func readCache(path string) (featureCache, error) {
	c := featureCache{Version: cacheVersion}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("feature cache: %w", err)
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return featureCache{Version: cacheVersion}, fmt.Errorf("feature cache %s: %w", path, err)
	}
	if c.Version != cacheVersion {
		return featureCache{Version: cacheVersion}, nil
	}
	return c, nil
}
