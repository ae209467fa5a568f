#!/usr/bin/env bash
# Compares `switchyard bench` with llama.cpp (through llama-cpp-python) on the same GGUF
# model and thread count: pp128, pp512 and tg128 as median tok/s, the ratio
# switchyard / llama.cpp, peak RSS and model + KV size.
#
# The two engines run INTERLEAVED — switchyard, llama.cpp, switchyard, llama.cpp... for
# --rounds rounds, each round one warm-up plus --reps timed repetitions per test — so that
# drifting machine load hits both alike. Medians pool every timed repetition of every
# round. llama.cpp runs with flash attention off and on; ratios use its faster mode per
# test, and the table names the mode that is best for pp512.
#
# Usage: scripts/bench-vs-llamacpp.sh [--model PATH] [--threads N] [--rounds R] [--reps K]
#                                     [--pp 128,512] [--tg 128] [--keep DIR]
# Env:   SWITCHYARD_BIN (default: a release build of this checkout),
#        LLAMA_CPP_PYTHON (pip requirement installed when llama_cpp is missing).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
home="${SWITCHYARD_HOME:-$HOME/.cache/switchyard}"
model="$home/models/SmolLM2-135M-Instruct.Q4_1.gguf"
threads="$(nproc 2>/dev/null || echo 4)"
rounds=3
reps=3
pp="128,512"
tg=128
keep=""

while [ $# -gt 0 ]; do
  case "$1" in
    --model) model="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    --pp) pp="$2"; shift 2 ;;
    --tg) tg="$2"; shift 2 ;;
    --keep) keep="$2"; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
for n in "$threads" "$rounds" "$reps" "$tg"; do
  case "$n" in ''|*[!0-9]*) echo "error: --threads, --rounds, --reps and --tg take numbers" >&2; exit 2 ;; esac
done
[ "$rounds" -ge 1 ] && [ "$reps" -ge 1 ] && [ "$threads" -ge 1 ] || {
  echo "error: --threads, --rounds and --reps must be at least 1" >&2; exit 2; }

if [ -n "${SWITCHYARD_BIN:-}" ]; then
  bin="$SWITCHYARD_BIN"
else
  echo "building switchyard (release)..." >&2
  (cd "$root" && cargo build --release --quiet --bin switchyard)
  bin="$root/target/release/switchyard"
fi

if [ ! -f "$model" ]; then
  echo "fetching the default model: $model" >&2
  "$bin" generate "Hello" -n 1 >/dev/null
  [ -f "$model" ] || { echo "error: no model at $model" >&2; exit 1; }
fi

if ! python3 -c "import llama_cpp, numpy" 2>/dev/null; then
  spec="${LLAMA_CPP_PYTHON:-llama-cpp-python==0.3.36}"
  echo "installing $spec: it builds llama.cpp from source and takes ~15 minutes..." >&2
  python3 -m pip install "$spec" >&2
fi

out="${keep:-$(mktemp -d)}"
mkdir -p "$out"
[ -n "$keep" ] || trap 'rm -rf "$out"' EXIT
ctx=$(( 128 + tg ))
for n in ${pp//,/ }; do [ "$n" -gt "$ctx" ] && ctx="$n"; done
ctx=$(( ctx > 2048 ? ctx : 2048 ))

for round in $(seq 1 "$rounds"); do
  echo "round $round/$rounds: switchyard" >&2
  "$bin" bench --model "$model" --threads "$threads" --ctx "$ctx" --prompt-tokens "$pp" \
    --gen-tokens "$tg" --reps "$reps" --json > "$out/switchyard-$round.json"
  echo "round $round/$rounds: llama.cpp (flash attention off, on)" >&2
  python3 "$root/scripts/llamacpp_bench.py" "$model" --threads "$threads" --ctx "$ctx" \
    --pp "$pp" --tg "$tg" --reps "$reps" --flash-attn both > "$out/llamacpp-$round.json"
done

python3 "$root/scripts/bench_compare.py" "$out"
