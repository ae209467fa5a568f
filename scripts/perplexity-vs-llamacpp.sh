#!/usr/bin/env bash
# Perplexity of the same model files and text by `switchyard perplexity` and llama.cpp's
# `llama-perplexity`, one after the other, both on the CPU with two threads: the two
# figures, their relative difference and each tool's wall time. The method is the same
# (windows of --ctx tokens, the second half of each scored; decision 137), so the figures
# should agree to the rounding of the two runtimes' kernels.
#
# Usage: scripts/perplexity-vs-llamacpp.sh [--ctx N] [--text FILE] MODEL.gguf...
#   --ctx   window length (default 256)
#   --text  the text to score (default tests/data/perplexity/architecture-excerpt.txt)
# Builds llama.cpp's tools the first time (scripts/llamacpp-tools.sh, ~15 minutes).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ctx=256
text="$root/tests/data/perplexity/architecture-excerpt.txt"
models=()
while [ $# -gt 0 ]; do
  case "$1" in
    --ctx) ctx="$2"; shift 2 ;;
    --text) text="$2"; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    -*) echo "error: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) models+=("$1"); shift ;;
  esac
done
[ ${#models[@]} -gt 0 ] || { echo "error: name at least one model file (see --help)" >&2; exit 2; }
[ -f "$text" ] || { echo "error: no text at $text" >&2; exit 2; }
switchyard="$("$root/scripts/switchyard-bin.sh")"
llama="$("$root/scripts/llamacpp-tools.sh")/llama-perplexity"
now() { date +%s.%N; }
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
echo "| model | switchyard PPL | llama.cpp PPL | difference | switchyard s | llama.cpp s |"
echo "| :-- | --: | --: | --: | --: | --: |"
for model in "${models[@]}"; do
  t0=$(now)
  ours=$("$switchyard" perplexity --backends cpu --threads 2 --ctx "$ctx" -f "$text" --json \
    -m "$model" 2>"$log") || { cat "$log" >&2; exit 1; }
  t1=$(now)
  theirs=$("$llama" -m "$model" -c "$ctx" -b "$ctx" -t 2 -f "$text" 2>&1 | grep "Final estimate" || true)
  t2=$(now)
  [ -n "$theirs" ] || { echo "error: llama-perplexity gave no estimate for $model" >&2; exit 1; }
  python3 - "$model" "$ours" "$theirs" "$t0" "$t1" "$t2" <<'PY'
import json, os, re, sys
model, ours, theirs, t0, t1, t2 = sys.argv[1:]
ours = json.loads(ours)
ppl, err = map(float, re.search(r"PPL = ([\d.]+) \+/- ([\d.]+)", theirs).groups())
diff = (ours["ppl"] - ppl) / ppl * 100
print(f"| {os.path.basename(model)} | {ours['ppl']:.4f} ± {ours['error']:.4f} | {ppl:.4f} ± {err:.4f} "
      f"| {diff:+.2f} % | {float(t1) - float(t0):.1f} | {float(t2) - float(t1):.1f} |")
PY
done
