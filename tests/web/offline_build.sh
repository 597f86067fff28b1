#!/usr/bin/env bash
# offline_build.sh SRC_ROOT CXX: a host that cannot build the web pages still
# builds kiln (web/README.md): web/build.sh with npm pointed at a registry that
# refuses connections (loopback port 9) and an empty npm cache, then with no
# node on PATH, must exit 0 and leave the reason in UNAVAILABLE; embed.py must
# turn that into C++ that compiles. Exit 1 on any difference.
set -u
root=$1
cxx=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# 1. npm cannot reach the registry.
if command -v npm >/dev/null && command -v node >/dev/null; then
  npm_config_registry=http://127.0.0.1:9/ npm_config_cache="$tmp/npm-cache" npm_config_fetch_retries=0 \
    bash "$root/web/build.sh" "$root/web" "$tmp/node" "$tmp/dist1" >"$tmp/log1" 2>&1 ||
    { cat "$tmp/log1"; fail "web/build.sh failed without the registry"; }
  grep -q 'npm could not reach the registry' "$tmp/dist1/UNAVAILABLE" ||
    { cat "$tmp/log1"; fail "no reason in UNAVAILABLE: $(cat "$tmp/dist1/UNAVAILABLE" 2>&1)"; }
  echo "without the registry: $(cat "$tmp/dist1/UNAVAILABLE")"
else
  echo "(node or npm is not installed here: the registry case is the next one's)"
fi

# 2. No node at all: a PATH with only what build.sh needs besides it.
mkdir -p "$tmp/bin"
for tool in rm mkdir cat; do ln -s "$(command -v $tool)" "$tmp/bin/$tool"; done
env PATH="$tmp/bin" "$(command -v bash)" "$root/web/build.sh" "$root/web" "$tmp/node2" "$tmp/dist2" >"$tmp/log2" 2>&1 ||
  { cat "$tmp/log2"; fail "web/build.sh failed without node"; }
grep -q 'node is not installed' "$tmp/dist2/UNAVAILABLE" || fail "no reason in UNAVAILABLE without node"
echo "without node: $(cat "$tmp/dist2/UNAVAILABLE")"

# 3. The C++ of a build without pages compiles and says why.
/usr/bin/python3 -I "$root/web/embed.py" "$tmp/dist2" "$tmp/web_assets.cc" || fail "embed.py failed"
grep -q 'node is not installed' "$tmp/web_assets.cc" || fail "the reason is not in web_assets.cc"
cat >"$tmp/main.cc" <<'CC'
#include <cstdio>
#include "web/assets.h"
int main() {
  if (!kiln::web::Assets().empty() || kiln::web::Find("/") != nullptr) return 2;
  std::printf("%.*s\n", static_cast<int>(kiln::web::UnavailableReason().size()),
              kiln::web::UnavailableReason().data());
  return kiln::web::UnavailableReason().empty() ? 3 : 0;
}
CC
"$cxx" -std=c++20 -Wall -Wextra -Wpedantic -Werror -I "$root/src" "$tmp/main.cc" "$tmp/web_assets.cc" \
  "$root/src/web/assets.cc" -o "$tmp/check" || fail "web_assets.cc without pages does not compile"
"$tmp/check" || fail "a build without pages did not report its reason"
echo "ok: a build without the pages goes on and says why"
