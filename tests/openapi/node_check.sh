# Sourced by setup.sh and lint.sh: exit 77 (ctest: skipped) with the reason
# when node or npm is missing, or node is older than @redocly/cli needs
# (its package.json's engines: ">=22.12.0 || >=20.19.0 <21.0.0"; Debian 12's
# own nodejs is 18).
command -v node >/dev/null || { echo "SKIP: node is not installed (Redocly CLI, which lints docs/openapi.json, needs Node 20.19+ or 22.12+)"; exit 77; }
if ! node -e 'const [a, b] = process.versions.node.split(".").map(Number);
              process.exit((a === 20 && b >= 19) || (a === 22 && b >= 12) || a > 22 ? 0 : 1)'; then
  echo "SKIP: node $(node --version) is too old for @redocly/cli (it needs Node 20.19+ or 22.12+)"
  exit 77
fi
