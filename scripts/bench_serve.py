#!/usr/bin/env python3
"""Drives OpenAI-compatible servers with concurrent streaming chat completions through
the official `openai` client and reports, per server and concurrency level: aggregate
output tok/s, time to first token and inter-token latency (p50 / p99 / mean).

Servers are measured INTERLEAVED: for each concurrency level, each server in turn, so
drifting machine load hits all of them alike.

    bench_serve.py --server switchyard=http://127.0.0.1:8080 \
                   --server llama-server=http://127.0.0.1:8081 \
                   --concurrency 1,4,16,64 --max-tokens 64 [--json OUT]

Every client sends its requests one after another; a level sends max(2, 32 / c)
requests per client, each with a prompt of its own (servers get the same prompts at a
level, never one seen at an earlier level or in the warm-up). Each stream's events are
read from the client's raw response and parsed with `json` (the typed chunk objects
cost the shared cores twice the CPU).
A completion's tokens are counted from the server's `usage` when it reports one, else
from its content chunks. `--api completions` sends each prompt as plain text to
/v1/completions instead (for model files without a chat template, such as the random-
weight 1B benchmark model).
"""

import argparse
import asyncio
import json
import statistics
import sys
import time

try:
    import openai
except ImportError:
    sys.exit("bench_serve.py needs the `openai` package: python3 -m pip install openai")

def limits(**kwargs):
    """The HTTP connection limits type of whichever httpx the `openai` package uses."""
    import openai._base_client as base
    httpx = getattr(base, "httpx", None) or getattr(base, "httpx2")
    return httpx.Limits(**kwargs)


TOPICS = [
    "the tides", "a violin", "photosynthesis", "the Roman roads", "bread", "volcanoes",
    "a lighthouse keeper", "prime numbers", "owls", "the printing press", "glaciers",
    "chess openings", "honey bees", "the Moon", "rivers", "compilers",
]


def prompt(i, run, api):
    """Request `i`'s prompt in measurement `run`: no two requests of a run, nor of two
    runs, share more than the chat template's own opening (a real user's system prompt
    is shared; their messages are not), so no server answers from a prompt it cached
    in an earlier level or in the warm-up. A text completion's prompt opens the story
    (an instruction alone is often answered by an end of text at once)."""
    topic = TOPICS[i % len(TOPICS)]
    if api == "chat":
        return f"Story {run}-{i}: write a long, detailed story about {topic}."
    return f"Story {run}-{i}, a long, detailed story about {topic}. Once upon a time"


async def one_request(client, model, i, run, max_tokens, api):
    """Streams one chat completion (`api` "chat") or text completion ("completions");
    returns (ttft_s, [inter-token gaps], tokens, total_s).

    The stream is read through the client's raw response and each server-sent event
    parsed with `json`, not into the client's typed chunk objects: on a 2-core machine
    the load generator shares the cores with the server it measures, and the typed
    chunks cost twice the client CPU per token (186 against 91 us at 16 streams).
    """
    started = time.perf_counter()
    arrivals, usage = [], None
    common = dict(model=model, max_tokens=max_tokens, temperature=0, stream=True,
                  stream_options={"include_usage": True})
    if api == "chat":
        stream = client.chat.completions.with_streaming_response.create(
            messages=[{"role": "user", "content": prompt(i, run, api)}], **common)
    else:
        stream = client.completions.with_streaming_response.create(
            prompt=prompt(i, run, api), **common)
    async with stream as response:
        async for line in response.iter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            if "error" in chunk:
                raise RuntimeError(f"request {i} failed mid-stream: {chunk['error']}")
            if chunk.get("usage"):
                usage = chunk["usage"]["completion_tokens"]
            choices = chunk.get("choices")
            if choices and ((choices[0].get("delta") or {}).get("content")
                            or choices[0].get("text")):
                arrivals.append(time.perf_counter())
    ended = time.perf_counter()
    if not arrivals:
        raise RuntimeError(f"request {i} returned no text")
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
    tokens = usage if usage is not None else len(arrivals)
    return arrivals[0] - started, gaps, tokens, ended - started


async def level(url, model, concurrency, max_tokens, run, api):
    # A fresh connection per request: llama-server closes kept-alive connections after
    # a stream, which a pooled client would only notice on its next request.
    http = openai.DefaultAsyncHttpxClient(limits=limits(max_keepalive_connections=0))
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0,
                                timeout=600, http_client=http)
    per_client = max(2, 32 // concurrency)

    async def run_client(c):
        out = []
        for r in range(per_client):
            out.append(await one_request(client, model, c * per_client + r, run, max_tokens,
                                         api))
        return out

    started = time.perf_counter()
    results = await asyncio.gather(*(run_client(c) for c in range(concurrency)))
    wall = time.perf_counter() - started
    await client.close()
    flat = [r for client_results in results for r in client_results]
    ttfts = [r[0] for r in flat]
    gaps = [g for r in flat for g in r[1]]
    tokens = sum(r[2] for r in flat)
    return {
        "concurrency": concurrency,
        "requests": len(flat),
        "output_tokens": tokens,
        "wall_s": wall,
        "tok_s": tokens / wall,
        "ttft_ms": summary(ttfts),
        "itl_ms": summary(gaps),
    }


def summary(values):
    if not values:
        return {"p50": float("nan"), "p99": float("nan"), "mean": float("nan")}
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]
    return {
        "p50": 1e3 * statistics.median(ordered),
        "p99": 1e3 * p99,
        "mean": 1e3 * statistics.fmean(ordered),
    }


async def model_name(url):
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="none")
    models = await client.models.list()
    await client.close()
    return models.data[0].id


async def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", action="append", required=True, metavar="NAME=URL")
    ap.add_argument("--concurrency", default="1,4,16,64")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--api", choices=["chat", "completions"], default="chat",
                    help="streaming chat completions (default) or text completions")
    ap.add_argument("--json", metavar="OUT", help="also write every result as JSON")
    args = ap.parse_args()
    servers = [s.split("=", 1) for s in args.server]
    levels = [int(c) for c in args.concurrency.split(",")]
    names = {url: await model_name(url) for _, url in servers}
    # One short request each first: compiles and warms caches outside the measurement.
    for _, url in servers:
        await level(url, names[url], 1, 8, 0, args.api)
    rows = []
    for run, c in enumerate(levels, start=1):
        for name, url in servers:
            print(f"concurrency {c}: {name}", file=sys.stderr)
            row = await level(url, names[url], c, args.max_tokens, run, args.api)
            row["server"] = name
            rows.append(row)
    print(f"{'server':<14}{'conc':>5}{'reqs':>6}{'tok/s':>9}"
          f"{'TTFT p50':>10}{'p99':>8}{'mean':>8}{'ITL p50':>9}{'p99':>8}{'mean':>8}  (ms)")
    for r in rows:
        t, i = r["ttft_ms"], r["itl_ms"]
        print(f"{r['server']:<14}{r['concurrency']:>5}{r['requests']:>6}{r['tok_s']:>9.1f}"
              f"{t['p50']:>10.0f}{t['p99']:>8.0f}{t['mean']:>8.0f}"
              f"{i['p50']:>9.1f}{i['p99']:>8.1f}{i['mean']:>8.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    asyncio.run(main())
