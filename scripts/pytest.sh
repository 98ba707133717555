#!/usr/bin/env bash
# Runs the Python SDK's tests (python/tests) against the real strata binary,
# rootless: as STRATA_TEST_USER when called as root (make test), else as
# yourself; and the SWE-bench example's unit tests (examples/swebench/tests:
# grading and job building, no strata needed). Debian's python3-pytest
# (make deps) runs them.
#
#   STRATA_TEST_USER   the unprivileged user (as root)
#   STRATA_BIN_DIR     the strata, strata-core and strata-init to test (default bin/)
#   PYTEST_ARGS        extra pytest arguments (e.g. -k batch)
set -euo pipefail
cd "$(dirname "$0")/.."
user=${STRATA_TEST_USER:-nobody}
py=${PYTHON:-/usr/bin/python3}
if ! "$py" -c 'import pytest' 2>/dev/null; then
  if [ "${STRATA_TEST_NO_SKIP:-}" = 1 ]; then
    echo "== python tests: FAIL: $py has no pytest (Debian: python3-pytest; make deps)"; exit 1
  fi
  echo "== python tests: skipped: $py has no pytest (Debian: python3-pytest; make deps)"; exit 0
fi
# The container images of the image test (make images builds them).
export STRATA_IMAGES=${STRATA_IMAGES:-${STRATA_CACHE:-/var/tmp/strata-cache}/images}
# Copies where an unprivileged user can read and run them: the checkout may
# sit under a home directory only its owner can enter.
tmp=$(mktemp -d /var/tmp/strata-py.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cp "${STRATA_BIN_DIR:-bin}/strata" "${STRATA_BIN_DIR:-bin}/strata-core" "${STRATA_BIN_DIR:-bin}/strata-init" "$tmp/"
# strata-mcp, the MCP server `strata mcp` execs, and strata-full, the CLI
# a lean strata-core hands import --git/--image, export-git, push and pull
# to (each absent from some builds: old ones, make cover's).
for b in strata-mcp strata-full; do
  if [ -e "${STRATA_BIN_DIR:-bin}/$b" ]; then cp "${STRATA_BIN_DIR:-bin}/$b" "$tmp/"; chmod 755 "$tmp/$b"; fi
done
mkdir "$tmp/python"
cp -r python/pyproject.toml python/README.md python/_build python/src python/tests "$tmp/python/"
mkdir -p "$tmp/examples"
cp -r examples/swebench "$tmp/examples/"
find "$tmp/python" -name __pycache__ -prune -exec rm -rf {} +
chmod -R a+rX "$tmp"
run() {
  STRATA_BIN="$tmp/strata" "$py" -m pytest -q -p no:cacheprovider ${PYTEST_ARGS:-} "$tmp/python/tests" "$tmp/examples/swebench/tests"
}
echo "== python tests (rootless)"
if [ "$(id -u)" -eq 0 ]; then
  uid=$(id -u "$user"); gid=$(id -g "$user")
  home=$(mktemp -d /var/tmp/strata-py-home.XXXXXX)
  chown "$uid:$gid" "$home"
  trap 'rm -rf "$tmp" "$home"' EXIT
  (cd "$home" && setpriv --reuid="$uid" --regid="$gid" --init-groups \
     env HOME="$home" TMPDIR="$home" XDG_DATA_HOME="$home/.local/share" XDG_CACHE_HOME="$home/.cache" \
     STRATA_BIN="$tmp/strata" "$py" -m pytest -q -p no:cacheprovider ${PYTEST_ARGS:-} "$tmp/python/tests" "$tmp/examples/swebench/tests")
else
  run
fi
