#!/usr/bin/env bash
# Fuzz smoke run (docs/fuzzing.md): builds every cargo-fuzz target in fuzz/ and runs each for
# SECONDS (default 60) on its seed corpus, printing the executions per target. Exits non-zero
# when any target crashes, hangs (-timeout) or runs out of memory (-rss_limit_mb).
#
#   scripts/fuzz-smoke.sh [SECONDS]
#
# Environment:
#   FUZZ_TARGETS    space-separated subset of targets (default: all five)
#   FUZZ_FRESH=1    start from the seeds only (drop the corpus grown by earlier runs)
#   FUZZ_SANITIZER  none (default) | address. The stable toolchain cannot build cargo-fuzz's
#                   default AddressSanitizer build: `-Zsanitizer=address` is a nightly flag.
#                   `none` keeps libFuzzer's coverage instrumentation (stable -C flags only)
#                   and is enough for launchgate, which has no `unsafe`. `address` builds
#                   with RUSTC_BOOTSTRAP=1, which lets the stable compiler accept -Z flags.
#
# Builds go to fuzz/target (fuzz/ is its own workspace), so they never invalidate the main
# build. Crash inputs land in fuzz/artifacts/<target>/, corpus growth in fuzz/corpus/<target>/
# (both git-ignored). Reproduce a crash with:
#   cargo fuzz run -s none -a <target> fuzz/artifacts/<target>/crash-<hash>
set -euo pipefail

SECS="${1:-60}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FUZZ="$ROOT/fuzz"
SANITIZER="${FUZZ_SANITIZER:-none}"
read -r -a TARGETS <<<"${FUZZ_TARGETS:-review_bytes review_structured field_sets config_parse quantity_parse}"

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "== installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi

# -s none: no sanitizer (stable). -a: debug assertions, so integer overflow panics.
FLAGS=(--fuzz-dir "$FUZZ" --target-dir "$FUZZ/target" -s "$SANITIZER" -a)
if [ "$SANITIZER" != none ]; then
    export RUSTC_BOOTSTRAP=1
fi

echo "== seed corpora"
for t in "${TARGETS[@]}"; do
    if [ "${FUZZ_FRESH:-0}" = 1 ]; then
        rm -rf "${FUZZ:?}/corpus/$t"
    fi
    mkdir -p "$FUZZ/corpus/$t"
done
seed() { # seed TARGET FILE...: copy seeds in without overwriting corpus entries
    local t="$1"
    shift
    [[ " ${TARGETS[*]} " == *" $t "* ]] || return 0
    cp -n "$@" "$FUZZ/corpus/$t/"
}
seed review_bytes "$ROOT"/tests/fixtures/admission/*.json
seed review_structured "$ROOT"/tests/fixtures/admission/*.json
seed field_sets "$ROOT"/tests/fixtures/admission/*.json
seed config_parse "$ROOT/src/policy/default-config.yaml" "$FUZZ/src/wide-config.yaml"
if [[ " ${TARGETS[*]} " == *" quantity_parse "* ]]; then
    i=0
    for q in 4 4000m 12Gi $'13000Mi\n12Gi' 0.5Gi 1.5 .5 5. 1e3 1E-3 -1 +2 1n 1u 1k 1M 1G 1T 1P 1E \
        1Ki 1Mi 1Ti 1Pi 1Ei 99999999999999999999Ei 1e1000 1e-1000 $'1e1000\n1e-1000\n0' \
        100000000000000000000000000000 0.000000000000000000001 $'4\n4001m\n-4'; do
        printf '%s' "$q" >"$FUZZ/corpus/quantity_parse/seed-$i"
        i=$((i + 1))
    done
fi

echo "== building (sanitizer: $SANITIZER)"
cargo fuzz build "${FLAGS[@]}"

declare -A EXECS STATUS
failed=0
for t in "${TARGETS[@]}"; do
    echo "== $t: ${SECS}s"
    log="$FUZZ/target/smoke-$t.log"
    set +e
    cargo fuzz run "${FLAGS[@]}" "$t" "$FUZZ/corpus/$t" -- \
        -max_total_time="$SECS" -print_final_stats=1 -timeout=20 -rss_limit_mb=2048 \
        >"$log" 2>&1
    rc=$?
    set -e
    EXECS[$t]="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
    if [ "$rc" -eq 0 ]; then
        STATUS[$t]="ok"
    else
        STATUS[$t]="FAILED (exit $rc)"
        failed=1
        grep -E '^(==[0-9]+== ERROR|thread .* panicked|.*panicked at|SUMMARY|artifact_prefix|Test unit written)' "$log" |
            head -20 || true
        echo "   full log: $log"
    fi
done

echo
echo "== fuzz smoke summary (${SECS}s per target, sanitizer $SANITIZER, $(nproc) cores)"
printf '%-20s %12s  %s\n' target executions result
for t in "${TARGETS[@]}"; do
    printf '%-20s %12s  %s\n' "$t" "${EXECS[$t]:-?}" "${STATUS[$t]}"
done
exit "$failed"
