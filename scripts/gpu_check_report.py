#!/usr/bin/env python3
"""Turns a `scripts/gpu-check.sh run` folder into gpu-check.json and gpu-check.md.

  gpu_check_report.py OUT

Reads OUT/doctor.json (the adapter), OUT/tests.jsonl (each GPU test binary's status),
OUT/MODEL.generate.{cpu,cpu,gpu}.json (greedy tokens with top-3 logits on each backend),
OUT/MODEL.bench.{cpu,cpu,gpu,draw}.json (`switchyard bench --json`, the last drawing
each token on the GPU at temperature 1 with top-k 40 and top-p 0.95, llama.cpp's
defaults: tok/s and the device counters) and OUT/MODEL.llama-vulkan.json (llama-bench -o json, when it ran), and writes
a report whose Markdown table the GPU page of the docs takes. Standard library only:
the device machine has nothing else.
"""
import glob
import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def greedy(out, model):
    """Whether the GPU's greedy tokens are the CPU's, and the largest top-3 logit gap."""
    cpu = load(f"{out}/{model}.generate.cpu.json")
    gpu = load(f"{out}/{model}.generate.cpu,gpu.json")
    if not cpu or not gpu:
        return None
    a, b = cpu.get("generation", cpu), gpu.get("generation", gpu)
    gap = 0.0
    for sa, sb in zip(a["top_logits"], b["top_logits"]):
        ids = {t["id"]: t["logit"] for t in sb}
        for t in sa:
            if t["id"] in ids:
                gap = max(gap, abs(t["logit"] - ids[t["id"]]))
    same = 0
    for x, y in zip(a["tokens"], b["tokens"]):
        if x != y:
            break
        same += 1
    return {"tokens": len(a["tokens"]), "same_prefix": same, "max_top3_gap": round(gap, 4)}


def speeds(report):
    """{test: median tok/s} of a `bench --json` report."""
    if not report:
        return {}
    return {r["test"]: r["summary"]["median"] for r in report["results"]}


def rounded(x, digits):
    return None if x is None else round(x, digits)


def counters(report):
    """Per decode run of the GPU: dispatches, submits, waits, creations, host µs."""
    if not report:
        return None
    for use in report.get("devices", []):
        if use["test"].startswith("tg") and "x" not in use["test"]:
            c = use["counters"]
            runs = max(c["runs"], 1)
            return {
                "runs": c["runs"],
                "dispatches_per_run": round(sum(c["dispatches"].values()) / runs, 1),
                "submits_per_run": round(c["submits"] / runs, 2),
                "waits_per_run": round(c["waits"] / runs, 2),
                "buffers_created": c["buffers_created"],
                "bind_groups_created": c["bind_groups_created"],
                "bytes_read_per_run": round(c["bytes_read"] / runs),
                "median_record_us": rounded(use.get("median_record_us"), 1),
                "record_us_per_dispatch": rounded(use.get("record_us_per_dispatch"), 2),
                "ahead_share": round(c.get("ahead_runs", 0) / runs, 2),
                "ahead_us_per_run": round(c.get("ahead_nanos", 0) / runs / 1e3, 1),
            }
    return None


def gpu_profile(out, model):
    """The GPU's decode (one-row) time by dispatch kind from `bench --profile --json`."""
    report = load(f"{out}/{model}.profile.json")
    if not report:
        return None
    for test in report.get("profile") or []:
        if test.get("backend") != "gpu":
            continue
        for steps in test["steps"]:
            if steps["rows"] == 1:
                runs = max(steps["runs"], 1)
                return {
                    "step_us": round(steps["nanos"] / runs / 1e3, 1),
                    "ops": [{"op": o["op"], "calls_per_step": round(o["calls"] / runs, 1),
                             "us_per_call": round(o["nanos"] / max(o["calls"], 1) / 1e3, 2),
                             "share": round(100 * o["nanos"] / max(steps["nanos"], 1), 1)}
                            for o in steps["ops"]],
                }
    return None


def llama(out, model):
    rows = load(f"{out}/{model}.llama-vulkan.json")
    if not rows:
        return {}
    got = {}
    for r in rows:
        test = f"pp{r['n_prompt']}" if r.get("n_prompt") else f"tg{r['n_gen']}"
        got[test] = r.get("avg_ts")
    return got


