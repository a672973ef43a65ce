#!/usr/bin/env bash
# launchgate against its yardstick, in one run on one machine: the smallest admission webhook
# built on kube's crate (bench/kube-peer: kube's AdmissionReview types, one label patched in,
# warp over rustls) and `launchgate serve` (embedded defaults), each answering the same body on
# /mutate over TLS to examples/loadgen in a closed loop. Rounds alternate the servers, so load
# from elsewhere on the machine falls on both; the ratios are taken within each round.
#
#   scripts/side-by-side.sh                      # 3 rounds of 15 s, the recorded launch Pod
#   ROUNDS=5 DURATION=20s scripts/side-by-side.sh
#   BEFORE_BIN=/path/to/older/launchgate scripts/side-by-side.sh   # also an older build, interleaved
#   ONE_WORKER=1 scripts/side-by-side.sh         # also launchgate on one tokio worker (--worker-threads 1)
#   QUIET=1 scripts/side-by-side.sh              # also launchgate without its per-decision log line
#   KUBE_EXAMPLE=<kube>/target/release/examples/admission_controller scripts/side-by-side.sh
#                                                # also kube-rs's own example, built in a checkout of
#                                                # kube (cargo build --release -p kube-examples
#                                                # --example admission_controller); it listens on
#                                                # 127.0.0.1:8443 and logs as PEER_RUST_LOG says
#   PEER_RUST_LOG=info scripts/side-by-side.sh   # the peer logs every request, as launchgate does
#
# Logging is part of the cost: launchgate writes one decision line per admission at its default
# level (info); the peer, like kube-rs's example, logs per request only when RUST_LOG asks for it.
# Compare like with like: launchgate against PEER_RUST_LOG=info, launchgate-quiet against the
# default peer.
#
# Per server and round: throughput (requests/s), the server's CPU per request (from
# /proc/PID/stat over the measured window), p50/p99 latency, peak RSS (VmHWM: the most the
# process ever held, start-up and load included) and idle RSS (VmRSS 2 s after it answered
# the one review that shows it is ready). Output: a markdown table on stdout; raw loadgen lines in $OUT_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-15s}
CONNECTIONS=${CONNECTIONS:-32}
BODY=${BODY:-tests/fixtures/admission/create-pod-launch-acme-mnist-mzxkz.json}
OUT_DIR=${OUT_DIR:-target/side-by-side}
PORT=${PORT:-18643}

cargo build --release --locked --bin launchgate --example loadgen
cargo build --release --locked --manifest-path bench/kube-peer/Cargo.toml \
  --target-dir target/kube-peer
mkdir -p "$OUT_DIR"
certs=$(mktemp -d)
pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  rm -rf "$certs"
}
trap cleanup EXIT
# The development CA and server certificate both servers present (ECDSA P-256, 127.0.0.1).
./target/release/launchgate serve --listen 127.0.0.1:$PORT --dev-cert-dir "$certs" \
  >/dev/null 2>&1 &
pid=$!
for _ in $(seq 1 100); do
  [ -s "$certs/tls.key" ] && break
  sleep 0.1
done
kill "$pid" && wait "$pid" 2>/dev/null || true
pid=

servers=(kube-peer launchgate)
[ -n "${BEFORE_BIN:-}" ] && servers+=(launchgate-before)
[ -n "${ONE_WORKER:-}" ] && servers+=(launchgate-1w)
[ -n "${QUIET:-}" ] && servers+=(launchgate-quiet)
[ -n "${KUBE_EXAMPLE:-}" ] && servers+=(kube-example)

# kube-rs's example listens on a fixed port, reading its certificate from its working directory.
port_of() { if [ "$1" = kube-example ]; then echo 8443; else echo "$PORT"; fi; }

