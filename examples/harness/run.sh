#!/usr/bin/env bash
# A SWE-bench-shaped evaluation with strata: import a project once, then
# run 50 jobs, each forking it, applying a different small patch and running
# the project's tests (npm test), in parallel, with results as JSON lines.
# About a fifth of the patches break a test on purpose.
#
#   examples/harness/run.sh [PARALLEL]
#
# Uses bin/strata (make build) and the shared corpus (make corpus); set
# STRATA_BIN and STRATA_CORPUS to use others. Everything else lives in a
# temporary directory, removed at the end unless KEEP=1.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
S=${STRATA_BIN:-$root/bin/strata}
corpus=${STRATA_CORPUS:-/var/tmp/strata-cache/corpus}
parallel=${1:-2}
[ -x "$S" ] || { echo "build strata first: make build" >&2; exit 1; }
[ -d "$corpus/node_modules" ] || { echo "no corpus at $corpus: make corpus" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/strata-harness.XXXXXX")
[ "${KEEP:-}" = 1 ] || trap 'rm -rf "$work"' EXIT
export STRATA_HOME=$work/store

echo "== import the project once (tracked files, .git and node_modules)"
"$S" import "$corpus" -m "harness base" >/dev/null
"$S" log -n 1

echo "== 50 tasks: each a patch made the way an agent's arrives (git diff)"
mkdir -p "$work/patches" "$work/repo"
cp -r "$corpus/src" "$corpus/test" "$work/repo/"
git -C "$work/repo" init -q && git -C "$work/repo" add -A &&
  git -C "$work/repo" -c user.name=h -c user.email=h@example.invalid commit -qm base
: >"$work/jobs.jsonl"
for i in $(seq 1 50); do
  git -C "$work/repo" checkout -q -- .
  if [ $((i % 5)) -eq 0 ]; then
    # A broken fix: unknown routes now answer 500, and test "unknown" fails.
    sed -i "s/status: 404/status: 500/" "$work/repo/src/routes.js"
  else
    # A new route, and a test for it.
    sed -i "s#^  return { status: 404#  if (method === 'GET' \&\& url === '/task$i') return { status: 200, body: { task: $i } };\n  return { status: 404#" "$work/repo/src/routes.js"
    cat >"$work/repo/test/task$i.test.js" <<JS
'use strict';
const test = require('node:test');
const assert = require('node:assert');
const { route } = require('../src/routes');
test('task $i', () => assert.deepStrictEqual(route('GET', '/task$i'), { status: 200, body: { task: $i } }));
JS
    git -C "$work/repo" add -N "test/task$i.test.js"
  fi
  git -C "$work/repo" diff >"$work/patches/task$i.diff"
  git -C "$work/repo" reset -q && git -C "$work/repo" clean -qfd
  printf '{"id": "task%d", "patch": "patches/task%d.diff", "cmd": ["npm", "test"], "timeout": "2m"}\n' "$i" "$i" >>"$work/jobs.jsonl"
done
head -c 300 "$work/jobs.jsonl"; echo " ..."

echo "== strata batch: fork + patch + npm test + discard, $parallel at a time"
start=$(date +%s.%N)
# Exit 4: every job ran and some failed (some patches here are meant to).
rc=0
"$S" batch "$work/jobs.jsonl" --parallel "$parallel" --out "$work/results.jsonl" || rc=$?
[ "$rc" -eq 0 ] || [ "$rc" -eq 4 ] || exit "$rc"
end=$(date +%s.%N)

echo "== results"
python3 - "$work/results.jsonl" "$start" "$end" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
passed = sorted(r["id"] for r in rows if r.get("exit_code") == 0 and not r.get("error"))
failed = sorted(r["id"] for r in rows if r.get("exit_code") not in (0, None))
errors = sorted(r["id"] for r in rows if r.get("error"))
run_ms = sorted(r["durations_ns"]["run"] / 1e6 for r in rows if "durations_ns" in r)
overhead = sorted((r["durations_ns"]["total"] - r["durations_ns"]["run"]) / 1e6 for r in rows if "durations_ns" in r)
print(f"{len(rows)} jobs: {len(passed)} passed, {len(failed)} failed, {len(errors)} errors "
      f"in {float(sys.argv[3]) - float(sys.argv[2]):.1f}s")
print("failed:", " ".join(failed))
if run_ms:
    print(f"npm test inside: p50 {run_ms[len(run_ms)//2]:.0f} ms; strata's own phases around it: p50 {overhead[len(overhead)//2]:.1f} ms")
PY
echo "(one result line looks like this)"
head -n 1 "$work/results.jsonl" | cut -c1-400
"$S" ws list
