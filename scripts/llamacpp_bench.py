#!/usr/bin/env python3
"""Times llama.cpp (through llama-cpp-python) on a GGUF model the way llama-bench does, for
comparison with `switchyard bench`.

  ppN  tokens/s of one N-token prompt evaluated into an empty context
  tgN  tokens/s of N greedy single-token decode steps after a 128-token prompt

Each test runs once untimed (warm-up), then --reps timed times; prints one JSON object with
every timing, the median/min/max, the peak RSS of this process and the model + KV bytes.
With --flash-attn both, each mode gets its own context and its own results.

Example:  python3 llamacpp_bench.py MODEL.gguf --threads 2 --pp 128,512 --tg 128 --reps 5
"""
import argparse
import json
import os
import statistics
import sys
import time

TG_PROMPT = 128
# The same English text `switchyard bench` tokenizes (src/bench/llm.rs, BENCH_TEXT).
TEXT = ("The history of the city spans many centuries, and its streets still carry the marks "
        "of every era. Merchants, scholars and travelers arrived by river and by road, "
        "bringing goods, ideas and languages. ")


def peak_rss_bytes():
    """VmHWM of this process, or None where /proc is absent."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def summary(rates):
    return {"median_tok_s": statistics.median(rates), "min": min(rates), "max": max(rates),
            "tok_s": rates}


def kv_bytes(llm, n_ctx):
    """Bytes of an f16 K and V cache for n_ctx positions, from the GGUF metadata."""
    meta = llm.metadata
    arch = meta.get("general.architecture", "llama")
    get = lambda key, default=None: int(meta.get(f"{arch}.{key}", default))
    n_layer, n_embd, n_head = get("block_count"), get("embedding_length"), get("attention.head_count")
    n_head_kv = get("attention.head_count_kv", n_head)
    head_dim = get("attention.key_length", n_embd // n_head)
    return 2 * n_layer * n_ctx * n_head_kv * head_dim * 2


def measure(llama_cpp, Llama, np, args, flash_attn):
    llm = Llama(model_path=args.model, n_ctx=args.ctx, n_batch=2048, n_ubatch=512,
                n_threads=args.threads, n_threads_batch=args.threads, flash_attn=flash_attn,
                verbose=False)
    ctx, n_vocab = llm._ctx.ctx, llm.n_vocab()
    need = max(args.pp + [TG_PROMPT])
    text = TEXT * 16
    tokens = llm.tokenize(text.encode(), add_bos=False)
    while len(tokens) < need:
        text += text
        tokens = llm.tokenize(text.encode(), add_bos=False)

    def greedy():
        logits = llama_cpp.llama_get_logits_ith(ctx, -1)
        return int(np.argmax(np.ctypeslib.as_array(logits, shape=(n_vocab,))))

    def timed(run):
        rates = []
        for rep in range(args.reps + 1):
            llm.reset()
            n, seconds = run()
            if rep:
                rates.append(n / seconds)
        return summary(rates)

    def pp(n):
        start = time.perf_counter()
        llm.eval(tokens[:n])
        llama_cpp.llama_synchronize(ctx)
        return n, time.perf_counter() - start

    def tg():
        llm.eval(tokens[:TG_PROMPT])
        token = greedy()
        start = time.perf_counter()
        for _ in range(args.tg):
            llm.eval([token])
            token = greedy()
        return args.tg, time.perf_counter() - start

    runs = {f"pp{n}": timed(lambda n=n: pp(n)) for n in args.pp}
    if args.tg > 0:
        runs[f"tg{args.tg}"] = timed(tg)
    kv = kv_bytes(llm, args.ctx)
    del llm
    return runs, kv


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--pp", default="128,512", help="comma-separated prompt lengths")
    ap.add_argument("--tg", type=int, default=128, help="decode steps after a 128-token prompt")
    ap.add_argument("--reps", type=int, default=5, help="timed repetitions after one warm-up")
    ap.add_argument("--ctx", type=int, default=2048, help="context positions (KV cache size)")
    ap.add_argument("--flash-attn", choices=["on", "off", "both"], default="both")
    args = ap.parse_args()
    args.pp = [int(x) for x in args.pp.split(",") if x.strip()]
    if args.reps < 1 or args.threads < 1 or any(n < 1 for n in args.pp):
        sys.exit("error: --reps, --threads and every --pp length must be at least 1")
    args.ctx = max([args.ctx, TG_PROMPT + args.tg] + args.pp)
    try:
        import llama_cpp
        import numpy as np
        from llama_cpp import Llama
    except ImportError:
        sys.exit("error: llama-cpp-python is not installed (python3 -m pip install llama-cpp-python)")

    result = {"tool": "llama.cpp via llama-cpp-python", "version": llama_cpp.__version__,
              "system_info": llama_cpp.llama_print_system_info().decode(errors="replace"),
              "model": args.model, "model_bytes": os.path.getsize(args.model),
              "threads": args.threads, "reps": args.reps, "ctx": args.ctx, "modes": {}}
    modes = {"on": [True], "off": [False], "both": [False, True]}[args.flash_attn]
    for flash_attn in modes:
        runs, kv = measure(llama_cpp, Llama, np, args, flash_attn)
        result["modes"]["flash_attn_" + ("on" if flash_attn else "off")] = runs
        result["kv_bytes"] = kv
    result["peak_rss_bytes"] = peak_rss_bytes()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
