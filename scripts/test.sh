#!/usr/bin/env bash
# Runs the whole test suite: unit, integration (real HTTPS server), CLI, property, Helm chart,
# and end-to-end on a real control plane (tests/e2e).
#
# The e2e suite needs a cluster: KUBEBUILDER_ASSETS (or LAUNCHGATE_E2E_ASSETS) naming a directory
# with etcd, kube-apiserver and kube-controller-manager, or LAUNCHGATE_E2E_KUBECONFIG. When none
# is set and the control-plane archives are next to the repository (../shared/k8s), they are
# unpacked into target/k8s-assets and used. Otherwise the e2e suite is skipped, saying so.
# The Helm chart tests need Python 3 with Helm's library (helm-sdkpy, from PyPI): installed here
# when Python 3 is there and the library is not; without it those tests are skipped with one
# SKIPPED line, unless LAUNCHGATE_HELM_REQUIRED=1 (CI), which makes that a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
if command -v python3 >/dev/null && ! python3 -c "import helm_sdkpy" >/dev/null 2>&1; then
  echo "installing helm-sdkpy (Helm's library, used by the chart tests)..." >&2
  python3 -m pip install --quiet --ignore-requires-python helm-sdkpy \
    || echo "helm-sdkpy could not be installed: the chart tests will say SKIPPED" >&2
fi
if [ -z "${KUBEBUILDER_ASSETS:-}${LAUNCHGATE_E2E_ASSETS:-}${LAUNCHGATE_E2E_KUBECONFIG:-}" ] \
  && assets=$(./scripts/k8s-assets.sh 2>/dev/null); then
  export KUBEBUILDER_ASSETS="$assets"
fi
cargo test --locked "$@"
