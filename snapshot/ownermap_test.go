package snapshot

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/internal/testutil"
)

// TestLayerOwnerMap: layers written with an owner map (a rootless image
// root with subordinate ids) carry the mapped owners and live in a
// flavour directory of their own, which Evict and Verify know; plain
// layers of the same commit are not touched. As root (chown).
func TestLayerOwnerMap(t *testing.T) {
	testutil.AsRootBecause(t, "writing layers with other owners needs chown")
	s := openLayerStore(t)
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "app", "secret"), "s")
	writeFile(t, filepath.Join(src, "rootfile"), "r")
	must(t, os.Chown(filepath.Join(src, "app"), 1000, 1000))
	must(t, os.Chown(filepath.Join(src, "app", "secret"), 1000, 1001))
	commit, _ := importAs(t, s, src)
	ctx := context.Background()
	cache := NewLayerCache(filepath.Join(t.TempDir(), "layers"))
	shift := &OwnerMap{Key: "idstest", Map: func(uid, gid uint32) (uint32, uint32) { return uid + 100000, gid + 200000 }}
	mapped, err := cache.Stack(ctx, s, commit, LayerOptions{Flavour: FlavourUser, Chown: true, Owners: shift})
	must(t, err)
	plain, err := cache.Stack(ctx, s, commit, LayerOptions{Flavour: FlavourUser})
	must(t, err)
	if filepath.Base(filepath.Dir(mapped[0])) != "user-idstest" || filepath.Base(filepath.Dir(plain[0])) != FlavourUser {
		t.Fatalf("stacks %q, %q", mapped, plain)
	}
	owner := func(p string) (uint32, uint32) {
		var st unix.Stat_t
		must(t, unix.Lstat(p, &st))
		return st.Uid, st.Gid
	}
	for _, tc := range []struct {
		rel      string
		uid, gid uint32
	}{{"app", 101000, 201000}, {"app/secret", 101000, 201001}, {"rootfile", 100000 + uint32(os.Getuid()), 200000 + uint32(os.Getgid())}} {
		if u, g := owner(filepath.Join(mapped[0], tc.rel)); u != tc.uid || g != tc.gid {
			t.Errorf("mapped %s: %d:%d; want %d:%d", tc.rel, u, g, tc.uid, tc.gid)
		}
		if u, g := owner(filepath.Join(plain[0], tc.rel)); u != uint32(os.Getuid()) || g != uint32(os.Getgid()) {
			t.Errorf("plain %s: %d:%d; want the caller's", tc.rel, u, g)
		}
	}
	if probs, err := cache.Verify(ctx, s); err != nil || len(probs) != 0 {
		t.Errorf("verify: %v %v", probs, err)
	}
	// Evicted like any layer (nothing kept), through RemoveAll for what
	// its own removal leaves (here: nothing; as root it removes all).
	res, err := cache.Evict(ctx, s, EvictOptions{RemoveAll: os.RemoveAll})
	must(t, err)
	var gone []string
	for _, r := range res.Removed {
		gone = append(gone, strings.SplitN(r, "/", 2)[0])
	}
	if strings.Join(gone, ",") != "user,user-idstest" && strings.Join(gone, ",") != "user-idstest,user" {
		t.Errorf("evicted %q", res.Removed)
	}
	for _, bad := range []LayerOptions{
		{Flavour: FlavourUser, Owners: shift}, // no Chown
		{Flavour: FlavourUser, Chown: true, Owners: &OwnerMap{Key: "Bad/Key", Map: shift.Map}},
		{Flavour: FlavourUser, Chown: true, Owners: &OwnerMap{Key: "k"}}, // no map
	} {
		if err := bad.check(); err == nil {
			t.Errorf("options %+v accepted", bad)
		}
	}
	for name, want := range map[string]bool{"user": true, "trusted": true, "user-ids0a": true, "trusted-x1": true, "user-": false, "other-ids": false, "user-A": false} {
		if isFlavourDir(name) != want {
			t.Errorf("isFlavourDir(%q) = %v", name, !want)
		}
	}
}
