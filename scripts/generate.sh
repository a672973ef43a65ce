#!/usr/bin/env bash
# Regenerates every file derived from the code, in the order they depend on each other: the
# field tree of the Kubernetes API types (src/validate/api_fields.json), the config schema and the chart's kinds list (`files/kinds.json`, the `webhook.rules` switch), the
# plain manifests rendered from the chart, the generated reference pages, the rule list of the
# troubleshooting page, the chart page, and the native policies' report on
# docs/native-policies.md. The mutation goldens are expectations, not derived files: a
# deliberate change of a mutation rewrites them with `UPDATE_GOLDEN=1 cargo test --test
# mutations`, and the diff is read before it is committed. Each derived file has a drift test
# that fails until this has been run.
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
if [ "$check" = 1 ]; then
  cargo test --locked --quiet --lib the_field_tree_is_k8s_openapis
else
  UPDATE_FIELDS=1 cargo test --locked --quiet --lib the_field_tree_is_k8s_openapis
fi
run UPDATE_SCHEMA config_schema
if [ "$check" = 1 ]; then
  python3 scripts/helm_check.py manifests --check
else
  python3 scripts/helm_check.py manifests
fi
run UPDATE_REFERENCE reference_pages
run UPDATE_DOCS rules
run UPDATE_DOCS docs_site
# The report docs/native-policies.md shows (tests/cli.rs checks it).
if [ "$check" = 1 ]; then
  cargo test --locked --quiet --test cli the_native_policies_page_shows_the_current_report
else
  report=$(cargo run --locked --quiet -- compile-native --report)
  REPORT="$report" python3 - <<'PY'
import os
path = "docs/native-policies.md"
page = open(path).read()
begin = page.index("<!-- report:begin -->\n") + len("<!-- report:begin -->\n")
end = page.index("<!-- report:end -->")
block = "```markdown\n" + os.environ["REPORT"].strip() + "\n```\n"
open(path, "w").write(page[:begin] + block + page[end:])
PY
fi
