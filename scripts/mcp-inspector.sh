#!/usr/bin/env bash
# Installs the MCP Inspector (npm @modelcontextprotocol/inspector) under
# $STRATA_CACHE/mcp-inspector for integration/mcp_test.go's
# TestMCPInspector: a real MCP client nobody here wrote. Once; outside the
# repository, readable by the unprivileged test user. Without npm or the
# registry it says so and succeeds: the test then skips with the reason
# (and fails under STRATA_TEST_NO_SKIP=1, as CI runs it).
#
#   MCP_INSPECTOR_VERSION  default 0.15.0, the newest that runs on Node 20
#                          (0.16 and later need Node 22)
set -euo pipefail
cache=${STRATA_CACHE:-/var/tmp/strata-cache}
dir=$cache/mcp-inspector
version=${MCP_INSPECTOR_VERSION:-0.15.0}
if [ -x "$dir/node_modules/.bin/mcp-inspector" ] && grep -q "\"version\": \"$version\"" "$dir/node_modules/@modelcontextprotocol/inspector/package.json" 2>/dev/null; then
  exit 0
fi
if ! command -v npm >/dev/null; then
  echo "mcp-inspector: npm is not installed (Debian: npm; make deps): TestMCPInspector will skip"
  exit 0
fi
echo "installing the MCP Inspector $version into $dir (once)"
mkdir -p "$cache"
rm -rf "$dir.tmp"
mkdir -p "$dir.tmp"
echo '{"name":"strata-mcp-inspector","private":true}' > "$dir.tmp/package.json"
if ! (cd "$dir.tmp" && npm install --no-audit --no-fund --silent --cache "$dir.tmp/.npm" "@modelcontextprotocol/inspector@$version" >/dev/null); then
  rm -rf "$dir.tmp"
  echo "mcp-inspector: npm install failed (registry unreachable?): TestMCPInspector will skip"
  exit 0
fi
rm -rf "$dir.tmp/.npm" "$dir"
mv "$dir.tmp" "$dir"
chmod -R a+rX "$dir"
