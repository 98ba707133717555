package strata

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stratafs/strata/internal/glob"
	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
)

func TestValidateWorkspaceName(t *testing.T) {
	for name, ok := range map[string]bool{
		"a": true, "agent-1": true, "w.2_x": true, "A9": true,
		"": false, "-x": false, ".x": false, "a/b": false, "a b": false, "..": false, "a..b": false,
		"x.lock": false, "x\ny": false, strings.Repeat("x", 64): true, strings.Repeat("x", 65): false,
	} {
		err := ValidateWorkspaceName(name)
		if (err == nil) != ok {
			t.Errorf("ValidateWorkspaceName(%q) = %v; want ok=%v", name, err, ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidName) {
			t.Errorf("ValidateWorkspaceName(%q): %v is not ErrInvalidName", name, err)
		}
	}
}

func TestGlobMatch(t *testing.T) {
	for _, tc := range []struct {
		glob, path string
		want       bool
	}{
		{".github/workflows/**", ".github/workflows/ci.yml", true},
		{".github/workflows/**", ".github/workflows/a/b.yml", true},
		{".github/workflows/**", ".github/other.yml", false},
		{".git/hooks/**", ".git/hooks/pre-commit", true},
		{"*.lock", "deep/dir/yarn.lock", true},
		{"docs/*", "docs/readme", true},
		{"docs/*", "docs/a/readme", false},
		{"**/secret", "a/b/secret", true},
		{"**/secret", "secret", true},
		{"src/**/*.go", "src/a/b/x.go", true},
		{"src/**/*.go", "src/x.go", true},
		{"src/**/*.go", "lib/x.go", false},
	} {
		if got := glob.Match(tc.glob, tc.path); got != tc.want {
			t.Errorf("globMatch(%q, %q) = %v; want %v", tc.glob, tc.path, got, tc.want)
		}
	}
}

func TestPolicyCheck(t *testing.T) {
	file := func(mode uint32) *store.TreeEntry { return &store.TreeEntry{Type: store.TypeFile, Mode: mode} }
	link := func(target string) *store.TreeEntry { return &store.TreeEntry{Type: store.TypeSymlink, Target: target} }
	diff := []snapshot.Change{
		{Path: "ok.txt", Op: snapshot.Added, New: file(0o644)},
		{Path: "bin/tool", Op: snapshot.Added, New: file(0o4755)},
		{Path: "kept-suid", Op: snapshot.Modified, Old: file(0o4755), New: file(0o4755)},
		{Path: "a/rel", Op: snapshot.Added, New: link("../b")},
		{Path: "a/up", Op: snapshot.Added, New: link("../../etc")},
		{Path: "abs", Op: snapshot.Added, New: link("/etc/passwd")},
		{Path: ".github/workflows/ci.yml", Op: snapshot.Modified, Old: file(0o644), New: file(0o644)},
		{Path: "gone", Op: snapshot.Deleted, Old: file(0o644)},
	}
	var got []string
	for _, v := range policyCheck(diff, []string{".github/workflows/**", "gone"}) {
		got = append(got, v.Path)
	}
	want := []string{"bin/tool", "a/up", "abs", ".github/workflows/ci.yml", "gone"}
	if !slices.Equal(got, want) {
		t.Errorf("policyCheck flagged %q; want %q", got, want)
	}
}

func TestGitSource(t *testing.T) {
	for src, want := range map[string]string{
		"/home/u/proj":                 "/home/u/proj",
		"git:abc123:/home/u/repo":      "/home/u/repo",
		"git:abc123:relative":          "git:abc123:relative",
		"git::/x":                      "git::/x",
		"":                             "",
		"git:0123:/path/with:colon/ok": "/path/with:colon/ok",
	} {
		if got := sourceDir(src); got != want {
			t.Errorf("sourceDir(%q) = %q; want %q", src, got, want)
		}
	}
}

func TestPatchPaths(t *testing.T) {
	for _, tc := range []struct {
		in    string
		strip bool
		want  string
	}{
		{"src/a.txt", false, "src/a.txt"},
		{"a/src/a.txt", true, "src/a.txt"},
		{"./x", false, "x"},
		{"/dev/null", true, ""},
	} {
		if got := patchPath(tc.in, tc.strip); got != tc.want {
			t.Errorf("patchPath(%q, %v) = %q; want %q", tc.in, tc.strip, got, tc.want)
		}
	}
	for p, ok := range map[string]bool{"src/a": true, "../x": false, "/etc/passwd": false, "a/../../b": false, ".git/config": false, "x/.GIT/y": false, "a//b": false} {
		if cleanRel(p) != ok {
			t.Errorf("cleanRel(%q) = %v; want %v", p, !ok, ok)
		}
	}
}

func TestBatchFiles(t *testing.T) {
	dir := t.TempDir()
	jobs := filepath.Join(dir, "jobs.jsonl")
	os.WriteFile(jobs, []byte(`{"id": "a", "cmd": "true"}
# a comment

{"cmd": ["sh", "-c", "exit 1"], "timeout": 5, "env": {"K": "V"}}
`), 0o644)
	js, err := readJobs(jobs)
	if err != nil || len(js) != 2 || js[0].ID != "a" || js[1].ID != "line-4" {
		t.Fatalf("readJobs = %+v, %v", js, err)
	}
	ro, err := jobOptions(jobs, js[1], BatchOptions{})
	if err != nil || len(ro.Argv) != 3 || ro.Timeout.Seconds() != 5 || ro.Env[0] != "K=V" {
		t.Errorf("jobOptions = %+v, %v", ro, err)
	}
	for _, bad := range []string{`{"id": "x"}`, `{"cmd": 3}`, `{"cmd": "x", "bogus": 1}`, `{"cmd": "x", "timeout": "soon"}`, `{"id":"d","cmd":"x"}` + "\n" + `{"id":"d","cmd":"y"}`} {
		os.WriteFile(jobs, []byte(bad+"\n"), 0o644)
		js, err := readJobs(jobs)
		if err == nil {
			_, err = jobOptions(jobs, js[0], BatchOptions{})
		}
		if err == nil {
			t.Errorf("batch line %q accepted", bad)
		}
	}
	// A results file cut short by a crash: the partial line is dropped.
	out := filepath.Join(dir, "out.jsonl")
	os.WriteFile(out, []byte(`{"id":"a","exit_code":0}`+"\n"+`{"id":"b","exi`), 0o644)
	done, err := finishedJobs(out)
	if err != nil || !done["a"] || done["b"] {
		t.Errorf("finishedJobs = %v, %v", done, err)
	}
	if b, _ := os.ReadFile(out); !strings.HasSuffix(string(b), "}\n") {
		t.Errorf("partial line left in %q", b)
	}
	if safeName("..") == ".." || strings.Contains(safeName("a/b"), "/") {
		t.Errorf("safeName lets a path through")
	}
}

// TestRemoveLeftoverWorkspace: the directory a create killed before it
// registered the workspace blocks a create of that name; ws rm --force
// removes it, and without --force the name stays unknown.
func TestRemoveLeftoverWorkspace(t *testing.T) {
	r, err := Open(filepath.Join(t.TempDir(), "store"), OpenOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	dir := r.layout.Workspace("ghost")
	if err := os.MkdirAll(filepath.Join(dir, "upper"), 0o700); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := r.RemoveWorkspace(ctx, "ghost", true); err == nil {
		t.Fatal("ws rm --force removed a directory changed a moment ago (a create may be finishing)")
	}
	old := leftoverAge
	leftoverAge = 0
	defer func() { leftoverAge = old }()
	if err := r.RemoveWorkspace(ctx, "ghost", false); !isNotFound(err) {
		t.Fatalf("ws rm without --force: %v; want not found", err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("ws rm without --force touched the leftover: %v", err)
	}
	if err := r.RemoveWorkspace(ctx, "ghost", true); err != nil {
		t.Fatalf("ws rm --force of a leftover: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the leftover is still there: %v", err)
	}
}
