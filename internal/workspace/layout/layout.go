// Package layout names every path strata keeps for a store: under its home
// directory (the store directory) and in the per-user tmpfs directory on
// /dev/shm. It is the one owner of that layout (docs/workspaces.md, "On
// disk"): nothing else joins names under the home or the tmpfs.
//
// Terms:
//
//   - home: the store directory ($STRATA_HOME), holding strata.db.
//   - workspace directory: home/workspaces/NAME, a workspace's state
//     directory (its keeper's files, its committed-state index, its
//     upper and work unless they live in the tmpfs directory).
//   - tmpfs directory: /dev/shm/strata-UID/HASH, per user and per store
//     (HASH names the home), where --tmpfs workspaces and one-shot runs
//     keep their upper and work.
//   - run directory: runs/ID under the tmpfs directory (or under the home
//     for --disk runs): a one-shot run's upper, work and state file.
//
// The package imports only the standard library: the hot path (exec into
// a live workspace, issue 14) finds a workspace's directory and its
// keeper's socket from here without linking the store, SQLite or go-git.
package layout

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Names in the home directory.
const (
	DBName         = "strata.db"     // the store's database (package store)
	SettingsName   = "settings.json" // the store's settings
	FeaturesName   = "features.json" // the overlay probe's cached answer
	UserNSName     = "userns.json"   // the user-namespace probe's cached answer (backend auto)
	LayersName     = "layers"        // the layer cache (package snapshot)
	LayersLockName = "layers.lock"   // gc's lock against mounts being made
	CacheName      = "cache"         // the sandbox's compiled programs (internal/sandbox)
	WorkspacesName = "workspaces"    // one directory per workspace
	RunsName       = "runs"          // one directory per one-shot run (here: --disk runs)
	ClonesName     = "clones"        // the clone cache on Btrfs (package snapshot)
	// TempPrefix starts every directory or file that is being made and
	// is renamed into place once complete; gc removes old ones.
	TempPrefix = ".tmp-"
)

// Names in a workspace directory (and in a run directory, which is a
// workspace directory without a registry record).
const (
	Upper  = "upper"  // the overlay's upper directory (or upper.RANDOM after a reset)
	Work   = "work"   // the overlay's work directory (or work.RANDOM)
	Merged = "merged" // the mount point when the source path is unusable
	// The keeper's files, written and read by package nsexec: its lock
	// (held for its lifetime), its socket, its pid and mount target,
	// its log.
	KeeperLock = "keeper.lock"
	KeeperSock = "keeper.sock"
	KeeperInfo = "keeper.json"
	KeeperLog  = "keeper.log"
	// KeeperSpec is what the keeper of the workspace mounts, written by
	// the lifecycle when it creates or starts the workspace, so that
	// the front (cmd/strata) can start the keeper without the store
	// (internal/workspace/hotpath, docs/hotpath.md).
	KeeperSpec = "keeper.spec"
	// A commit's freeze: the marker naming the freezing process, and the
	// lock that makes two freezes take turns (package nsexec).
	Frozen     = "frozen"
	FreezeLock = "freeze.lock"
	// CommittedIndex is the committed-state index: the upper as of the
	// last commit (docs/workspaces.md, "Clean after commit").
	CommittedIndex = "committed.idx"
	// RunState names a one-shot run's process and base commit.
	RunState = "run.json"
	// RootConfig, in an image-rooted workspace's directory, holds what
	// its commands get by default (environment, working directory), so
	// that exec into its live keeper needs no store.
	RootConfig = "root.json"
	// RootUpper and RootWork are the root's own upper and work of a
	// project on an environment (--root IMAGE --at PATH), beside the
	// project's (upper.root.RANDOM after a reset).
	RootUpper = Upper + ".root"
	RootWork  = Work + ".root"
)

// Names in the tmpfs directories.
const (
	// TmpfsOwner, in a store's tmpfs directory, holds the store's home:
	// a sweep removes the directory once that store is gone.
	TmpfsOwner = "store"
	// SweepMarker, in the user's tmpfs directory, is touched by the last
	// sweep of every store's runs (its mtime says when).
	SweepMarker = ".swept"
)

// ValidName reports whether name may name a workspace: 1-64 letters,
// digits, '.', '_' or '-', starting with a letter or digit, without ".."
// and not ending in ".lock" (a workspace's name is a directory name under
// the home and part of its branch's name). Names that read as refs
// (main, HEAD) are refused by the root package on top of this.
func ValidName(name string) bool {
	ok := len(name) >= 1 && len(name) <= 64 && isAlnum(name[0])
	for i := 1; ok && i < len(name); i++ {
		c := name[i]
		ok = isAlnum(c) || c == '.' || c == '_' || c == '-'
	}
	return ok && !strings.HasSuffix(name, ".lock") && !strings.Contains(name, "..")
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// Layout is the paths of one store.
type Layout struct {
	home string
	shm  string // "" is /dev/shm
}

// New returns the layout of the store at home (made absolute).
func New(home string) Layout {
	if abs, err := filepath.Abs(home); err == nil {
		home = abs
	}
	return Layout{home: home}
}

// DefaultHome is $STRATA_HOME, then $XDG_DATA_HOME/strata, then
// ~/.local/share/strata.
func DefaultHome() (string, error) {
	if h := os.Getenv("STRATA_HOME"); h != "" {
		return filepath.Abs(h)
	}
	if x := os.Getenv("XDG_DATA_HOME"); x != "" {
		return filepath.Abs(filepath.Join(x, "strata"))
	}
	h, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no store location: set STRATA_HOME or HOME: %w", err)
	}
	return filepath.Join(h, ".local", "share", "strata"), nil
}

