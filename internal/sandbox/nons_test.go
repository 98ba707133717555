package sandbox

import (
	"reflect"
	"runtime"
	"slices"
	"testing"

	"github.com/stratafs/strata/landlock"
	"github.com/stratafs/strata/seccomp"
)

// TestNoNSPolicy: the agent policy without the host's /dev/shm and ptys.
func TestNoNSPolicy(t *testing.T) {
	p := NoNSPolicy("/w", "/w-tmp", []string{"/ro"}, []string{"/rw"}, false)
	for _, s := range []string{"/dev/shm"} {
		if slices.Contains(p.RW, s) {
			t.Errorf("RW has %s: %v", s, p.RW)
		}
	}
	for _, s := range []string{"/dev/ptmx", "/dev/pts"} {
		if slices.Contains(p.RWFiles, s) {
			t.Errorf("RWFiles has %s: %v", s, p.RWFiles)
		}
	}
	for _, s := range []string{"/w", "/w-tmp", "/rw"} {
		if !slices.Contains(p.RW, s) {
			t.Errorf("RW lacks %s: %v", s, p.RW)
		}
	}
	if !slices.Contains(p.RO, "/ro") || p.RestrictTCP {
		t.Errorf("RO %v, RestrictTCP %v", p.RO, p.RestrictTCP)
	}
	if !NoNSPolicy("/w", "/t", nil, nil, true).RestrictTCP {
		t.Error("restrictTCP not set")
	}
}

// TestBuildNoNS: the preset's program (strict's under --net none) and the
// unix socket deny after it; the Landlock plan of NoNSPolicy.
func TestBuildNoNS(t *testing.T) {
	req := Request{Target: t.TempDir(), Tmp: t.TempDir(), ConnectTCP: []uint16{443}}
	for _, c := range []struct {
		netNone bool
		preset  seccomp.Policy
	}{{false, seccomp.Agent()}, {true, seccomp.Strict()}} {
		plan, err := BuildNoNS(req, c.netNone)
		if err != nil {
			t.Fatal(err)
		}
		f, _ := seccomp.Plan(c.preset, runtime.GOARCH)
		want, _ := seccomp.Program(f)
		deny, _ := seccomp.UnixSocketDeny(runtime.GOARCH)
		want = append(want, deny)
		if !reflect.DeepEqual(plan.Seccomp, want) {
			t.Errorf("netNone %v: %d programs, not the preset's and the unix deny", c.netNone, len(plan.Seccomp))
		}
		abi, _ := landlock.ABI()
		if abi == 0 {
			if plan.Landlock != nil {
				t.Error("a Landlock plan without Landlock")
			}
			continue
		}
		wantRS, err := landlock.Plan(NoNSPolicy(req.Target, req.Tmp, nil, nil, c.netNone), abi)
		if err != nil {
			t.Fatal(err)
		}
		if plan.Landlock == nil || !reflect.DeepEqual(plan.Landlock.Paths, wantRS.Paths) {
			t.Errorf("netNone %v: Landlock %+v", c.netNone, plan.Landlock)
		}
		if abi >= 4 && len(plan.Landlock.Ports) == 0 {
			t.Errorf("netNone %v: the allowed port is not in the plan", c.netNone)
		}
	}
}
