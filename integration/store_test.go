//go:build integration

package integration

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/internal/testutil"
	"github.com/stratafs/strata/snapshot/snapshottest"
)

// TestCorpusRoundTrip: import of the shared corpus, then export into a new
// directory, reproduces it exactly (diff -r, plus metadata: modes, mtimes,
// symlinks, hardlinks, empty dirs, xattrs). A second import reads nothing.
func TestCorpusRoundTrip(t *testing.T) {
	parallel(t)
	src := corpus(t)
	h := newHome(t)
	h.ok("init")
	settle(t, src)
	var imp struct {
		Commit    string `json:"commit"`
		FilesRead int64  `json:"files_read"`
		CacheHits int64  `json:"cache_hits"`
		Stats     struct {
			Files int64 `json:"files"`
		} `json:"stats"`
	}
	h.okJSON(&imp, "import", src, "-m", "corpus")
	if imp.Stats.Files < 15000 {
		t.Fatalf("imported only %d files from the corpus", imp.Stats.Files)
	}
	out := filepath.Join(t.TempDir(), "export")
	h.ok("export", "main", out)
	if b, err := exec.Command("diff", "-r", "--no-dereference", src, out).CombinedOutput(); err != nil {
		t.Fatalf("diff -r corpus export: %v\n%s", err, b)
	}
	snapshottest.CompareTrees(t, src, out, snapshottest.Owner(os.Geteuid() == 0))

	// Re-import of the unchanged tree: the stat cache answers for every
	// file and no object is added.
	var again struct {
		Unchanged  bool  `json:"unchanged"`
		FilesRead  int64 `json:"files_read"`
		NewObjects int64 `json:"new_objects"`
	}
	h.okJSON(&again, "import", src)
	if !again.Unchanged || again.FilesRead != 0 || again.NewObjects != 0 {
		t.Fatalf("re-import of the unchanged corpus: %+v; want unchanged, nothing read or added", again)
	}
	h.fsckClean()
}

