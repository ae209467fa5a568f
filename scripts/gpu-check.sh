#!/usr/bin/env bash
# The GPU device check, in two steps, for a machine lent for minutes without network.
#
#   scripts/gpu-check.sh prepare [DIR]   here: builds the dist binary and the GPU test
#                                        binaries (dist profile: no debug info), writes the
#                                        random-model headers (scripts/random_gguf.py), and
#                                        copies llama.cpp's Vulkan tools when
#                                        scripts/llamacpp-tools.sh --vulkan built them.
#                                        DIR (default gpu-check/) is what the device run
#                                        carries; it stays under 64 MiB.
#   scripts/gpu-check.sh run [DIR] [OUT] there (or here, on lavapipe, as a rehearsal):
#                                        the GPU tests, greedy tokens against the CPU, the
#                                        speed matrix beside llama.cpp's Vulkan backend,
#                                        the co-execution arms and the device counters;
#                                        OUT/gpu-check.json and OUT/gpu-check.md (default
#                                        OUT: $OUT, else DIR/report). At most ~8 minutes on
#                                        a GPU; GPU_CHECK_QUICK=1 (the default on a software
#                                        adapter) runs the 135M model with short tests only.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
what="${1:-}"
dir="${2:-gpu-check}"

prepare() {
  local target="${CARGO_TARGET_DIR:-$root/target}"
  mkdir -p "$dir/bin" "$dir/models"
  dir="$(cd "$dir" && pwd)"
  echo "== building the dist binary and the GPU test binaries (no debug info)" >&2
  (cd "$root" && cargo build --profile dist --quiet --bin switchyard)
  cp "$target/dist/switchyard" "$dir/bin/"
  local tests=(gpu_kernels gpu_model gpu_step_counters)
  (cd "$root" && cargo test --profile dist --quiet --no-run $(printf -- '--test %s ' "${tests[@]}")) 2>/dev/null
  for t in "${tests[@]}"; do
    local newest
    newest="$(ls -t "$target"/dist/deps/"$t"-* | grep -v '\.d$' | head -1)"
    cp "$newest" "$dir/bin/$t"
    strip "$dir/bin/$t" 2>/dev/null || true
  done
  echo "== random-model headers (135m and 1b; needs python3 gguf numpy)" >&2
  python3 -c "import gguf, numpy" 2>/dev/null || python3 -m pip install --quiet gguf numpy
  local source="${SWITCHYARD_HOME:-$HOME/.cache/switchyard}/models/SmolLM2-135M-Instruct.Q4_1.gguf"
  if [ ! -f "$source" ]; then
    echo "== fetching the default model (its tokenizer and shapes make the headers)" >&2
    "$dir/bin/switchyard" generate -n 1 "Hello" >/dev/null
  fi
  (cd "$root/scripts" && python3 random_gguf.py header "$source" "$dir/models")
  cp "$root/scripts/random_gguf.py" "$root/scripts/gpu_check_report.py" "$dir/"
  # Where `scripts/llamacpp-tools.sh --vulkan` builds them (statically linked: the
  # machine's Vulkan loader is all they need there).
  local vk="${SWITCHYARD_HOME:-$HOME/.cache/switchyard}/llamacpp-tools-vulkan/bin"
  if [ -x "$vk/llama-bench" ]; then
    mkdir -p "$dir/llama-vulkan" && cp "$vk"/llama-bench "$vk"/lib*.so* "$dir/llama-vulkan/" 2>/dev/null || true
  fi
  du -sh "$dir" >&2
}

run() {
  local out="${3:-${OUT:-$dir/report}}"
  mkdir -p "$out" "$dir/work"
  local bin="$dir/bin/switchyard" log="$out/gpu-check.log"
  : > "$log"
  export SWITCHYARD_REQUIRE_GPU=1 XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"
  "$bin" doctor --json > "$out/doctor.json"
  local quick="${GPU_CHECK_QUICK:-}"
  if [ -z "$quick" ] && grep -q '"device_type": *"Cpu"' "$out/doctor.json"; then
    quick=1
  fi
  local models=(135m-q4_1 135m-q8_0 135m-f16 1b-q4_1 1b-q8_0 1b-f16) pp=512 tg=128 batch=16
  if [ -n "$quick" ]; then
    models=(135m-q4_1) pp=32 tg=8 batch=4
  fi
  echo "== GPU tests" | tee -a "$log"
  for t in gpu_kernels gpu_model gpu_step_counters; do
    local status=pass
    "$dir/bin/$t" --test-threads 1 >> "$log" 2>&1 || status=fail
    echo "{\"test\": \"$t\", \"status\": \"$status\"}" >> "$out/tests.jsonl"
    echo "$t: $status" | tee -a "$log"
  done
  for m in "${models[@]}"; do
    local file="$dir/work/$m.gguf"
    [ -f "$file" ] || python3 "$dir/random_gguf.py" fill "$dir/models/$m" "$file"
    echo "== $m: greedy tokens, CPU and GPU" | tee -a "$log"
    for b in cpu cpu,gpu; do
      "$bin" generate -m "$file" --backends "$b" --coexec off --temperature 0 -n 16 \
        --top-logits 3 --json "The capital of France is" > "$out/$m.generate.$b.json" 2>> "$log" || true
    done
    echo "== $m: bench, CPU and GPU" | tee -a "$log"
    for b in cpu cpu,gpu; do
      "$bin" bench -m "$file" --backends "$b" --coexec off --prompt-tokens "$pp" \
        --gen-tokens "$tg" --batch "$batch" --reps 2 --json > "$out/$m.bench.$b.json" 2>> "$log" || true
    done
    echo "== $m: bench on the GPU, tokens drawn on the device (T 1, top-k 40, top-p 0.95)" | tee -a "$log"
    "$bin" bench -m "$file" --backends cpu,gpu --coexec off --prompt-tokens "$pp" \
      --gen-tokens "$tg" --batch "$batch" --reps 2 --temperature 1 --top-k 40 --top-p 0.95 --json \
      > "$out/$m.bench.draw.json" 2>> "$log" || true
    case "$m" in
      *q4_1)
        echo "== $m: where the GPU's time goes (bench --profile, device timestamps)" | tee -a "$log"
        "$bin" bench -m "$file" --backends cpu,gpu --coexec off --prompt-tokens "$pp" \
          --gen-tokens 32 --reps 1 --profile --json > "$out/$m.profile.json" 2>> "$log" || true
        ;;
    esac
    if [ -x "$dir/llama-vulkan/llama-bench" ]; then
      echo "== $m: llama.cpp Vulkan" | tee -a "$log"
      LD_LIBRARY_PATH="$dir/llama-vulkan" GGML_VK_VISIBLE_DEVICES=0 "$dir/llama-vulkan/llama-bench" \
        -m "$file" -ngl 99 -p "$pp" -n "$tg" -r 2 -o json > "$out/$m.llama-vulkan.json" 2>> "$log" || true
    fi
  done
  echo "== co-execution arms (135m-q4_1)" | tee -a "$log"
  "$bin" bench -m "$dir/work/135m-q4_1.gguf" --backends cpu,gpu --arms cpu,gpu,split,gate \
    --rounds 3 --warmup 1 --prompt-tokens "$pp" --gen-tokens 8 --out "$out/arms" >> "$log" 2>&1 || true
  python3 "$dir/gpu_check_report.py" "$out"
}

case "$what" in
  prepare) prepare ;;
  run) run "$@" ;;
  *)
    sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
