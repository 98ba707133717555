//go:build integration

package integration

// CLI tests of README features that no other test drives through the real
// binary: global flags, import's options, show and refs, gc --dry-run,
// doctor, workspace listing and shells. Their companions for exec, changes,
// runs and batches are in cli_run_test.go.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/dustin/go-humanize"
	"golang.org/x/sys/unix"
)

// cliStrata runs the strata binary with exactly args (no --home added) in
// dir, with env as its whole environment.
func cliStrata(t testing.TB, env []string, dir string, args ...string) result {
	t.Helper()
	cmd := exec.Command(bin(t), args...)
	cmd.Dir = dir
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("strata %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// cliEnvWithout is the test's environment without the variables named.
func cliEnvWithout(keys ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		drop := false
		for _, d := range keys {
			drop = drop || k == d
		}
		if !drop {
			out = append(out, kv)
		}
	}
	return out
}

// cliStderr is s without the lines a coverage-instrumented strata (make
// cover) adds to stderr, for exact comparisons.
func cliStderr(s string) string {
	var out []string
	skipBlank := false
	for _, l := range strings.SplitAfter(s, "\n") {
		if strings.HasPrefix(l, "warning: GOCOVERDIR not set") || strings.HasPrefix(l, "error: coverage meta-data emit failed") {
			skipBlank = strings.HasPrefix(l, "error: ")
			continue
		}
		if skipBlank && l == "\n" {
			skipBlank = false
			continue
		}
		skipBlank = false
		out = append(out, l)
	}
	return strings.Join(out, "")
}

// cliLines decodes JSON lines into maps.
func cliLines(t testing.TB, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("JSON line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// cliPaths lists every path under root (relative, slash-separated), with
// "/" appended to directories.
func cliPaths(t testing.TB, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			rel += "/"
		}
		out = append(out, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// cliWrite writes files (path -> content) under root, making directories.
func cliWrite(t testing.TB, root string, files map[string]string) {
	t.Helper()
	for p, body := range files {
		full := filepath.Join(root, p)
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// cliHead is the commit id a ref names (`show --json REF`).
func cliHead(h *home, ref string) string {
	h.t.Helper()
	var s struct {
		Commit struct {
			ID string `json:"id"`
		} `json:"commit"`
	}
	h.okJSON(&s, "show", ref)
	if s.Commit.ID == "" {
		h.t.Fatalf("show --json %s: no commit id", ref)
	}
	return s.Commit.ID
}

// TestCLIDefaultHome: without --home the store is $STRATA_HOME, else
// $XDG_DATA_HOME/strata, else ~/.local/share/strata; --home wins over all.
func TestCLIDefaultHome(t *testing.T) {
	root := t.TempDir()
	src := filepath.Join(root, "proj")
	cliWrite(t, src, map[string]string{"f.txt": "default home\n"})
	base := cliEnvWithout("STRATA_HOME", "XDG_DATA_HOME", "HOME")
	for _, tc := range []struct {
		name string
		env  []string
		dir  string // working directory
		want string
	}{
		{"STRATA_HOME first", []string{"STRATA_HOME=" + filepath.Join(root, "sh"), "XDG_DATA_HOME=" + filepath.Join(root, "xdg1"), "HOME=" + filepath.Join(root, "home1")}, "", filepath.Join(root, "sh")},
		{"relative STRATA_HOME", []string{"STRATA_HOME=rel/store", "HOME=" + filepath.Join(root, "home2")}, root, filepath.Join(root, "rel", "store")},
		{"XDG_DATA_HOME second", []string{"XDG_DATA_HOME=" + filepath.Join(root, "xdg3"), "HOME=" + filepath.Join(root, "home3")}, "", filepath.Join(root, "xdg3", "strata")},
		{"HOME last", []string{"HOME=" + filepath.Join(root, "home4")}, "", filepath.Join(root, "home4", ".local", "share", "strata")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := append(append([]string{}, base...), tc.env...)
			r := cliStrata(t, env, tc.dir, "init")
			if r.code != 0 || r.stdout != "store ready at "+tc.want+" (max layers 64)\n" {
				t.Fatalf("init without --home: want %q, got %s", "store ready at "+tc.want, r)
			}
			if r := cliStrata(t, env, tc.dir, "--json", "import", src, "-b", "dh"); r.code != 0 {
				t.Fatalf("import without --home: %s", r)
			}
			if _, err := os.Stat(filepath.Join(tc.want, "strata.db")); err != nil {
				t.Fatalf("the store is not at %s: %v", tc.want, err)
			}
			// Every later command finds the same store.
			if r := cliStrata(t, env, tc.dir, "show", "dh:f.txt"); r.code != 0 || r.stdout != "default home\n" {
				t.Errorf("show from the default home: %s", r)
			}
			// No other candidate location was created.
			for _, kv := range tc.env {
				_, v, _ := strings.Cut(kv, "=")
				if !filepath.IsAbs(v) {
					v = filepath.Join(tc.dir, v)
				}
				for _, other := range []string{v, filepath.Join(v, "strata"), filepath.Join(v, ".local", "share", "strata")} {
					if other == tc.want || strings.HasPrefix(tc.want, other+"/") {
						continue
					}
					if _, err := os.Stat(filepath.Join(other, "strata.db")); err == nil {
						t.Errorf("a store was also created at %s", other)
					}
				}
			}
		})
	}
	// --home wins over STRATA_HOME.
	flag := filepath.Join(root, "flag")
	env := append(append([]string{}, base...), "STRATA_HOME="+filepath.Join(root, "ignored"), "HOME="+root)
	if r := cliStrata(t, env, "", "--home", flag, "init"); r.code != 0 || r.stdout != "store ready at "+flag+" (max layers 64)\n" {
		t.Errorf("--home with STRATA_HOME set: %s", r)
	}
	if _, err := os.Stat(filepath.Join(root, "ignored")); !os.IsNotExist(err) {
		t.Errorf("--home given, yet STRATA_HOME was created (%v)", err)
	}
	// JSON names the home too.
	var ini struct {
		Home      string `json:"home"`
		MaxLayers int    `json:"max_layers"`
	}
	r := cliStrata(t, append(append([]string{}, base...), "STRATA_HOME="+flag), "", "--json", "init")
	if err := json.Unmarshal([]byte(r.stdout), &ini); err != nil || ini.Home != flag || ini.MaxLayers != 64 {
		t.Errorf("init --json: %+v (%v) %s", ini, err, r)
	}
}

// TestCLIQuiet: --quiet drops warnings and extra lines, never results.
func TestCLIQuiet(t *testing.T) {
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "proj")
	cliWrite(t, src, map[string]string{"a.txt": "a\n", "d/b.txt": "b\n"})
	// A socket is skipped with a warning.
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(src, "d", "sock"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	r := h.ok("import", src, "-b", "loud")
	if !strings.Contains(r.stderr, "strata: warning: d/sock: socket; not recorded") {
		t.Errorf("import of a socket without --quiet: want the warning, got:\n%s", r.stderr)
	}
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[1], "  read ") {
		t.Errorf("import without --quiet: want the result and the read/stored line:\n%s", r.stdout)
	}
	for _, args := range [][]string{
		{"--quiet", "import", src, "-b", "quiet"},
		{"-q", "import", src, "-b", "quiet2"},
		{"import", src, "-b", "quiet3", "--quiet"}, // global flags may follow
	} {
		r = h.ok(args...)
		if cliStderr(r.stderr) != "" {
			t.Errorf("%v: stderr not empty:\n%s", args, r.stderr)
		}
		want := regexp.MustCompile(`^imported ` + regexp.QuoteMeta(src) + ` -> quiet\d? [0-9a-f]{12} \(2 files, 1 dir, 0 other, 4 B\)\n$`)
		if !want.MatchString(r.stdout) {
			t.Errorf("%v: want only the result line, got:\n%q", args, r.stdout)
		}
	}
	// --json with --quiet: no JSON warning lines either, the result stays.
	r = h.ok("--quiet", "--json", "import", src, "-b", "quietjson")
	if cliStderr(r.stderr) != "" || len(cliLines(t, r.stdout)) != 1 {
		t.Errorf("--quiet --json import: %s", r)
	}
	r = h.ok("--json", "import", src, "-b", "loudjson")
	if ws := cliLines(t, cliStderr(r.stderr)); len(ws) != 1 || ws[0]["path"] != "d/sock" || ws[0]["warning"] != "socket; not recorded" {
		t.Errorf("--json import warning: %q", r.stderr)
	}

	// run prints its summary on stderr, unless --quiet.
	r = h.ok("run", "--from", "loud", "--", "sh", "-c", "echo out; echo err >&2")
	if r.stdout != "out\n" || !strings.HasPrefix(cliStderr(r.stderr), "err\nstrata: run ") || !strings.Contains(r.stderr, ": exit 0; 0 files changed (+0 -0); discarded; ") || !strings.Contains(r.stderr, " in all\n") {
		t.Errorf("run without --quiet: %s", r)
	}
	r = h.ok("--quiet", "run", "--from", "loud", "--", "sh", "-c", "echo out; echo err >&2")
	if r.stdout != "out\n" || cliStderr(r.stderr) != "err\n" {
		t.Errorf("run --quiet: want only the command's output, got %s", r)
	}
	// Results are still printed.
	if r := h.ok("--quiet", "log", "quiet"); len(strings.Split(strings.TrimSpace(r.stdout), "\n")) != 1 {
		t.Errorf("log --quiet: %s", r)
	}
}

// TestCLIImportExclude: --exclude globs: a name at any depth, anchored with
// "/", "**" across elements, a trailing "/" for directories only.
func TestCLIImportExclude(t *testing.T) {
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "proj")
	cliWrite(t, src, map[string]string{
		"keep.txt":            "k",
		"x.pyc":               "excluded: *.pyc at the top",
		"src/main.go":         "package main",
		"src/a.pyc":           "excluded: *.pyc at depth 1",
		"src/deep/b.pyc":      "excluded: *.pyc at depth 2",
		"build/top":           "excluded: build/**",
		"build/out/o.bin":     "excluded: build/**",
		"sub/build/keep":      "kept: build/** is anchored",
		"cache/c":             "excluded: cache/ (a directory)",
		"src/cache/c2":        "excluded: cache/ at depth",
		"notdir/cache":        "kept: cache/ matches directories only",
		"docs/x.log":          "excluded: docs/*.log",
		"docs/sub/y.log":      "kept: * does not cross /",
		"sub/docs/z.log":      "kept: docs/*.log is anchored",
		"a/gen.txt":           "excluded: a/**/gen.txt (** as zero elements)",
		"a/gen/b/gen.txt":     "excluded: a/**/gen.txt",
		"a/gen/b/other.txt":   "kept",
		"lib/gen.txt":         "kept: a/**/gen.txt is anchored at a",
		"empty-but-excluded/": "",
	})
	var imp struct {
		Stats struct {
			Files int64 `json:"files"`
		} `json:"stats"`
	}
	h.okJSON(&imp, "import", src, "--exclude", "*.pyc", "--exclude", "build/**", "--exclude", "cache/",
		"--exclude", "docs/*.log", "--exclude", "a/**/gen.txt", "--exclude", "empty-but-excluded/")
	out := filepath.Join(t.TempDir(), "out")
	h.ok("export", "main", out)
	want := []string{
		"a/", "a/gen/", "a/gen/b/", "a/gen/b/other.txt",
		"build/", // build/** keeps build itself
		"docs/", "docs/sub/", "docs/sub/y.log",
		"keep.txt",
		"lib/", "lib/gen.txt",
		"notdir/", "notdir/cache",
		"src/", "src/deep/", "src/main.go",
		"sub/", "sub/build/", "sub/build/keep", "sub/docs/", "sub/docs/z.log",
	}
	if got := cliPaths(t, out); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("import --exclude kept:\n  %s\nwant:\n  %s", strings.Join(got, " "), strings.Join(want, " "))
	}
	if imp.Stats.Files != 8 {
		t.Errorf("stats.files = %d; want the 8 kept files", imp.Stats.Files)
	}
	// A bad glob is refused, naming it.
	r := h.run("import", src, "-b", "bad", "--exclude", "[")
	if r.code == 0 || !strings.Contains(r.stderr, `"["`) {
		t.Errorf("--exclude '[': want a failure naming the glob, got %s", r)
	}
}

// TestCLIImportNoStatCache: a re-import of an unchanged tree reads nothing;
// --no-stat-cache reads every file again (and still adds nothing).
func TestCLIImportNoStatCache(t *testing.T) {
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "proj")
	baseTree(t, src)
	settle(t, src)
	type imp struct {
		Unchanged  bool  `json:"unchanged"`
		FilesRead  int64 `json:"files_read"`
		CacheHits  int64 `json:"cache_hits"`
		NewObjects int64 `json:"new_objects"`
	}
	var first, again, all imp
	h.okJSON(&first, "import", src)
	if first.FilesRead == 0 {
		t.Fatalf("first import read no file: %+v", first)
	}
	h.okJSON(&again, "import", src)
	if !again.Unchanged || again.FilesRead != 0 || again.CacheHits != first.FilesRead {
		t.Errorf("re-import: %+v; want unchanged, 0 read, %d cache hits", again, first.FilesRead)
	}
	h.okJSON(&all, "import", src, "--no-stat-cache")
	if !all.Unchanged || all.FilesRead != first.FilesRead || all.CacheHits != 0 || all.NewObjects != 0 {
		t.Errorf("import --no-stat-cache: %+v; want unchanged, %d read, 0 cache hits, 0 new objects", all, first.FilesRead)
	}
	r := h.ok("import", src, "--no-stat-cache")
	if !strings.Contains(r.stdout, fmt.Sprintf("  read %d files, 0 unchanged from the stat cache; stored 0 new objects", first.FilesRead)) {
		t.Errorf("import --no-stat-cache text:\n%s", r.stdout)
	}
	// The stat cache is still used afterwards.
	h.okJSON(&again, "import", src)
	if again.FilesRead != 0 {
		t.Errorf("import after --no-stat-cache read %d files", again.FilesRead)
	}
}

// TestCLIImportGitWithIgnored: --with-ignored auto (default), none, globs,
// and auto plus a glob.
func TestCLIImportGitWithIgnored(t *testing.T) {
	repo := gitRepo(t)
	h := newHome(t)
	has := func(branch, p string) bool {
		t.Helper()
		r := h.run("show", branch+":"+p)
		if r.code != 0 && r.code != 1 {
			t.Fatalf("show %s:%s: %s", branch, p, r)
		}
		return r.code == 0
	}
	for _, tc := range []struct {
		branch string
		with   []string
		want   map[string]bool
	}{
		{"auto", nil, map[string]bool{"node_modules/dep/index.js": true, ".venv/pyvenv.cfg": true, "dist": false}},
		{"explicit-auto", []string{"auto"}, map[string]bool{"node_modules/dep/index.js": true, ".venv/pyvenv.cfg": true, "dist": false}},
		{"none", []string{"none"}, map[string]bool{"node_modules": false, ".venv": false, "dist": false}},
		{"glob", []string{"dist"}, map[string]bool{"dist/out.js": true, "node_modules": false, ".venv": false}},
		{"glob-star", []string{"node_*"}, map[string]bool{"node_modules/dep/index.js": true, "dist": false, ".venv": false}},
		{"auto-and-glob", []string{"auto", "/dist"}, map[string]bool{"dist/out.js": true, "node_modules/dep/index.js": true, ".venv/pyvenv.cfg": true}},
	} {
		t.Run(tc.branch, func(t *testing.T) {
			args := []string{"import", "--git", repo, "-b", tc.branch}
			for _, w := range tc.with {
				args = append(args, "--with-ignored", w)
			}
			h.ok(args...)
			// Tracked files are always there.
			for _, p := range []string{"src/lib.txt", "run.sh", ".gitignore", ".git/HEAD"} {
				if !has(tc.branch, p) {
					t.Errorf("%v: tracked %s missing", tc.with, p)
				}
			}
			for p, want := range tc.want {
				if got := has(tc.branch, p); got != want {
					t.Errorf("--with-ignored %v: %s present = %v, want %v", tc.with, p, got, want)
				}
			}
		})
	}
	if got := h.ok("show", "glob:dist/out.js").stdout; got != "built\n" {
		t.Errorf("glob:dist/out.js = %q", got)
	}
}

// TestCLIShow: show REF prints the commit; REF:DIR a listing; REF:FILE the
// bytes; refs with ^ and ~N.
func TestCLIShow(t *testing.T) {
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "proj")
	cliWrite(t, src, map[string]string{"v.txt": "1\n", "dir/file.txt": "hello\n", "dir/empty/": ""})
	h.ok("import", src, "-m", "first")
	os.WriteFile(filepath.Join(src, "v.txt"), []byte("2\n"), 0o644)
	h.ok("import", src, "-m", "second\n\nwith a body")
	os.WriteFile(filepath.Join(src, "v.txt"), []byte("3\n"), 0o644)
	os.WriteFile(filepath.Join(src, "dir", "run.sh"), []byte("#!/bin/sh\n"), 0o755)
	os.Symlink("file.txt", filepath.Join(src, "dir", "link"))
	mt := time.Date(2021, 3, 4, 5, 6, 7, 0, time.Local)
	os.Chtimes(filepath.Join(src, "dir", "file.txt"), mt, mt)
	h.ok("import", src, "-m", "third")

	type logEntry struct {
		ID      string   `json:"id"`
		Parents []string `json:"parents"`
		Tree    string   `json:"tree"`
		TimeNs  int64    `json:"time_ns"`
		Message string   `json:"message"`
		Source  string   `json:"source"`
		Stats   struct {
			Files, Dirs, Other, Bytes int64
		} `json:"stats"`
	}
	var log []logEntry
	for _, m := range strings.Split(strings.TrimSpace(h.ok("--json", "log").stdout), "\n") {
		var le logEntry
		if err := json.Unmarshal([]byte(m), &le); err != nil {
			t.Fatal(err)
		}
		log = append(log, le)
	}
	if len(log) != 3 {
		t.Fatalf("log: %d commits", len(log))
	}
	third, second, first := log[0], log[1], log[2]

	// show REF: the commit, exactly.
	got := h.ok("show", "main").stdout
	want := fmt.Sprintf("commit %s\nparent %s\ntree   %s\nsource %s\ndate   %s\nstats  %d files, %d dirs, %d other, %s\n\n    third\n",
		third.ID, second.ID, third.Tree, src, time.Unix(0, third.TimeNs).Format(time.RFC3339Nano),
		third.Stats.Files, third.Stats.Dirs, third.Stats.Other, humanize.IBytes(uint64(third.Stats.Bytes)))
	if got != want {
		t.Errorf("show main:\n%s\nwant:\n%s", got, want)
	}
	if third.Stats.Files != 3 || third.Stats.Dirs != 2 || third.Stats.Other != 1 {
		t.Errorf("stats of the third import: %+v", third.Stats)
	}
	// A root commit has no parent line; a message keeps its lines, indented.
	if got := h.ok("show", first.ID).stdout; strings.Contains(got, "parent ") || !strings.HasPrefix(got, "commit "+first.ID+"\ntree   ") {
		t.Errorf("show of the root commit:\n%s", got)
	}
	if got := h.ok("show", second.ID[:10]).stdout; !strings.HasSuffix(got, "\n\n    second\n    \n    with a body\n") {
		t.Errorf("show of a multi-line message:\n%q", got)
	}

	// Refs: ^ and ~N, on branches and id prefixes, combined.
	for ref, id := range map[string]string{
		"main":                  third.ID,
		"main^":                 second.ID,
		"main^^":                first.ID,
		"main~":                 second.ID,
		"main~0":                third.ID,
		"main~1":                second.ID,
		"main~2":                first.ID,
		"main~1^":               first.ID,
		third.ID[:8] + "^":      second.ID,
		third.ID[:8] + "~2":     first.ID,
		second.ID + "^":         first.ID,
		"main^:v.txt":           "2\n",
		"main~2:v.txt":          "1\n",
		third.ID[:6] + ":v.txt": "3\n",
	} {
		if strings.Contains(ref, ":") {
			if got := h.ok("show", ref).stdout; got != id {
				t.Errorf("show %s = %q, want %q", ref, got, id)
			}
			continue
		}
		if got := cliHead(h, ref); got != id {
			t.Errorf("%s resolves to %.12s, want %.12s", ref, got, id)
		}
	}
	if r := h.fails(1, "show", "main~3"); !strings.Contains(r.stderr, "no parent") {
		t.Errorf("main~3 past the root: %s", r)
	}
	h.fails(1, "show", "main^^^")
	h.fails(2, "show", "main~x")

	// show REF:DIR: a listing, one line per entry: mode, owner, size,
	// mtime, name (symlinks with their target).
	uid, gid := os.Getuid(), os.Getgid()
	lines := strings.Split(strings.TrimRight(h.ok("show", "main:dir").stdout, "\n"), "\n")
	wantLines := map[string][]string{
		"empty":    {"drwxr-xr-x", itoa(uid), itoa(gid)},
		"file.txt": {"-rw-r--r--", itoa(uid), itoa(gid), "6", "2021-03-04", "05:06", "file.txt"},
		"link":     {"Lrwxrwxrwx", itoa(uid), itoa(gid), "8"},
		"run.sh":   {"-rwxr-xr-x", itoa(uid), itoa(gid), "10"},
	}
	if len(lines) != len(wantLines) {
		t.Fatalf("show main:dir: %d lines, want %d:\n%s", len(lines), len(wantLines), strings.Join(lines, "\n"))
	}
	names := []string{}
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) < 7 {
			t.Errorf("listing line %q: want mode uid gid size date time name", l)
			continue
		}
		name := f[6]
		names = append(names, name)
		w, ok := wantLines[name]
		if !ok {
			t.Errorf("unexpected entry %q", l)
			continue
		}
		for i, v := range w {
			if f[i] != v {
				t.Errorf("listing of %s: field %d = %q, want %q (%q)", name, i, f[i], v, l)
			}
		}
		if name == "link" && strings.Join(f[6:], " ") != "link -> file.txt" {
			t.Errorf("symlink line %q: want 'link -> file.txt'", l)
		}
	}
	if strings.Join(names, " ") != "empty file.txt link run.sh" {
		t.Errorf("listing order %v: want sorted by name", names)
	}
	// The root (REF: and REF:/), an empty directory, a trailing slash.
	if got := h.ok("show", "main:").stdout; got != h.ok("show", "main:/").stdout || !strings.Contains(got, " dir\n") || !strings.Contains(got, " v.txt\n") {
		t.Errorf("show main: lists:\n%s", got)
	}
	if got := h.ok("show", "main:dir/empty").stdout; got != "" {
		t.Errorf("an empty directory lists %q", got)
	}
	if got := h.ok("show", "main:dir/").stdout; got != strings.Join(lines, "\n")+"\n" {
		t.Errorf("show main:dir/ differs from main:dir:\n%s", got)
	}
	// --json: one entry per line.
	ents := cliLines(t, h.ok("--json", "show", "main:dir").stdout)
	if len(ents) != 4 || ents[1]["name"] != "file.txt" || ents[1]["type"] != "file" || ents[1]["size"] != 6.0 ||
		ents[2]["type"] != "symlink" || ents[2]["target"] != "file.txt" || ents[0]["type"] != "dir" {
		t.Errorf("show --json main:dir: %v", ents)
	}

	// show REF:FILE: the bytes; a symlink's target.
	if got := h.ok("show", "main:dir/file.txt").stdout; got != "hello\n" {
		t.Errorf("show main:dir/file.txt = %q", got)
	}
	if got := h.ok("show", "main:dir/link").stdout; got != "file.txt" {
		t.Errorf("show main:dir/link = %q, want its target", got)
	}
	var fe struct {
		Path  string `json:"path"`
		Entry struct {
			Name string `json:"name"`
			Size int64  `json:"size"`
			Mode uint32 `json:"mode"`
		} `json:"entry"`
		Commit struct {
			ID string `json:"id"`
		} `json:"commit"`
	}
	h.okJSON(&fe, "show", "main:dir/run.sh")
	if fe.Path != "dir/run.sh" || fe.Entry.Name != "run.sh" || fe.Entry.Size != 10 || fe.Entry.Mode&0o777 != 0o755 || fe.Commit.ID != third.ID {
		t.Errorf("show --json main:dir/run.sh: %+v", fe)
	}
	if r := h.fails(1, "show", "main:nope"); !strings.Contains(r.stderr, "nope") {
		t.Errorf("show of a missing path does not name it: %s", r)
	}
	// --json of a commit.
	var sc struct {
		Commit struct {
			ID      string   `json:"id"`
			Parents []string `json:"parents"`
			Message string   `json:"message"`
			Source  string   `json:"source"`
		} `json:"commit"`
	}
	h.okJSON(&sc, "show", "main^")
	if sc.Commit.ID != second.ID || len(sc.Commit.Parents) != 1 || sc.Commit.Parents[0] != first.ID || sc.Commit.Message != "second\n\nwith a body" || sc.Commit.Source != src {
		t.Errorf("show --json main^: %+v", sc)
	}
}

