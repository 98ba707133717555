#!/usr/bin/env bash
# The package graph of /work/shared/DESIGN.md ("Packages"), checked with
# `go list`: make lint fails when an import breaks it. Each rule says why.
# (golangci-lint's depguard would state the same rules; it is not a
# dependency of the build, so the rules are checked here with the go tool
# alone.)
#
# Rule forms, one per line of RULES:
#   only PKG ALLOWED...   PKG imports no strata package but ALLOWED (prefixes)
#   owner IMPORT OWNER... only OWNERs import IMPORT (a prefix)
#   nodeps PKG IMPORT...  nothing PKG links, transitively, is IMPORT (prefixes)
set -euo pipefail
cd "$(dirname "$0")/.."
M=github.com/stratafs/strata

RULES=$(cat <<'EOF'
only store                       # the bottom of the graph: everything reads the store, it reads nothing of ours
only overlayfs                   # mount options as data and the upper reader: no store, no policy
only landlock                    # a pure plan per ABI: no store, no mounts
only seccomp                     # a pure plan: no store, no mounts
only snapshot store internal/    # trees over the store; the layer cache is its own
only worktree snapshot store internal/  # go-git's one importer writes through snapshot and store
only internal/sandbox landlock seccomp   # sandbox modes -> Landlock plan + seccomp program + their cache
only nsexec overlayfs landlock internal/  # the hot path: it is handed plans and programs, never opens the store
only cmd/strata-init nsexec internal/     # the static init: namespaces only
owner modernc.org/sqlite store          # the one importer of SQLite (DESIGN: "The only importer of sqlite")
owner github.com/go-git/ worktree       # the one importer of go-git
owner github.com/seccomp/libseccomp-golang seccomp/internal/compiler  # cgo only in the generator's compiler (strata embeds its output)
nodeps cmd/strata github.com/seccomp/    # the CLI builds with CGO_ENABLED=0 (docs/hotpath.md)
owner github.com/google/go-containerregistry image scripts/mkimages  # the one importer of go-containerregistry (and the test-image generator, no part of a binary)
only mcp                         # the MCP server: thin wrappers over the root package
nodeps nsexec modernc.org/sqlite github.com/go-git/ github.com/seccomp/  # the hot path links no SQLite, go-git or cgo
nodeps cmd/strata-init modernc.org/sqlite github.com/go-git/ github.com/seccomp/ runtime/cgo  # CGO_ENABLED=0 static binary
EOF
)

imports() { go list -f '{{join .Imports "\n"}}' "$M/$1" 2>/dev/null; }
fail=0
pkgs=$(go list ./... | grep -v "^$M/integration")
while IFS= read -r line; do
	line=${line%%#*}
	read -r kind pkg rest <<<"$line" || true
	[ -n "${kind:-}" ] || continue
	case $kind in
	only)
		for imp in $(imports "$pkg" | grep "^$M/" || true); do
			rel=${imp#"$M/"}
			ok=0
			for a in $rest; do
				case $rel in "$a"*) ok=1 ;; esac
			done
			if [ $ok = 0 ]; then
				echo "depgraph: $pkg imports $rel; allowed: ${rest:-nothing of strata} (DESIGN.md, Packages)" >&2
				fail=1
			fi
		done
		;;
	owner)
		for p in $pkgs; do
			rel=${p#"$M"}; rel=${rel#/}; [ -n "$rel" ] || rel=.
			ok=0
			for o in $rest; do [ "$rel" = "$o" ] && ok=1; done
			[ $ok = 1 ] && continue
			if go list -f '{{join .Imports "\n"}}' "$p" | grep -q "^$pkg"; then
				echo "depgraph: $rel imports $pkg; only ${rest} may (DESIGN.md, Packages)" >&2
				fail=1
			fi
		done
		;;
	nodeps)
		deps=$(go list -deps "$M/$pkg")
		for bad in $rest; do
			if grep -q "^$bad" <<<"$deps"; then
				echo "depgraph: $pkg links $bad (transitively); it must not (DESIGN.md, the hot path)" >&2
				fail=1
			fi
		done
		;;
	esac
done <<<"$RULES"
# The root package is orchestration: the sandbox's policies come from
# internal/sandbox; only doctor probes Landlock and seccomp itself.
for f in *.go; do
	case $f in *_test.go | doctor.go) continue ;; esac
	if grep -qE '"'"$M"'/(landlock|seccomp)"' "$f"; then
		echo "depgraph: $f imports landlock or seccomp; the root package gets sandbox plans from internal/sandbox (only doctor.go probes them)" >&2
		fail=1
	fi
done
exit $fail
