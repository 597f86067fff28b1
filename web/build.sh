#!/usr/bin/env bash
# web/build.sh SRC NODE_DIR OUT: the build's step that makes the web pages
# (web/README.md). Installs the exact packages of SRC/package-lock.json into
# NODE_DIR with `npm ci` (once: a stamp remembers the lock file it installed),
# then bundles SRC with esbuild into OUT (build.mjs).
#
# A host without node or npm, or whose npm cannot reach the registry, must
# still build kiln: OUT then holds only UNAVAILABLE, one line saying why, and
# the server answers / with that reason (503). Any other failure (a syntax
# error in the sources, esbuild refusing them) fails the build.
set -u
src=$1
dir=$2
out=$3
unavailable() {
  echo "web: $1; kiln serve will answer / with this reason (web/README.md)" >&2
  rm -rf "$out"
  mkdir -p "$out"
  printf '%s\n' "$1" >"$out/UNAVAILABLE"
  exit 0
}
if [ -n "${KILN_WEB_SKIP:-}" ]; then
  unavailable "the web pages were not built (KILN_WEB_SKIP is set)"
fi
command -v node >/dev/null || unavailable "the web pages were not built: node is not installed (apt-get install nodejs npm, then rebuild)"
command -v npm >/dev/null || unavailable "the web pages were not built: npm is not installed (apt-get install npm, then rebuild)"
mkdir -p "$dir"
cp "$src/package.json" "$src/package-lock.json" "$src/build.mjs" "$dir/" || exit 1
stamp="$dir/node_modules/.kiln-package-lock.json"
if ! { [ -f "$stamp" ] && cmp -s "$stamp" "$src/package-lock.json"; }; then
  if ! npm_out=$(cd "$dir" && timeout 600 npm ci --no-audit --no-fund --loglevel=error 2>&1); then
    echo "$npm_out" | tail -20 >&2
    if echo "$npm_out" | grep -qiE 'ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ETIMEDOUT|ECONNRESET|ENETUNREACH|EHOSTUNREACH|network|getaddrinfo|proxy|self.signed|certificate'; then
      unavailable "the web pages were not built: npm could not reach the registry to install web/package-lock.json (rebuild with network)"
    fi
    exit 1
  fi
  cp "$src/package-lock.json" "$stamp"
fi
cd "$dir" || exit 1
exec node build.mjs "$out" "$src"