// TestCLIGCDryRun: gc --dry-run reports what gc would remove and removes
// nothing; gc then removes exactly that.
func TestCLIGCDryRun(t *testing.T) {
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "proj")
	writeTree(t, src, 21)
	h.ok("import", src)
	doomed := filepath.Join(t.TempDir(), "doomed")
	writeTree(t, doomed, 22) // its own random big.bin and unique files
	h.ok("import", doomed, "-b", "doomed")
	id := cliHead(h, "doomed")
	h.ok("branch", "delete", "doomed")

	type fsck struct {
		Objects int64 `json:"objects"`
	}
	type gc struct {
		Store struct {
			Marked       int64 `json:"marked"`
			Removed      int64 `json:"removed"`
			RemovedBytes int64 `json:"removed_bytes"`
			DryRun       bool  `json:"dry_run"`
		} `json:"store"`
	}
	var before, mid, after fsck
	h.okJSON(&before, "fsck")

	// Within the prune window the deleted branch's commit is kept.
	var keep gc
	h.okJSON(&keep, "gc", "--dry-run")
	if !keep.Store.DryRun || keep.Store.Removed != 0 {
		t.Errorf("gc --dry-run within the prune window: %+v; want nothing to remove", keep.Store)
	}

	var dry gc
	h.okJSON(&dry, "gc", "--prune", "0s", "--dry-run")
	if !dry.Store.DryRun || dry.Store.Removed == 0 || dry.Store.RemovedBytes < 3<<20 {
		t.Fatalf("gc --prune 0s --dry-run: %+v; want the doomed import's objects (3 MiB and more)", dry.Store)
	}
	r := h.ok("gc", "--prune", "0s", "-n")
	wantLine := fmt.Sprintf("gc: would remove %d objects (%s); %d reachable\n", dry.Store.Removed, humanize.IBytes(uint64(dry.Store.RemovedBytes)), dry.Store.Marked)
	if r.stdout != wantLine {
		t.Errorf("gc --dry-run text: %q, want %q", r.stdout, wantLine)
	}
	h.okJSON(&mid, "fsck")
	if mid.Objects != before.Objects {
		t.Errorf("gc --dry-run removed objects: %d before, %d after", before.Objects, mid.Objects)
	}
	if got := cliHead(h, id); got != id {
		t.Errorf("the unreferenced commit is gone after a dry run")
	}

	var real gc
	h.okJSON(&real, "gc", "--prune", "0s")
	if real.Store.DryRun || real.Store.Removed != dry.Store.Removed || real.Store.RemovedBytes != dry.Store.RemovedBytes {
		t.Errorf("gc removed %+v; the dry run said %+v", real.Store, dry.Store)
	}
	h.okJSON(&after, "fsck")
	if after.Objects != before.Objects-dry.Store.Removed {
		t.Errorf("after gc: %d objects; want %d - %d", after.Objects, before.Objects, dry.Store.Removed)
	}
	h.fails(1, "show", id)
	if r := h.ok("gc", "--prune", "0s", "--dry-run"); !strings.HasPrefix(r.stdout, "gc: would remove 0 objects (0 B); ") {
		t.Errorf("dry run after gc: %q", r.stdout)
	}
}

