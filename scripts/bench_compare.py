#!/usr/bin/env python3
"""Prints the comparison table of scripts/bench-vs-llamacpp.sh from the JSON files it wrote
into DIR: switchyard-<round>.json (`switchyard bench --json`) and llamacpp-<round>.json
(scripts/llamacpp_bench.py). Medians pool every timed repetition of every round.

Usage: python3 bench_compare.py DIR
"""
import glob
import json
import os
import statistics
import sys


def load(pattern):
    runs = []
    for path in sorted(glob.glob(pattern)):
        with open(path) as f:
            runs.append(json.load(f))
    if not runs:
        sys.exit(f"error: no results match {pattern}")
    return runs


def stats(rates):
    return {"median": statistics.median(rates), "min": min(rates), "max": max(rates), "n": len(rates)}


def mib(n):
    return "n/a" if n is None else f"{n / 2**20:.1f} MiB"


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    directory = sys.argv[1]
    sy_runs = load(os.path.join(directory, "switchyard-*.json"))
    ll_runs = load(os.path.join(directory, "llamacpp-*.json"))

    tests = [r["test"] for r in sy_runs[0]["results"]]
    sy = {t: stats([x for run in sy_runs for r in run["results"] if r["test"] == t for x in r["tok_s"]])
          for t in tests}
    modes = list(ll_runs[0]["modes"])
    ll = {m: {t: stats([x for run in ll_runs for x in run["modes"][m][t]["tok_s"]]) for t in tests}
          for m in modes}

    first = sy_runs[0]
    env = first["env"]
    print(f"model: {first['model']['path']}")
    print(f"threads: {first['threads']}; rounds: {len(sy_runs)} interleaved; "
          f"{first['reps']} timed reps per round after a warm-up; ctx {first['model']['ctx']}")
    print(f"cpu: {env['cpu_model']} ({env['cores_physical']} cores / {env['cores_logical']} threads; "
          f"{' '.join(env['simd'])})")
    loads = [run["env"]["loadavg"][0] for run in sy_runs if run["env"]["loadavg"]]
    print("1-minute load at the start of each round: " + ", ".join(f"{x:.2f}" for x in loads))
    if loads and max(loads) > env["cores_logical"]:
        print(f"WARNING: the machine was busy (load above its {env['cores_logical']} logical CPUs): "
              "other work competed with both engines, llama.cpp's spinning threads most; "
              "treat the ratios as unreliable.")
    print(f"switchyard {env['version']} ({env['git_commit']}); llama.cpp via llama-cpp-python "
          f"{ll_runs[0]['version']}\n")

    def cell(s):
        return f"{s['median']:.2f} ({s['min']:.1f}–{s['max']:.1f})"

    head = ["test", "switchyard tok/s"] + [f"llama.cpp {m.replace('_', ' ')}" for m in modes]
    head += ["switchyard / llama.cpp best"]
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|")
    for t in tests:
        best = max(modes, key=lambda m: ll[m][t]["median"])
        ratio = sy[t]["median"] / ll[best][t]["median"]
        row = [t, cell(sy[t])] + [cell(ll[m][t]) for m in modes]
        row.append(f"{ratio:.3f} (vs {best.replace('_', ' ')})")
        print("| " + " | ".join(row) + " |")
    if "pp512" in tests:
        best = max(modes, key=lambda m: ll[m]["pp512"]["median"])
        print(f"\nllama.cpp's best mode for pp512: {best.replace('_', ' ')}")

    sy_rss = max((r["peak_rss_bytes"] or 0) for r in sy_runs) or None
    ll_rss = max((r["peak_rss_bytes"] or 0) for r in ll_runs) or None
    m = first["model"]
    ll0 = ll_runs[0]
    print(f"\n| memory | switchyard | llama.cpp |\n|---|---:|---:|")
    print(f"| peak RSS (process) | {mib(sy_rss)} | {mib(ll_rss)} |")
    print(f"| model file | {mib(m['file_bytes'])} | {mib(ll0['model_bytes'])} |")
    print(f"| KV cache ({m['ctx']} / {ll0['ctx']} positions) | {mib(m['kv_bytes'])} ({m.get('kv_dtype', '?').lower()}) "
          f"| {mib(ll0['kv_bytes'])} (f16) |")
    print(f"| model + KV | {mib(m['file_bytes'] + m['kv_bytes'])} | "
          f"{mib(ll0['model_bytes'] + ll0['kv_bytes'])} |")
    print("\nllama.cpp's peak RSS includes the Python interpreter and numpy, and the larger of its "
          "two flash-attention contexts.")


if __name__ == "__main__":
    main()
