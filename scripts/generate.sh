#!/usr/bin/env bash
# Regenerates every file derived from the code, in the order they depend on each other: the
# field tree of the Kubernetes API types (src/validate/api_fields.json); the config schema and
# the chart's files generated from the kind registry and the server's own lists (`files/kinds.json`,
# `files/intermediates.json`, `files/watched.json`, `files/match-labels.json`,
# `files/native-slot.json`, the `webhook.rules` switches of values.yaml and
# ci/cert-manager-values.yaml, the chart README's rows listing the kinds); the plain manifests rendered from the chart; the generated reference pages; the rule
# list of the troubleshooting page; the chart page; and the native policies' report on
# docs/native-policies.md. The mutation goldens are expectations, not derived files: a
# deliberate change of a mutation rewrites them with `UPDATE_GOLDEN=1 cargo test --test
# mutations`, and the diff is read before it is committed. Each derived file also has a drift
# test that fails until this has been run.
#
#   scripts/generate.sh            regenerate everything
#   scripts/generate.sh --check    regenerate, list every file that differs from the working
#                                  tree's and fail if any does; the working tree is left as it
#                                  was (what CI checks)
#
# Rendering the chart needs Helm's library (helm-sdkpy, scripts/helm_check.py): installed here
# when Python does not have it.
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
[ "${1:-}" = "--check" ] && check=1

if ! python3 -c 'import helm_sdkpy' 2>/dev/null; then
  PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check \
    --ignore-requires-python helm-sdkpy
fi

# --check: every file of the working tree (tracked, and untracked but not ignored) is kept in a
# temporary copy, everything is regenerated in place, the files that differ from the copy are
# listed, and the copy is put back (also when a step fails).
if [ "$check" = 1 ]; then
  saved=$(mktemp -d)
  listed="$saved/.files"
  git ls-files -z --cached --others --exclude-standard >"$listed"
  python3 - "$saved" "$listed" <<'PY'
import os, shutil, sys
saved, listed = sys.argv[1], sys.argv[2]
for path in open(listed, "rb").read().decode().split("\0"):
    if path and os.path.isfile(path):
        os.makedirs(os.path.join(saved, "tree", os.path.dirname(path)), exist_ok=True)
        shutil.copy2(path, os.path.join(saved, "tree", path))
PY
  compare_and_restore() {
    local status=$?
    python3 - "$saved" <<'PY' || status=1
import os, shutil, subprocess, sys
saved = sys.argv[1]
tree = os.path.join(saved, "tree")
before = {p for p in open(os.path.join(saved, ".files"), "rb").read().decode().split("\0") if p}
now = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                     capture_output=True, check=True).stdout.decode().split("\0")
differ = []
for path in sorted(before | {p for p in now if p}):
    kept = os.path.join(tree, path)
    here, there = os.path.isfile(path), os.path.isfile(kept)
    if not here and not there:
        continue
    if here and there and open(path, "rb").read() == open(kept, "rb").read():
        continue
    differ.append(path)
    if there:
        shutil.copy2(kept, path)
    else:
        os.remove(path)
if differ:
    print("scripts/generate.sh --check: these files are out of date with the code "
          "(run scripts/generate.sh and commit the result):", file=sys.stderr)
    for path in differ:
        print(f"  {path}", file=sys.stderr)
    sys.exit(1)
PY
    rm -rf "$saved"
    exit "$status"
  }
  trap compare_and_restore EXIT
fi

UPDATE_FIELDS=1 cargo test --locked --quiet --lib the_field_tree_is_k8s_openapis
UPDATE_SCHEMA=1 cargo test --locked --quiet --test config_schema
python3 scripts/helm_check.py manifests
UPDATE_REFERENCE=1 cargo test --locked --quiet --test reference_pages
UPDATE_DOCS=1 cargo test --locked --quiet --test rules
UPDATE_DOCS=1 cargo test --locked --quiet --test docs_site
# The report docs/native-policies.md shows (tests/cli.rs checks it).
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