// TestCLIDoctor: on this machine every required piece is there: doctor
// exits 0 and says what it found.
func TestCLIDoctor(t *testing.T) {
	h := newHome(t)
	var uts unix.Utsname
	unix.Uname(&uts)
	kernel := unix.ByteSliceToString(uts.Release[:])
	who := fmt.Sprintf("uid %d", os.Getuid())
	if os.Geteuid() == 0 {
		who = "root"
	}
	r := h.ok("doctor")
	lines := strings.Split(r.stdout, "\n")
	if lines[0] != "kernel "+kernel+", running as "+who {
		t.Errorf("doctor's first line %q; want kernel %s, running as %s", lines[0], kernel, who)
	}
	for _, want := range []string{"user namespaces", "unprivileged overlay", "userxattr", "whiteouts", "user xattrs on the store's filesystem", "landlock", "seccomp"} {
		re := regexp.MustCompile(`(?m)^\[ok  \] ` + regexp.QuoteMeta(want) + ` +\S`)
		if !re.MatchString(r.stdout) {
			t.Errorf("doctor: no [ok  ] line for %s:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "[MISS]") {
		t.Errorf("doctor exited 0 with a missing required piece:\n%s", r.stdout)
	}
	for _, want := range []string{"redirect_dir", "cgroup v2 delegation", "subordinate ids", "fsconfig lowerdir+"} {
		if !regexp.MustCompile(`(?m)^\[(ok  |opt )\] ` + regexp.QuoteMeta(want) + ` `).MatchString(r.stdout) {
			t.Errorf("doctor: no line for the optional %s", want)
		}
	}
	if !regexp.MustCompile(`(?m)^\[ok  \] landlock +ABI \d+: filesystem access \(1\)`).MatchString(r.stdout) {
		t.Errorf("doctor does not name the Landlock ABI:\n%s", r.stdout)
	}
	for _, mode := range []string{"agent", "strict", "none"} {
		if !strings.Contains(r.stdout, "\n--sandbox "+mode+" on this kernel:\n") {
			t.Errorf("doctor: no section for --sandbox %s", mode)
		}
	}
	if !strings.Contains(r.stdout, "  enforces: a private network namespace with loopback only (--net none)\n") {
		t.Errorf("doctor: strict's network namespace not reported")
	}
	// JSON says the same.
	var rep struct {
		Kernel   string `json:"kernel"`
		UID      int    `json:"uid"`
		RealRoot bool   `json:"real_root"`
		Checks   []struct {
			Name     string `json:"name"`
			OK       bool   `json:"ok"`
			Detail   string `json:"detail"`
			Optional bool   `json:"optional"`
		} `json:"checks"`
		Sandbox []struct {
			Mode     string   `json:"mode"`
			Enforces []string `json:"enforces"`
		} `json:"sandbox"`
	}
	h.okJSON(&rep, "doctor")
	if rep.Kernel != kernel || rep.UID != os.Getuid() || rep.RealRoot != (os.Geteuid() == 0) {
		t.Errorf("doctor --json: kernel %q uid %d real_root %v", rep.Kernel, rep.UID, rep.RealRoot)
	}
	if len(rep.Checks) < 9 {
		t.Errorf("doctor --json: %d checks", len(rep.Checks))
	}
	for _, c := range rep.Checks {
		if !c.OK && !c.Optional {
			t.Errorf("doctor --json exited 0 with required check %q failing: %s", c.Name, c.Detail)
		}
		if c.Detail == "" {
			t.Errorf("check %q has no detail", c.Name)
		}
	}
	if len(rep.Sandbox) != 3 || rep.Sandbox[0].Mode != "agent" || rep.Sandbox[1].Mode != "strict" || rep.Sandbox[2].Mode != "none" || len(rep.Sandbox[0].Enforces) == 0 {
		t.Errorf("doctor --json sandbox: %+v", rep.Sandbox)
	}
	// The probes leave nothing behind in the store.
	if left, _ := filepath.Glob(filepath.Join(h.dir, ".doctor-*")); len(left) != 0 {
		t.Errorf("doctor left %v", left)
	}
	h.fails(2, "doctor", "extra")
}

// TestCLIWorkspaceCreateUnnamed: ws create without a name prints a
// generated one, which works like any other.
func TestCLIWorkspaceCreateUnnamed(t *testing.T) {
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "proj")
	cliWrite(t, src, map[string]string{"f.txt": "unnamed\n"})
	h.ok("import", src)
	short := cliHead(h, "main")[:12]
	r := h.ok("ws", "create")
	m := regexp.MustCompile(`^workspace (\S+) on branch (\S+) at ([0-9a-f]{12})\n$`).FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("ws create: %q", r.stdout)
	}
	name := m[1]
	if m[2] != "ws/"+name || m[3] != short || !regexp.MustCompile(`^w[0-9a-f]{8}$`).MatchString(name) {
		t.Errorf("ws create: name %q branch %q base %q; want a generated name on ws/NAME at %s", name, m[2], m[3], short)
	}
	defer h.run("ws", "rm", "--force", name)
	if got := h.ok("exec", name, "--", "cat", "f.txt").stdout; got != "unnamed\n" {
		t.Errorf("exec in the generated workspace: %q", got)
	}
	h.ok("exec", name, "--", "sh", "-c", "echo change > g.txt")
	h.ok("commit", name, "-m", "in a generated workspace")
	if got := h.ok("show", "ws/"+name+":g.txt").stdout; got != "change\n" {
		t.Errorf("commit of the generated workspace: %q", got)
	}
	// --json names it too, and names differ.
	var w struct {
		Name   string `json:"name"`
		Branch string `json:"branch"`
		Base   string `json:"base"`
		State  string `json:"state"`
	}
	h.okJSON(&w, "ws", "create")
	defer h.run("ws", "rm", "--force", w.Name)
	if w.Name == "" || w.Name == name || w.Branch != "ws/"+w.Name || w.Base != cliHead(h, "main") || w.State != "stopped" {
		t.Errorf("ws create --json: %+v (first was %s)", w, name)
	}
	list := h.ok("ws", "list").stdout
	for _, n := range []string{name, w.Name} {
		if !regexp.MustCompile(`(?m)^` + n + ` `).MatchString(list) {
			t.Errorf("ws list does not show %s:\n%s", n, list)
		}
	}
}

