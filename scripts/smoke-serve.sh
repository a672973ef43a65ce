#!/usr/bin/env bash
# Smoke test of the README's first command: `cargo run --release -- serve` comes up with the
# embedded defaults on 0.0.0.0:8443, /readyz answers 200 over HTTPS, and SIGTERM exits 0 fast.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked
log=$(mktemp)
./target/release/launchgate serve >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 1 100); do
  if curl -ksf https://127.0.0.1:8443/readyz >/dev/null 2>&1; then break; fi
  sleep 0.1
done
code=$(curl -ks -o /dev/null -w '%{http_code}' https://127.0.0.1:8443/readyz)
[ "$code" = 200 ] || { echo "readyz answered $code"; cat "$log"; exit 1; }
resp=$(curl -ks -H 'content-type: application/json' --data-binary @tests/fixtures/admission/create-job-demo.json https://127.0.0.1:8443/mutate)
echo "$resp" | grep -q '"patchType":"JSONPatch"' || { echo "unexpected mutate answer: $resp"; exit 1; }
start=$(date +%s%N)
kill -TERM $pid
set +e
wait $pid
rc=$?
set -e
ms=$(( ($(date +%s%N) - start) / 1000000 ))
grep -q "CA bundle written to" "$log" || { echo "no CA bundle path printed"; cat "$log"; exit 1; }
echo "serve smoke: readyz 200, mutate patched, SIGTERM exit $rc after ${ms} ms"
[ "$rc" = 0 ] && [ "$ms" -lt 2000 ]
