package workspace

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/stratafs/strata/internal/workspace/hotpath"
	"github.com/stratafs/strata/nsexec"
)

// Keeper is a live keeper (nsexec.Keeper).
type Keeper = nsexec.Keeper

// Keeper returns workspace name's live keeper, starting one if needed.
// The caller has checked the name.
func (m *Manager) Keeper(ctx context.Context, name string) (*Keeper, error) {
	dir := m.Layout.Workspace(name)
	if k, err := nsexec.FindKeeper(dir); err == nil {
		nsexec.ThawStale(dir)
		return k, nil
	}
	rec, err := m.Load(ctx, name)
	if err != nil {
		return nil, err
	}
	b, err := m.Backend(rec)
	if err != nil {
		return nil, err
	}
	return b.Start(ctx, rec)
}

// Running returns the live keeper of the workspace directory dir, or nil.
func Running(dir string) *Keeper {
	k, err := nsexec.FindKeeper(dir)
	if err != nil {
		return nil
	}
	return k
}

// Stop ends the keeper of the workspace (or run) directory dir and with it
// every process in the workspace; it is not an error that none runs.
func Stop(ctx context.Context, dir string) error {
	err := nsexec.StopKeeper(ctx, dir)
	if errors.Is(err, nsexec.ErrNotRunning) {
		return nil
	}
	return err
}

// The shell's terminal (hotpath, shared with the front).
var (
	// DefaultShell is $SHELL, then /bin/bash, then /bin/sh.
	DefaultShell = hotpath.DefaultShell
	// IsTerminal reports whether a file is a terminal.
	IsTerminal = hotpath.IsTerminal
	// OpenHostPTY opens a pty pair on the host's devpts.
	OpenHostPTY = hotpath.OpenPTY
	// OnTerminal runs a command on the caller's terminal through a pty.
	OnTerminal = hotpath.OnTerminal
)

// OpenPTY opens a pty pair in workspace name's view (its own devpts), for
// a sandboxed shell.
func (m *Manager) OpenPTY(name string) (master, slave *os.File, err error) {
	return nsexec.OpenPTY(m.Layout.Workspace(name))
}

// RemoveLeftover removes the directory of a workspace that was never
// registered — what a create killed between making its directory and
// recording it leaves, which blocks a create of the same name — unless it
// changed within age (a create may be finishing). It reports whether there
// was one. The caller has checked the name.
func (m *Manager) RemoveLeftover(ctx context.Context, name string, age time.Duration) bool {
	dir := m.Layout.Workspace(name)
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() || RecentlyChanged(dir, age) {
		return false
	}
	_ = Stop(ctx, dir)
	return RemoveAll(dir) == nil
}
