#!/usr/bin/env bash
# Builds the container images the image tests read (see scripts/mkimages)
# into $STRATA_CACHE/images, once: a Debian root filesystem made by
# mmdebstrap (variant minbase + python3, from the Debian archive) layered into three
# images that share layers, as an OCI layout (oci/, tags base, env,
# instance) and docker-archive tarballs (env.tar, instance.tar). The cache
# is keyed by the hash of this script and of the generator: change either
# and it is rebuilt. mmdebstrap needs root (CI runs make test as root).
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${STRATA_CACHE:-/var/tmp/strata-cache}
OUT=$CACHE/images
SUITE=${STRATA_IMAGE_SUITE:-bookworm}
MIRROR=${STRATA_IMAGE_MIRROR:-http://deb.debian.org/debian}
key=$( (cat scripts/images.sh scripts/mkimages/main.go; echo "$SUITE $MIRROR") | sha256sum | cut -c1-16)
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
echo "building the test images into $OUT (about a minute, once)"
tmp=$(mktemp -d "$CACHE/images.new-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# Reproducible enough: one suite, the minbase package set, fixed epoch.
SOURCE_DATE_EPOCH=1700000000 mmdebstrap --quiet --variant=minbase --mode=root --format=tar --include=python3 \
  --dpkgopt="path-exclude=/usr/share/man/*" --dpkgopt="path-exclude=/usr/share/locale/*" \
  --dpkgopt="path-exclude=/usr/share/doc/*" \
  "$SUITE" "$tmp/rootfs.tar" "$MIRROR"
go run ./scripts/mkimages -base "$tmp/rootfs.tar" -out "$tmp/out"
echo "$key" > "$tmp/out/.key"
chmod -R a+rX "$tmp/out"
rm -rf "$OUT.old"
[ -d "$OUT" ] && mv "$OUT" "$OUT.old"
mv "$tmp/out" "$OUT"
rm -rf "$OUT.old"
