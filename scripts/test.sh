#!/usr/bin/env bash
# Runs the whole test suite: unit, integration (real HTTPS server), CLI, property, Helm chart.
# Installs the one non-Rust test dependency (Helm's library, from PyPI) when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! python3 -c "import helm_sdkpy" >/dev/null 2>&1; then
  echo "installing helm-sdkpy (Helm's library, used by the chart tests)..." >&2
  python3 -m pip install --quiet --ignore-requires-python helm-sdkpy
fi
cargo test --locked "$@"
