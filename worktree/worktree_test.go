package worktree

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stratafs/strata/store"
)

// TestNotLinked: this test binary does not link worktree/gogit, so
// Snapshot and ExportGit fail with ErrNotLinked, naming what was asked;
// Register installs an implementation once and refuses a nil one or a
// second.
func TestNotLinked(t *testing.T) {
	if Linked() {
		t.Fatal("Linked() in a binary without worktree/gogit")
	}
	_, err := Snapshot(context.Background(), nil, nil, "/src/repo@HEAD", SnapshotOptions{})
	if !errors.Is(err, ErrNotLinked) || !strings.Contains(err.Error(), "/src/repo@HEAD") {
		t.Errorf("Snapshot: %v", err)
	}
	_, err = ExportGit(context.Background(), nil, store.ZeroID, store.ZeroID, "", "/src/repo", ExportOptions{})
	if !errors.Is(err, ErrNotLinked) || !strings.Contains(err.Error(), "/src/repo") {
		t.Errorf("ExportGit: %v", err)
	}
	panics := func(f func()) (p bool) {
		defer func() { p = recover() != nil }()
		f()
		return false
	}
	snap := func(context.Context, *store.Store, *store.Writer, string, SnapshotOptions) (*SnapshotResult, error) {
		return &SnapshotResult{Rev: "r"}, nil
	}
	export := func(context.Context, *store.Store, store.ID, store.ID, string, string, ExportOptions) (*ExportResult, error) {
		return &ExportResult{Commit: "c"}, nil
	}
	if !panics(func() { Register(nil, export) }) || Linked() {
		t.Error("Register with a nil function did not panic, or installed it")
	}
	defer func() { impl.snapshot, impl.export = nil, nil }()
	Register(snap, export)
	if !Linked() {
		t.Fatal("not Linked after Register")
	}
	if r, err := Snapshot(context.Background(), nil, nil, "x", SnapshotOptions{}); err != nil || r.Rev != "r" {
		t.Errorf("Snapshot after Register: %+v, %v", r, err)
	}
	if r, err := ExportGit(context.Background(), nil, store.ZeroID, store.ZeroID, "", "x", ExportOptions{}); err != nil || r.Commit != "c" {
		t.Errorf("ExportGit after Register: %+v, %v", r, err)
	}
	if !panics(func() { Register(snap, export) }) {
		t.Error("a second Register did not panic")
	}
}
