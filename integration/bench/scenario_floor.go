package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Issue "hotpath" (14): strata's hot path beside the floor — what the
// kernel and the smallest tools need for the same steps — all interleaved
// in one run: `exec -- true` into a live workspace against `unshare -Urm
// true` and `bwrap --bind / / true`; `ws create --tmpfs` + the first
// `exec -- true` against a C program doing the same namespace and mount
// work (floorC); `run -- true` against spawning /bin/true. Two Go floors
// (floorgo/hello, floorgo/sqlite: built by scripts/bench.sh beside the
// strata binaries) say what any Go process, and any Go process that opens
// a SQLite file with strata's driver, costs here before its first line of
// work: the lower bounds a Go CLI cannot go under (docs/hotpath.md,
// part 6).

// floorC is the C floor: fork; in the child unshare(USER|NS), map the
// caller's uid and gid to 0, make the mounts private, mount a tmpfs on
// the directory argv[1], make lower/upper/work/merged in it, mount an
// overlay (userxattr, as rootless strata does) and exec argv[2...]; the
// parent waits; the namespace, and its mounts, end with the child.
const floorC = `#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void put(const char *path, const char *s) {
	int fd = open(path, O_WRONLY);
	if (fd < 0 || write(fd, s, strlen(s)) < 0) { perror(path); _exit(120); }
	close(fd);
}

int main(int argc, char **argv) {
	if (argc < 3) { fprintf(stderr, "usage: floor DIR CMD...\n"); return 2; }
	const char *dir = argv[1];
	unsigned uid = getuid(), gid = getgid();
	pid_t pid = fork();
	if (pid < 0) { perror("fork"); return 125; }
	if (pid == 0) {
		char b[4096], o[4096];
		if (unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0) { perror("unshare"); _exit(121); }
		put("/proc/self/setgroups", "deny");
		snprintf(b, sizeof b, "0 %u 1", uid); put("/proc/self/uid_map", b);
		snprintf(b, sizeof b, "0 %u 1", gid); put("/proc/self/gid_map", b);
		if (mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) { perror("private"); _exit(122); }
		if (mount("tmpfs", dir, "tmpfs", 0, NULL) < 0) { perror("tmpfs"); _exit(122); }
		const char *sub[] = {"l", "u", "w", "m"};
		for (int i = 0; i < 4; i++) {
			snprintf(b, sizeof b, "%s/%s", dir, sub[i]);
			if (mkdir(b, 0755) < 0) { perror(b); _exit(122); }
		}
		snprintf(o, sizeof o, "lowerdir=%s/l,upperdir=%s/u,workdir=%s/w,userxattr", dir, dir, dir);
		snprintf(b, sizeof b, "%s/m", dir);
		if (mount("overlay", b, "overlay", 0, o) < 0) { perror("overlay"); _exit(123); }
		execv(argv[2], argv + 2);
		perror(argv[2]);
		_exit(127);
	}
	int st;
	if (waitpid(pid, &st, 0) < 0) { perror("waitpid"); return 125; }
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
`

// floorRow is one interleaved row of the floor scenario.
type floorRow struct {
	key, label string
	argv       []string // nil: strata's own rows, run by runFloor
}

