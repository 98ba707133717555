package overlayfs

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestFeatureCache(t *testing.T) {
	file := filepath.Join(t.TempDir(), "features.json")
	rootless := Key{Kernel: "6.18.44", Euid: 0, UserNS: true}
	root := Key{Kernel: "6.18.44", Euid: 0}

	if _, ok, err := LoadFeatures(file, rootless); ok || err != nil {
		t.Fatalf("empty cache: ok=%v err=%v", ok, err)
	}
	f1 := Features{Key: rootless, FSType: "ext4", Overlay: true, UserXattr: true, LowerdirPlus: true,
		Errors: map[string]string{"redirect_dir": "EINVAL"}, ProbedAt: time.Unix(1700000000, 0).UTC()}
	f2 := Features{Key: root, Overlay: true, RedirectDir: true}
	if err := SaveFeatures(file, f1); err != nil {
		t.Fatal(err)
	}
	if err := SaveFeatures(file, f2); err != nil {
		t.Fatal(err)
	}
	got, ok, err := LoadFeatures(file, rootless)
	if err != nil || !ok || got.Key != rootless || !got.LowerdirPlus || got.Errors["redirect_dir"] != "EINVAL" || !got.ProbedAt.Equal(f1.ProbedAt) {
		t.Errorf("rootless entry = %+v, %v, %v", got, ok, err)
	}
	if got, ok, _ := LoadFeatures(file, root); !ok || !got.RedirectDir {
		t.Errorf("root entry = %+v, %v", got, ok)
	}
	// A kernel upgrade misses.
	if _, ok, _ := LoadFeatures(file, Key{Kernel: "6.19.0", UserNS: true}); ok {
		t.Error("entry found for another kernel")
	}
	// A corrupt cache is an error on load and is replaced on save.
	if err := os.WriteFile(file, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadFeatures(file, rootless); err == nil {
		t.Error("corrupt cache loaded without error")
	}
	if err := SaveFeatures(file, f2); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := LoadFeatures(file, root); !ok || err != nil {
		t.Errorf("after rewrite: %v %v", ok, err)
	}
	if ents, _ := os.ReadDir(filepath.Dir(file)); len(ents) != 1 {
		t.Errorf("temporary files left: %v", ents)
	}
}
