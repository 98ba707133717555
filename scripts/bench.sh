#!/usr/bin/env bash
# make bench: strata against its peers (git worktree + cp, fuse-overlayfs,
# restic, git), side by side, as root and rootless, in one run. Prints
# markdown tables and writes them to $BENCH_OUT (default
# /tmp/strata-bench/results.md). Method and latest results: docs/bench.md.
#
#   BENCH_QUICK=1        small N: a smoke run of a few minutes
#   BENCH_ONLY=a,b       scenarios: create peers reads commit sandbox runs view mcp deltas push floor images backends
#                        (or issues: workspaces commit sandbox runs view mcp store share hotpath environments backends)
#   BENCH_OUT=FILE       results file
#   BENCH_DOC=FILE       also replace the results section of FILE (docs/bench.md)
#   BENCH_USER=NAME      the rootless user (default strata-test, else nobody)
#   BENCH_ROOTLESS=0     skip the rootless pass
#   BENCH_CACHE=DIR      generated trees (default /var/tmp/strata-cache/bench-trees)
#   BENCH_BASE_REV=REV   the baseline of the view scenario's before/after rows: a
#                        git revision built beside this one (default: the merge-base
#                        with main when HEAD is not on it; none: no baseline)
#   STRATA_CORPUS=DIR    the shared corpus (make corpus)
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
missing=()
for t in git fuse-overlayfs restic zstd skopeo docker-registry podman runc; do
  command -v "$t" >/dev/null || missing+=("$t")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "bench: missing ${missing[*]}: the rows that need them say n/a (bash scripts/deps.sh --bench installs them)" >&2
fi
# The binaries go where the unprivileged user can run them: the checkout
# may sit under a home directory only its owner can enter.
tmp=$(mktemp -d /tmp/strata-bench-bin.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp"
$GO build -trimpath -o "$tmp/bench" ./integration/bench
# The floor scenario's Go floors (integration/bench/floorgo): static, as
# the strata binaries are.
CGO_ENABLED=0 $GO build -trimpath -o "$tmp/floor-go-hello" ./integration/bench/floorgo/hello
CGO_ENABLED=0 $GO build -trimpath -o "$tmp/floor-go-sqlite" ./integration/bench/floorgo/sqlite
cp bin/strata bin/strata-core bin/strata-full bin/strata-init bin/strata-mcp "$tmp/"
chmod 755 "$tmp/floor-go-hello" "$tmp/floor-go-sqlite" "$tmp/bench" "$tmp/strata" "$tmp/strata-core" "$tmp/strata-full" "$tmp/strata-init" "$tmp/strata-mcp"
# The images scenario runs examples/swebench (with the Python SDK beside
# it) as the rootless user too: a copy it can read.
mkdir -p "$tmp/src/examples" "$tmp/src/python"
cp -r examples/swebench "$tmp/src/examples/" && cp -r python/src "$tmp/src/python/"
find "$tmp/src" -name __pycache__ -prune -exec rm -rf {} +
chmod -R a+rX "$tmp/src"
export BENCH_SRC="$tmp/src"
export STRATA_IMAGES=${STRATA_IMAGES:-${STRATA_CACHE:-/var/tmp/strata-cache}/images}
# The baseline for the view scenario: the same build of an earlier
# revision (git archive: no worktree is registered), beside its strata-init.
base_rev=${BENCH_BASE_REV:-}
if [ -z "$base_rev" ] && git rev-parse -q --verify main >/dev/null 2>&1; then
  mb=$(git merge-base HEAD main 2>/dev/null || true)
  if [ -n "$mb" ] && [ "$mb" != "$(git rev-parse HEAD)" ]; then base_rev=$mb; fi
fi
if [ -n "$base_rev" ] && [ "$base_rev" != none ]; then
  short=$(git rev-parse --short "$base_rev")
  echo "bench: building the baseline $short for the view scenario" >&2
  mkdir -p "$tmp/base-src" "$tmp/base"
  git archive "$base_rev" | tar -x -C "$tmp/base-src"
  # A revision from before the front (cmd/strata-core) has one CLI binary.
  (cd "$tmp/base-src" && $GO build -trimpath -tags urfave_cli_no_docs -o bin/strata ./cmd/strata &&
    CGO_ENABLED=0 $GO build -trimpath -tags urfave_cli_no_docs -o bin/strata-init ./cmd/strata-init &&
    if [ -d cmd/strata-core ]; then CGO_ENABLED=0 $GO build -trimpath -tags urfave_cli_no_docs -o bin/strata-core ./cmd/strata-core; fi)
  # Copied, as the current binaries are: files written alike start alike.
  cp "$tmp/base-src/bin/"strata* "$tmp/base/"
  chmod 755 "$tmp/base" "$tmp/base/"strata*
  rm -rf "$tmp/base-src"
  export BENCH_BASE="$tmp/base/strata" BENCH_BASE_REV="$short"
fi
rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ -n "$(git status --porcelain 2>/dev/null | head -1)" ]; then rev="$rev + uncommitted changes"; fi
cmd="make bench"
[ "${BENCH_QUICK:-}" = 1 ] && cmd="BENCH_QUICK=1 $cmd"
[ -n "${BENCH_ONLY:-}" ] && cmd="BENCH_ONLY=$BENCH_ONLY $cmd"
[ -n "${BENCH_DOC:-}" ] && cmd="BENCH_DOC=$BENCH_DOC $cmd"
# Executables written a moment ago start about a millisecond slower than
# the same bytes once their pages have been read back (measured on ext4):
# start every binary from the same page cache state.
sync
if [ "$(id -u)" -eq 0 ]; then echo 3 > /proc/sys/vm/drop_caches || true; fi
export BENCH_REV="${BENCH_REV:-$rev}" BENCH_COMMAND="${BENCH_COMMAND:-$cmd}"
export STRATA_CORPUS=${STRATA_CORPUS:-/var/tmp/strata-cache/corpus}
"$tmp/bench" -strata "$tmp/strata"
