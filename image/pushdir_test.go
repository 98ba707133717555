package image

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestRemoveStalePushDirs: a push in flight (its lock held) is left alone;
// a killed push's directory (its lock free) goes at once; a directory
// without a lock, or a half-made one, only once older than the age; other
// entries are never touched.
func TestRemoveStalePushDirs(t *testing.T) {
	dir := t.TempDir()
	live, err := NewPushDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Release()
	if filepath.Base(live.Path)[:len(pushDirPrefix)] != pushDirPrefix {
		t.Fatalf("push dir %s lacks the prefix %s", live.Path, pushDirPrefix)
	}
	// A killed push: its lock file is there, nobody holds it.
	killed, err := NewPushDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(killed.Path, "layer0"), []byte("blob"), 0o644); err != nil {
		t.Fatal(err)
	}
	killed.lock.Close()
	mk := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	nolock := mk(pushDirPrefix + "nolock")
	half := mk(pushNewDirPrefix + "half")
	other := mk("layers")

	got := RemoveStalePushDirs(dir, time.Hour)
	if !slices.Equal(got, []string{killed.Path}) {
		t.Errorf("young: removed %v, want only the killed push's %s", got, killed.Path)
	}
	for _, p := range []string{live.Path, nolock, half, other} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	// With no age every unlocked leftover goes; the live push stays.
	got = RemoveStalePushDirs(dir, -time.Second)
	slices.Sort(got)
	want := []string{half, nolock}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("old: removed %v, want %v", got, want)
	}
	for _, p := range []string{live.Path, other, filepath.Join(live.Path, pushLockName)} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	live.Release()
	if _, err := os.Stat(live.Path); !os.IsNotExist(err) {
		t.Errorf("Release left %s: %v", live.Path, err)
	}
}