// TestNastyTreeRoundTrip: names with newlines and invalid UTF-8, hardlinks,
// symlinks pointing outside, setuid/sticky modes, FIFOs, xattrs, empty and
// read-only directories survive import and export through the CLI.
func TestNastyTreeRoundTrip(t *testing.T) {
	src := filepath.Join(t.TempDir(), "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	snapshottest.Build(t, src, snapshottest.Nasty(snapshottest.Probe(src)))
	h := newHome(t)
	h.ok("import", src, "-b", "nasty")
	out := filepath.Join(t.TempDir(), "out")
	h.ok("export", "nasty", out)
	snapshottest.CompareTrees(t, src, out, snapshottest.Owner(os.Geteuid() == 0))
	snapshottest.Writable(t, src)
	snapshottest.Writable(t, out)

	// show lists names with invalid UTF-8 exactly in --json.
	r := h.ok("--json", "show", "nasty:")
	if !strings.Contains(r.stdout, "name_base64") {
		t.Errorf("show --json of a tree with invalid UTF-8 names carries no name_base64:\n%s", r.stdout)
	}
}

// TestConcurrentImportGC: 8 processes importing and collecting one store at
// once lose nothing, and fsck is clean afterwards.
func TestConcurrentImportGC(t *testing.T) {
	h := newHome(t)
	h.ok("init")
	const procs = 8
	srcs := make([]string, procs)
	for i := range srcs {
		srcs[i] = filepath.Join(t.TempDir(), fmt.Sprintf("src%d", i))
		writeTree(t, srcs[i], i)
	}
	var wg sync.WaitGroup
	errs := make(chan string, procs*10)
	for i := 0; i < procs; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for round := 0; round < 3; round++ {
				var r result
				if i%4 == 3 {
					r = h.run("gc", "--prune", "0s")
				} else {
					// Each round changes one file, so each import adds a
					// commit that a concurrent gc must not break.
					if err := os.WriteFile(filepath.Join(srcs[i], "round"), []byte(fmt.Sprint(round)), 0o644); err != nil {
						errs <- err.Error()
						return
					}
					r = h.run("import", srcs[i], "-b", fmt.Sprintf("b%d", i))
				}
				if r.code != 0 {
					errs <- r.String()
				}
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	h.ok("gc", "--prune", "0s")
	h.fsckClean()
	for i := 0; i < procs; i++ {
		if i%4 == 3 {
			continue
		}
		out := filepath.Join(t.TempDir(), fmt.Sprintf("out%d", i))
		h.ok("export", fmt.Sprintf("b%d", i), out)
		snapshottest.CompareTrees(t, srcs[i], out, snapshottest.Owner(os.Geteuid() == 0))
	}
}

// writeTree makes a small tree: some shared files (deduplicated across
// imports), some unique ones, one large file that is chunked.
func writeTree(t testing.TB, dir string, seed int) {
	t.Helper()
	for d := 0; d < 5; d++ {
		sub := filepath.Join(dir, fmt.Sprintf("d%d", d))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		for f := 0; f < 40; f++ {
			body := fmt.Sprintf("shared %d/%d\n", d, f)
			if f%3 == 0 {
				body = fmt.Sprintf("unique %d %d/%d\n", seed, d, f)
			}
			if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%d.txt", f)), []byte(strings.Repeat(body, 1+f)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	big := make([]byte, 3<<20)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "big.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestBadInput: clear errors, right exit codes, nothing lost.
func TestBadInput(t *testing.T) {
	h := newHome(t)
	h.ok("init")
	src := filepath.Join(t.TempDir(), "src")
	writeTree(t, src, 1)
	h.ok("import", src)

	t.Run("missing source", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "nope")
		r := h.fails(1, "import", missing)
		if !strings.Contains(r.stderr, missing) {
			t.Errorf("error does not name the missing path %s:\n%s", missing, r.stderr)
		}
	})
	t.Run("invalid branch names", func(t *testing.T) {
		for _, name := range []string{"a..b", "-x", "a b", "x.lock", "a//b", "trailing/", "t\nab", "a~1b", "a:b"} {
			r := h.fails(2, "import", src, "-b", name)
			if !strings.Contains(r.stderr, "invalid") {
				t.Errorf("branch %q: message does not say it is invalid:\n%s", name, r.stderr)
			}
		}
		h.fails(2, "branch", "create", "bad..name")
	})
	t.Run("unknown ref", func(t *testing.T) {
		r := h.fails(1, "log", "nosuchbranch")
		if !strings.Contains(r.stderr, "nosuchbranch") {
			t.Errorf("error does not name the ref:\n%s", r.stderr)
		}
	})
	t.Run("usage", func(t *testing.T) {
		h.fails(2, "import")
		h.fails(2, "export", "main")
		h.fails(2, "import", src, "--no-such-flag")
	})
	t.Run("export into non-empty dir", func(t *testing.T) {
		dst := t.TempDir()
		if err := os.WriteFile(filepath.Join(dst, "keep"), []byte("mine"), 0o644); err != nil {
			t.Fatal(err)
		}
		h.fails(1, "export", "main", dst)
		if b, _ := os.ReadFile(filepath.Join(dst, "keep")); string(b) != "mine" {
			t.Fatalf("export touched an existing file")
		}
	})
	t.Run("branch exists", func(t *testing.T) {
		h.ok("branch", "create", "dup")
		h.fails(1, "branch", "create", "dup")
	})
	t.Run("json errors", func(t *testing.T) {
		r := h.fails(1, "--json", "log", "nosuch")
		var e struct{ Error, Kind string }
		if err := json.Unmarshal([]byte(strings.TrimSpace(r.stderr)), &e); err != nil || e.Kind != "not_found" {
			t.Errorf("--json error: %q (%v); want {\"error\":...,\"kind\":\"not_found\"}", r.stderr, err)
		}
	})
	h.fsckClean()
}

// TestUnreadableSource: an unreadable directory fails the import with its
// name; --skip-unreadable skips it with a warning. Root reads everything,
// so this runs in the unprivileged pass.
func TestUnreadableSource(t *testing.T) {
	testutil.AsUser(t)
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "src")
	writeTree(t, src, 2)
	secret := filepath.Join(src, "d1")
	if err := os.Chmod(secret, 0); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(secret, 0o755)
	r := h.fails(1, "import", src)
	if !strings.Contains(r.stderr, "d1") {
		t.Errorf("error does not name the unreadable directory:\n%s", r.stderr)
	}
	r = h.ok("import", "--skip-unreadable", src)
	if !strings.Contains(r.stderr, "d1") {
		t.Errorf("--skip-unreadable does not warn about d1:\n%s", r.stderr)
	}
	r = h.fails(1, "show", "main:d1")
	h.ok("show", "main:d0")
}

// TestReadOnlyStore: a store that cannot be written still serves log, show,
// export and fsck; writes fail with a clear message and exit 1.
func TestReadOnlyStore(t *testing.T) {
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "src")
	writeTree(t, src, 3)
	h.ok("import", src)
	h.ok("gc") // checkpoint the WAL
	makeReadOnly(t, h.dir)
	h.ok("log")
	h.ok("show", "main:d0/f1.txt")
	h.ok("fsck")
	h.ok("export", "main", filepath.Join(t.TempDir(), "out"))
	r := h.fails(1, "import", src, "-b", "other")
	if !strings.Contains(strings.ToLower(r.stderr), "read-only") {
		t.Errorf("import into a read-only store: message does not say read-only:\n%s", r.stderr)
	}
}

// makeReadOnly makes dir unwritable: a read-only bind mount as root, file
// modes as an unprivileged user.
func makeReadOnly(t testing.TB, dir string) {
	t.Helper()
	if os.Geteuid() == 0 {
		sh(t, "", fmt.Sprintf("mount --bind %q %q && mount -o remount,bind,ro %q", dir, dir, dir))
		t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
		return
	}
	sh(t, "", fmt.Sprintf("chmod -R a-w %q", dir))
	t.Cleanup(func() { exec.Command("chmod", "-R", "u+w", dir).Run() })
}

// TestDamagedDatabase: bytes overwritten inside strata.db are found by
// fsck, which names what is lost — the branch, the workspace forked from
// it and the workspace's branch, through the damaged objects — names
// nothing else, and exits non-zero.
func TestDamagedDatabase(t *testing.T) {
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "src")
	writeTree(t, src, 4)
	h.ok("import", src, "-b", "victim")
	h.ok("ws", "create", "w", "--from", "victim")
	defer h.run("ws", "rm", "--force", "w")
	// A bystander shares the small files (writeTree's shared ones) but
	// not big.bin.
	other := filepath.Join(t.TempDir(), "other")
	writeTree(t, other, 5)
	h.ok("import", other, "-b", "bystander")
	h.ok("gc") // checkpoint the WAL into strata.db
	db := filepath.Join(h.dir, "strata.db")
	b, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	// Damage the stored content of big.bin: its random bytes are kept
	// uncompressed, so a window of them can be found in the file. (Flipping
	// bytes at a fixed offset could land on a free page and go unnoticed.)
	big, err := os.ReadFile(filepath.Join(src, "big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	hits := 0
	for i := 0; i+32 <= len(big) && hits < 4; i += 64 << 10 {
		off := bytes.Index(b, big[i:i+32])
		if off < 0 {
			continue
		}
		for j := 0; j < 32; j++ {
			b[off+j] ^= 0xa5
		}
		hits++
	}
	if hits == 0 {
		t.Fatal("no window of big.bin found in strata.db; cannot damage object data")
	}
	if err := os.WriteFile(db, b, 0o644); err != nil {
		t.Fatal(err)
	}
	// What is lost, seen without fsck: victim's big.bin no longer reads
	// back; the bystander's files all do.
	if r := h.run("show", "victim:big.bin"); r.code == 0 && r.stdout == string(big) {
		t.Fatalf("victim:big.bin still reads back intact: the damage missed it")
	}
	out := filepath.Join(t.TempDir(), "bystander")
	h.ok("export", "bystander", out)
	snapshottest.CompareTrees(t, other, out, snapshottest.Owner(os.Geteuid() == 0))

	var rep struct {
		Problems []struct {
			Object   string   `json:"object"`
			Kind     string   `json:"kind"`
			Detail   string   `json:"detail"`
			Affected []string `json:"affected"`
		} `json:"problems"`
	}
	r := h.fails(1, "--json", "fsck")
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("fsck --json: decoding %q: %v", r.stdout, err)
	}
	want := []string{"victim", "workspace:w", "ws/w"}
	corrupt := 0
	for _, p := range rep.Problems {
		if p.Kind != "corrupt" || p.Object == "" || !slices.Equal(p.Affected, want) {
			t.Errorf("problem %+v; want a corrupt object affecting %v", p, want)
		}
		corrupt++
	}
	// Each damaged window lies in one chunk; windows may share one.
	if corrupt < 1 || corrupt > hits {
		t.Errorf("%d corrupt objects for %d damaged windows", corrupt, hits)
	}
	// The text report names them too.
	r = h.fails(1, "fsck")
	if !strings.Contains(r.stdout, "affects: victim, workspace:w, ws/w\n") || strings.Contains(r.stdout+r.stderr, "bystander") {
		t.Errorf("fsck does not name what is lost (victim, workspace:w, ws/w) and only that:\n%s", r)
	}
	if !strings.Contains(r.stdout, "fsck --repair") {
		t.Errorf("fsck does not say how damaged objects can be repaired:\n%s", r)
	}
	// The source still holds big.bin: fsck --repair rewrites the damaged
	// objects from it, and says so.
	r = h.ok("fsck", "--repair", src)
	if !strings.Contains(r.stdout, fmt.Sprintf("%d of %d damaged objects rewritten", corrupt, corrupt)) {
		t.Errorf("fsck --repair: %s", r)
	}
	h.fsckClean()
	if r := h.ok("show", "victim:big.bin"); r.stdout != string(big) {
		t.Errorf("victim:big.bin does not read back intact after the repair")
	}
}

// TestDiskFull: an import that runs out of space fails cleanly with a
// message that says so, and the store stays consistent. A small tmpfs
// stands in for a full disk; mounting one needs root.
func TestDiskFull(t *testing.T) {
	testutil.AsRoot(t)
	dir := t.TempDir()
	sh(t, "", fmt.Sprintf("mount -t tmpfs -o size=12m tmpfs %q", dir))
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	h := &home{t: t, dir: filepath.Join(dir, "store")}
	small := filepath.Join(t.TempDir(), "small")
	writeTree(t, small, 5)
	h.ok("import", small, "-b", "small")
	big := filepath.Join(t.TempDir(), "big")
	if err := os.MkdirAll(big, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 6; i++ {
		blob := make([]byte, 4<<20)
		rand.Read(blob)
		if err := os.WriteFile(filepath.Join(big, fmt.Sprintf("blob%d", i)), blob, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := h.fails(1, "import", big, "-b", "big")
	if !strings.Contains(strings.ToLower(r.stderr), "no space") {
		t.Errorf("import onto a full disk: message does not say no space:\n%s", r.stderr)
	}
	h.fails(1, "log", "big")
	h.ok("gc", "--prune", "0s")
	h.fsckClean()
	out := filepath.Join(t.TempDir(), "out")
	h.ok("export", "small", out)
	snapshottest.CompareTrees(t, small, out, snapshottest.Owner(true))
}

// TestLogShowBranch: history, listings and file bytes through the CLI.
func TestLogShowBranch(t *testing.T) {
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "src")
	writeTree(t, src, 6)
	settle(t, src)
	h.ok("import", src, "-m", "first")
	if err := os.WriteFile(filepath.Join(src, "d0", "f1.txt"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var second struct {
		Commit    string `json:"commit"`
		FilesRead int64  `json:"files_read"`
	}
	h.okJSON(&second, "import", src, "-m", "second")
	if second.FilesRead != 1 {
		t.Errorf("re-import after changing one file read %d files; want 1", second.FilesRead)
	}
	r := h.ok("log")
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(lines) != 2 || !strings.Contains(lines[0], "second") {
		t.Fatalf("log:\n%s", r.stdout)
	}
	if got := h.ok("show", "main:d0/f1.txt").stdout; got != "changed\n" {
		t.Errorf("show main:d0/f1.txt = %q", got)
	}
	if got := h.ok("show", "main~1:d0/f1.txt").stdout; !strings.HasPrefix(got, "shared") {
		t.Errorf("show main~1:d0/f1.txt = %q", got)
	}
	if got := h.ok("show", second.Commit[:8]+":d0/f1.txt").stdout; got != "changed\n" {
		t.Errorf("show by id prefix = %q", got)
	}
	if r := h.ok("show", "main:d0"); !bytes.Contains([]byte(r.stdout), []byte("f1.txt")) {
		t.Errorf("show main:d0 does not list f1.txt:\n%s", r.stdout)
	}

	// A branch with a commit of its own, which nothing else reaches.
	h.ok("branch", "create", "keep", "--from", "main")
	if r := h.ok("branch"); !strings.Contains(r.stdout, "keep") || !strings.Contains(r.stdout, "main") {
		t.Errorf("branch list:\n%s", r.stdout)
	}
	if err := os.WriteFile(filepath.Join(src, "d0", "f1.txt"), []byte("only on keep\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var kept struct {
		Commit string `json:"commit"`
	}
	h.okJSON(&kept, "import", src, "-b", "keep", "-m", "kept")
	h.ok("branch", "delete", "keep")
	type gcResult struct {
		Store struct {
			Marked       int64 `json:"marked"`
			Removed      int64 `json:"removed"`
			RemovedBytes int64 `json:"removed_bytes"`
			DryRun       bool  `json:"dry_run"`
		} `json:"store"`
	}
	// Within the prune window the deleted branch's commit stays
	// recoverable: the operation log names it, gc keeps it.
	var g gcResult
	h.okJSON(&g, "gc")
	if g.Store.DryRun || g.Store.Marked == 0 || g.Store.Removed != 0 || g.Store.RemovedBytes != 0 {
		t.Errorf("gc within the prune window: %+v; want objects marked and none removed", g.Store)
	}
	if got := h.ok("show", kept.Commit+":d0/f1.txt").stdout; got != "only on keep\n" {
		t.Errorf("the deleted branch's commit after gc: show %s:d0/f1.txt = %q", kept.Commit, got)
	}
	h.ok("branch", "create", "keep", "--from", kept.Commit[:8]) // recoverable by id
	h.ok("branch", "delete", "keep")
	// With --prune 0s only branches and workspaces count: it goes, and
	// main's history stays.
	var g0 gcResult
	h.okJSON(&g0, "gc", "--prune", "0s")
	// At least the commit, its root tree, d0's tree and the new f1.txt.
	if g0.Store.Removed < 4 || g0.Store.RemovedBytes == 0 {
		t.Errorf("gc --prune 0s: %+v; want the deleted branch's commit, trees and file removed", g0.Store)
	}
	if r := h.fails(1, "show", kept.Commit); !strings.Contains(r.stderr, kept.Commit[:8]) {
		t.Errorf("show of the pruned commit does not name it:\n%s", r)
	}
	h.ok("show", second.Commit)
	if got := h.ok("show", "main:d0/f1.txt").stdout; got != "changed\n" {
		t.Errorf("main after gc --prune 0s: show main:d0/f1.txt = %q", got)
	}
	h.fsckClean()
}

// racyMargin is how recent a change may be for the stat cache to distrust
// it (the racy-git rule; docs/snapshot.md).
const racyMargin = 3 * time.Second

// settle waits until every file under dir changed longer ago than the stat
// cache's racy margin, so that a following import may trust all of them.
func settle(t testing.TB, dir string) {
	t.Helper()
	var newest int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		if c := st.Ctim.Nano(); c > newest {
			newest = c
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if wait := time.Until(time.Unix(0, newest).Add(racyMargin + 500*time.Millisecond)); wait > 0 {
		time.Sleep(wait)
	}
}
