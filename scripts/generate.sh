#!/usr/bin/env bash
# Regenerates every file derived from the code, in the order they depend on each other: the
# config schema and the chart's kinds list (`files/kinds.json`, the `webhook.rules` switch), the
# plain manifests rendered from the chart, the generated reference pages, the rule list of the
# troubleshooting page, the chart page, and the mutation goldens. Each of these has a drift test that fails
# until this has been run (the goldens' diff is to be read before committing).
#
#   scripts/generate.sh            regenerate everything
#   scripts/generate.sh --check    fail when any derived file is out of date (what CI checks)
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
[ "${1:-}" = "--check" ] && check=1
run() {
  local var=$1 test=$2
  if [ "$check" = 1 ]; then
    cargo test --locked --quiet --test "$test"
  else
    env "$var=1" cargo test --locked --quiet --test "$test"
  fi
}
run UPDATE_SCHEMA config_schema
if [ "$check" = 1 ]; then
  python3 scripts/helm_check.py manifests --check
else
  python3 scripts/helm_check.py manifests
fi
run UPDATE_REFERENCE reference_pages
run UPDATE_DOCS rules
run UPDATE_DOCS docs_site
run UPDATE_GOLDEN mutations
