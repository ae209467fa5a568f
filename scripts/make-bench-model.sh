#!/usr/bin/env bash
# Makes the benchmark matrix's model files: every requested quantization of the default
# model (SmolLM2-135M-Instruct) and of a random-weight model with Llama-3.2-1B's shapes,
# each quantized by llama.cpp's own `llama-quantize` (so per-tensor type choices, such as
# Q4_K_M's Q6_K tensors or the Q5_0/Q8_0 fallbacks for rows that are not a multiple of
# 256, are exactly what users download). Prints one line per file: SIZE FORMAT PATH.
#
#   135m: the default model dequantized to F32 (scripts/make_bench_model.py dequantize),
#         then re-quantized. Q4_1 is the published file itself.
#   1b:   scripts/make_bench_model.py random-1b writes an F16 source (2.5 GB; N(0, 0.02)
#         weights, the default model's tokenizer padded to 128256 entries), then quantized.
#
# Usage: scripts/make-bench-model.sh [--sizes 135m,1b] [--formats F16,BF16,Q8_0,...]
#                                    [--out DIR]
#   --formats  llama-quantize type names (default: F16,BF16,Q8_0,Q6_K,Q5_K_M,Q4_K_M,Q4_0,
#              Q4_1,IQ4_XS); --out defaults to $SWITCHYARD_HOME/bench-models.
# Needs python3 with pip (installs gguf and numpy when missing) and builds llama.cpp's
# tools with scripts/llamacpp-tools.sh on first use (~15 minutes). Existing files are kept.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
home="${SWITCHYARD_HOME:-$HOME/.cache/switchyard}"
sizes="135m,1b"
formats="F16,BF16,Q8_0,Q6_K,Q5_K_M,Q4_K_M,Q4_0,Q4_1,IQ4_XS"
out="$home/bench-models"

while [ $# -gt 0 ]; do
  case "$1" in
    --sizes) sizes="$2"; shift 2 ;;
    --formats) formats="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
for s in ${sizes//,/ }; do
  case "$s" in 135m|1b) ;; *) echo "error: --sizes takes 135m and/or 1b, not $s" >&2; exit 2 ;; esac
done
mkdir -p "$out"

if ! python3 -c "import gguf, numpy" 2>/dev/null; then
  echo "installing gguf and numpy (python3 -m pip)..." >&2
  python3 -m pip install --quiet gguf numpy >&2
fi
tools="$("$root/scripts/llamacpp-tools.sh")"

default_model="$home/models/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ ! -f "$default_model" ]; then
  echo "fetching the default model..." >&2
  (cd "$root" && cargo run --release --quiet -- generate "Hello" -n 1 >/dev/null)
fi

for size in ${sizes//,/ }; do
  if [ "$size" = 135m ]; then
    stem="SmolLM2-135M-Instruct"
    source="$out/$stem.F32.gguf"
    [ -f "$source" ] || python3 "$root/scripts/make_bench_model.py" dequantize "$default_model" "$source"
  else
    stem="bench-1b"
    source="$out/$stem.F16.gguf"
    [ -f "$source" ] || python3 "$root/scripts/make_bench_model.py" random-1b "$default_model" "$source"
  fi
  for fmt in ${formats//,/ }; do
    file="$out/$stem.$fmt.gguf"
    if [ "$size" = 135m ] && [ "$fmt" = Q4_1 ]; then
      file="$default_model"
    elif [ "$file" != "$source" ] && [ ! -f "$file" ]; then
      echo "quantizing $stem to $fmt..." >&2
      "$tools/llama-quantize" --allow-requantize "$source" "$file.part" "$fmt" > "$file.log" 2>&1 ||
        { echo "error: llama-quantize $fmt failed; see $file.log" >&2; rm -f "$file.part"; exit 1; }
      mv "$file.part" "$file"
    fi
    echo "$(du -h "$file" | cut -f1) $size $fmt $file"
  done
done