def main():
    out = sys.argv[1]
    doctor = load(f"{out}/doctor.json") or {}
    tests = []
    if os.path.exists(f"{out}/tests.jsonl"):
        tests = [json.loads(line) for line in open(f"{out}/tests.jsonl") if line.strip()]
    models = sorted({os.path.basename(p).split(".")[0] for p in glob.glob(f"{out}/*.bench.*.json")})
    rows = []
    for m in models:
        gpu = load(f"{out}/{m}.bench.cpu,gpu.json")
        rows.append({
            "model": m,
            "cpu": speeds(load(f"{out}/{m}.bench.cpu.json")),
            "gpu": speeds(gpu),
            "gpu_drawn": speeds(load(f"{out}/{m}.bench.draw.json")),
            "llama_vulkan": llama(out, m),
            "greedy": greedy(out, m),
            "counters": counters(gpu),
            "gpu_profile": gpu_profile(out, m),
        })
    report = {"doctor": doctor, "tests": tests, "models": rows}
    with open(f"{out}/gpu-check.json", "w") as f:
        json.dump(report, f, indent=1)
    adapter = (doctor.get("gpu") or {}).get("adapter") or {}
    lines = [
        f"Adapter: {adapter.get('name', '?')} ({adapter.get('device_type', '?')}, "
        f"driver {adapter.get('driver', '?')})",
        "",
        "Tests: " + ", ".join(f"{t['test']} {t['status']}" for t in tests),
        "",
        "| model | test | cpu tok/s | gpu tok/s | gpu, drawn (T 1, top-k 40, top-p 0.95) "
        "| llama.cpp Vulkan tok/s "
        "| gpu / llama.cpp |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        for test in sorted(set(r["cpu"]) | set(r["gpu"])):
            g, v = r["gpu"].get(test), r["llama_vulkan"].get(test)
            ratio = f"{g / v:.2f}" if g and v else ""
            fmt = lambda x: f"{x:.1f}" if isinstance(x, (int, float)) else ""
            lines.append(f"| {r['model']} | {test} | {fmt(r['cpu'].get(test))} | {fmt(g)} "
                         f"| {fmt(r['gpu_drawn'].get(test))} | {fmt(v)} | {ratio} |")
    lines += ["", "| model | greedy tokens equal | max top-3 logit gap | dispatches / step "
              "| submits / step | waits / step | buffers made | bytes read / step | record µs / step "
              "| µs / dispatch | steps recorded ahead | µs recorded ahead / step |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        g, c = r["greedy"] or {}, r["counters"] or {}
        lines.append(
            f"| {r['model']} | {g.get('same_prefix', '')}/{g.get('tokens', '')} "
            f"| {g.get('max_top3_gap', '')} | {c.get('dispatches_per_run', '')} "
            f"| {c.get('submits_per_run', '')} | {c.get('waits_per_run', '')} "
            f"| {c.get('buffers_created', '')} | {c.get('bytes_read_per_run', '')} "
            f"| {c.get('median_record_us') or ''} "
            f"| {c.get('record_us_per_dispatch') or ''} "
            f"| {c.get('ahead_share', '')} | {c.get('ahead_us_per_run', '')} |")
    for r in rows:
        p = r["gpu_profile"]
        if not p:
            continue
        lines += ["", f"GPU time of a {r['model']} decode step by dispatch kind "
                  f"(`bench --profile`, device timestamps): {p['step_us']} µs a step", "",
                  "| kind | calls / step | µs / call | share |", "|---|---:|---:|---:|"]
        lines += [f"| {o['op']} | {o['calls_per_step']} | {o['us_per_call']} | {o['share']}% |"
                  for o in p["ops"]]
    arms = f"{out}/arms.md"
    if os.path.exists(arms):
        lines += ["", "Co-execution arms (`bench --arms cpu,gpu,split,gate`):", ""]
        lines += [l.rstrip("\n") for l in open(arms) if l.startswith("|")]
    with open(f"{out}/gpu-check.md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
