package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A Bench is one pass: one user (root or not), one strata store, one
// scratch directory. Scenarios run against it and record Measures.
type Bench struct {
	ctx    context.Context
	cfg    config
	pass   string // "root" or "rootless"
	strata string // the strata binary
	home   string // the pass's store (--home)
	work   string // scratch directory for this pass (removed at the end)
	log    io.Writer

	// drop empties the page cache (after a sync), or is nil when this
	// pass may not.
	drop func() error

	mu       sync.Mutex
	measures []Measure

	imported   bool   // the corpus is imported on branch main
	corpusCopy string // a writable cp -a copy of the corpus, made on demand
}

// logf prints progress on stderr, prefixed with the pass.
func (b *Bench) logf(format string, args ...any) {
	fmt.Fprintf(b.log, "[%s %s] %s\n", time.Now().Format("15:04:05"), b.pass, fmt.Sprintf(format, args...))
}

// record summarizes samples as the Measure scenario/key.
func (b *Bench) record(scenario, key, unit string, samples []float64, note string) Measure {
	m := Measure{Pass: b.pass, Scenario: scenario, Key: key, Unit: unit, Note: note}
	summarize(&m, samples)
	b.mu.Lock()
	b.measures = append(b.measures, m)
	b.mu.Unlock()
	if unit == unitNS {
		b.logf("%s/%s: n=%d p50=%s p99=%s", scenario, key, m.N, fmtDur(m.P50), fmtDur(m.P99))
	} else {
		b.logf("%s/%s: n=%d p50=%.0f %s", scenario, key, m.N, m.P50, unit)
	}
	return m
}

// skip records that scenario/key was not measured in this pass, and why.
func (b *Bench) skip(scenario, key, why string) {
	b.mu.Lock()
	b.measures = append(b.measures, Measure{Pass: b.pass, Scenario: scenario, Key: key, Skip: why})
	b.mu.Unlock()
	b.logf("%s/%s: skipped: %s", scenario, key, why)
}

// cancelled reports whether the run was interrupted.
func (b *Bench) cancelled() error { return b.ctx.Err() }

// cmdError is a failed command with its output, for messages.
type cmdError struct {
	argv   []string
	err    error
	stderr string
}

func (e *cmdError) Error() string {
	msg := strings.TrimSpace(e.stderr)
	if len(msg) > 800 {
		msg = msg[:800] + "…"
	}
	return fmt.Sprintf("%s: %v: %s", strings.Join(e.argv, " "), e.err, msg)
}

func (e *cmdError) Unwrap() error { return e.err }

// run runs argv in dir with extra environment and returns its stdout, and
// the time from start to exit. Only the command is timed: preparing it and
// reading its output afterwards are not.
func (b *Bench) run(dir string, env []string, argv ...string) (string, time.Duration, error) {
	cmd := exec.CommandContext(b.ctx, argv[0], argv[1:]...)
	// On an interrupt, let the command clean up after itself (strata
	// removes what a half-made workspace left) before it is killed.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	cmd.Dir = dir
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	if err != nil {
		return out.String(), d, &cmdError{argv: argv, err: err, stderr: errb.String() + out.String()}
	}
	return out.String(), d, nil
}

// must runs argv and returns its stdout, or an error.
func (b *Bench) must(dir string, argv ...string) (string, error) {
	out, _, err := b.run(dir, nil, argv...)
	return out, err
}

// st runs strata --home HOME args... and returns its stdout and duration.
func (b *Bench) st(args ...string) (string, time.Duration, error) {
	return b.run("", nil, append([]string{b.strata, "--home", b.home}, args...)...)
}

// stJSON runs strata --home HOME --json args... and decodes its output.
func (b *Bench) stJSON(v any, args ...string) (time.Duration, error) {
	out, d, err := b.st(append([]string{"--json"}, args...)...)
	if err != nil {
		return d, err
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		return d, fmt.Errorf("strata --json %s: decoding %q: %w", strings.Join(args, " "), out, err)
	}
	return d, nil
}

// wsPath is the host path of a workspace's merged view (starting it).
func (b *Bench) wsPath(name string) (string, error) {
	var info struct {
		Path string `json:"path"`
	}
	if _, err := b.stJSON(&info, "ws", "path", name); err != nil {
		return "", err
	}
	if info.Path == "" {
		return "", fmt.Errorf("strata ws path %s: no path in output", name)
	}
	return info.Path, nil
}