// Home is the store directory.
func (l Layout) Home() string { return l.home }

// DB is the store's database file.
func (l Layout) DB() string { return filepath.Join(l.home, DBName) }

// Settings is the store's settings file.
func (l Layout) Settings() string { return filepath.Join(l.home, SettingsName) }

// Features is the overlay probe's cache.
func (l Layout) Features() string { return filepath.Join(l.home, FeaturesName) }

// Layers is the layer cache's directory (its contents are snapshot's).
func (l Layout) Layers() string { return filepath.Join(l.home, LayersName) }

// LayersLock is the lock gc takes exclusively to evict layers, and a
// workspace shared while it computes and mounts its stack.
func (l Layout) LayersLock() string { return filepath.Join(l.home, LayersLockName) }

// Clones is the clone cache's directory (its contents are snapshot's):
// reflink workspaces on Btrfs are snapshots of its subvolumes.
func (l Layout) Clones() string { return filepath.Join(l.home, ClonesName) }

// Cache is the sandbox's cache of compiled programs.
func (l Layout) Cache() string { return filepath.Join(l.home, CacheName) }

// Workspaces is the directory that holds every workspace directory.
func (l Layout) Workspaces() string { return filepath.Join(l.home, WorkspacesName) }

// Workspace is the state directory of the workspace name.
func (l Layout) Workspace(name string) string { return filepath.Join(l.home, WorkspacesName, name) }

// ShmDir is the host tmpfs the tmpfs directories live on.
const ShmDir = "/dev/shm"

// WithShm returns the layout with dir standing for /dev/shm: for tests,
// which must not sweep the real tmpfs directories of the user's stores.
func (l Layout) WithShm(dir string) Layout {
	l.shm = dir
	return l
}

// TmpfsUser is this user's directory on /dev/shm, which holds the tmpfs
// directory of each of the user's stores.
func (l Layout) TmpfsUser() string {
	shm := l.shm
	if shm == "" {
		shm = ShmDir
	}
	return filepath.Join(shm, fmt.Sprintf("strata-%d", os.Getuid()))
}

// Tmpfs is the store's tmpfs directory: per user, per store (a hash of
// the home names it).
func (l Layout) Tmpfs() string {
	sum := sha256.Sum256([]byte(l.home))
	return filepath.Join(l.TmpfsUser(), hex.EncodeToString(sum[:6]))
}

// TmpfsWorkspace is where the --tmpfs workspace name keeps upper and work.
func (l Layout) TmpfsWorkspace(name string) string { return filepath.Join(l.Tmpfs(), name) }

// Runs is where one-shot runs keep their directories: the store's tmpfs
// directory, or the home for --disk runs.
func (l Layout) Runs(disk bool) string {
	if disk {
		return filepath.Join(l.home, RunsName)
	}
	return filepath.Join(l.Tmpfs(), RunsName)
}

// Run is the directory of the one-shot run id.
func (l Layout) Run(disk bool, id string) string { return filepath.Join(l.Runs(disk), id) }

// KeeperSocket is the socket of the keeper of the workspace (or run)
// directory dir.
func KeeperSocket(dir string) string { return filepath.Join(dir, KeeperSock) }

// KeeperInfoFile is the keeper's pid and mount target in dir.
func KeeperInfoFile(dir string) string { return filepath.Join(dir, KeeperInfo) }

// KeeperSpecFile is the keeper spec file of the workspace directory dir.
func KeeperSpecFile(dir string) string { return filepath.Join(dir, KeeperSpec) }

// MergedDir is the fallback mount point of the workspace directory dir.
func MergedDir(dir string) string { return filepath.Join(dir, Merged) }

// CommittedIndexFile is the committed-state index of the workspace
// directory dir.
func CommittedIndexFile(dir string) string { return filepath.Join(dir, CommittedIndex) }

// RunStateFile is the state file of the run directory dir.
func RunStateFile(dir string) string { return filepath.Join(dir, RunState) }

// FreshUpper names a new upper and work directory in dir (beside a
// workspace's current ones) with a random suffix.
func FreshUpper(dir, suffix string) (upper, work string) {
	return filepath.Join(dir, Upper+"."+suffix), filepath.Join(dir, Work+"."+suffix)
}

// FreshRootUpper names a new root upper and work directory in dir.
func FreshRootUpper(dir, suffix string) (upper, work string) {
	return filepath.Join(dir, RootUpper+"."+suffix), filepath.Join(dir, RootWork+"."+suffix)
}

// IsUpperOrWork reports whether name is that of an upper or work
// directory (upper, work, upper.RANDOM, work.RANDOM).
func IsUpperOrWork(name string) bool {
	return name == Upper || name == Work || strings.HasPrefix(name, Upper+".") || strings.HasPrefix(name, Work+".")
}

// Relocate derives the upper or work directory of the workspace directory
// dir from the recorded path: its base name (upper, upper.RANDOM) in dir.
// A store moved on disk keeps working; kind is Upper or Work, the default
// name.
func Relocate(dir, recorded, kind string) string {
	name := kind
	if b := filepath.Base(recorded); recorded != "" && strings.HasPrefix(b, kind+".") {
		name = b
	}
	return filepath.Join(dir, name)
}
