//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCrash kills strata with SIGKILL at random instants during import,
// commit, promote and gc, and after every kill checks the store: fsck is
// clean (so every branch points at a complete commit), every commit that
// strata acknowledged is still there, and a workspace whose commit was
// interrupted still has its changes. STRATA_CRASH_KILLS sets how many kills
// (make test: a short run; make crash: 500).
func TestCrash(t *testing.T) {
	kills := 40
	if v, err := strconv.Atoi(os.Getenv("STRATA_CRASH_KILLS")); err == nil && v > 0 {
		kills = v
	}
	seed := time.Now().UnixNano()
	if v, err := strconv.ParseInt(os.Getenv("STRATA_CRASH_SEED"), 10, 64); err == nil {
		seed = v
	}
	t.Logf("seed %d (STRATA_CRASH_SEED reproduces the sequence of operations)", seed)
	rng := rand.New(rand.NewSource(seed))

	h := newHome(t)
	src := filepath.Join(t.TempDir(), "src")
	writeTree(t, src, 42)
	h.ok("import", src)
	wss := []string{"w0", "w1"}
	for _, w := range wss {
		h.ok("ws", "create", w)
	}
	defer func() {
		for _, w := range wss {
			h.run("ws", "rm", "--force", w)
		}
	}()

	acked := map[string]string{}     // commit id -> what made it
	pending := map[string][]string{} // workspace -> marker files written, not known committed
	// How long each operation takes when not killed: kills land in
	// [0, 1.5 x that), so most interrupt it somewhere inside.
	dur := map[string]time.Duration{"import": 100 * time.Millisecond, "commit": 30 * time.Millisecond, "promote": 30 * time.Millisecond, "gc": 50 * time.Millisecond}
	killed, completed := 0, 0
	for i := 0; killed < kills; i++ {
		var op string
		var args []string
		ws := wss[rng.Intn(len(wss))]
		switch rng.Intn(4) {
		case 0:
			op = "import"
			// Change a few files so that each import writes something.
			for j := 0; j < 3; j++ {
				p := filepath.Join(src, fmt.Sprintf("d%d", rng.Intn(5)), fmt.Sprintf("f%d.txt", rng.Intn(40)))
				os.WriteFile(p, []byte(fmt.Sprintf("round %d %d\n", i, rng.Int())), 0o644)
			}
			if rng.Intn(3) == 0 {
				big := make([]byte, 1<<20+rng.Intn(1<<20))
				rng.Read(big)
				os.WriteFile(filepath.Join(src, "big.bin"), big, 0o644)
			}
			args = []string{"--json", "import", src}
		case 1:
			op = "commit"
			marker := fmt.Sprintf("marker-%d", i)
			h.ok("exec", ws, "--", "sh", "-c", fmt.Sprintf("echo %d > %s && head -c %d /dev/urandom > blob-%d", i, marker, 1000+rng.Intn(400000), i%3))
			pending[ws] = append(pending[ws], marker)
			args = []string{"--json", "commit", ws, "-m", marker}
		case 2:
			op = "promote"
			args = []string{"--json", "promote", ws}
		case 3:
			op = "gc"
			args = []string{"--json", "gc", "--prune", "0s"}
		}
		delay := time.Duration(rng.Int63n(int64(dur[op]*3/2) + 1))
		code, out, took, wasKilled := runKilled(t, h, delay, args...)
		if !wasKilled {
			dur[op] = (dur[op] + took) / 2
			switch {
			case code == 0:
				completed++
				var res struct {
					Commit string `json:"commit"`
					Clean  bool   `json:"clean"`
				}
				if json.Unmarshal([]byte(out), &res) == nil && res.Commit != "" {
					acked[res.Commit] = op + " " + strings.Join(args, " ")
				}
				if op == "commit" {
					pending[ws] = nil
				}
			case code == 3 && op == "promote":
				// A conflict (two workspaces promoting overlapping files)
				// is an answer, not a failure.
			default:
				t.Fatalf("%s (not killed) exited %d:\n%s", strings.Join(args, " "), code, out)
			}
		} else {
			killed++
		}
		if r := h.run("fsck"); r.code != 0 {
			t.Fatalf("after %s (killed=%v after %s): fsck: %s", op, wasKilled, delay, r)
		}
		if i%10 == 9 || killed == kills {
			for id, what := range acked {
				if r := h.run("show", id); r.code != 0 {
					t.Fatalf("acknowledged commit %s (%s) is gone: %s", id, what, r)
				}
			}
			// Every marker a workspace wrote is still in its merged view,
			// committed or not.
			for ws, ms := range pending {
				for _, m := range ms {
					if r := h.run("exec", ws, "--", "test", "-f", m); r.code != 0 {
						t.Fatalf("workspace %s lost %s after an interrupted commit: %s", ws, m, r)
					}
				}
			}
		}
	}
	t.Logf("%d kills, %d operations completed, %d acknowledged commits verified", killed, completed, len(acked))
	h.ok("gc", "--prune", "0s")
	h.fsckClean()
}

// runKilled runs strata and sends it SIGKILL after delay unless it ended
// first. It reports the exit code, stdout, how long it ran and whether the
// kill landed.
func runKilled(t testing.TB, h *home, delay time.Duration, args ...string) (int, string, time.Duration, bool) {
	t.Helper()
	cmd := exec.Command(bin(t), append([]string{"--home", h.dir}, args...)...)
	var out strings.Builder
	cmd.Stdout = &out
	cmd.Stderr = &out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	killedIt := false
	select {
	case err = <-done:
	case <-time.After(delay):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		err = <-done
		killedIt = true
	}
	took := time.Since(start)
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
		if st, ok := ee.Sys().(syscall.WaitStatus); ok && st.Signaled() && st.Signal() == syscall.SIGKILL {
			return -1, out.String(), took, true
		}
	}
	if killedIt && code == 0 && err == nil {
		killedIt = false // it finished just before the kill
	}
	return code, out.String(), took, killedIt
}