start_server() {
  case $1 in
    kube-peer) RUST_LOG=${PEER_RUST_LOG:-error} ./target/kube-peer/release/kube-peer 127.0.0.1:$PORT "$certs/tls.crt" \
      "$certs/tls.key" >"$OUT_DIR/$1.log" 2>&1 & ;;
    launchgate) ./target/release/launchgate serve --listen 127.0.0.1:$PORT \
      --tls-cert "$certs/tls.crt" --tls-key "$certs/tls.key" >"$OUT_DIR/$1.log" 2>&1 & ;;
    launchgate-quiet) ./target/release/launchgate serve --listen 127.0.0.1:$PORT --log-level warn \
      --tls-cert "$certs/tls.crt" --tls-key "$certs/tls.key" >"$OUT_DIR/$1.log" 2>&1 & ;;
    launchgate-1w) ./target/release/launchgate serve --listen 127.0.0.1:$PORT --worker-threads 1 \
      --tls-cert "$certs/tls.crt" --tls-key "$certs/tls.key" >"$OUT_DIR/$1.log" 2>&1 & ;;
    launchgate-before) "$BEFORE_BIN" serve --listen 127.0.0.1:$PORT \
      --tls-cert "$certs/tls.crt" --tls-key "$certs/tls.key" >"$OUT_DIR/$1.log" 2>&1 & ;;
    kube-example)
      ln -sf "$certs/tls.crt" "$certs/admission-controller-tls.crt"
      ln -sf "$certs/tls.key" "$certs/admission-controller-tls.key"
      (cd "$certs" && ADMISSION_PRIVATE_IP=127.0.0.1 RUST_LOG=${PEER_RUST_LOG:-error} \
        exec "$KUBE_EXAMPLE") >"$OUT_DIR/$1.log" 2>&1 & ;;
  esac
  pid=$!
  # Ready when it answers a review (the peer has no health endpoint).
  for _ in $(seq 1 200); do
    if curl -s --cacert "$certs/ca.crt" -o /dev/null -H 'content-type: application/json' \
      --data-binary @"$BODY" "https://127.0.0.1:$(port_of "$1")/mutate"; then
      return 0
    fi
    sleep 0.05
  done
  echo "$1 did not come up; its log:" >&2
  cat "$OUT_DIR/$1.log" >&2
  exit 1
}

status_kib() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }

results="$OUT_DIR/results.jsonl"
: >"$results"
for round in $(seq 1 "$ROUNDS"); do
  for server in "${servers[@]}"; do
    start_server "$server"
    sleep 2
    idle=$(status_kib "$pid" VmRSS)
    load=$(cut -d' ' -f1 /proc/loadavg)
    line=$(./target/release/examples/loadgen --url "https://127.0.0.1:$(port_of "$server")/mutate" \
      --body "$BODY" --ca "$certs/ca.crt" --connections "$CONNECTIONS" \
      --duration "$DURATION" --pid "$pid" --json | tail -n 1)
    peak=$(status_kib "$pid" VmHWM)
    kill "$pid" && wait "$pid" 2>/dev/null || true
    pid=
    echo "{\"round\": $round, \"server\": \"$server\", \"load\": $load, \"idle_kib\": $idle, \"peak_kib\": $peak, \"loadgen\": $line}" >>"$results"
    echo "round $round $server: $line" >&2
  done
done

python3 - "$results" <<'EOF'
import json, statistics, sys

rows = [json.loads(l) for l in open(sys.argv[1])]
servers = list(dict.fromkeys(r["server"] for r in rows))
print("| round | server | load (1 min) | requests/s | server CPU µs/request | p50 ms | p99 ms | peak RSS MiB | idle RSS MiB |")
print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
for r in rows:
    g = r["loadgen"]
    print(f"| {r['round']} | {r['server']} | {r['load']:.2f} | {g['rps']:.0f} | "
          f"{g['server_cpu_us_per_req']:.1f} | {g['p50_ms']:.2f} | {g['p99_ms']:.2f} | "
          f"{r['peak_kib'] / 1024:.1f} | {r['idle_kib'] / 1024:.1f} |")
print()
by = {(r["round"], r["server"]): r for r in rows}
rounds = sorted({r["round"] for r in rows})
for base in [b for b in ("kube-peer", "kube-example") if b in servers]:
    print()
    print(f"Ratios to {base} within each round (median over rounds):")
    print()
    print("| server | throughput × | CPU per request × | peak RSS MiB (median) | idle RSS MiB (median) |")
    print("|---|---:|---:|---:|---:|")
    for s in servers:
        tput = [by[(n, s)]["loadgen"]["rps"] / by[(n, base)]["loadgen"]["rps"] for n in rounds]
        cpu = [by[(n, s)]["loadgen"]["server_cpu_us_per_req"]
               / by[(n, base)]["loadgen"]["server_cpu_us_per_req"] for n in rounds]
        peak = statistics.median(by[(n, s)]["peak_kib"] for n in rounds) / 1024
        idle = statistics.median(by[(n, s)]["idle_kib"] for n in rounds) / 1024
        print(f"| {s} | {statistics.median(tput):.2f} | {statistics.median(cpu):.2f} | {peak:.1f} | {idle:.1f} |")
EOF