// TestCLIWorkspaceList: ws list prints a header and one aligned row per
// workspace: name, branch, base, state, size of changes.
func TestCLIWorkspaceList(t *testing.T) {
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "proj")
	cliWrite(t, src, map[string]string{"f.txt": "list\n"})
	h.ok("import", src)
	short := cliHead(h, "main")[:12]
	if r := h.ok("ws", "list"); r.stdout != "NAME  BRANCH  BASE  STATE  CHANGES\n" {
		t.Errorf("ws list of no workspace: %q; want the header only", r.stdout)
	}
	h.ok("ws", "create", "alpha")
	h.ok("ws", "create", "b", "--tmpfs", "--branch", "feature/long-name")
	defer h.run("ws", "rm", "--force", "alpha", "b")
	h.ok("exec", "alpha", "--", "sh", "-c", "head -c 5000 /dev/zero > blob")

	var js []struct {
		Name    string `json:"name"`
		State   string `json:"state"`
		Changes int64  `json:"changes_bytes"`
	}
	for _, m := range strings.Split(strings.TrimSpace(h.ok("ws", "list", "--json").stdout), "\n") {
		var w struct {
			Name    string `json:"name"`
			State   string `json:"state"`
			Changes int64  `json:"changes_bytes"`
		}
		if err := json.Unmarshal([]byte(m), &w); err != nil {
			t.Fatal(err)
		}
		js = append(js, w)
	}
	if len(js) != 2 || js[0].Name != "alpha" || js[0].State != "running" || js[0].Changes < 5000 || js[1].State != "stopped" || js[1].Changes != 0 {
		t.Fatalf("ws list --json: %+v", js)
	}
	lines := strings.Split(strings.TrimRight(h.ok("ws", "list").stdout, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("ws list: %q", lines)
	}
	want := [][]string{
		{"NAME", "BRANCH", "BASE", "STATE", "CHANGES"},
		{"alpha", "ws/alpha", short, "running", humanize.IBytes(uint64(js[0].Changes))},
		{"b", "feature/long-name", short, "stopped (tmpfs)", "0 B"},
	}
	// Columns are aligned: each starts where its header does, two spaces
	// after the widest cell before it.
	starts := []int{0}
	for c := 1; c < 5; c++ {
		w := 0
		for _, row := range want {
			w = max(w, len(row[c-1]))
		}
		starts = append(starts, starts[c-1]+w+2)
	}
	for i, row := range want {
		var b strings.Builder
		for c, cell := range row {
			for b.Len() < starts[c] {
				b.WriteByte(' ')
			}
			b.WriteString(cell)
		}
		if lines[i] != b.String() {
			t.Errorf("ws list line %d:\n  %q\nwant\n  %q", i, lines[i], b.String())
		}
	}
}

