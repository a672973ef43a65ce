#!/usr/bin/env bash
# Builds the documentation site (an mdBook of docs/, book.toml) into target/book.
#   ./scripts/docs.sh           build; open target/book/index.html
#   ./scripts/docs.sh --check   build, failing on any mdBook warning, then check every relative
#                               link and #anchor of the site and of the repository's READMEs
#                               offline (scripts/check_links.py). CI runs this.
# mdBook (pinned below) is installed into target/tools the first time, from crates.io with
# cargo: a few minutes, inside the repository, so CI needs nothing from outside it.
# The reference pages under docs/reference/ are generated from the code and checked by
# `cargo test --test reference_pages` (UPDATE_REFERENCE=1 rewrites them).
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=0.5.4
TOOLS=target/tools/mdbook-$VERSION
MDBOOK=$TOOLS/bin/mdbook
if ! [ -x "$MDBOOK" ]; then
  echo "installing mdBook $VERSION into $TOOLS ..." >&2
  cargo install --quiet --locked mdbook --version "=$VERSION" --root "$TOOLS" \
    --target-dir target/tools/mdbook-build
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
rm -rf target/book
if ! "$MDBOOK" build 2>"$log"; then
  cat "$log" >&2
  exit 1
fi
if [ "${1:-}" = --check ]; then
  # mdBook reports broken includes, missing pages and unparsable files as warnings: none allowed.
  if grep -Eiq '\b(warn|warning|error)\b' "$log"; then
    echo "docs: mdBook printed warnings:" >&2
    cat "$log" >&2
    exit 1
  fi
  python3 scripts/check_links.py target/book
fi
echo "docs: built target/book/index.html"
