#!/usr/bin/env bash
# ctest fixture e2b_sdk: installs the official E2B JavaScript SDKs (e2b, @e2b/code-interpreter)
# (package.json, package-lock.json: an exact version) into DIR with `npm ci`,
# once (a stamp remembers the lock file it installed), and copies the test
# scripts there, so that they resolve the SDK from DIR/node_modules.
#
# Exit 77 (ctest: skipped) with the reason when node or npm is missing, or
# when npm cannot reach the registry; any other npm failure fails.
set -u
src=$(cd "$1" && pwd) || exit 1
dir=$2
mkdir -p "$dir"
cp "$src"/package.json "$src"/package-lock.json "$src"/*.mjs "$dir"/ || exit 1
cp "$src"/../../kiln.toml "$dir"/kiln.toml || exit 1  # the built-in configuration (harness.mjs)
command -v node >/dev/null || { echo "SKIP: node is not installed (the E2B SDK tests need Node 20+)"; exit 77; }
command -v npm >/dev/null || { echo "SKIP: npm is not installed (it installs the E2B SDKs)"; exit 77; }
stamp="$dir/node_modules/.kiln-package-lock.json"
if [ -f "$stamp" ] && cmp -s "$stamp" "$src/package-lock.json"; then
  echo "the E2B SDKs are installed in $dir"
  exit 0
fi
cd "$dir" || exit 1
if out=$(timeout 600 npm ci --no-audit --no-fund --loglevel=error 2>&1); then
  cp "$src/package-lock.json" "$stamp"
  echo "installed the E2B SDKs into $dir"
  exit 0
fi
echo "$out" | tail -20
if echo "$out" | grep -qiE 'ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ETIMEDOUT|ECONNRESET|ENETUNREACH|EHOSTUNREACH|network|getaddrinfo|proxy|self.signed|certificate'; then
  echo "SKIP: npm cannot reach the registry, so the E2B SDKs cannot be installed"
  exit 77
fi
exit 1
