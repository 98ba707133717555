#!/usr/bin/env bash
# Runs the integration tests against the real kernel: as root, then as an
# unprivileged user. Called by `make integration` (part of `make test`).
#
#   STRATA_TEST_USER   the unprivileged user for the second pass (as root)
#   STRATA_CORPUS      the shared corpus (built by make corpus)
#   STRATA_TEST_NO_SKIP=1  capability-gated skips fail (CI sets it)
#   IT_ARGS            extra arguments for the test binary (e.g. -test.run X)
#   STRATA_BIN_DIR     the strata, strata-core and strata-init to test (default bin/)
#   GOCOVERDIR         where coverage-instrumented binaries write (make cover)
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
user=${STRATA_TEST_USER:-nobody}
# The binaries go where an unprivileged user can run them: the checkout may
# sit under a home directory only its owner can enter.
tmp=$(mktemp -d /tmp/strata-it.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp"
$GO test -tags integration -c -o "$tmp/integration.test" ./integration
# STRATA_BIN_DIR: where strata, strata-core and strata-init come from (make cover
# passes coverage-instrumented ones).
cp "${STRATA_BIN_DIR:-bin}/strata" "${STRATA_BIN_DIR:-bin}/strata-core" "${STRATA_BIN_DIR:-bin}/strata-init" "$tmp/"
# strata-mcp, the MCP server `strata mcp` execs, and strata-full, the CLI
# a lean strata-core hands import --git/--image, export-git, push and pull
# to (each absent from some builds: old ones, make cover's).
for b in strata-mcp strata-full; do
  if [ -e "${STRATA_BIN_DIR:-bin}/$b" ]; then cp "${STRATA_BIN_DIR:-bin}/$b" "$tmp/"; chmod 755 "$tmp/$b"; fi
done
chmod 755 "$tmp/integration.test" "$tmp/strata" "$tmp/strata-core"
# What the SWE-bench test runs besides strata: the example harness, the
# Python SDK it imports, the image push script.
mkdir -p "$tmp/src/examples" "$tmp/src/python" "$tmp/src/scripts"
cp -r examples/swebench "$tmp/src/examples/" && cp -r python/src "$tmp/src/python/" && cp scripts/images.sh "$tmp/src/scripts/"
find "$tmp/src" -name __pycache__ -prune -exec rm -rf {} +
chmod -R a+rX "$tmp/src"
export STRATA_SRC="$tmp/src"
export STRATA_BIN="$tmp/strata"
export GOTRACEBACK=all
# The container images of the image tests (make images builds them).
export STRATA_IMAGES=${STRATA_IMAGES:-${STRATA_CACHE:-/var/tmp/strata-cache}/images}
timeout=${IT_TIMEOUT:-12m}
pass() { # pass LABEL CMD...
  local label=$1; shift
  echo "== integration tests ($label)"
  local start=$SECONDS
  if ! "$@" -test.count=1 -test.timeout "$timeout" ${IT_ARGS:-}; then
    echo "== integration tests ($label): FAIL"
    return 1
  fi
  echo "== integration tests ($label): ok in $((SECONDS - start))s"
}
# Both passes run even when the first fails, so that one run shows every
# failure; the script fails if either did.
failed=0
# Reflink filesystems (internal/testutil/loopfs.go): a real XFS and a real
# Btrfs on loop devices, made here as root because the rootless pass cannot
# mount; each has a directory the test user owns, named to both passes in
# STRATA_TEST_XFS / STRATA_TEST_BTRFS, and all is unmounted at exit.
loopfs=""
loopfs_setup() {
  local uid=$1 gid=$2 t mkfs
  loopfs=$(mktemp -d /var/tmp/strata-it-loopfs.XXXXXX)
  chmod 755 "$loopfs"
  for t in xfs btrfs; do
    mkfs=(mkfs.xfs -q -m reflink=1); [ $t = btrfs ] && mkfs=(mkfs.btrfs -q)
    if ! command -v "${mkfs[0]}" >/dev/null; then echo "== no ${mkfs[0]}: the $t tests skip (make deps installs it)"; continue; fi
    truncate -s 4G "$loopfs/$t.img" && "${mkfs[@]}" "$loopfs/$t.img" >/dev/null && mkdir "$loopfs/$t" &&
      mount -o loop "$loopfs/$t.img" "$loopfs/$t" && mkdir "$loopfs/$t/tests" &&
      chown "$uid:$gid" "$loopfs/$t/tests" || { echo "== cannot make the $t filesystem"; continue; }
    if [ $t = xfs ]; then export STRATA_TEST_XFS=$loopfs/xfs/tests; else export STRATA_TEST_BTRFS=$loopfs/btrfs/tests; fi
  done
}
loopfs_teardown() {
  [ -n "$loopfs" ] || return 0
  local t
  for t in xfs btrfs; do mountpoint -q "$loopfs/$t" && { umount "$loopfs/$t" || umount -l "$loopfs/$t"; }; done
  rm -rf "$loopfs"
}
# The third pass: the rootless pass once more where user namespaces are
# denied, the two ways real hosts deny them — inside bwrap --unshare-user
# --disable-userns (a nested user namespace then fails with ENOSPC, as
# under user.max_user_namespaces=0) and under a seccomp filter refusing
# CLONE_NEWUSER (the test binary re-executes itself as the launcher that
# loads it, as container runtimes' default profiles do). Only the suites
# that apply run there (STRATA_TEST_USERNS_DENIED tells them the denial):
# workspaces of the namespace-free backends, runs and batches, the
# escapes and the workflow without namespaces, doctor (not the backends'
# commit conformance: reading a tree involves no namespace). With IT_ARGS
# naming tests (-test.run), the pass runs those of the list it selects.
denied_tests="TestBackendWorkspace TestBackendRuns TestBackendRefused TestBackendMCP TestNoNSEscapes TestSandboxWorkflow TestDoctorUserNSDenied"
# Under seccomp, the tests where how the denial shows matters (the probe,
# auto's choice, doctor's diagnosis, the fence): the rest behave alike once
# auto has chosen, and ran under bwrap (CI's 30 minutes).
denied_tests_seccomp="TestBackendWorkspace TestBackendRuns TestNoNSEscapes TestDoctorUserNSDenied"
denied_passes() { # denied_passes PREFIX... (how to become the test user, if at all)
  local run_pat rest listed="" sel=() t how pat
  run_pat=$(sed -n 's/.*-test\.run[= ]\([^ ]*\).*/\1/p' <<<"${IT_ARGS:-}")
  rest=$(sed 's/-test\.run[= ][^ ]*//' <<<"${IT_ARGS:-}")
  [ -n "$run_pat" ] && listed=$("$tmp/integration.test" -test.list "$run_pat" 2>/dev/null || true)
  for t in $denied_tests; do
    if [ -z "$run_pat" ] || grep -qx "$t" <<<"$listed"; then sel+=("$t"); fi
  done
  if [ ${#sel[@]} -eq 0 ]; then
    echo "== integration tests (user namespaces denied): none of IT_ARGS's tests apply"
    return 0
  fi
  for how in bwrap seccomp; do
    local run=()
    for t in "${sel[@]}"; do
      if [ $how = bwrap ] || [[ " $denied_tests_seccomp " == *" $t "* ]]; then run+=("$t"); fi
    done
    [ ${#run[@]} -gt 0 ] || continue
    pat="^($(IFS='|'; echo "${run[*]}"))\$"
    local wrap=(bwrap --unshare-user --disable-userns --dev-bind / / --chdir "$PWD" --)
    [ $how = seccomp ] && wrap=(env STRATA_IT_SECCOMP_EXEC=1 "$tmp/integration.test")
    IT_ARGS="$rest" pass "$1, user namespaces denied ($how)" "${@:2}" env STRATA_TEST_USERNS_DENIED=$how \
      "${wrap[@]}" "$tmp/integration.test" -test.run "$pat" || return 1
  done
}
if [ "$(id -u)" -eq 0 ]; then
  loopfs_setup "$(id -u "$user")" "$(id -g "$user")"
  trap 'rm -rf "$tmp"; loopfs_teardown' EXIT
  cover=${GOCOVERDIR:-}
  if [ -n "$cover" ]; then mkdir -p "$cover/root"; export GOCOVERDIR=$cover/root; fi
  (cd "$tmp" && pass root ./integration.test) || failed=1
  uid=$(id -u "$user"); gid=$(id -g "$user")
  # Each pass writes its own coverage data: a file one user wrote cannot
  # be replaced by the other in a shared directory.
  if [ -n "$cover" ]; then
    mkdir -p "$cover/user"; chown "$uid:$gid" "$cover/user"; export GOCOVERDIR=$cover/user
  fi
  # Outside /tmp: inside a workspace /tmp is private, and the sandbox tests
  # plant secrets in this home that must be fenced, not merely hidden.
  home=$(mktemp -d /var/tmp/strata-it-home.XXXXXX)
  chown "$uid:$gid" "$home"
  # The user's runtime directory, as a login session has it (the session
  # bus lives there): the view's escape tests put a socket in it.
  rundir=""
  # An empty one that is not the user's (left by an interrupted run) is
  # given to the user: a real session's directory is the user's own.
  if [ -d "/run/user/$uid" ] && [ "$(stat -c %u "/run/user/$uid")" != "$uid" ] && [ -z "$(ls -A "/run/user/$uid")" ]; then
    chown "$uid:$gid" "/run/user/$uid" && chmod 700 "/run/user/$uid"
  fi
  if [ ! -e "/run/user/$uid" ]; then
    rundir="/run/user/$uid"
    mkdir -p "$rundir" && chown "$uid:$gid" "$rundir" && chmod 700 "$rundir"
  fi
  trap 'rm -rf "$tmp" "$home" ${rundir:+"$rundir"}; loopfs_teardown' EXIT
  (cd "$home" && pass "rootless, as $user" setpriv --reuid="$uid" --regid="$gid" --init-groups \
     env HOME="$home" TMPDIR="$home" XDG_DATA_HOME="$home/.local/share" XDG_CACHE_HOME="$home/.cache" \
     "$tmp/integration.test") || failed=1
  (cd "$home" && denied_passes "rootless, as $user" setpriv --reuid="$uid" --regid="$gid" --init-groups \
     env HOME="$home" TMPDIR="$home" XDG_DATA_HOME="$home/.local/share" XDG_CACHE_HOME="$home/.cache") || failed=1
else
  echo "== integration tests (root): skipped, not running as root; CI runs this pass"
  (cd "$tmp" && pass "rootless, as $(id -un)" ./integration.test) || failed=1
  (cd "$tmp" && denied_passes "rootless, as $(id -un)") || failed=1
fi
exit $failed
