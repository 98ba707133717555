package overlayfs

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/internal/testutil"
)

// kernelAtLeast reports whether the running kernel is at least major.minor.
func kernelAtLeast(t testing.TB, major, minor int) bool {
	t.Helper()
	rel, err := KernelRelease()
	if err != nil {
		t.Fatal(err)
	}
	var maj, mnr int
	parts := strings.SplitN(rel, ".", 3)
	if len(parts) >= 2 {
		maj, _ = strconv.Atoi(parts[0])
		mnr, _ = strconv.Atoi(strings.TrimFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	}
	return maj > major || maj == major && mnr >= minor
}

// probeOrSkip probes in the child and skips when overlay cannot be
// mounted here at all (a capability gate).
func probeOrSkip(t *testing.T) Features {
	t.Helper()
	feat, err := Probe(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if !feat.Overlay {
		testutil.Skip(t, "overlay cannot be mounted here: "+feat.Errors["overlay"])
	}
	return feat
}

func logFeatures(t *testing.T, feat Features) {
	t.Helper()
	b, _ := json.MarshalIndent(feat, "", "  ")
	t.Logf("features: %s", b)
}

func TestProbeRootless(t *testing.T) {
	rootlessChildren(t, func(t *testing.T) {
		feat := probeOrSkip(t)
		logFeatures(t, feat)
		if !feat.UserNS || feat.Euid != 0 {
			t.Errorf("key = %+v, want euid 0 in a user namespace", feat.Key)
		}
		if !feat.UserXattr || !feat.Volatile || !feat.Whiteout || !feat.UserXattrs {
			t.Errorf("rootless basics missing: %+v", feat)
		}
		if feat.RedirectDir || feat.Errors["redirect_dir"] == "" {
			t.Errorf("redirect_dir=on must fail rootless: %v / %q", feat.RedirectDir, feat.Errors["redirect_dir"])
		}
		if feat.TrustedXattrs {
			t.Error("trusted xattrs settable in a user namespace")
		}
		if kernelAtLeast(t, 6, 8) && !feat.LowerdirPlus {
			t.Errorf("lowerdir+ missing on 6.8+: %s", feat.Errors["lowerdir_plus"])
		}
		if kernelAtLeast(t, 6, 13) && !feat.LayerFDs {
			t.Errorf("layer fds missing on 6.13+: %s", feat.Errors["layer_fds"])
		}
	})
}

func TestProbeRoot(t *testing.T) {
	rootChild(t, func(t *testing.T) {
		feat := probeOrSkip(t)
		logFeatures(t, feat)
		if feat.UserNS || feat.Euid != 0 {
			t.Errorf("key = %+v, want real root", feat.Key)
		}
		if !feat.RedirectDir || !feat.UserXattr || !feat.TrustedXattrs || !feat.Whiteout {
			t.Errorf("root features missing: %+v", feat)
		}
	})
}

func TestProbeCached(t *testing.T) {
	rootlessChildren(t, func(t *testing.T) {
		cache := filepath.Join(t.TempDir(), "features.json")
		f1, err := ProbeCached(cache, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		f2, err := ProbeCached(cache, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if !f1.ProbedAt.Equal(f2.ProbedAt) {
			t.Errorf("second call probed again: %v vs %v", f1.ProbedAt, f2.ProbedAt)
		}
	})
}

// stack is a small two-layer setup for mount tests.
type stack struct {
	cfg    Config
	merged string
}

func newStack(t *testing.T, dir string, feat Features) stack {
	t.Helper()
	must(t, os.MkdirAll(dir, 0o755))
	for _, d := range []string{"l1", "l2", "upper", "work", "merged"} {
		must(t, os.MkdirAll(filepath.Join(dir, d), 0o755))
	}
	must(t, os.WriteFile(filepath.Join(dir, "l1", "f"), []byte("top"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "l2", "f"), []byte("bottom"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "l2", "g"), []byte("g"), 0o644))
	cfg := DefaultConfig([]string{filepath.Join(dir, "l1"), filepath.Join(dir, "l2")},
		filepath.Join(dir, "upper"), filepath.Join(dir, "work"), feat)
	return stack{cfg: cfg, merged: filepath.Join(dir, "merged")}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// checkMounted verifies the layer order and that writes reach the upper.
func checkMounted(t *testing.T, s stack) {
	t.Helper()
	got, err := os.ReadFile(filepath.Join(s.merged, "f"))
	if err != nil || string(got) != "top" {
		t.Fatalf("merged f = %q, %v; want the topmost layer's", got, err)
	}
	if _, err := os.Stat(filepath.Join(s.merged, "g")); err != nil {
		t.Fatal(err)
	}
	must(t, os.WriteFile(filepath.Join(s.merged, "new"), []byte("n"), 0o644))
	must(t, Unmount(s.merged, false))
	if _, err := os.Stat(filepath.Join(s.cfg.Upper, "new")); err != nil {
		t.Fatalf("write did not reach the upper: %v", err)
	}
}

func testMountMethods(t *testing.T) {
	feat := probeOrSkip(t)
	methods := map[Method]bool{Legacy: true, Fsconfig: feat.LowerdirPlus, FsconfigFD: feat.LayerFDs}
	for _, m := range []Method{Legacy, Fsconfig, FsconfigFD} {
		t.Run(m.String(), func(t *testing.T) {
			if !methods[m] {
				testutil.Skip(t, "kernel lacks "+m.String())
			}
			f := feat
			f.LowerdirPlus, f.LayerFDs = m != Legacy, m == FsconfigFD
			s := newStack(t, t.TempDir(), f)
			must(t, Mount(s.merged, s.cfg, f))
			checkMounted(t, s)
		})
	}

	// Paths too long for the method force short relative paths, resolved
	// on a thread of their own: the process's working directory stays.
	t.Run("relative paths", func(t *testing.T) {
		cwd, _ := os.Getwd()
		deep := filepath.Join(t.TempDir(), strings.Repeat("long-directory-name/", 14))
		for _, m := range []Method{Legacy, Fsconfig} {
			if !methods[m] {
				continue
			}
			f := feat
			f.LowerdirPlus, f.LayerFDs = m != Legacy, false
			s := newStack(t, filepath.Join(deep, m.String()), f)
			// Many lowers to exceed the page for mount(2).
			for i := range 14 {
				l := filepath.Join(filepath.Dir(s.cfg.Upper), fmt.Sprintf("extra-%02d", i))
				must(t, os.Mkdir(l, 0o755))
				s.cfg.Lowers = append(s.cfg.Lowers, l)
			}
			plan, err := NewPlan(s.cfg, m)
			if err != nil {
				t.Fatal(err)
			}
			if plan.Dir == "" {
				t.Fatalf("%s: plan uses absolute paths: %s", m, plan)
			}
			must(t, Mount(s.merged, s.cfg, f))
			checkMounted(t, s)
			if now, _ := os.Getwd(); now != cwd {
				t.Fatalf("working directory changed to %s", now)
			}
		}
	})

	t.Run("errors", func(t *testing.T) {
		s := newStack(t, t.TempDir(), feat)
		missing := s.cfg
		missing.Lowers = append([]string{"/nonexistent/layer"}, s.cfg.Lowers...)
		err := Mount(s.merged, missing, feat)
		var me *MountError
		if !errors.As(err, &me) || me.Op != "prepare" || !errors.Is(err, os.ErrNotExist) {
			t.Errorf("missing lower: %v", err)
		}
		// overlayfs's own refusals go to dmesg: the error says so.
		bad := s.cfg
		bad.Work = "/proc" // not on the upper's filesystem
		err = Mount(s.merged, bad, feat)
		if !errors.As(err, &me) || !strings.Contains(err.Error(), "dmesg") {
			t.Errorf("work on another filesystem: %v", err)
		}
		t.Logf("example error: %v", err)
	})

	t.Run("fsconfig log", func(t *testing.T) {
		if !feat.LowerdirPlus {
			testutil.Skip(t, "kernel lacks fsconfig lowerdir+ (Linux 6.8+)")
		}
		s := newStack(t, t.TempDir(), feat)
		// The kernel's fs context messages reach the error.
		err := mountPlan(s.merged, s.cfg, Plan{Method: Fsconfig, Params: []Param{{Kind: ParamFlag, Key: "bogus"}}}, false)
		var me *MountError
		if !errors.As(err, &me) || me.Op != `fsconfig bogus` || !errors.Is(err, unix.EINVAL) ||
			len(me.Log) == 0 || !strings.Contains(me.Log[0], "Unknown parameter 'bogus'") {
			t.Errorf("bogus parameter: %#v", err)
		}
		t.Logf("example error: %v", err)
	})

	t.Run("volatile", func(t *testing.T) {
		if !feat.Volatile {
			testutil.Skip(t, "kernel lacks volatile")
		}
		s := newStack(t, t.TempDir(), feat)
		vol := s.cfg
		vol.Volatile = true
		must(t, Mount(s.merged, vol, feat))
		must(t, Unmount(s.merged, false))
		marker := volatileMarker(s.cfg.Work)
		if _, err := os.Stat(marker); err != nil {
			t.Fatalf("kernel left no volatile marker: %v", err)
		}
		// Same boot: Mount clears the marker and the kernel accepts.
		must(t, Mount(s.merged, s.cfg, feat))
		must(t, Unmount(s.merged, false))
		if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("marker still there: %v", err)
		}
		// A marker from another boot is refused until cleared.
		must(t, Mount(s.merged, vol, feat))
		must(t, Unmount(s.merged, false))
		must(t, os.WriteFile(volatileBootFile(s.cfg.Work), []byte("another-boot\n"), 0o600))
		err := Mount(s.merged, s.cfg, feat)
		if !errors.Is(err, ErrVolatileDirty) {
			t.Fatalf("err = %v, want ErrVolatileDirty", err)
		}
		t.Logf("example error: %v", err)
		must(t, ClearVolatile(s.cfg.Work))
		must(t, Mount(s.merged, s.cfg, feat))
		must(t, Unmount(s.merged, true))
	})

	t.Run("read-only", func(t *testing.T) {
		s := newStack(t, t.TempDir(), feat)
		ro := s.cfg
		ro.Upper, ro.Work = "", ""
		must(t, Mount(s.merged, ro, feat))
		defer Unmount(s.merged, true)
		if err := os.WriteFile(filepath.Join(s.merged, "x"), nil, 0o644); !errors.Is(err, unix.EROFS) {
			t.Errorf("write to read-only overlay: %v", err)
		}
	})
}

func TestMountRootless(t *testing.T) { rootlessChildren(t, testMountMethods) }

func TestMountRoot(t *testing.T) { rootChild(t, testMountMethods) }

// TestUnmountNotMounted pins that Unmount reports a typed error.
func TestUnmountNotMounted(t *testing.T) {
	err := Unmount(t.TempDir(), false)
	var me *MountError
	if !errors.As(err, &me) || me.Op != "umount" {
		t.Fatalf("err = %v", err)
	}
}

// TestProbeCleansStale pins that Probe removes the scratch directory of a
// probe killed midway (mode-0 kernel work directories included).
func TestProbeCleansStale(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, probePrefix+"123")
	must(t, os.MkdirAll(filepath.Join(stale, "base", "work", "work"), 0o755))
	must(t, os.Chmod(filepath.Join(stale, "base", "work", "work"), 0))
	old := time.Now().Add(-time.Hour)
	must(t, os.Chtimes(stale, old, old))
	fresh := filepath.Join(dir, probePrefix+"456")
	must(t, os.Mkdir(fresh, 0o755))
	cleanStaleProbes(dir)
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale probe directory left: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("fresh probe directory removed: %v", err)
	}
}
