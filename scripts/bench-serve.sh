#!/usr/bin/env bash
# Serving benchmark: starts `switchyard serve` and llama.cpp's `llama-server` on the same
# model file and drives both with concurrent streaming chat (or text) completions through
# the official `openai` client (scripts/bench_serve.py), interleaved per concurrency level.
# Prints aggregate output tok/s, TTFT and inter-token latency (p50 / p99 / mean).
#
# Usage: scripts/bench-serve.sh [--model PATH] [--concurrency 1,4,16,64] [--parallel N]
#                               [--max-tokens N] [--threads N] [--api chat|completions]
#                               [--json OUT] [--scored-prompt N [--streams N]]
#                               [--temperature T] [--top-p P]
#   --model        GGUF file (default: the default model, fetched if needed)
#   --parallel     sequences each server steps together (default 16); llama-server gets
#                  --parallel N -c N*1024, switchyard --parallel N --ctx 1024
#   --concurrency  client counts (default 1,4,16,64)
#   --max-tokens   tokens per completion (default 64)
#   --api          chat (default) or completions: plain-text prompts, for model files
#                  without a chat template (the random-weight 1B benchmark model)
#   --temperature  the streamed completions' sampling temperature (default 0: greedy;
#                  1 is what OpenAI clients send unless told otherwise)
#   --top-p        a top-p sent with every completion to both servers (default: none)
#   --scored-prompt N  switchyard alone (llama-server does not score prompts): the
#                  inter-token p50/p99/max of --streams streams (default 8) of
#                  --max-tokens tokens without and with one scored prompt of N tokens
#                  (echo + logprobs), and the same scored prompt twice (prefix cache hits)
# Env:   SWITCHYARD_BIN (default: a release build of this checkout), LLAMACPP_TOOLS (a
#        folder with llama-server; default: built by scripts/llamacpp-tools.sh, ~15 min).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
threads="$(nproc 2>/dev/null || echo 4)"
model=""
concurrency="1,4,16,64"
parallel=16
max_tokens=64
json=""
api="chat"
scored=""
streams=8
temperature=0
top_p=""
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model="$2"; shift 2 ;;
    --concurrency) concurrency="$2"; shift 2 ;;
    --parallel) parallel="$2"; shift 2 ;;
    --max-tokens) max_tokens="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --json) json="$2"; shift 2 ;;
    --api) api="$2"; shift 2 ;;
    --scored-prompt) scored="$2"; shift 2 ;;
    --streams) streams="$2"; shift 2 ;;
    --temperature) temperature="$2"; shift 2 ;;
    --top-p) top_p="$2"; shift 2 ;;
    -h|--help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$temperature" in ''|*[!0-9.]*|*.*.*) echo "error: --temperature takes a number like 0 or 0.8, not '$temperature'" >&2; exit 2 ;; esac
case "$top_p" in ''|0.*[0-9]|1|1.0) ;; *) echo "error: --top-p takes a number in (0, 1] like 0.95, not '$top_p'" >&2; exit 2 ;; esac
case "$api" in chat|completions) ;; *) echo "error: --api takes chat or completions, not '$api'" >&2; exit 2 ;; esac
for n in "$parallel" "$max_tokens" "$threads" "$streams" ${scored:+"$scored"}; do
  case "$n" in ''|*[!0-9]*) echo "error: --parallel, --max-tokens, --threads, --streams and --scored-prompt take numbers" >&2; exit 2 ;; esac
done

python3 -c "import openai" 2>/dev/null || python3 -m pip install --quiet openai
bin="$("$root/scripts/switchyard-bin.sh")"
[ -n "$scored" ] || tools="$("$root/scripts/llamacpp-tools.sh")"
if [ -z "$model" ]; then
  model="${SWITCHYARD_HOME:-$HOME/.cache/switchyard}/models/SmolLM2-135M-Instruct.Q4_1.gguf"
  [ -f "$model" ] || { echo "fetching the default model..." >&2; "$bin" generate "Hello" -n 1 >/dev/null; }
fi
[ -f "$model" ] || { echo "error: no model file at '$model' (give --model)" >&2; exit 1; }

log="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$log"; }
trap cleanup EXIT
# Run a copy: a rebuild of the checkout during the run must not change the binary.
cp "$bin" "$log/switchyard.bin"
bin="$log/switchyard.bin"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_healthy() {
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "error: the server on port $1 did not become healthy; its log:" >&2; cat "$2" >&2; exit 1
}

sy_port="$(free_port)"
"$bin" serve --model "$model" --port "$sy_port" --threads "$threads" --ctx 1024 \
  --parallel "$parallel" --max-queue 256 > "$log/switchyard.log" 2>&1 &
pids+=($!)
wait_healthy "$sy_port" "$log/switchyard.log"
if [ -n "$scored" ]; then
  echo "model $model; $threads threads; --parallel $parallel; $streams streams of $max_tokens tokens; a scored prompt of $scored tokens" >&2
  python3 "$root/scripts/bench_serve.py" --server "switchyard=http://127.0.0.1:$sy_port" \
    --scored-prompt "$scored" --streams "$streams" --max-tokens "$max_tokens" \
    --temperature "$temperature" ${top_p:+--top-p "$top_p"} ${json:+--json "$json"}
  exit 0
fi
ls_port="$(free_port)"
"$tools/llama-server" -m "$model" --port "$ls_port" -t "$threads" --parallel "$parallel" \
  -c $(( parallel * 1024 )) > "$log/llama-server.log" 2>&1 &
pids+=($!)
wait_healthy "$ls_port" "$log/llama-server.log"

echo "model $model; $threads threads; --parallel $parallel; $max_tokens tokens per completion; temperature $temperature${top_p:+, top-p $top_p}" >&2
python3 "$root/scripts/bench_serve.py" \
  --server "switchyard=http://127.0.0.1:$sy_port" \
  --server "llama-server=http://127.0.0.1:$ls_port" \
  --concurrency "$concurrency" --max-tokens "$max_tokens" --api "$api" \
  --temperature "$temperature" ${top_p:+--top-p "$top_p"} ${json:+--json "$json"}
