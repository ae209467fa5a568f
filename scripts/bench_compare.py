#!/usr/bin/env python3
"""Prints the tables of scripts/bench-vs-llamacpp.sh from the files it wrote into DIR:
models.txt ("LABEL PATH" lines), switchyard.LABEL.ROUND.json (`switchyard bench --json`),
llamacpp.LABEL.ROUND.{pp,tg}.json (`llama-bench -o json`) and llamacpp.LABEL.ROUND.rss
(peak RSS in KiB). Statistics pool every timed repetition of every round; "slowest" is the
slowest repetition, the tail a user sees.

Usage: python3 bench_compare.py DIR
"""
import glob
import json
import os
import statistics
import sys


def load_json(pattern):
    runs = []
    for path in sorted(glob.glob(pattern)):
        with open(path) as f:
            runs.append(json.load(f))
    return runs


def stats(rates):
    if not rates:
        return None
    return {"median": statistics.median(rates), "mean": statistics.fmean(rates),
            "slowest": min(rates), "n": len(rates)}


def switchyard_rates(runs):
    """{test: [tok/s, ...]} over every round."""
    out = {}
    for run in runs:
        for r in run["results"]:
            out.setdefault(r["test"], []).extend(r["tok_s"])
    return out


def llamacpp_rates(runs):
    """{mode: {test: [tok/s, ...]}} over every round, from llama-bench's JSON records."""
    out = {}
    for run in runs:
        for rec in run:
            mode = "fa on" if rec.get("flash_attn") in (True, 1, "1", "on", "enabled") else "fa off"
            test = f"pp{rec['n_prompt']}" if rec["n_prompt"] > 0 else f"tg{rec['n_gen']}"
            out.setdefault(mode, {}).setdefault(test, []).extend(rec["samples_ts"])
    return out


