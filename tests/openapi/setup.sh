#!/usr/bin/env bash
# ctest fixture redocly_cli: installs Redocly CLI (package.json,
# package-lock.json: an exact version) into DIR with `npm ci`, once (a stamp
# remembers the lock file it installed).
#
# Exit 77 (ctest: skipped) with the reason when node or npm is missing or
# node is too old, or when npm cannot reach the registry; any other npm
# failure fails.
set -u
mkdir -p "$2" || exit 1
src=$(cd "$1" && pwd) || exit 1
dir=$(cd "$2" && pwd) || exit 1
cp "$src"/package.json "$src"/package-lock.json "$dir"/ || exit 1
source "$src/node_check.sh" || exit 1
command -v npm >/dev/null || { echo "SKIP: npm is not installed (it installs Redocly CLI)"; exit 77; }
stamp="$dir/node_modules/.kiln-package-lock.json"
if [ -f "$stamp" ] && cmp -s "$stamp" "$src/package-lock.json"; then
  echo "@redocly/cli is installed in $dir"
  exit 0
fi
cd "$dir" || exit 1
if out=$(timeout 600 npm ci --no-audit --no-fund --loglevel=error 2>&1); then
  cp "$src/package-lock.json" "$stamp" || exit 1
  echo "installed @redocly/cli into $dir"
  exit 0
fi
echo "$out" | tail -20
if echo "$out" | grep -qiE 'ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ETIMEDOUT|ECONNRESET|ENETUNREACH|EHOSTUNREACH|network|getaddrinfo|proxy|self.signed|certificate'; then
  echo "SKIP: npm cannot reach the registry, so @redocly/cli cannot be installed"
  exit 77
fi
exit 1
