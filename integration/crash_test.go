//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCrash kills strata with SIGKILL at random instants during import,
// commit, promote, reset, rebase and gc, and after every kill checks the store:
// fsck is clean (so every branch points at a complete commit), every commit
// that strata acknowledged is still there, a workspace whose commit was
// interrupted still has its changes (uncommitted, or committed when the
// kill came after the commit landed), what a workspace committed stays in
// its view until it is rebased, and a workspace whose reset was
// interrupted has all of its uncommitted changes or none (the reset
// landed), never a part; a rebase, interrupted or not, keeps them all. STRATA_CRASH_KILLS sets how many kills
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
	// workspace -> markers its commits took (acknowledged or killed after
	// they landed): in its view until a rebase, which may drop one that
	// was promoted and then deleted on main (an import).
	committed := map[string][]string{}
	// How long each operation takes when not killed: kills are sent at a
	// uniform instant in [0, 2 x that), so that about half interrupt it
	// somewhere inside and the others let it complete and be acknowledged.
	// The estimate follows the operations: a completed one pulls it to its
	// duration, a killed one (it would have taken longer than the delay)
	// raises it a little, so that an operation slower than its first
	// guess is not killed every time.
	dur := map[string]time.Duration{"import": 100 * time.Millisecond, "commit": 30 * time.Millisecond, "promote": 30 * time.Millisecond, "gc": 50 * time.Millisecond, "reset": 30 * time.Millisecond, "rebase": 40 * time.Millisecond}
	killed, completed, iterations := 0, 0, 0
	// "Acknowledged commits survive" must not shrink to nothing: a share
	// of the operations must complete and be checked. About half the
	// operations complete; of those, reset and gc make no commit and a
	// promote or rebase between diverged workspaces often conflicts, so
	// a sixth of the kills is the floor. On a loaded machine operations
	// slow down and more of them are killed: the run goes on, killing as
	// before, until it has both its kills and its floor of acknowledged
	// commits — bounded, so that a store that never acknowledges fails.
	verify := func() {
		for id, what := range acked {
			if r := h.run("show", id); r.code != 0 {
				t.Fatalf("acknowledged commit %s (%s) is gone: %s", id, what, r)
			}
		}
		// Every marker a workspace wrote is still in its merged view,
		// committed or not.
		for _, w := range wss {
			for _, m := range slices.Concat(pending[w], committed[w]) {
				if r := h.run("exec", w, "--", "test", "-f", m); r.code != 0 {
					crashDiagnose(t, h, w, m)
					t.Fatalf("workspace %s lost %s (uncommitted %q, committed %q): %s", w, m, pending[w], committed[w], r)
				}
			}
		}
	}
	floor := kills / 6
	maxIterations := 10*kills + 20
	for i := 0; (killed < kills || len(acked) < floor) && i < maxIterations; i++ {
		iterations++
		var op, marker string
		var args []string
		ws := wss[rng.Intn(len(wss))]
		switch rng.Intn(6) {
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
			marker = fmt.Sprintf("marker-%d", i)
			h.ok("exec", ws, "--", "sh", "-c", fmt.Sprintf("echo %d > %s && head -c %d /dev/urandom > blob-%d", i, marker, 1000+rng.Intn(400000), i%3))
			pending[ws] = append(pending[ws], marker)
			args = []string{"--json", "commit", ws, "-m", marker}
		case 2:
			op = "promote"
			args = []string{"--json", "promote", ws}
		case 3:
			op = "gc"
			args = []string{"--json", "gc", "--prune", "0s"}
		case 4:
			op = "reset"
			args = []string{"--json", "reset", ws}
			if rng.Intn(2) == 0 {
				// Onto its branch's head, by name (a reset onto
				// another ref would leave acknowledged commits to gc).
				args = append(args, "ws/"+ws)
			}
		case 5:
			op = "rebase"
			args = []string{"--json", "rebase", ws, "main"}
		}
		delay := time.Duration(rng.Int63n(int64(2*dur[op]) + 1))
		r, took, wasKilled := runKilled(t, h, delay, args...)
		// The sequence, shown when the test fails: what ran on which
		// workspace, and whether the kill landed.
		t.Logf("%d: %s (delay %s, took %s, killed %v, exit %d)", i, strings.Join(args, " "), delay, took.Round(time.Microsecond), wasKilled, r.code)
		if op == "rebase" {
			// Landed or not, its committed markers are from here on what
			// the branch it rebased onto says (checked: fsck and the
			// acknowledged commits).
			committed[ws] = nil
		}
		if !wasKilled {
			dur[op] = (dur[op] + took) / 2
			switch {
			case r.code == 0:
				completed++
				// One JSON object on stdout; warnings go to stderr.
				var res struct {
					Commit string           `json:"commit"`
					Base   string           `json:"base"`  // rebase's
					Store  *json.RawMessage `json:"store"` // gc's
				}
				if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
					t.Fatalf("%s (not killed) exited 0 but its output does not decode: %v\n%s", strings.Join(args, " "), err, r)
				}
				if op == "rebase" {
					res.Commit = res.Base
				}
				switch {
				case op == "gc" && res.Store == nil:
					t.Fatalf("%s: no store result:\n%s", strings.Join(args, " "), r)
				case op != "gc" && len(res.Commit) != 64:
					t.Fatalf("%s: no commit id in the result:\n%s", strings.Join(args, " "), r)
				case op != "gc":
					acked[res.Commit] = op + " " + strings.Join(args, " ")
				}
				if op == "commit" {
					committed[ws] = append(committed[ws], pending[ws]...)
				}
				if op == "commit" || op == "reset" {
					pending[ws] = nil
				}
			case r.code == 3 && (op == "promote" || op == "rebase"):
				// A conflict (two workspaces promoting overlapping files)
				// is an answer, not a failure.
			default:
				t.Fatalf("%s (not killed) exited %d:\n%s", strings.Join(args, " "), r.code, r)
			}
		} else {
			killed++
			dur[op] += dur[op] / 8
			if op == "commit" && h.run("show", "ws/"+ws+":"+marker).code == 0 {
				// Killed after its transaction landed: the markers are
				// committed.
				committed[ws] = append(committed[ws], pending[ws]...)
				pending[ws] = nil
			}
			if op == "reset" && len(pending[ws]) > 0 {
				// All of the uncommitted markers, or none: a reset
				// replaces the upper in one transaction. (A marker an
				// interrupted commit did record stays either way: the
				// view then equals the branch's head.)
				present, landed := 0, true
				for _, m := range pending[ws] {
					inView := h.run("exec", ws, "--", "test", "-f", m).code == 0
					inHead := h.run("show", "ws/"+ws+":"+m).code == 0
					if inView {
						present++
					}
					if inView != inHead {
						landed = false
					}
				}
				switch {
				case present == len(pending[ws]):
				case landed:
					pending[ws] = nil
				default:
					t.Fatalf("reset of %s killed after %s: %d of %d uncommitted markers left, and the view is not the branch's head: want all or none", ws, delay, present, len(pending[ws]))
				}
			}
		}
		if r := h.run("fsck"); r.code != 0 {
			t.Fatalf("after %s (killed=%v after %s): fsck: %s", op, wasKilled, delay, r)
		}
		if i%10 == 9 {
			verify()
		}
	}
	verify()
	t.Logf("%d iterations: %d kills, %d operations completed, %d acknowledged commits verified (durations %v)", iterations, killed, completed, len(acked), dur)
	if len(acked) < floor || killed < kills {
		t.Errorf("only %d acknowledged commits in %d iterations (%d kills); want at least %d for the survival check to mean something", len(acked), iterations, killed, floor)
	}
	h.ok("gc", "--prune", "0s")
	h.fsckClean()
}

