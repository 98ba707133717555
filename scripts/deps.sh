#!/usr/bin/env bash
# Installs what a fresh Debian machine lacks for building and testing strata.
# As root it installs; otherwise it prints the exact command to run.
set -euo pipefail
need=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
# strata builds without cgo (make build: CGO_ENABLED=0). libseccomp-dev,
# pkg-config and gcc are for seccomp's generator (go generate ./seccomp,
# which compiles the embedded BPF programs) and its freshness test
# (seccomp/internal/compiler: TestProgramsFresh), which go test runs with
# cgo; gcc also builds the seccomp probe and the bench's C floor.
have_pkg libseccomp-dev || need+=(libseccomp-dev)   # the seccomp generator and its test
have_pkg pkg-config     || need+=(pkg-config)       # libseccomp-golang's cgo flags
command -v gcc >/dev/null || need+=(gcc)            # cgo (generator), C probes
command -v git >/dev/null || need+=(git)            # worktree tests, corpus
command -v setpriv >/dev/null || need+=(util-linux) # the unprivileged test pass
command -v newuidmap >/dev/null || need+=(uidmap)   # --subids workspaces (and their tests)
# The sandbox's workflow tests (integration/view_test.go): a .venv, pip
# installing a wheel built offline; the Python SDK's tests (make
# python-test): Debian's pytest.
for p in python3-venv python3-pip python3-setuptools python3-wheel python3-pytest; do
  have_pkg "$p" || need+=("$p")
done
# Container images (integration/image_test.go): mmdebstrap builds the test
# images' Debian root, docker-registry serves them on 127.0.0.1, umoci
# unpacks them as the reference the conformance test compares against.
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
command -v docker-registry >/dev/null || need+=(docker-registry)
command -v umoci >/dev/null || need+=(umoci)
# The reflink and copy backends' tests make a real XFS and Btrfs on loop
# devices (scripts/integration.sh); the no-user-namespace tests deny them
# inside Debian's bubblewrap (bwrap --disable-userns).
command -v mkfs.xfs >/dev/null || need+=(xfsprogs)
command -v mkfs.btrfs >/dev/null || need+=(btrfs-progs)
command -v bwrap >/dev/null || need+=(bubblewrap)
# skopeo inspects what strata push wrote (integration/push_test.go).
command -v skopeo >/dev/null || need+=(skopeo)
# podman runs what strata push wrote, as root and rootless
# (integration/push_test.go; also a peer of the benchmarks). runc: Debian
# 12's default crun refuses a hybrid cgroup v1+v2 hierarchy. Rootless it
# needs uidmap (above), /etc/subuid and /etc/subgid entries for the user
# (.ci/run adds them for the test user); the tests pass --network none,
# their own --root/--runroot and XDG_RUNTIME_DIR, so neither slirp4netns
# nor a login session is needed.
command -v podman >/dev/null || need+=(podman)
command -v runc >/dev/null || need+=(runc)
# patch: the SWE-bench example's last patch fallback (examples/swebench/tests).
command -v patch >/dev/null || need+=(patch)
# The MCP Inspector (TestMCPInspector), installed by make mcp-inspector.
command -v npm >/dev/null || need+=(npm)
if [ "${1:-}" = "--bench" ]; then                   # peers measured by make bench
  command -v fuse-overlayfs >/dev/null || need+=(fuse-overlayfs)
  command -v restic >/dev/null || need+=(restic)
  command -v hyperfine >/dev/null || need+=(hyperfine)
  command -v zstd >/dev/null || need+=(zstd)         # compressed size of a change
  command -v bwrap >/dev/null || need+=(bubblewrap)  # the floor rows: bwrap --bind / / true
fi
if [ ${#need[@]} -eq 0 ]; then
  echo "deps: nothing missing"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "deps: missing ${need[*]}; run:"
  echo "  sudo apt-get update && sudo apt-get install -y ${need[*]}"
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${need[@]}"
