#!/usr/bin/env bash
# make cover: coverage of every package, from the unit tests and from the
# integration passes (root and rootless) that drive coverage-instrumented
# strata, strata-core and strata-init binaries (go build -cover), merged. Prints one row
# per package: unit, integration, merged.
#
#   COVER_DIR=DIR   keep the raw data (covdata directories, cover.out) there
#   IT_ARGS=...     passed to the integration test binary (e.g. -test.run X)
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
dir=${COVER_DIR:-$(mktemp -d /tmp/strata-cover.XXXXXX)}
mkdir -p "$dir"
chmod 755 "$dir"
rm -rf "$dir/unit" "$dir/it" "$dir/merged" "$dir/bin"
mkdir -p "$dir/unit" "$dir/it" "$dir/merged" "$dir/bin"
# The rootless pass and the processes it starts write here too.
chmod 1777 "$dir/it"
pkgs=$($GO list ./... | grep -v /integration | paste -sd, -)

echo "== cover: unit tests"
$GO test -count=1 -cover -covermode=atomic -coverpkg="$pkgs" ./... -args -test.gocoverdir="$dir/unit" >"$dir/unit.log" 2>&1 ||
  { cat "$dir/unit.log"; echo "cover: unit tests failed"; exit 1; }

echo "== cover: integration tests (instrumented binaries)"
flags=(-trimpath -tags urfave_cli_no_docs -cover -covermode=atomic -coverpkg="$pkgs")
# strata-init stays uninstrumented: it runs with the workspace's
# environment (no GOCOVERDIR), where an instrumented binary would print a
# warning into the command's stderr; nsexec's unit tests cover it.
$GO build "${flags[@]}" -o "$dir/bin/strata" ./cmd/strata
$GO build "${flags[@]}" -o "$dir/bin/strata-core" ./cmd/strata-core
$GO build "${flags[@]}" -o "$dir/bin/strata-mcp" ./cmd/strata-mcp
CGO_ENABLED=0 $GO build -trimpath -o "$dir/bin/strata-init" ./cmd/strata-init
chmod 755 "$dir/bin" "$dir/bin/"*
it=0
GOCOVERDIR="$dir/it" STRATA_BIN_DIR="$dir/bin" bash scripts/integration.sh || it=1

itdirs=$(find "$dir/it" -mindepth 1 -maxdepth 1 -type d | paste -sd, -)
itdirs=${itdirs:-$dir/it}
$GO tool covdata merge -i="$dir/unit,$itdirs" -o="$dir/merged"
$GO tool covdata textfmt -i="$dir/merged" -o="$dir/cover.out"
percent() { # percent DIR: "pkg pct" lines
  $GO tool covdata percent -i="$1" | awk '$1 != "" { p = $1; sub(/\t.*/, "", p); for (i = 1; i <= NF; i++) if ($i ~ /%$/) v = $i; print p, v }'
}
join -a1 -e - -o 0,1.2,2.2 <(percent "$dir/unit" | sort) <(percent "$itdirs" | sort) >"$dir/a"
join -a1 -e - -o 0,1.2,1.3,2.2 "$dir/a" <(percent "$dir/merged" | sort) >"$dir/table"
echo
printf '| %-45s | %8s | %12s | %8s |\n' package unit integration merged
printf '|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..47})" "---------:" "-------------:" "---------:"
while read -r p u i m; do
  name=${p#github.com/stratafs/strata/}
  [ "$p" = github.com/stratafs/strata ] && name="strata (root package)"
  printf '| %-45s | %8s | %12s | %8s |\n' "$name" "$u" "$i" "$m"
done <"$dir/table"
echo
echo "cover: total (merged): $($GO tool cover -func="$dir/cover.out" | awk '/^total:/ { print $NF }')"
echo "cover: raw data in $dir (go tool cover -html=$dir/cover.out)"
if [ $it -ne 0 ]; then
  echo "cover: integration tests failed (see above): the figures count what ran"
  exit 1
fi
