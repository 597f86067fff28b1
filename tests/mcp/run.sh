#!/usr/bin/env bash
# Runs the SDK tests of one transport (stdio_local, stdio_url, http) from DIR,
# where setup.sh installed the SDK; exit 77 (skipped) with the reason when it
# could not.
set -u
dir=$1
transport=$2
command -v node >/dev/null || { echo "SKIP: node is not installed"; exit 77; }
if [ ! -f "$dir/node_modules/@modelcontextprotocol/sdk/package.json" ]; then
  echo "SKIP: @modelcontextprotocol/sdk is not installed in $dir (see the mcp_sdk_setup test: npm could not reach the registry)"
  exit 77
fi
cd "$dir" || exit 1
node check.mjs || exit $?
KILN_MCP_TRANSPORT=$transport exec node --test --test-reporter=spec sdk.test.mjs
