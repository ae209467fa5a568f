#!/usr/bin/env bash
# Compares `switchyard bench` with llama.cpp's own `llama-bench` (C++) over a matrix of
# model files: pp128, pp512 and tg128 as tok/s, the ratio switchyard / llama.cpp, and
# peak RSS against model + KV size.
#
#   ppN    tok/s of one N-token prompt evaluated into an empty context
#   tgN    tok/s of N single-token decode steps after a 128-token prompt (llama-bench:
#          -n N at --n-depth 128)
#
# The engines run INTERLEAVED: for every round, for every model file, switchyard then
# llama.cpp (each one warm-up plus --reps timed repetitions), so drifting load hits both
# alike. llama.cpp runs with flash attention off and on; ratios use its faster mode per
# test. Medians, means and the slowest repetition pool every timed repetition of every round.
#
# Usage: scripts/bench-vs-llamacpp.sh [--formats Q4_1,Q4_K_M,...] [--sizes 135m,1b]
#                                     [--model PATH] [--threads N] [--rounds R] [--reps K]
#                                     [--pp 128,512] [--tg 128] [--keep DIR]
#                                     [--isa native|avx2]
#   --formats  quantizations to compare, made once by scripts/make-bench-model.sh
#              (default: Q4_1, the default model as published); `all` is F16,BF16,Q8_0,
#              Q6_K,Q5_K_M,Q4_K_M,Q4_0,Q4_1,IQ4_XS
#   --sizes    135m (the default model) and/or 1b (Llama-3.2-1B shapes); default 135m
#   --model    one GGUF file instead of the matrix
#   --isa      native (default): each engine's widest kernels. avx2: both limited to AVX2
#              (switchyard under SWITCHYARD_ISA=avx2, llama.cpp built by
#              `scripts/llamacpp-tools.sh --isa avx2`), to compare like with like on a
#              host with AVX-512 as on an AVX2-only one
# Env:   SWITCHYARD_BIN (default: a release build of this checkout), LLAMACPP_TOOLS (a
#        folder with llama-bench; default: built by scripts/llamacpp-tools.sh, ~15 minutes;
#        LLAMACPP_TOOLS_AVX2 for --isa avx2).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
threads="$(nproc 2>/dev/null || echo 4)"
rounds=3
reps=3
pp="128,512"
tg=128
keep=""
formats="Q4_1"
sizes="135m"
model=""
isa=native

while [ $# -gt 0 ]; do
  case "$1" in
    --formats) formats="$2"; shift 2 ;;
    --sizes) sizes="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    --pp) pp="$2"; shift 2 ;;
    --tg) tg="$2"; shift 2 ;;
    --keep) keep="$2"; shift 2 ;;
    --isa) isa="$2"; shift 2 ;;
    -h|--help) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
for n in "$threads" "$rounds" "$reps" "$tg"; do
  case "$n" in ''|*[!0-9]*) echo "error: --threads, --rounds, --reps and --tg take numbers" >&2; exit 2 ;; esac
done
[ "$rounds" -ge 1 ] && [ "$reps" -ge 1 ] && [ "$threads" -ge 1 ] || {
  echo "error: --threads, --rounds and --reps must be at least 1" >&2; exit 2; }
case "$isa" in
  native) sy_isa="" ;;
  avx2) sy_isa=avx2 ;;
  *) echo "error: --isa $isa: use native or avx2" >&2; exit 2 ;;
esac
[ "$formats" = all ] && formats="F16,BF16,Q8_0,Q6_K,Q5_K_M,Q4_K_M,Q4_0,Q4_1,IQ4_XS"

bin="$("$root/scripts/switchyard-bin.sh")"
tools="$("$root/scripts/llamacpp-tools.sh" --isa "$isa")"

out="${keep:-$(mktemp -d)}"
mkdir -p "$out"
[ -n "$keep" ] || trap 'rm -rf "$out"' EXIT
# Run a copy: a rebuild of the checkout while the matrix runs must not change the binary
# between formats.
cp "$bin" "$out/switchyard.bin"
bin="$out/switchyard.bin"
# Which llama.cpp build ran, for the report (switchyard's kernel set is in its JSON).
if [ "$isa" = avx2 ]; then
  echo "AVX2 only (GGML_NATIVE=OFF, AVX-512/AVX-VNNI/AMX off; $tools)" > "$out/llamacpp.isa"
else
  echo "native (-march=native; $tools)" > "$out/llamacpp.isa"
fi

# The matrix: one "LABEL PATH" line per model file.
if [ -n "$model" ]; then
  [ -f "$model" ] || { echo "error: no model file at $model" >&2; exit 1; }
  echo "$(basename "$model" .gguf) $model" > "$out/models.txt"
else
  "$root/scripts/make-bench-model.sh" --sizes "$sizes" --formats "$formats" |
    awk '{ print $2 "-" $3, $4 }' > "$out/models.txt"
fi

ctx=$(( 128 + tg ))
for n in ${pp//,/ }; do [ "$n" -gt "$ctx" ] && ctx="$n"; done
ctx=$(( ctx > 2048 ? ctx : 2048 ))

for round in $(seq 1 "$rounds"); do
  while read -r label path; do
    echo "round $round/$rounds, $label: switchyard" >&2
    # CPU against llama.cpp's CPU build: probing for a GPU would load whatever Vulkan
    # drivers are installed (here lavapipe, ~50 MiB of peak RSS) without using them.
    SWITCHYARD_ISA="$sy_isa" "$bin" bench --model "$path" --backends cpu --threads "$threads" --ctx "$ctx" --prompt-tokens "$pp" \
      --gen-tokens "$tg" --reps "$reps" --json > "$out/switchyard.$label.$round.json"
    echo "round $round/$rounds, $label: llama-bench (flash attention off, on)" >&2
    /usr/bin/time -f '%M' -o "$out/llamacpp.$label.$round.rss" \
      "$tools/llama-bench" -m "$path" -t "$threads" -r "$reps" -fa 0,1 -o json \
      -p "$pp" -n 0 > "$out/llamacpp.$label.$round.pp.json" 2>"$out/llamacpp.$label.$round.log"
    "$tools/llama-bench" -m "$path" -t "$threads" -r "$reps" -fa 0,1 -o json \
      -p 0 -n "$tg" -d 128 > "$out/llamacpp.$label.$round.tg.json" 2>>"$out/llamacpp.$label.$round.log"
  done < "$out/models.txt"
done

python3 "$root/scripts/bench_compare.py" "$out"
