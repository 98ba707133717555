#!/usr/bin/env bash
# Builds the container images the image tests read (see scripts/mkimages)
# into $STRATA_CACHE/images, once: a Debian root filesystem made by
# mmdebstrap (variant minbase + python3, from the Debian archive) layered into three
# images that share layers, as an OCI layout (oci/, tags base, env,
# instance) and docker-archive tarballs (env.tar, instance.tar); and the
# SWE-bench-shaped images on the same base (tags sweb.env.textkit,
# sweb.eval.textkit_1776_textkit-1 and -2: python3-pytest, git and patch from
# the archive, a project's repository at /testbed, /eval.sh) with the
# project, dataset rows and predictions under swebench/. The cache is
# keyed by the hash of this script and of the generator: change either
# and it is rebuilt. mmdebstrap needs root (CI runs make test as root).
#
#   scripts/images.sh                      build (when stale)
#   scripts/images.sh push HOST:PORT [--tls-verify=false]
#                                          copy every image to a registry
#                                          as HOST:PORT/strata-test/TAG:latest
#                                          (skopeo), e.g. Debian's
#                                          docker-registry on 127.0.0.1
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${STRATA_CACHE:-/var/tmp/strata-cache}
OUT=$CACHE/images
SUITE=${STRATA_IMAGE_SUITE:-bookworm}
MIRROR=${STRATA_IMAGE_MIRROR:-http://deb.debian.org/debian}

if [ "${1:-}" = push ]; then
  reg=${2:?usage: scripts/images.sh push HOST:PORT [--tls-verify=false]}
  tls=${3:---tls-verify=true}
  [ -f "$OUT/.key" ] || { echo "images: $OUT is not built: make images" >&2; exit 1; }
  tags=$(python3 -c 'import json,sys; print("\n".join(m["annotations"]["org.opencontainers.image.ref.name"] for m in json.load(open(sys.argv[1]))["manifests"]))' "$OUT/oci/index.json")
  for t in $tags; do
    skopeo copy --quiet "--dest-${tls#--}" "oci:$OUT/oci:$t" "docker://$reg/strata-test/$t:latest"
    echo "$reg/strata-test/$t:latest"
  done
  exit 0
fi

key=$( (cat scripts/images.sh scripts/mkimages/*.go; echo "$SUITE $MIRROR") | sha256sum | cut -c1-16)
if [ -f "$OUT/.key" ] && [ "$(cat "$OUT/.key")" = "$key" ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  # Not fatal: the image tests then skip (and fail under
  # STRATA_TEST_NO_SKIP=1, as in CI, which runs as root).
  echo "images: $OUT is missing or stale and mmdebstrap needs root: sudo make images" >&2
  exit 0
fi
command -v mmdebstrap >/dev/null || { echo "images: mmdebstrap missing: make deps" >&2; exit 1; }
command -v git >/dev/null || { echo "images: git missing: make deps" >&2; exit 1; }
echo "building the test images into $OUT (a few minutes, once)"
mkdir -p "$CACHE"
tmp=$(mktemp -d "$CACHE/images.new-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# Reproducible: one suite, the minbase package set, fixed epoch (the
# same root tar, byte for byte, on every build). The second root is the
# first with what SWE-bench's environments need; mkimages layers the
# difference on the first. The roots are kept in $CACHE/images-rootfs,
# keyed by their mmdebstrap arguments: a change of the generator alone
# does not build them again.
roots=$CACHE/images-rootfs
mkdir -p "$roots"
for v in "rootfs python3" "rootfs_swe python3,python3-pytest,git,patch"; do
  set -- $v
  args=(--quiet --variant=minbase --mode=root --format=tar --include="$2"
    --dpkgopt="path-exclude=/usr/share/man/*" --dpkgopt="path-exclude=/usr/share/locale/*"
    --dpkgopt="path-exclude=/usr/share/doc/*" "$SUITE")
  root=$roots/$1-$(echo "${args[*]} $MIRROR" | sha256sum | cut -c1-16).tar
  if [ ! -f "$root" ]; then
    rm -f "$roots/$1"-*.tar
    SOURCE_DATE_EPOCH=1700000000 mmdebstrap "${args[@]}" "$tmp/$1.tar" "$MIRROR"
    mv "$tmp/$1.tar" "$root"
  fi
  printf -v "$1" %s "$root"
done
go run ./scripts/mkimages -base "$rootfs" -swe "$rootfs_swe" -out "$tmp/out"
echo "$key" > "$tmp/out/.key"
chmod -R a+rX "$tmp/out"
rm -rf "$OUT.old"
[ -d "$OUT" ] && mv "$OUT" "$OUT.old"
mv "$tmp/out" "$OUT"
rm -rf "$OUT.old"