func runFloor(b *Bench) error {
	if err := b.ensureCorpus(); err != nil {
		return err
	}
	rows := []floorRow{
		{key: "exec", label: "`strata exec W -- true` into a live workspace (agent sandbox)"},
		{key: "create", label: "`strata ws create --tmpfs` + first `exec -- true`"},
		{key: "run", label: "`strata run -- true` (one-shot: fork, run, discard)"},
		{key: "true", label: "spawning `/bin/true`", argv: []string{"/bin/true"}},
		{key: "unshare", label: "`unshare -Urm true`", argv: []string{"unshare", "-Urm", "true"}},
	}
	if lookTool("bwrap") {
		rows = append(rows, floorRow{key: "bwrap", label: "`bwrap --bind / / true` (Debian's bubblewrap)", argv: []string{"bwrap", "--bind", "/", "/", "true"}})
	} else {
		b.skip("floor", "bwrap", "bwrap is not installed (bash scripts/deps.sh --bench)")
	}
	if bin, err := b.buildFloorC(); err != nil {
		b.skip("floor", "cfloor", err.Error())
	} else {
		mnt := filepath.Join(b.work, "floor-mnt")
		if err := os.MkdirAll(mnt, 0o755); err != nil {
			return err
		}
		rows = append(rows, floorRow{key: "cfloor", label: "C floor: fork + unshare(USER+NS) + uid/gid map + overlay on tmpfs + exec `true` + teardown", argv: []string{bin, mnt, "/bin/true"}})
	}
	// The Go floors, built by scripts/bench.sh beside the strata binary.
	bindir := filepath.Dir(b.strata)
	hello, sqlite := filepath.Join(bindir, "floor-go-hello"), filepath.Join(bindir, "floor-go-sqlite")
	if _, err := os.Stat(hello); err != nil {
		b.skip("floor", "gohello", "no Go floor beside the strata binary (scripts/bench.sh builds it): "+err.Error())
	} else {
		rows = append(rows, floorRow{key: "gohello", label: goHelloLabel, argv: []string{hello}})
	}
	if _, err := os.Stat(sqlite); err != nil {
		b.skip("floor", "gosqlite", "no Go SQLite floor beside the strata binary (scripts/bench.sh builds it): "+err.Error())
	} else {
		// The first run creates the file (WAL, one table), untimed below.
		rows = append(rows, floorRow{key: "gosqlite", label: goSQLiteLabel, argv: []string{sqlite, filepath.Join(b.work, "floor.db")}})
	}
	// A row whose tool fails here (no user namespaces for bwrap, say) is
	// reported as skipped, and the others go on.
	for i := range rows {
		if rows[i].argv == nil {
			continue
		}
		if _, _, err := b.run("", nil, rows[i].argv...); err != nil {
			b.skip("floor", rows[i].key, err.Error())
			rows[i].argv = []string{}
		}
	}
	if _, _, err := b.st("-q", "ws", "create", "floor-live", "--tmpfs"); err != nil {
		return err
	}
	defer b.st("-q", "ws", "rm", "--force", "floor-live")
	samples := map[string][]time.Duration{}
	for i := -3; i < b.cfg.n.exec; i++ { // three unrecorded rounds
		if err := b.cancelled(); err != nil {
			return err
		}
		for _, row := range rows {
			var d time.Duration
			var err error
			switch {
			case row.key == "exec":
				_, d, err = b.st("exec", "floor-live", "--", "true")
			case row.key == "create":
				name := fmt.Sprintf("floor%04d", i+3)
				var dc, de time.Duration
				if _, dc, err = b.st("-q", "ws", "create", name, "--tmpfs"); err == nil {
					_, de, err = b.st("exec", name, "--", "true")
				}
				d = dc + de
				if _, _, rmErr := b.st("-q", "ws", "rm", "--force", name); err == nil {
					err = rmErr
				}
			case row.key == "run":
				_, d, err = b.st("-q", "run", "--tmpfs", "--", "true")
			case len(row.argv) == 0:
				continue // skipped above
			default:
				_, d, err = b.run("", nil, row.argv...)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", row.key, err)
			}
			if i >= 0 {
				samples[row.key] = append(samples[row.key], d)
			}
		}
		if (i+1)%50 == 0 && i > 0 {
			b.logf("floor: %d/%d", i+1, b.cfg.n.exec)
		}
	}
	for _, row := range rows {
		if len(samples[row.key]) > 0 {
			b.record("floor", row.key, unitNS, durs(samples[row.key]), "")
		}
	}
	return nil
}

const (
	goHelloLabel  = "Go floor: a static Go program that does nothing (floorgo/hello)"
	goSQLiteLabel = "Go floor: a static Go program that opens a SQLite file with modernc.org/sqlite and reads a row (floorgo/sqlite)"
)

// buildFloorC compiles floorC into the pass's scratch directory.
func (b *Bench) buildFloorC() (string, error) {
	if !lookTool("gcc") {
		return "", fmt.Errorf("gcc is not installed: no C floor")
	}
	src := filepath.Join(b.work, "floor.c")
	bin := filepath.Join(b.work, "floor")
	if err := os.WriteFile(src, []byte(floorC), 0o644); err != nil {
		return "", err
	}
	if out, err := exec.Command("gcc", "-O2", "-o", bin, src).CombinedOutput(); err != nil {
		return "", fmt.Errorf("gcc floor.c: %v: %s", err, out)
	}
	return bin, nil
}

