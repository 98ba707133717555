#!/bin/bash
# make bench-push: strata push/pull of the corpus snapshot through a real
# registry (docker-registry on 127.0.0.1) against skopeo copy of the same
# content as an image, and an incremental push after a one-file change
# against skopeo copy of the image rebuilt (one layer, as COPY . builds it).
# Bytes are the registry's blob storage growth. Results: docs/images.md.
set -euo pipefail
STRATA=${STRATA:-$PWD/bin/strata}
corpus=${STRATA_CORPUS:-/var/tmp/strata-cache/corpus}
[ -d "$corpus" ] || { echo "no corpus at $corpus (make corpus)" >&2; exit 1; }
tmp=$(mktemp -d /tmp/strata-bench-push.XXXXXX)
trap 'kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"' EXIT
# Two registries: strata's, and skopeo's (so that neither finds the
# other's blobs).
pids=()
start_reg() { # NAME → sets port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  printf 'version: 0.1\nlog: {level: error}\nstorage: {filesystem: {rootdirectory: %s}}\nhttp: {addr: 127.0.0.1:%s}\n' "$tmp/$1" "$port" > "$tmp/$1.yml"
  docker-registry serve "$tmp/$1.yml" >"$tmp/$1.log" 2>&1 & pids+=($!)
  for _ in $(seq 100); do curl -fs "http://127.0.0.1:$port/v2/" >/dev/null && break; sleep 0.1; done
}
start_reg reg; reg=127.0.0.1:$port
start_reg sreg; sreg=127.0.0.1:$port
blobs() { du -sb "$tmp/${1:-reg}/docker/registry/v2/blobs" 2>/dev/null | cut -f1 || echo 0; }
t() { local s=$(date +%s.%N); "$@" >/dev/null; echo "$(date +%s.%N) - $s" | bc; }
row() { printf '| %-44s | %7.2f s | %12s |\n' "$1" "$2" "$(numfmt --to=iec-i --suffix=B "$3")"; }

cp -a "$corpus" "$tmp/src"
S="$STRATA --home $tmp/a"
$S import "$tmp/src" -b main >/dev/null
echo "| what | time | registry bytes added |"
echo "|---|---:|---:|"
b0=$(blobs); d=$(t $S push main docker://$reg/strata/corpus:1 --tls-verify=false); row "strata push (empty registry)" "$d" $(( $(blobs) - b0 ))
b0=$(blobs); d=$(t $S push main docker://$reg/strata/corpus:1b --tls-verify=false); row "strata push again (unchanged)" "$d" $(( $(blobs) - b0 ))
$S push main "oci:$tmp/layout:1" >/dev/null
b0=$(blobs sreg); d=$(t skopeo copy -q --dest-tls-verify=false "oci:$tmp/layout:1" docker://$sreg/skopeo/corpus:1); row "skopeo copy of the same image (empty registry)" "$d" $(( $(blobs sreg) - b0 ))
pull() { local s=$(date +%s.%N); $STRATA --home "$tmp/b" --json pull "$@" --tls-verify=false > "$tmp/pull.json"; d=$(echo "$(date +%s.%N) - $s" | bc)
  n=$(python3 -c 'import json,sys; print(sum(l["read_bytes"] for l in json.load(open(sys.argv[1]))["layers"]))' "$tmp/pull.json"); }
echo "(pull rows: uncompressed layer bytes read from the registry)"
pull docker://$reg/strata/corpus:1 -b main; row "strata pull into an empty store" "$d" "$n"
# One file changed.
f=$(cd "$tmp/src" && find . -type f -name '*.js' -print -quit)
echo "// changed" >> "$tmp/src/$f"
$S ws create w >/dev/null
$S exec w -- sh -c "echo '// changed' >> '$f'" >/dev/null
$S commit w -m "one file" >/dev/null
b0=$(blobs); d=$(t $S push ws/w docker://$reg/strata/corpus:2 --tls-verify=false); row "strata push after a 1-file commit" "$d" $(( $(blobs) - b0 ))
$STRATA --home "$tmp/c" import "$tmp/src" -b main >/dev/null
$STRATA --home "$tmp/c" push main "oci:$tmp/layout:2" >/dev/null
b0=$(blobs sreg); d=$(t skopeo copy -q --dest-tls-verify=false "oci:$tmp/layout:2" docker://$sreg/skopeo/corpus:2); row "skopeo copy of the rebuilt image (1 layer)" "$d" $(( $(blobs sreg) - b0 ))
pull docker://$reg/strata/corpus:2 -b w; row "strata pull of it, base present" "$d" "$n"