// ensureCorpus imports the shared corpus onto branch main once per pass,
// and materializes its layer by creating (and removing) one workspace, so
// that no later measurement pays for either. Both are recorded.
func (b *Bench) ensureCorpus() error {
	if b.imported {
		return nil
	}
	if _, err := os.Stat(b.home); err != nil {
		if _, _, err := b.st("-q", "init"); err != nil {
			return err
		}
	}
	b.logf("importing the corpus %s", b.cfg.corpus)
	_, d, err := b.st("-q", "import", b.cfg.corpus, "-b", "main")
	if err != nil {
		return err
	}
	b.record("setup", "import", unitNS, []float64{float64(d)}, "")
	syncFS()
	// The first workspace of a commit materializes its layer (once per
	// commit, cached); that is not what the workspace scenarios measure.
	_, d1, err := b.st("-q", "ws", "create", "setup-first")
	if err != nil {
		return err
	}
	_, d2, err := b.st("exec", "setup-first", "--", "true")
	if err != nil {
		return err
	}
	b.record("setup", "first-create", unitNS, []float64{float64(d1 + d2)}, "")
	if _, _, err := b.st("-q", "ws", "rm", "--force", "setup-first"); err != nil {
		return err
	}
	syncFS()
	b.imported = true
	return nil
}

// copyCorpus returns a writable cp -a copy of the corpus in the pass's
// scratch directory (untimed; made once per pass).
func (b *Bench) copyCorpus() (string, error) {
	if b.corpusCopy != "" {
		return b.corpusCopy, nil
	}
	dst := filepath.Join(b.work, "corpus-copy")
	b.logf("copying the corpus to %s", dst)
	if _, err := b.must("", "cp", "-a", b.cfg.corpus, dst); err != nil {
		return "", err
	}
	syncFS()
	b.corpusCopy = dst
	return dst, nil
}

// cleanupWorkspaces removes every workspace of the pass's store: it ends
// their keepers and frees their tmpfs directories.
func (b *Bench) cleanupWorkspaces() { b.cleanupHome(b.home) }

// cleanupHome removes every workspace of the store at home.
func (b *Bench) cleanupHome(home string) {
	if _, err := os.Stat(filepath.Join(home, "strata.db")); err != nil {
		return
	}
	// A fresh context: this also runs after an interrupt.
	cmd := exec.Command(b.strata, "--home", home, "--json", "ws", "list")
	out, err := cmd.Output()
	if err != nil {
		b.logf("cleanup: ws list: %v", err)
		return
	}
	var names []string
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var w struct {
			Name string `json:"name"`
		}
		if err := dec.Decode(&w); err != nil {
			break
		}
		names = append(names, w.Name)
	}
	if len(names) == 0 {
		return
	}
	args := append([]string{"--home", home, "-q", "ws", "rm", "--force"}, names...)
	if out, err := exec.Command(b.strata, args...).CombinedOutput(); err != nil {
		b.logf("cleanup: ws rm: %v: %s", err, out)
	}
}

// removeAll removes a scratch tree, making read-only directories (layers,
// node_modules copies) writable first when not root. It first detaches
// any mount left under dir, so that it never deletes through one.
func removeAll(dir string) error {
	if mounts := mountsUnder(dir); len(mounts) > 0 {
		for _, m := range mounts {
			_ = exec.Command(fuseUnmount()[0], "-u", "-z", m).Run()
			_ = unix.Unmount(m, unix.MNT_DETACH)
		}
		if left := mountsUnder(dir); len(left) > 0 {
			return fmt.Errorf("not removing %s: %s still mounted", dir, strings.Join(left, ", "))
		}
	}
	if err := os.RemoveAll(dir); err == nil {
		return nil
	}
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o755)
		}
		return nil
	})
	return os.RemoveAll(dir)
}

// mountsUnder lists the mount points at or below dir (this process's
// mount namespace), deepest first.
func mountsUnder(dir string) []string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMountinfo(f[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// unescapeMountinfo undoes the octal escapes (\040 for a space) of
// /proc/self/mountinfo.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var sb strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				sb.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		sb.WriteByte(s[i])
	}
	return sb.String()
}

// syncFS flushes dirty pages so that writeback from setup does not land
// inside a later measurement.
func syncFS() { syscall.Sync() }

// duBytes is the apparent size of the files under dir (du -sb without
// the subprocess); missing directories count 0.
func duBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// appendLine appends a line to a file (the 1-file edit of the commit
// scenario).
func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(line + "\n"); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// lookTool reports whether a peer tool is installed.
func lookTool(name string) bool {
	_, err := exec.LookPath(name)
	return err == nil
}

var errNoDrop = errors.New("not permitted to drop the page cache")