func reportFloor(r *Results) []Table {
	if !r.has("floor") {
		return nil
	}
	t := Table{
		Title:  "The hot path beside the floor (one run, interleaved)",
		Header: append([]string{"operation", "N"}, passHeader(r.Passes, "p50", "p99", "ratio")...),
	}
	rows := []struct{ key, label, base string }{
		{"exec", "`strata exec W -- true` into a live workspace (agent sandbox)", "unshare"},
		{"create", "`strata ws create --tmpfs` + first `exec -- true`", "cfloor"},
		{"run", "`strata run --tmpfs -- true` (one-shot)", "true"},
		{"true", "spawning `/bin/true`", ""},
		{"unshare", "`unshare -Urm true`", "true"},
		{"bwrap", "`bwrap --bind / / true`", "unshare"},
		{"cfloor", "C floor: fork + unshare(USER+NS) + uid/gid map + overlay mount on tmpfs + exec `true` + teardown", "true"},
		{"gohello", goHelloLabel, "true"},
		{"gosqlite", goSQLiteLabel, "true"},
	}
	for _, row := range rows {
		cells := []string{row.label, nOf(r, "floor", row.key)}
		for _, p := range r.Passes {
			ratio := ""
			if row.base != "" {
				ratio = r.ratio(p, "floor", row.key, row.base, "p50") + " " + row.base
			}
			cells = append(cells, r.cell(p, "floor", row.key, "p50"), r.cell(p, "floor", row.key, "p99"), ratio)
		}
		t.Rows = append(t.Rows, cells)
	}
	var over []string
	for _, p := range r.Passes {
		run, tr := r.value(p, "floor", "run", "p50"), r.value(p, "floor", "true", "p50")
		if run > 0 && tr > 0 {
			over = append(over, fmt.Sprintf("%s %s", p, fmtDelta(run, tr)))
		}
	}
	t.Notes = append([]string{
		"Ratios are p50 ÷ p50 of the row named, in the same pass. Targets from issue 14: `exec -- true` ≤ 2.5 ms and ≤ 1.3× `unshare -Urm true`; `ws create --tmpfs` + first exec ≤ 5 ms and ≤ 2× the C floor; `run -- true` ≤ 5 ms over spawning `/bin/true`.",
		"All rows run interleaved, one of each per round, after three unrecorded rounds; `ws rm` after each create is not timed. The C floor is built by the bench with gcc (integration/bench/scenario_floor.go).",
	}, r.skips("floor")...)
	if len(over) > 0 {
		t.Notes = append(t.Notes, "`run -- true` over spawning `/bin/true` (p50): "+strings.Join(over, ", "))
	}
	t.Notes = append(t.Notes, floorBounds(r)...)
	return []Table{t}
}

// floorBounds are the lower bounds the Go floors put under each target
// (p50s of one pass, added): the Go processes a Go implementation of the
// step must start, each at least gohello, before it does any work —
// beside what the target allows.
//
//   - exec: the front and, from the keeper, the command: gohello + true,
//     against 1.3 × unshare and 2.5 ms;
//   - ws create + first exec: create opens the store (gosqlite), the first
//     exec starts the front and the keeper (in the new user namespace) and
//     the command: gosqlite + 2 × gohello + true; with no store read at
//     create and the keeper started by create off the path, still
//     2 × gohello + true; against 2 × the C floor and 5 ms;
//   - run, over spawning true: the CLI (which opens the store) and the
//     helper that enters the namespaces: gosqlite + gohello, and
//     2 × gohello with no store read; against 5 ms (issue 14) and 10 ms
//     (issue 13);
//   - a commit through the CLI: gosqlite, against 8 ms.
func floorBounds(r *Results) []string {
	var notes []string
	for _, p := range r.Passes {
		v := func(k string) float64 { return r.value(p, "floor", k, "p50") }
		hello, sq, tr, un, cf := v("gohello"), v("gosqlite"), v("true"), v("unshare"), v("cfloor")
		if hello <= 0 || sq <= 0 || tr <= 0 {
			continue
		}
		ms := func(ns float64) string { return fmt.Sprintf("%.1f ms", ns/1e6) }
		var b []string
		if un > 0 {
			b = append(b, fmt.Sprintf("exec ≥ gohello + true = %s = %.2f× unshare (target ≤ 1.3×, ≤ 2.5 ms)", ms(hello+tr), (hello+tr)/un))
		}
		if cf > 0 {
			x, y := sq+2*hello+tr, 2*hello+tr
			b = append(b, fmt.Sprintf("ws create + first exec ≥ gosqlite + 2 × gohello + true = %s = %.2f× the C floor, and with no store read at create and the keeper started off the path ≥ 2 × gohello + true = %s = %.2f× (target ≤ 2×, ≤ 5 ms)", ms(x), x/cf, ms(y), y/cf))
		}
		b = append(b, fmt.Sprintf("run over `/bin/true` ≥ gosqlite + gohello = %s, with no store read ≥ 2 × gohello = %s (targets ≤ 5 ms, issue 14; < 10 ms, issue 13)", ms(sq+hello), ms(2*hello)))
		b = append(b, fmt.Sprintf("a commit through the CLI ≥ gosqlite = %s (target ≤ 8 ms)", ms(sq)))
		notes = append(notes, fmt.Sprintf("Lower bounds for a Go CLI, %s (p50s added; docs/hotpath.md part 6): %s.", p, strings.Join(b, "; ")))
	}
	return notes
}