// runKilled runs strata and sends it SIGKILL after delay unless it ended
// first. It reports the result (stdout and stderr apart), how long it ran
// and whether the kill landed.
func runKilled(t testing.TB, h *home, delay time.Duration, args ...string) (result, time.Duration, bool) {
	t.Helper()
	cmd := exec.Command(bin(t), append([]string{"--home", h.dir}, args...)...)
	var stdout, stderr strings.Builder
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
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
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
		if st, ok := ee.Sys().(syscall.WaitStatus); ok && st.Signaled() && st.Signal() == syscall.SIGKILL {
			r.code = -1
			return r, took, true
		}
	} else if err != nil {
		t.Fatalf("strata %s: %v", strings.Join(args, " "), err)
	}
	if killedIt && r.code == 0 && err == nil {
		killedIt = false // it finished just before the kill
	}
	return r, took, killedIt
}

// crashDiagnose logs what a failed check needs to be understood: the
// workspace's record and view, and where the marker is on disk.
func crashDiagnose(t *testing.T, h *home, ws, marker string) {
	t.Helper()
	t.Logf("ws ls: %s", h.run("--json", "ws", "ls"))
	t.Logf("view: %s", h.run("exec", ws, "--", "sh", "-c", "pwd; ls -la --time-style=full-iso"))
	t.Logf("log: %s", h.run("log", "ws/"+ws))
	// The store's files: the marker wherever it is (uppers, layers), the
	// keeper spec and JSON files, and the workspaces' directories (their
	// uppers, current and left over).
	filepath.WalkDir(h.dir, func(p string, d os.DirEntry, err error) error {
		rel := strings.TrimPrefix(p, h.dir)
		switch {
		case err != nil:
		case d.IsDir() && strings.HasPrefix(rel, "/workspaces/") && strings.Count(rel, "/") <= 3:
			t.Logf("dir: %s", p)
		case d.Name() == marker || d.Name() == "keeper.spec" || strings.HasSuffix(d.Name(), ".json"):
			b, _ := os.ReadFile(p)
			t.Logf("on disk: %s: %q", p, b[:min(len(b), 4000)])
		}
		return nil
	})
}
