//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stratafs/strata/internal/testutil"
	"github.com/stratafs/strata/nsexec"
)

// needSubIDs skips (fails under STRATA_TEST_NO_SKIP) a rootless test when
// the user has no subordinate ids; root needs none.
func needSubIDs(t *testing.T) {
	t.Helper()
	if nsexec.RealRoot() {
		return
	}
	if _, err := nsexec.SubIDMaps(); err != nil {
		testutil.Skip(t, err.Error())
	}
}

// TestSubIDs: a --subids workspace maps the user's subordinate ids.
// Commands chown files to them and become them; diff and commit read what
// they own even where the user could not (a 0600 file in a 0700
// directory of another id), while a process of another id runs and is
// held still; ws rm removes all of it; run --subids commits such a change,
// and a killed one is swept by gc.
func TestSubIDs(t *testing.T) {
	needSubIDs(t)
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "proj")
	baseTree(t, src)
	h.ok("import", src)
	h.ok("ws", "create", "--subids", "s")
	defer h.run("ws", "rm", "--force", "s")

	r := h.ok("exec", "s", "--", "sh", "-ec", `
		mkdir secret
		echo classified > secret/f
		chmod 600 secret/f
		chown -R 2000:2000 secret
		chmod 700 secret
		mkdir u3
		chown 3000:3000 u3
		setpriv --reuid 3000 --regid 3000 --clear-groups sh -c 'echo by3000 > u3/own; id -u'`)
	if got := strings.TrimSpace(r.stdout); got != "3000" {
		t.Errorf("setpriv --reuid 3000 inside: id -u = %q, want 3000\n%s", got, r)
	}
	if got := strings.TrimSpace(h.ok("exec", "s", "--", "stat", "-c", "%u:%g", "secret/f", "u3/own").stdout); got != "2000:2000\n3000:3000" {
		t.Errorf("owners inside = %q, want 2000:2000 and 3000:3000", got)
	}
	// The user stays itself: the project is still its own.
	if got := strings.TrimSpace(h.ok("exec", "s", "--", "sh", "-c", "id -u; stat -c %u src/app.txt").stdout); got != strconv.Itoa(os.Getuid())+"\n"+strconv.Itoa(os.Getuid()) {
		t.Errorf("id -u and the owner of src/app.txt inside = %q, want the caller's uid twice", got)
	}
	// Commands hold the id capabilities and no more: no mounting, even
	// as uid 0 inside. --sandbox none, so that the capabilities alone
	// refuse it (seccomp would too: TestSandboxEscapes). Real root is
	// root: its workspaces need no user namespace, and it may mount.
	if !nsexec.RealRoot() {
		r := h.run("exec", "s", "--sandbox", "none", "--", "setpriv", "--reuid", "0", "--regid", "0", "--clear-groups", "mount", "-t", "tmpfs", "none", "/mnt")
		if msg := strings.ToLower(r.stderr); r.code == 0 || !strings.Contains(msg, "permission denied") && !strings.Contains(msg, "operation not permitted") {
			t.Errorf("uid 0 inside a --subids workspace: mount did not fail with EPERM:\n%s", r)
		}
	}

	if d := h.ok("diff", "s").stdout; !strings.Contains(d, "+classified") {
		t.Errorf("diff of the workspace misses secret/f:\n%s", d)
	}
	// A process of another id is running while the commit reads.
	h.ok("exec", "s", "--", "sh", "-c", "setpriv --reuid 2000 --regid 2000 --clear-groups sleep 1000 >/dev/null 2>&1 &")
	h.ok("commit", "s", "-m", "subids")
	out := filepath.Join(t.TempDir(), "out")
	h.ok("export", "ws/s", out)
	for f, want := range map[string]string{"secret/f": "classified\n", "u3/own": "by3000\n"} {
		if b, err := os.ReadFile(filepath.Join(out, f)); err != nil || string(b) != want {
			t.Errorf("committed %s = %q, %v; want %q", f, b, err, want)
		}
	}
	if got := strings.TrimSpace(h.ok("exec", "s", "--", "sh", "-c", "ps -o user= -C sleep | wc -l").stdout); got != "1" {
		t.Errorf("the process of uid 2000 did not survive the commit (%s sleeping)", got)
	}

	// shell on a terminal, its keeper stopped: strata starts over in the
	// subordinate-id namespace with the terminal untouched.
	h.ok("ws", "stop", "s")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sc := exec.CommandContext(ctx, "script", "-qec", bin(t)+" --home "+h.dir+" shell s", "/dev/null")
	sc.Stdin = strings.NewReader("stat -c %u secret/f; exit 3\n")
	got, err := sc.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 || !strings.Contains(string(got), "2000") {
		t.Errorf("shell of a stopped --subids workspace on a terminal: %v\n%s", err, got)
	}

	h.ok("ws", "rm", "--force", "s")
	if _, err := os.Lstat(filepath.Join(h.dir, "workspaces", "s")); !os.IsNotExist(err) {
		t.Errorf("ws rm left the workspace directory (%v)", err)
	}

	// run --subids: the change of other ids is committed.
	h.ok("run", "--subids", "--commit", "main", "--", "sh", "-ec", "mkdir r; echo run > r/f; chmod 600 r/f; chown -R 2500:2500 r; chmod 700 r")
	out2 := filepath.Join(t.TempDir(), "out2")
	h.ok("export", "main", out2)
	if b, err := os.ReadFile(filepath.Join(out2, "r/f")); err != nil || string(b) != "run\n" {
		t.Errorf("run --subids --commit: r/f = %q, %v", b, err)
	}

	// batch --subids: every job maps them.
	jobs := filepath.Join(t.TempDir(), "jobs.jsonl")
	job := `{"id":"b1","cmd":"mkdir b && echo batch > b/f && chmod 600 b/f && chown -R 2600:2600 b && chmod 700 b","commit":"main"}`
	if err := os.WriteFile(jobs, []byte(job+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := h.ok("batch", "--subids", jobs); !strings.Contains(r.stdout, `"exit_code":0`) {
		t.Errorf("batch --subids:\n%s", r)
	}
	out3 := filepath.Join(t.TempDir(), "out3")
	h.ok("export", "main", out3)
	if b, err := os.ReadFile(filepath.Join(out3, "b/f")); err != nil || string(b) != "batch\n" {
		t.Errorf("batch --subids with commit: b/f = %q, %v", b, err)
	}

	// A run killed with such files in its upper: gc removes them.
	killRun(t, h, "strata-it-subids-"+strconv.Itoa(os.Getpid()), []string{"--subids", "--tmpfs=false"},
		"mkdir k; echo x > k/f; chmod 600 k/f; chown -R 2000:2000 k; chmod 700 k; ")
	left := runDirs(t, h)
	// The run's own process dies a moment after its namespace (it is
	// still exiting when the command is gone); gc leaves live runs alone.
	for _, d := range left {
		waitExited(t, d)
	}
	h.ok("gc")
	for _, d := range left {
		if _, err := os.Lstat(d); !os.IsNotExist(err) {
			t.Errorf("gc left the killed --subids run %s (%v)", d, err)
		}
	}
	h.fsckClean()
}

// TestSubIDsMissing: without newuidmap a rootless --subids is refused
// up front, naming what is missing; root needs none.
func TestSubIDsMissing(t *testing.T) {
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "proj")
	baseTree(t, src)
	h.ok("import", src)
	h.env = []string{"PATH=/nonexistent"}
	if nsexec.RealRoot() {
		h.ok("ws", "create", "--subids", "x")
		return
	}
	r := h.fails(1, "ws", "create", "--subids", "x")
	if !strings.Contains(r.stderr, "newuidmap") || !strings.Contains(r.stderr, "uidmap") {
		t.Errorf("ws create --subids without newuidmap: want a message naming newuidmap and its package:\n%s", r)
	}
	if r := h.fails(1, "run", "--subids", "--", "/bin/true"); !strings.Contains(r.stderr, "newuidmap") {
		t.Errorf("run --subids without newuidmap:\n%s", r)
	}
}

// waitExited waits until the process that owns the run directory d
// (run.json) has exited.
func waitExited(t *testing.T, d string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d, "run.json"))
	if err != nil {
		return
	}
	var st struct {
		PID int `json:"pid"`
	}
	if err := json.Unmarshal(b, &st); err != nil || st.PID <= 0 {
		t.Fatalf("%s/run.json: %q: %v", d, b, err)
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(st.PID) + "/stat")
		if err != nil {
			return
		}
		if i := strings.LastIndexByte(string(b), ')'); i > 0 && len(b) > i+2 && (b[i+2] == 'Z' || b[i+2] == 'X') {
			return
		}
	}
	t.Fatalf("the killed run's process %d is still running", st.PID)
}
