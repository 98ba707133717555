#!/usr/bin/env bash
# Start-up cost of strata's dependencies, one at a time (docs/hotpath.md):
# builds a hello-world Go binary, the same binary linking each of
# strata's large dependencies, and strata itself, then times them and
# the floors (spawning /bin/true, `unshare -Urm true`, `bwrap --bind / /
# true`) interleaved, N rounds, medians (and hyperfine / perf stat when
# HOTPATH_HYPERFINE=1 / HOTPATH_PERF=1).
#
#   HOTPATH_N=500          rounds of the interleaved timer
#   HOTPATH_STRATA=BIN     strata binaries to time (space-separated; default bin/strata)
#
# Run from the repository (needs the module cache: go mod download).
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
N=${HOTPATH_N:-500}
# _hotpath is inside the module (so the deps resolve) and ignored by ./...
src=_hotpath
out=$(mktemp -d /tmp/strata-hotpath.XXXXXX)
trap 'rm -rf "$src" "$out"' EXIT
rm -rf "$src"; mkdir -p "$src"

prog() { # name, cgo(0|1), imports, body
  mkdir -p "$src/$1"
  printf 'package main\n\nimport (\n\t"os"\n%s\n)\n\nfunc main() {\n\tif len(os.Args) > 99 {\n%s\n\t}\n}\n' "$3" "$4" > "$src/$1/main.go"
  CGO_ENABLED=$2 $GO build -trimpath -o "$out/$1" "./$src/$1"
}
prog hello 0 '' ''
prog hello-cgo 1 $'\t// #include <unistd.h>\n\t"C"' $'\t\tC.getpid()'
prog sqlite 0 $'\t"database/sql"\n\t_ "modernc.org/sqlite"' $'\t\tsql.Open("sqlite", os.Args[1])'
prog go-git 0 $'\tgit "github.com/go-git/go-git/v5"' $'\t\tgit.PlainOpen(os.Args[1])'
prog ggcr 0 $'\t"github.com/google/go-containerregistry/pkg/v1/remote"\n\t"github.com/google/go-containerregistry/pkg/name"' $'\t\tr, _ := name.ParseReference(os.Args[1])\n\t\tremote.Image(r)'
prog urfave 0 $'\tcli "github.com/urfave/cli/v2"' $'\t\t(&cli.App{}).Run(os.Args)'
prog zstd 0 $'\t"github.com/klauspost/compress/zstd"' $'\t\tzstd.NewReader(os.Stdin)'
prog mcp-sdk 0 $'\t"github.com/modelcontextprotocol/go-sdk/mcp"' $'\t\tmcp.NewServer(&mcp.Implementation{Name: "x"}, nil)'
prog progressbar 0 $'\t"github.com/schollz/progressbar/v3"' $'\t\tprogressbar.Default(1)'
prog libseccomp 1 $'\tlibseccomp "github.com/seccomp/libseccomp-golang"' $'\t\tlibseccomp.GetLibraryVersion()'
# The interleaved timer: fork+exec+wait each command in turn, N rounds.
mkdir -p "$src/timer"
cat > "$src/timer/main.go" <<'GO'
package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"
)

func main() {
	var n int
	fmt.Sscan(os.Args[1], &n)
	var cmds [][]string
	for _, c := range os.Args[2:] {
		cmds = append(cmds, strings.Fields(c))
	}
	null, _ := os.OpenFile("/dev/null", os.O_RDWR, 0)
	attr := &syscall.ProcAttr{Env: os.Environ(), Files: []uintptr{null.Fd(), null.Fd(), 2}}
	samples := make([][]time.Duration, len(cmds))
	for i := -10; i < n; i++ {
		for j, c := range cmds {
			t := time.Now()
			pid, err := syscall.ForkExec(c[0], c, attr)
			if err != nil {
				fmt.Fprintln(os.Stderr, c, err)
				os.Exit(1)
			}
			var ws syscall.WaitStatus
			syscall.Wait4(pid, &ws, 0, nil)
			d := time.Since(t)
			if ws.ExitStatus() != 0 {
				fmt.Fprintln(os.Stderr, c, "exit", ws.ExitStatus())
				os.Exit(1)
			}
			if i >= 0 {
				samples[j] = append(samples[j], d)
			}
		}
	}
	fmt.Printf("| command | N | p10 | p50 | p90 |\n|---|---:|---:|---:|---:|\n")
	for j, c := range cmds {
		s := samples[j]
		slices.Sort(s)
		q := func(p float64) string { return fmt.Sprintf("%.2f ms", float64(s[int(p*float64(len(s)-1))])/1e6) }
		fmt.Printf("| `%s` | %d | %s | %s | %s |\n", strings.Join(c, " "), len(s), q(0.1), q(0.5), q(0.9))
	}
}
GO
CGO_ENABLED=0 $GO build -o "$out/timer" "./$src/timer"
strata_bins=${HOTPATH_STRATA:-bin/strata}
cmds=("$out/hello" "$out/hello-cgo" "$out/sqlite" "$out/go-git" "$out/ggcr" "$out/urfave" "$out/zstd" "$out/mcp-sdk" "$out/progressbar" "$out/libseccomp")
for s in $strata_bins; do
  cp "$s" "$out/$(basename "$s")-$(echo "$s" | md5sum | cut -c1-4)"
  cmds+=("$out/$(basename "$s")-$(echo "$s" | md5sum | cut -c1-4) --version")
done
cmds+=("/bin/true" "/usr/bin/unshare -Urm /bin/true")
command -v bwrap >/dev/null && cmds+=("$(command -v bwrap) --bind / / /bin/true")
echo "sizes:"; ls -l "$out" | awk 'NR>1 {printf "  %-24s %6.1f MB\n", $9, $5/1e6}'
for f in "$out"/*; do file "$f" | grep -q 'statically linked' && echo "  $(basename "$f"): static"; done
sync; [ "$(id -u)" = 0 ] && echo 3 > /proc/sys/vm/drop_caches || true
echo; echo "interleaved, N=$N, load $(cut -d' ' -f1-3 /proc/loadavg):"
"$out/timer" "$N" "${cmds[@]}"
echo "load at end $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "${HOTPATH_HYPERFINE:-}" = 1 ]; then
  hyperfine -N --warmup 20 --runs "$N" --style basic "${cmds[@]}" 2>&1 | grep -E 'Benchmark|Time'
fi
if [ "${HOTPATH_PERF:-}" = 1 ]; then
  for c in "${cmds[@]}"; do
    echo "perf stat: $c"
    perf stat -r 100 -e task-clock,page-faults,context-switches $c 2>&1 >/dev/null | grep -E 'task-clock|page-faults|elapsed'
  done
fi
