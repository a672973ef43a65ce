#!/usr/bin/env bash
# Unpacks the real control plane (etcd, kube-apiserver, kube-controller-manager; xz-compressed)
# into target/k8s-assets and prints that directory, for KUBEBUILDER_ASSETS:
#
#   KUBEBUILDER_ASSETS=$(./scripts/k8s-assets.sh) ./scripts/test.sh
#
# Source: $LAUNCHGATE_K8S_ASSETS_SRC, else ../shared/k8s next to the repository. Binaries already
# unpacked and newer than their archive are kept.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
src="${LAUNCHGATE_K8S_ASSETS_SRC:-$repo/../shared/k8s}"
dest="$repo/target/k8s-assets"
if ! ls "$src"/*.xz >/dev/null 2>&1; then
  echo "k8s-assets: no *.xz control-plane binaries in $src" >&2
  exit 1
fi
mkdir -p "$dest"
for archive in "$src"/*.xz; do
  bin="$dest/$(basename "$archive" .xz)"
  if [ ! -x "$bin" ] || [ "$archive" -nt "$bin" ]; then
    xz -dc "$archive" > "$bin.partial"
    chmod +x "$bin.partial"
    mv "$bin.partial" "$bin"
  fi
done
for needed in etcd kube-apiserver kube-controller-manager; do
  [ -x "$dest/$needed" ] || { echo "k8s-assets: $src has no $needed.xz" >&2; exit 1; }
done
echo "$dest"