def mib(n):
    return "n/a" if not n else f"{n / 2**20:.1f}"


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    d = sys.argv[1]
    with open(os.path.join(d, "models.txt")) as f:
        models = [line.split(maxsplit=1) for line in f if line.strip()]

    rows, first = [], None
    for label, path in models:
        sy_runs = load_json(os.path.join(d, f"switchyard.{label}.*.json"))
        ll_runs = load_json(os.path.join(d, f"llamacpp.{label}.*.pp.json")) + \
            load_json(os.path.join(d, f"llamacpp.{label}.*.tg.json"))
        if not sy_runs or not ll_runs:
            sys.exit(f"error: missing results for {label} in {d}")
        first = first or sy_runs[0]
        sy = {t: stats(r) for t, r in switchyard_rates(sy_runs).items()}
        ll = {m: {t: stats(r) for t, r in tests.items()} for m, tests in llamacpp_rates(ll_runs).items()}
        rss_ll = []
        for p in glob.glob(os.path.join(d, f"llamacpp.{label}.*.rss")):
            with open(p) as f:
                lines = [x for x in f.read().split() if x.isdigit()]
                rss_ll += [int(x) * 1024 for x in lines[-1:]]
        m = sy_runs[0]["model"]
        rows.append({"label": label, "sy": sy, "ll": ll,
                     "rss_sy": max((r.get("peak_rss_bytes") or 0) for r in sy_runs),
                     "rss_ll": max(rss_ll, default=0), "model_kv": m["file_bytes"] + m["kv_bytes"],
                     "types": (m.get("tensors") or {}).get("dtypes"),
                     "gb_s": [r["decode_read_gb_s"] for r in sy_runs if r.get("decode_read_gb_s")],
                     "bw": [r["read_bandwidth"]["median_gb_s"] for r in sy_runs if r.get("read_bandwidth")]})

    env = first["env"]
    tests = [r["test"] for r in first["results"]]
    print(f"threads: {first['threads']}; {len(glob.glob(os.path.join(d, 'switchyard.' + models[0][0] + '.*.json')))} "
          f"interleaved rounds of {first['reps']} timed reps after a warm-up; switchyard ctx {first['model']['ctx']}")
    print(f"cpu: {env['cpu_model']} ({env['cores_physical']} cores / {env['cores_logical']} threads; "
          f"{' '.join(env['simd'])})")
    print(f"switchyard {env['version']} ({env['git_commit']}); llama.cpp: llama-bench (C++)")
    kernels = env.get("cpu_kernels")
    if kernels:
        capped = f"capped by {kernels['capped_by']}" if kernels.get("capped_by") else "uncapped"
        print(f"switchyard CPU kernels: {kernels['active']} ({capped}; this CPU runs {kernels['host']})")
    isa_file = os.path.join(d, "llamacpp.isa")
    if os.path.exists(isa_file):
        with open(isa_file) as f:
            print(f"llama.cpp build: {f.read().strip()}")
    load = env.get("loadavg") or []
    if load:
        print(f"1-minute load at the first switchyard run: {load[0]:.2f}")
        if load[0] > env["cores_logical"]:
            print(f"WARNING: the machine was busy (load above its {env['cores_logical']} logical CPUs): "
                  "other work competed with both engines, llama.cpp's spinning threads most; "
                  "treat the ratios as unreliable.")

    def best(row, t):
        modes = [m for m in row["ll"] if row["ll"][m].get(t)]
        return max(modes, key=lambda m: row["ll"][m][t]["median"]) if modes else None

    print("\nRatio switchyard / llama.cpp's best mode (median tok/s):\n")
    print("| model | " + " | ".join(tests) + " |")
    print("|---|" + "---:|" * len(tests))
    for row in rows:
        cells = []
        for t in tests:
            b = best(row, t)
            s = row["sy"].get(t)
            cells.append("n/a" if not (b and s) else f"{s['median'] / row['ll'][b][t]['median']:.2f}×")
        print(f"| {row['label']} | " + " | ".join(cells) + " |")

    print("\ntok/s, median / mean / slowest repetition:\n")
    print("| model | test | switchyard | llama.cpp (best mode) | ratio of medians | ratio of means |")
    print("|---|---|---:|---:|---:|---:|")
    for row in rows:
        for t in tests:
            b, s = best(row, t), row["sy"].get(t)
            if not (b and s):
                continue
            l = row["ll"][b][t]
            print(f"| {row['label']} | {t} | {s['median']:.1f} / {s['mean']:.1f} / {s['slowest']:.1f} "
                  f"| {l['median']:.1f} / {l['mean']:.1f} / {l['slowest']:.1f} ({b}) "
                  f"| {s['median'] / l['median']:.2f}× | {s['mean'] / l['mean']:.2f}× |")

    print("\nMemory (MiB):\n")
    print("| model | switchyard peak RSS | model + KV | ratio | llama-bench peak RSS "
          "| switchyard decode read GB/s | host read GB/s (probe) | decode / host |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        ratio = f"{row['rss_sy'] / row['model_kv']:.2f}" if row["rss_sy"] and row["model_kv"] else "n/a"
        gb_s = statistics.median(row["gb_s"]) if row["gb_s"] else None
        bw = statistics.median(row["bw"]) if row["bw"] else None
        share = f"{100 * gb_s / bw:.0f} %" if gb_s and bw else "n/a"
        print(f"| {row['label']} | {mib(row['rss_sy'])} | {mib(row['model_kv'])} | {ratio} "
              f"| {mib(row['rss_ll'])} | {f'{gb_s:.1f}' if gb_s else 'n/a'} "
              f"| {f'{bw:.1f}' if bw else 'n/a'} | {share} |")
    if any(row["types"] for row in rows):
        print("\nTensor types (switchyard bench --json; tensors, MiB):")
        for row in rows:
            if row["types"]:
                mix = ", ".join(f"{t['dtype']} {t['tensors']} ({t['bytes'] / 2**20:.1f})" for t in row["types"])
                print(f"  {row['label']}: {mix}")


if __name__ == "__main__":
    main()