// TestCLIShell: shell without a terminal runs $SHELL on the piped script;
// on a terminal (script(1)) the shell gets a pty of its own.
func TestCLIShell(t *testing.T) {
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "proj")
	cliWrite(t, src, map[string]string{"f.txt": "shell\n"})
	h.ok("import", src)
	h.ok("ws", "create", "w")
	defer h.run("ws", "rm", "--force", "w")

	for _, shell := range []string{"/bin/sh", "/bin/bash"} {
		h.env = []string{"SHELL=" + shell}
		r := h.runIn(context.Background(), "", []byte("echo hi; pwd; cat f.txt; echo \"$0\"; test -t 0 || echo no-tty; exit 3\n"), "shell", "w")
		want := "hi\n" + src + "\nshell\n" + shell + "\nno-tty\n"
		if r.code != 3 || r.stdout != want {
			t.Errorf("shell with SHELL=%s, piped: want exit 3 and %q, got %s", shell, want, r)
		}
	}
	// Without $SHELL: bash.
	h.env = []string{"SHELL="}
	if r := h.runIn(context.Background(), "", []byte("echo \"$0\"\n"), "shell", "w"); r.code != 0 || r.stdout != "/bin/bash\n" {
		t.Errorf("shell without $SHELL: %s", r)
	}
	h.env = nil
	// Changes made in the shell stay in the workspace.
	h.runIn(context.Background(), "", []byte("echo from-shell > s.txt\n"), "shell", "w")
	if got := h.ok("exec", "w", "--", "cat", "s.txt").stdout; got != "from-shell\n" {
		t.Errorf("a file written in the shell reads %q", got)
	}

	// On a terminal: a pty of its own, the exit status passes through.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sc := exec.CommandContext(ctx, "script", "-qec", bin(t)+" --home "+h.dir+" shell w", "/dev/null")
	sc.Env = append(os.Environ(), "SHELL=/bin/sh")
	sc.Stdin = strings.NewReader("test -t 0 && echo is-a-tty; tty; exit 4\n")
	out, err := sc.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 4 {
		t.Errorf("shell on a terminal: want exit 4, got %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "is-a-tty") || !regexp.MustCompile(`/dev/pts/\d+`).Match(out) {
		t.Errorf("shell on a terminal: no pty inside:\n%s", out)
	}
	h.fails(2, "shell")
	h.fails(125, "shell", "nosuch")
}
