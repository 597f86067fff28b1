#!/usr/bin/env bash
# run.sh NODE_DIR WEB_DIST ARTIFACTS: the browser tests (ui.test.mjs) from
# NODE_DIR, where setup.sh installed puppeteer-core; screenshots go to
# ARTIFACTS. Exit 77 (skipped) with the reason when puppeteer-core could not be
# installed, when the binary was built without the web pages (WEB_DIST/UNAVAILABLE
# says why), or when check.mjs finds that sandboxes or Chromium cannot run here.
set -u
dir=$1
dist=$2
artifacts=$3
command -v node >/dev/null || { echo "SKIP: node is not installed"; exit 77; }
if [ ! -f "$dir/node_modules/puppeteer-core/package.json" ]; then
  echo "SKIP: puppeteer-core is not installed in $dir (see the web_ui_setup test: npm could not reach the registry)"
  exit 77
fi
if [ -f "$dist/UNAVAILABLE" ]; then
  echo "SKIP: kiln was built without its web pages: $(cat "$dist/UNAVAILABLE")"
  exit 77
fi
cd "$dir" || exit 1
node check.mjs || exit $?
rm -rf "$artifacts"
mkdir -p "$artifacts"
KILN_WEB_ARTIFACTS=$artifacts exec node --test --test-reporter=spec ui.test.mjs
