#!/usr/bin/env bash
# Runs the E2B SDK tests from DIR, where setup.sh installed the SDKs; exit 77
# (skipped) with the reason when it could not.
set -u
dir=$1
command -v node >/dev/null || { echo "SKIP: node is not installed"; exit 77; }
if [ ! -f "$dir/node_modules/@e2b/code-interpreter/package.json" ]; then
  echo "SKIP: @e2b/code-interpreter is not installed in $dir (see the e2b_sdk_setup test: npm could not reach the registry)"
  exit 77
fi
cd "$dir" || exit 1
node check.mjs || exit $?
exec node --test --test-reporter=spec --test-concurrency=1 sdk.test.mjs
