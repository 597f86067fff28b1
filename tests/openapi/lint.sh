#!/usr/bin/env bash
# Lints docs/openapi.json with Redocly CLI, as installed into DIR by setup.sh,
# and the repository's redocly.yaml (the recommended rules, warnings raised to
# errors): any problem fails, and so does a mistake in redocly.yaml itself.
# Exit 77 (skipped) with the reason when the CLI could not be installed.
set -u
dir=$1
root=$2
source "$(dirname "$0")/node_check.sh" || exit 1
redocly="$dir/node_modules/.bin/redocly"
if [ ! -x "$redocly" ]; then
  echo "SKIP: @redocly/cli is not installed in $dir (see the openapi_lint_setup test: npm could not reach the registry)"
  exit 77
fi
cd "$root" || exit 1
# No telemetry and no update check: the lint sends nothing anywhere.
export REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true
exec "$redocly" lint --config redocly.yaml --lint-config=error docs/openapi.json
