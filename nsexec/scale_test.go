package nsexec

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stratafs/strata/internal/testutil"
)

// memKB reads a "Name:   N kB" field of a /proc file.
func memKB(path, field string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return n
		}
	}
	return 0
}

// TestManyKeepers: 200 keepers alive at once (a harness's worth of
// workspaces), each serving a command; reports their memory; stops them
// all. Skipped with -short.
func TestManyKeepers(t *testing.T) {
	testutil.SkipShort(t)
	rootlessOnly(t, func(t *testing.T) {
		n := 200
		if s := os.Getenv("STRATA_NSEXEC_KEEPERS"); s != "" {
			n, _ = strconv.Atoi(s)
		}
		base := t.TempDir()
		specs := make([]Spec, n)
		for i := range specs {
			specs[i] = newSpec(t, filepath.Join(base, strconv.Itoa(i)))
		}
		t.Cleanup(func() {
			var wg sync.WaitGroup
			for _, s := range specs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					StopKeeper(context.Background(), s.Dir)
				}()
			}
			wg.Wait()
		})
		start := time.Now()
		keepers := make([]*Keeper, n)
		var mu sync.Mutex
		var firstErr error
		var wg sync.WaitGroup
		sem := make(chan struct{}, parallelStarts())
		for i := range specs {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				t0 := time.Now()
				k, err := StartKeeper(context.Background(), specs[i])
				if os.Getenv("STRATA_NSEXEC_TRACE") != "" {
					t.Logf("keeper %d: %v", i, time.Since(t0))
				}
				mu.Lock()
				defer mu.Unlock()
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("keeper %d: %w", i, err)
				}
				keepers[i] = k
			}()
		}
		wg.Wait()
		if firstErr != nil {
			t.Fatal(firstErr)
		}
		started := time.Since(start)
		for i, s := range specs {
			if r := execIn(t, s, Command{Argv: []string{"cat", "top"}}); r.stdout != "top\n" {
				t.Fatalf("keeper %d: %v %q %q", i, r.ExitStatus, r.stdout, r.stderr)
			}
		}
		time.Sleep(200 * time.Millisecond) // idle
		var rss, pss, uss []int
		for _, k := range keepers {
			p := "/proc/" + strconv.Itoa(k.PID)
			rss = append(rss, memKB(p+"/status", "VmRSS"))
			pss = append(pss, memKB(p+"/smaps_rollup", "Pss"))
			uss = append(uss, memKB(p+"/smaps_rollup", "Private_Clean")+memKB(p+"/smaps_rollup", "Private_Dirty"))
		}
		sum := func(v []int) int {
			s := 0
			for _, x := range v {
				s += x
			}
			return s
		}
		slices.Sort(rss)
		slices.Sort(uss)
		t.Logf("%d keepers started in %v (%v each, %d at a time); after one command each, idle: RSS median %d kB (max %d), total %.1f MB; private (USS) median %d kB, total %.1f MB; PSS total %.1f MB",
			n, started.Round(time.Millisecond), (started / time.Duration(n)).Round(10*time.Microsecond), parallelStarts(),
			rss[n/2], rss[n-1], float64(sum(rss))/1024, uss[n/2], float64(sum(uss))/1024, float64(sum(pss))/1024)
		stopStart := time.Now()
		for _, s := range specs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := StopKeeper(context.Background(), s.Dir); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		t.Logf("stopped %d keepers in %v", n, time.Since(stopStart).Round(time.Millisecond))
		for i, k := range keepers {
			if alive(k.PID, 0) || func() bool { _, err := FindKeeper(specs[i].Dir); return err == nil }() {
				t.Errorf("keeper %d (pid %d) still running", i, k.PID)
			}
		}
	})
}

func parallelStarts() int {
	if n, err := strconv.Atoi(os.Getenv("STRATA_NSEXEC_PARALLEL")); err == nil && n > 0 {
		return n
	}
	return 4
}
