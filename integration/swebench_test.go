//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stratafs/strata/internal/testutil"
)

// swebenchSrc is the copy of examples/swebench, python/src and
// scripts/images.sh that scripts/integration.sh makes for the test user.
func swebenchSrc(t *testing.T) string {
	t.Helper()
	src := os.Getenv("STRATA_SRC")
	if src == "" {
		testutil.Skip(t, "STRATA_SRC is not set: run the integration tests through scripts/integration.sh")
	}
	return src
}

// sweReport is the SWE-bench summary report (REPORT_DIR/MODEL.RUN_ID.json).
type sweReport struct {
	Total      int      `json:"total_instances"`
	Submitted  int      `json:"submitted_instances"`
	Completed  int      `json:"completed_instances"`
	Resolved   []string `json:"resolved_ids"`
	Unresolved []string `json:"unresolved_ids"`
	Empty      []string `json:"empty_patch_ids"`
	Errors     []string `json:"error_ids"`
	Schema     int      `json:"schema_version"`
}

// TestSWEBench runs examples/swebench end to end: the SWE-bench-shaped
// test images pushed to Debian's docker-registry on 127.0.0.1
// (scripts/images.sh push), pulled into a store (`strata pull`), and the
// harness over the dataset's rows — each instance a `strata batch` job in
// the instance's image, and again as the project at its base commit on
// the environment image (--root --at /testbed) — graded into SWE-bench's
// reports: the gold patch resolves both instances, an empty patch does
// not (and is not run unless asked), a patch that breaks the build does
// not, a patch that does not apply is an error.
func TestSWEBench(t *testing.T) {
	parallel(t)
	imgs := testImages(t)
	src := swebenchSrc(t)
	py := testutil.LookPath(t, "python3")
	reg := startRegistry(t)
	push := exec.Command("bash", filepath.Join(src, "scripts", "images.sh"), "push", reg.addr, "--tls-verify=false")
	push.Env = append(os.Environ(), "STRATA_CACHE="+filepath.Dir(imgs))
	if out, err := push.CombinedOutput(); err != nil {
		t.Fatalf("images.sh push: %v\n%s", err, out)
	}
	dataset := filepath.Join(imgs, "swebench", "dataset.json")
	var rows []struct {
		ID    string `json:"instance_id"`
		Image string `json:"image"`
		Env   string `json:"env_image"`
	}
	b, err := os.ReadFile(dataset)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rows); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range rows {
		ids = append(ids, r.ID)
	}
	slices.Sort(ids)

	h := newHome(t)
	// Pulled first, onto the branches the harness names them by; its
	// import of each is then a manifest check.
	pulled := map[string]bool{}
	for _, r := range rows {
		for img, branch := range map[string]string{r.Image: "swebench/image/" + r.Image, r.Env: "swebench/env/" + r.Env} {
			if !pulled[img] {
				h.ok("pull", "docker://"+reg.addr+"/strata-test/"+img+":latest", "-b", branch, "--tls-verify=false")
				pulled[img] = true
			}
		}
	}
	work := t.TempDir()
	harness := func(mode, preds, runID string, extra ...string) sweReport {
		t.Helper()
		args := []string{filepath.Join(src, "examples", "swebench", "harness.py"),
			"--dataset", dataset, "--predictions", preds, "--run-id", runID, "--mode", mode,
			"--image-source", "docker://" + reg.addr + "/strata-test/{image}:latest", "--tls-verify", "false",
			"--home", h.dir, "--strata", bin(t), "-j", "2",
			"--log-dir", filepath.Join(work, "logs"), "--report-dir", filepath.Join(work, "reports")}
		if mode == "env" {
			args = append(args, "--repos", filepath.Join(imgs, "swebench"))
		}
		cmd := exec.Command(py, append(args, extra...)...)
		cmd.Dir = work
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("harness %s %s: %v\n%s", mode, runID, err, out)
		}
		model := "gold"
		if preds != "gold" {
			var ps []struct {
				Model string `json:"model_name_or_path"`
			}
			pb, err := os.ReadFile(preds)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(pb, &ps); err != nil {
				t.Fatal(err)
			}
			model = ps[0].Model
		}
		var rep sweReport
		rb, err := os.ReadFile(filepath.Join(work, "reports", model+"."+runID+".json"))
		if err != nil {
			t.Fatalf("harness %s %s wrote no report: %v\n%s", mode, runID, err, out)
		}
		if err := json.Unmarshal(rb, &rep); err != nil {
			t.Fatal(err)
		}
		for _, l := range [][]string{rep.Resolved, rep.Unresolved, rep.Empty, rep.Errors} {
			slices.Sort(l)
		}
		if rep.Schema != 2 || rep.Total != len(rows) {
			t.Errorf("harness %s %s: report %+v", mode, runID, rep)
		}
		return rep
	}
	pred := func(name string) string { return filepath.Join(imgs, "swebench", "predictions", name+".json") }
	for _, mode := range []string{"image", "env"} {
		t.Run(mode, func(t *testing.T) {
			if rep := harness(mode, "gold", mode+"-gold"); !slices.Equal(rep.Resolved, ids) || len(rep.Unresolved)+len(rep.Errors) != 0 {
				t.Errorf("gold: %+v; want %v resolved", rep, ids)
			}
			if rep := harness(mode, pred("empty"), mode+"-empty"); !slices.Equal(rep.Empty, ids) || rep.Completed != 0 {
				t.Errorf("empty: %+v; want every instance an empty patch, none run", rep)
			}
			if rep := harness(mode, pred("empty"), mode+"-empty-run", "--run-empty-patches"); !slices.Equal(rep.Unresolved, ids) || len(rep.Resolved) != 0 {
				t.Errorf("empty, run: %+v; want %v unresolved", rep, ids)
			}
			if rep := harness(mode, pred("broken"), mode+"-broken"); !slices.Equal(rep.Unresolved, ids) || len(rep.Resolved) != 0 {
				t.Errorf("broken: %+v; want %v unresolved", rep, ids)
			}
			if rep := harness(mode, pred("bad"), mode+"-bad"); !slices.Equal(rep.Errors, ids) || rep.Completed != 0 {
				t.Errorf("bad: %+v; want %v errors", rep, ids)
			}
		})
	}

	// SWE-bench's per-instance files, in its layout and shape.
	for _, id := range ids {
		d := filepath.Join(work, "logs", "run_evaluation", "image-gold", "gold", id)
		for _, f := range []string{"patch.diff", "eval.sh", "run_instance.log", "test_output.txt", "report.json"} {
			if _, err := os.Stat(filepath.Join(d, f)); err != nil {
				t.Errorf("%s: %v", f, err)
			}
		}
		var rep map[string]struct {
			PatchIsNone    bool            `json:"patch_is_None"`
			PatchExists    bool            `json:"patch_exists"`
			PatchApplied   bool            `json:"patch_successfully_applied"`
			Resolved       bool            `json:"resolved"`
			TestsStatusRaw json.RawMessage `json:"tests_status"`
		}
		rb, err := os.ReadFile(filepath.Join(d, "report.json"))
		if err != nil {
			continue
		}
		if err := json.Unmarshal(rb, &rep); err != nil {
			t.Fatal(err)
		}
		r, ok := rep[id]
		var st map[string]struct {
			Success []string `json:"success"`
			Failure []string `json:"failure"`
		}
		_ = json.Unmarshal(r.TestsStatusRaw, &st)
		if !ok || r.PatchIsNone || !r.PatchExists || !r.PatchApplied || !r.Resolved || len(st["FAIL_TO_PASS"].Success) != 1 || len(st["PASS_TO_PASS"].Success) == 0 || len(st) != 4 {
			t.Errorf("%s report.json: %s", id, rb)
		}
		out, _ := os.ReadFile(filepath.Join(d, "test_output.txt"))
		if !strings.Contains(string(out), ">>>>> Start Test Output") || !strings.Contains(string(out), ">>>>> End Test Output") {
			t.Errorf("%s test_output.txt has no SWE-bench markers:\n%s", id, out)
		}
	}
	// The batch ran in the images: the store holds each base layer once.
	var list []string
	for _, l := range strings.Split(strings.TrimSpace(h.ok("branch", "list").stdout), "\n") {
		list = append(list, strings.Fields(l)[0])
	}
	for _, want := range []string{"swebench/env/sweb.env.textkit", fmt.Sprintf("swebench/image/%s", rows[0].Image)} {
		if !slices.Contains(list, want) {
			t.Errorf("branch %s missing: %v", want, list)
		}
	}
	h.fsckClean()
}
