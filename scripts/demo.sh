#!/usr/bin/env bash
# make demo: the main job end to end on a sample project generated here,
# with the embedded store (one SQLite file). Everything lives in a temporary
# directory that is removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
S=${STRATA_BIN:-$PWD/bin/strata}
work=$(mktemp -d "${TMPDIR:-/tmp}/strata-demo.XXXXXX")
cleanup() { chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
export STRATA_HOME=$work/store
proj=$work/proj

step() { printf '\n\033[1m$ strata %s\033[0m\n' "$*"; "$S" "$@"; }
note() { printf '\n# %s\n' "$*"; }

note "a sample project: sources, a test, a dependency tree with symlinks and a hardlink, odd names"
mkdir -p "$proj"/{src,test,node_modules/left-pad,node_modules/.bin,.venv/bin,build/empty}
cat >"$proj/src/greet.sh" <<'EOF'
#!/bin/sh
greet() { echo "hello, $1"; }
EOF
cat >"$proj/test/run.sh" <<'EOF'
#!/bin/sh
. "$(dirname "$0")/../src/greet.sh"
[ "$(greet world)" = "hello, world" ] && echo "test: ok"
EOF
chmod +x "$proj/test/run.sh" "$proj/src/greet.sh"
echo 'module.exports = (s, n) => s.padStart(n)' >"$proj/node_modules/left-pad/index.js"
ln -s ../left-pad/index.js "$proj/node_modules/.bin/left-pad"
ln -s /usr/bin/python3 "$proj/.venv/bin/python"
ln "$proj/node_modules/left-pad/index.js" "$proj/node_modules/left-pad/hardlink.js"
printf 'a name with\na newline\n' >"$proj/$(printf 'odd\nname.txt')"
printf 'bytes\n' >"$proj/$(printf 'latin1-\xe9.txt')"
head -c 3000000 /dev/urandom >"$proj/build/blob.bin"
if command -v git >/dev/null; then
  git -C "$proj" init -q && git -C "$proj" add -A src test && \
    git -C "$proj" -c user.email=demo@example.invalid -c user.name=demo commit -qm "first" && echo "(with a .git)"
fi

note "the stat cache distrusts files changed in the last 3 s (the racy-git rule): let the new files settle"
sleep 3
step init
step import "$proj" -m "first snapshot"

note "edit one file and re-import: only that file is read"
echo '# greet prints a greeting' >>"$proj/src/greet.sh"
step import "$proj" -m "second snapshot"
step log
step show main
step show main:src
step show main:src/greet.sh
step show main~1:src/greet.sh

step export main "$work/export"
note "the export is the project, byte for byte and in metadata:"
diff -r --no-dereference "$proj" "$work/export" && echo "diff -r: identical"
stat -c '%A %h %n' "$work/export/node_modules/left-pad/index.js" "$work/export/node_modules/left-pad/hardlink.js"

note "workspaces: each agent gets its own writable copy, at the project's own path, in milliseconds"
step ws create agent1
step ws create agent2
step exec agent1 -- sh -c 'pwd; ./test/run.sh'
step exec agent1 -- sh -c 'sed -i "s/hello, /hello there, /" src/greet.sh test/run.sh && rm node_modules/left-pad/hardlink.js && echo notes > NOTES.md && ./test/run.sh'
step exec agent2 -- sh -c 'cat NOTES.md 2>/dev/null || echo "agent2 sees none of agent1s changes"'
note "the source project is untouched:"
ls "$proj"
step diff agent1 --stat
step diff agent1 --patch
step commit agent1 -m "agent1: friendlier greeting"
step promote agent1
step log -n 3

note "the sandbox: the agent can work in its workspace, and nothing else"
step exec agent2 --env "REAL_HOME=$HOME" -- sh -c 'ls "$REAL_HOME" 2>&1 | head -1; touch /usr/local/planted 2>&1; unshare -U true 2>&1 | head -1; echo "exit codes pass through"; exit 3' || echo "(exit $?)"
note "one-shot runs: fork, patch, test, discard — the shape of a SWE-bench evaluation"
cat >"$work/fix.diff" <<'PATCH'
--- a/src/greet.sh
+++ b/src/greet.sh
@@ -1,2 +1,2 @@
 #!/bin/sh
-greet() { echo "hello, $1"; }
+greet() { echo "hello, $1"; }  # reviewed
PATCH
step run --from main~2 --patch "$work/fix.diff" --timeout 30s -- ./test/run.sh
step --json run --commit passed/fix --from main~2 --patch "$work/fix.diff" -- ./test/run.sh
step log passed/fix -n 1

step ws list
step ws rm --force agent1 agent2
step gc
step fsck
step doctor || true
note "done; the store was $(du -sh "$STRATA_HOME" | cut -f1) for a $(du -sh "$proj" | cut -f1) project"
