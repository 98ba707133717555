package nsexec

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stratafs/strata/seccomp"
)

// TestCosts measures what docs/nsexec.md reports: the p50 (and p90) of
// StartKeeper, FindKeeper, Exec of true into a live keeper and Run of
// true, without and with the agent sandbox (Landlock + seccomp), with
// strata-init and with the fallback binary. A measurement, not an
// assertion: it runs only with STRATA_NSEXEC_COSTS=1 (N=100 by default,
// STRATA_NSEXEC_COSTS_N).
//
//	STRATA_NSEXEC_COSTS=1 go test -run TestCosts -v ./nsexec/
func TestCosts(t *testing.T) {
	if os.Getenv("STRATA_NSEXEC_COSTS") != "1" {
		t.Skip("a measurement: set STRATA_NSEXEC_COSTS=1")
	}
	if strata := strataBin(t); strata != "" && stage() == "" {
		t.Setenv("STRATA_NSEXEC_COSTS_STRATA", strata) // for the rootless pass too
	}
	both(t, func(t *testing.T) {
		n := 100
		if v, err := strconv.Atoi(os.Getenv("STRATA_NSEXEC_COSTS_N")); err == nil && v > 0 {
			n = v
		}
		measure := func(name string, n int, fn func(i int)) {
			t.Helper()
			fn(-1) // warm
			d := make([]time.Duration, n)
			for i := range d {
				start := time.Now()
				fn(i)
				d[i] = time.Since(start)
			}
			slices.Sort(d)
			t.Logf("%-44s p50 %7.2f ms  p90 %7.2f ms  (n=%d)", name, ms(d[n/2]), ms(d[n*9/10]), n)
		}
		ctx := context.Background()
		spec := newSpec(t, "")
		startKeeper(t, spec)
		rs, progs := agentSandbox(t, spec.Target)
		f, _ := seccomp.Plan(seccomp.Agent(), runtime.GOARCH)
		measure("seccomp.Program (parent side)", 20, func(int) { seccomp.Program(f) })
		measure("FindKeeper", 1000, func(int) {
			if _, err := FindKeeper(spec.Dir); err != nil {
				t.Fatal(err)
			}
		})
		run := func(fn func() (ExitStatus, error)) {
			st, err := fn()
			if err != nil || st.Code != 0 {
				t.Fatalf("%v, %v", st, err)
			}
		}
		measure("baseline: exec.Command(true).Run(), no namespaces", n, func(int) {
			if err := exec.Command("true").Run(); err != nil {
				t.Fatal(err)
			}
		})
		plain := Command{Argv: []string{"true"}, Env: testEnv()}
		boxed := Command{Argv: []string{"true"}, Env: testEnv(), Landlock: rs, Seccomp: progs}
		boxedNet := boxed
		boxedNet.NetNone = true
		viewed := boxed
		viewed.View = true
		outside := outsideDir(t)
		ownBind := viewed
		ownBind.Binds = []Bind{{Source: outside, Target: outside}}
		for _, c := range []struct {
			name string
			cmd  Command
		}{{"", plain}, {" + sandbox", boxed}, {" + sandbox + net none", boxedNet}, {" + sandbox + view", viewed}, {" + sandbox + view of its own (a bind)", ownBind}} {
			measure("Exec true into a live keeper"+c.name, n, func(int) {
				run(func() (ExitStatus, error) { return Exec(ctx, spec.Dir, c.cmd, nil, nil, nil) })
			})
		}
		bins := []struct{ name, path string }{{InitName, InitPath()}}
		if strata := os.Getenv("STRATA_NSEXEC_COSTS_STRATA"); strata != "" && strata != "none" {
			bins = append(bins, struct{ name, path string }{"strata (fallback)", strata})
		}
		for _, bin := range bins {
			old := initOverride
			initOverride = bin.path
			for _, c := range []struct {
				name string
				cmd  Command
			}{{"", plain}, {" + sandbox", boxed}, {" + sandbox + view", viewed}} {
				measure("Run true, "+bin.name+c.name, n, func(int) {
					run(func() (ExitStatus, error) { return Run(ctx, spec, c.cmd, nil, nil, nil) })
				})
			}
			if shm, err := os.MkdirTemp("/dev/shm", "strata-nsexec-cost-"); err == nil {
				s := spec
				s.Upper, s.Work = filepath.Join(shm, "upper"), filepath.Join(shm, "work")
				os.Mkdir(s.Upper, 0o755)
				os.Mkdir(s.Work, 0o755)
				measure("Run true, "+bin.name+", upper+work on tmpfs", n, func(int) {
					run(func() (ExitStatus, error) { return Run(ctx, s, plain, nil, nil, nil) })
				})
				openTree(shm)
				os.RemoveAll(shm)
			}
			base := t.TempDir()
			nk := min(n, 30)
			specs := make([]Spec, 2*nk+2)
			for i := range specs {
				specs[i] = newSpec(t, filepath.Join(base, strconv.Itoa(i)))
			}
			measure("StartKeeper + StopKeeper, "+bin.name, nk, func(i int) {
				s := specs[i+1]
				if _, err := StartKeeper(ctx, s); err != nil {
					t.Fatal(err)
				}
				if err := StopKeeper(ctx, s.Dir); err != nil {
					t.Fatal(err)
				}
			})
			for _, c := range []struct {
				name string
				cmd  Command
			}{{" + sandbox", boxed}, {" + sandbox + view", viewed}} {
				fresh := make([]Spec, nk+1)
				for i := range fresh {
					fresh[i] = newSpec(t, filepath.Join(base, "first"+c.name, strconv.Itoa(i)))
				}
				measure("StartKeeper + first Exec true"+c.name+", "+bin.name, nk, func(i int) {
					s := fresh[i+1]
					if _, err := StartKeeper(ctx, s); err != nil {
						t.Fatal(err)
					}
					run(func() (ExitStatus, error) { return Exec(ctx, s.Dir, c.cmd, nil, nil, nil) })
					t.Cleanup(func() { StopKeeper(ctx, s.Dir) })
				})
			}
			measure("StartKeeper alone, "+bin.name, nk, func(i int) {
				s := specs[nk+2+i]
				if _, err := StartKeeper(ctx, s); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { StopKeeper(ctx, s.Dir) })
			})
			initOverride = old
		}
	})
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// strataBin builds strata (cmd/strata, the fallback binary) for the
// measurement, unless STRATA_NSEXEC_COSTS_STRATA names one ("none": no
// fallback measurement).
func strataBin(t *testing.T) string {
	if p := os.Getenv("STRATA_NSEXEC_COSTS_STRATA"); p != "" {
		return p
	}
	dir, err := os.MkdirTemp("", "strata-nsexec-cost-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	out := filepath.Join(dir, "strata")
	if b, err := exec.Command("go", "build", "-trimpath", "-o", out, "github.com/stratafs/strata/cmd/strata").CombinedOutput(); err != nil {
		t.Logf("no fallback measurement: go build ./cmd/strata: %v: %s", err, b)
		return ""
	}
	return out
}
