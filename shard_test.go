package strata

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseShard(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	for _, tc := range []struct {
		spec   string
		shards int
		env    func(string) string
		k, n   int
		bad    string
	}{
		{spec: "0/2", env: env(), k: 0, n: 2},
		{spec: "3/4", env: env(), k: 3, n: 4},
		{spec: "4/4", env: env(), bad: "0 <= K < N"},
		{spec: "x", env: env(), bad: "K/N"},
		{spec: "1/2", shards: 2, env: env(), bad: "--shards goes with --shard auto"},
		{spec: "auto", shards: 5, env: env("JOB_COMPLETION_INDEX", "3"), k: 3, n: 5},
		{spec: "auto", env: env("JOB_COMPLETION_INDEX", "3"), bad: "--shards N"},
		{spec: "auto", env: env("SLURM_ARRAY_TASK_ID", "1", "SLURM_ARRAY_TASK_COUNT", "2"), k: 1, n: 2},
		{spec: "auto", env: env("SLURM_ARRAY_TASK_ID", "2", "SLURM_ARRAY_TASK_COUNT", "2"), bad: "0 <= K < N"},
		{spec: "auto", env: env(), bad: "neither"},
	} {
		k, n, err := ParseShard(tc.spec, tc.shards, tc.env)
		if tc.bad != "" {
			if err == nil || !strings.Contains(err.Error(), tc.bad) {
				t.Errorf("%s (shards %d): %v, want an error with %q", tc.spec, tc.shards, err, tc.bad)
			}
			continue
		}
		if err != nil || k != tc.k || n != tc.n {
			t.Errorf("%s (shards %d): %d/%d %v, want %d/%d", tc.spec, tc.shards, k, n, err, tc.k, tc.n)
		}
	}
}

func TestBatchMerge(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	jobs := write("jobs.jsonl", `{"id":"a","cmd":"true"}`+"\n"+`{"id":"b","cmd":"true"}`+"\n"+`{"id":"c","cmd":"true"}`+"\n")
	s0 := write("s0.jsonl", `{"id":"c","index":3,"shard":"0/2"}`+"\n"+`{"id":"a","index":1,"shard":"0/2"}`+"\n")
	s1 := write("s1.jsonl", `{"id":"b","index":2,"shard":"1/2"}`+"\n")
	var out bytes.Buffer
	rep, err := BatchMerge([]string{s0, s1}, jobs, &out)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Results != 3 || rep.Shards["0/2"] != 2 || rep.Shards["1/2"] != 1 {
		t.Errorf("report %+v", rep)
	}
	if got := out.String(); !strings.HasPrefix(got, `{"id":"a"`) || !strings.Contains(got, "\n"+`{"id":"b"`) || !strings.HasSuffix(got, `"shard":"0/2"}`+"\n") {
		t.Errorf("merged, not in job order:\n%s", got)
	}
	// s0 twice: duplicates; s1 alone: missing a and c.
	if rep, _ = BatchMerge([]string{s0, s1, s0}, jobs, &bytes.Buffer{}); rep.OK() || strings.Join(rep.Duplicate, ",") != "a,c" {
		t.Errorf("duplicates: %+v", rep)
	}
	if rep, _ = BatchMerge([]string{s1}, jobs, &bytes.Buffer{}); rep.OK() || strings.Join(rep.Missing, ",") != "a,c" {
		t.Errorf("missing: %+v", rep)
	}
	if rep, _ = BatchMerge([]string{s1}, "", &bytes.Buffer{}); rep.OK() || strings.Join(rep.Missing, ",") != "line 1" {
		t.Errorf("missing without the jobs file: %+v", rep)
	}
	bad := write("bad.jsonl", "not json\n")
	if _, err := BatchMerge([]string{bad}, jobs, &bytes.Buffer{}); err == nil {
		t.Error("a line that is not a result: no error")
	}
}
