#!/usr/bin/env bash
# What the hot path links, transitively: make lint fails when it links
# SQLite, go-git or cgo. The direct imports of every package (the package
# graph of DESIGN.md, "Packages") are depguard's rules in .golangci.yml;
# depguard sees only a file's own imports, so what a package links through
# the packages it imports is checked here, with `go list -deps`.
#
# Rule form, one per line of RULES:
#   nodeps PKG[:TAGS] IMPORT...  nothing PKG (built with the build tags TAGS)
#                                links, transitively, is IMPORT (prefixes)
set -euo pipefail
cd "$(dirname "$0")/.."
M=github.com/stratafs/strata

RULES=$(cat <<'RULES'
nodeps nsexec modernc.org/sqlite github.com/go-git/ github.com/seccomp/ runtime/cgo  # the hot path links no SQLite, go-git or cgo
nodeps internal/workspace/layout modernc.org/sqlite github.com/go-git/ github.com/seccomp/ runtime/cgo  # the hot path finds workspaces through it
nodeps internal/workspace/hotpath modernc.org/sqlite github.com/go-git/ github.com/seccomp/ runtime/cgo github.com/stratafs/strata/store  # the front plans commands with it
nodeps internal/cliargs github.com/urfave/ github.com/go-git/ golang.org/ modernc.org/  # standard library only: the front orders its arguments with it
nodeps cmd/strata modernc.org/sqlite github.com/go-git/ github.com/google/go-containerregistry github.com/urfave/ github.com/seccomp/ runtime/cgo net/http  # the front is the hot path (docs/hotpath.md)
nodeps cmd/strata-core github.com/seccomp/    # the CLI builds with CGO_ENABLED=0 and links no libseccomp (docs/hotpath.md)
nodeps cmd/strata-core:strata_lean github.com/go-git/ github.com/google/go-containerregistry/pkg/name github.com/google/go-containerregistry/pkg/v1/remote github.com/opencontainers/go-digest encoding/gob net/http  # make build's strata-core: strata-full does the verbs that need them (docs/hotpath.md)
nodeps cmd/strata-init modernc.org/sqlite github.com/go-git/ github.com/seccomp/ runtime/cgo  # CGO_ENABLED=0 static binary
RULES
)

fail=0
while IFS= read -r line; do
	line=${line%%#*}
	read -r kind pkg rest <<<"$line" || true
	[ "${kind:-}" = nodeps ] || continue
	tags=""
	case $pkg in *:*) tags=${pkg#*:}; pkg=${pkg%%:*} ;; esac
	deps=$(CGO_ENABLED=1 go list ${tags:+-tags "$tags"} -deps "$M/$pkg")
	for bad in $rest; do
		if grep -q "^$bad" <<<"$deps"; then
			echo "depgraph: $pkg links $bad (transitively; \`go list ${tags:+-tags $tags }-deps ./$pkg\` shows the chain); it must not (DESIGN.md, the hot path)" >&2
			fail=1
		fi
	done
done <<<"$RULES"
exit $fail
