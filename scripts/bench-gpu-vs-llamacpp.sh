#!/usr/bin/env bash
# Switchyard's GPU backend against llama.cpp's Vulkan backend on the same adapter and
# the same files, interleaved: each round runs `switchyard bench --backends cpu,gpu
# --coexec off` once, then `llama-bench -ngl 99` once (every layer on the GPU), so both
# see the same machine state; medians, means and p99 over the rounds. Tests: ppN, tgN
# and, where llama.cpp's `llama-batched-bench` was built, B sequences decoding together.
#
# Usage: scripts/bench-gpu-vs-llamacpp.sh [--pp N] [--tg N] [--batch B] [--rounds R]
#                                         [--out PREFIX] MODEL.gguf...
#   defaults: --pp 512 --tg 128 --batch 16 --rounds 3 --out gpu-vs-llamacpp
#   MODEL     GGUF files (e.g. scripts/make-bench-model.sh's F16, Q8_0, Q4_0 and Q4_K_M
#             files at 135m and 1b, or scripts/random_gguf.py's)
# Writes PREFIX.json and PREFIX.md. The llama.cpp tools come from
# scripts/llamacpp-tools.sh --vulkan (built on first use, ~15+ minutes on 2 cores), the
# switchyard binary from scripts/switchyard-bin.sh ($SWITCHYARD_BIN to choose one). On a
# software adapter (lavapipe) set GGML_VK_VISIBLE_DEVICES=0 (the default here), as
# llama.cpp skips CPU-type Vulkan devices otherwise.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
pp=512 tg=128 batch=16 rounds=3 out=gpu-vs-llamacpp
models=()
while [ $# -gt 0 ]; do
  case "$1" in
    --pp) pp="$2"; shift 2 ;;
    --tg) tg="$2"; shift 2 ;;
    --batch) batch="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "error: unknown argument $1 (see --help)" >&2; exit 2 ;;
    *) models+=("$1"); shift ;;
  esac
done
[ ${#models[@]} -gt 0 ] || { echo "error: name at least one MODEL.gguf (see --help)" >&2; exit 2; }
for v in pp tg batch rounds; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || { echo "error: --$v must be a positive integer" >&2; exit 2; }
done
for m in "${models[@]}"; do
  [ -f "$m" ] || { echo "error: no model file $m" >&2; exit 1; }
done
tools="$("$root/scripts/llamacpp-tools.sh" --vulkan)"
bin="$("$root/scripts/switchyard-bin.sh")"
export GGML_VK_VISIBLE_DEVICES="${GGML_VK_VISIBLE_DEVICES:-0}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for m in "${models[@]}"; do
  name="$(basename "$m" .gguf)"
  for r in $(seq 1 "$rounds"); do
    echo "== $name, round $r of $rounds" >&2
    "$bin" bench -m "$m" --backends cpu,gpu --coexec off --prompt-tokens "$pp" \
      --gen-tokens "$tg" --batch "$batch" --reps 1 --json > "$work/$name.sy.$r.json"
    "$tools/llama-bench" -m "$m" -ngl 99 -p "$pp" -n "$tg" -r 1 -o json \
      > "$work/$name.ll.$r.json" 2>> "$work/llama.log"
    if [ -x "$tools/llama-batched-bench" ]; then
      "$tools/llama-batched-bench" -m "$m" -ngl 99 -c $(( (pp + tg) * batch )) -npp "$pp" \
        -ntg "$tg" -npl "$batch" --output-format jsonl > "$work/$name.llb.$r.jsonl" 2>> "$work/llama.log"
    fi
  done
done
python3 - "$work" "$out" "$pp" "$tg" "$batch" <<'PY'
import glob, json, os, statistics, sys

work, out, pp, tg, batch = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])


def stats(xs):
    if not xs:
        return None
    s = sorted(xs)
    return {"n": len(s), "median": statistics.median(s), "mean": statistics.fmean(s),
            "p99": s[min(len(s) - 1, round(0.99 * (len(s) - 1)))]}


rows = []
names = sorted({os.path.basename(p).split(".sy.")[0] for p in glob.glob(f"{work}/*.sy.*.json")})
for name in names:
    sy, ll = {}, {}
    for p in glob.glob(f"{work}/{name}.sy.*.json"):
        for r in json.load(open(p))["results"]:
            sy.setdefault(r["test"], []).extend(r["tok_s"])
    for p in glob.glob(f"{work}/{name}.ll.*.json"):
        for r in json.load(open(p)):
            test = f"pp{r['n_prompt']}" if r.get("n_prompt") else f"tg{r['n_gen']}"
            ll.setdefault(test, []).append(r["avg_ts"])
    for p in glob.glob(f"{work}/{name}.llb.*.jsonl"):
        for line in open(p):
            if line.strip().startswith("{"):
                r = json.loads(line)
                ll.setdefault(f"tg{tg}x{batch}", []).append(r.get("speed_tg"))
    for test in sorted(set(sy) | set(ll)):
        a, b = stats(sy.get(test, [])), stats([x for x in ll.get(test, []) if x])
        rows.append({"model": name, "test": test, "switchyard": a, "llama_vulkan": b,
                     "ratio_median": a["median"] / b["median"] if a and b else None})
json.dump(rows, open(f"{out}.json", "w"), indent=1)
fmt = lambda s, k: f"{s[k]:.1f}" if s else ""
lines = ["| model | test | switchyard median / mean / p99 tok/s | llama.cpp Vulkan median / mean / p99 tok/s | ratio (medians) |",
         "|---|---|---:|---:|---:|"]
for r in rows:
    a, b = r["switchyard"], r["llama_vulkan"]
    ratio = f"{r['ratio_median']:.2f}×" if r["ratio_median"] else ""
    lines.append(f"| {r['model']} | {r['test']} | {fmt(a, 'median')} / {fmt(a, 'mean')} / {fmt(a, 'p99')} "
                 f"| {fmt(b, 'median')} / {fmt(b, 'mean')} / {fmt(b, 'p99')} | {ratio} |")
open(f"{out}.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
