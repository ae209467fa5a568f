#!/usr/bin/env bash
# Runs every cargo-fuzz target in fuzz/ (libFuzzer, coverage-guided) for SECONDS each
# (default 60), one after another, one process at a time:
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#
# Each target starts from a scratch corpus (fuzz/scratch/<target>, not committed)
# seeded from fuzz/corpus/<target>, with libFuzzer's limits: 1 s per input
# (-timeout=1), 2 GiB of memory (-rss_limit_mb=2048) and a per-target -max_len. It
# prints one summary line per target (executions, exec/s, crashes, timeouts, OOMs) and
# copies every crash, timeout and out-of-memory input into fuzz/regressions/<target>/,
# where tests/fuzz_corpus.rs runs it as an ordinary test from then on.
#
# Uses the nightly toolchain with AddressSanitizer when one is installed (cargo-fuzz's
# default); otherwise the stable toolchain without a sanitizer (--sanitizer none, with
# RUSTC_BOOTSTRAP=1 for the flags cargo-fuzz passes). Builds with debug assertions
# (-a), so arithmetic overflow panics. Honours CARGO_TARGET_DIR (default fuzz/target)
# and FUZZ_EXTRA (more libFuzzer flags).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"

seconds="${1:-60}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(gguf safetensors hf_config tokenizer chat_template server_request)
fi

# Largest input per target: a few times the largest seed.
max_len() {
  case "$1" in
    gguf | tokenizer) echo 65536 ;;
    safetensors) echo 16384 ;;
    *) echo 8192 ;;
  esac
}

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "== cargo install cargo-fuzz"
  cargo install --locked cargo-fuzz
fi

toolchain=()
sanitizer=(--sanitizer address)
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  toolchain=(+nightly)
  echo "== toolchain: nightly ($(rustc +nightly --version)), sanitizer: address"
else
  sanitizer=(--sanitizer none)
  export RUSTC_BOOTSTRAP=1
  echo "== toolchain: stable ($(rustc --version)), no sanitizer (no nightly installed)"
fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/fuzz/target}"

echo "== cargo ${toolchain[*]} fuzz run ${sanitizer[*]} -a -O TARGET (builds on first use)"

status=0
summary=()
for t in "${targets[@]}"; do
  scratch="$root/fuzz/scratch/$t"
  artifacts="$root/fuzz/artifacts/$t"
  mkdir -p "$scratch" "$artifacts" "$root/fuzz/regressions/$t"
  cp -n "$root/fuzz/corpus/$t/"* "$scratch/" 2>/dev/null || true
  log="$root/fuzz/artifacts/$t.log"
  # Earlier findings were copied to fuzz/regressions/ when they were made.
  rm -f "$artifacts"/*
  echo "== $t: ${seconds}s, -max_len=$(max_len "$t")"
  set +e
  (cd fuzz && cargo "${toolchain[@]}" fuzz run "${sanitizer[@]}" -a -O "$t" "$scratch" -- \
    -max_total_time="$seconds" -timeout=1 -rss_limit_mb=2048 -max_len="$(max_len "$t")" \
    -print_final_stats=1 -artifact_prefix="$artifacts/" ${FUZZ_EXTRA:-}) >"$log" 2>&1
  rc=$?
  set -e
  stat() { grep -o "stat::$1: *[0-9]*" "$log" | tail -1 | grep -o '[0-9]*$' || echo "?"; }
  count() { ls "$artifacts" | grep -c "^$1-" || true; }
  execs=$(stat number_of_executed_units)
  rate=$(stat average_exec_per_sec)
  rss=$(stat peak_rss_mb)
  crashes=$(( $(count crash) + $(count leak) ))
  timeouts=$(count timeout)
  ooms=$(count oom)
  line="$t: $execs executions in ${seconds}s ($rate exec/s), crashes $crashes, timeouts $timeouts, OOMs $ooms, peak RSS ${rss} MB (exit $rc)"
  echo "$line"
  summary+=("$line")
  if [ -n "$(ls "$artifacts")" ] || [ "$rc" -ne 0 ]; then
    status=1
    tail -40 "$log"
    for f in "$artifacts"/crash-* "$artifacts"/leak-* "$artifacts"/timeout-* "$artifacts"/oom-*; do
      [ -e "$f" ] && cp -n "$f" "$root/fuzz/regressions/$t/"
    done
    echo "   findings copied to fuzz/regressions/$t/ (full log: $log)"
  fi
done

echo "== summary (toolchain ${toolchain[*]:-stable}, ${sanitizer[*]})"
printf '%s\n' "${summary[@]}"
exit $status
