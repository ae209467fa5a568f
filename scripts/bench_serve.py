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
from its content chunks. `--temperature T` samples the streamed completions at T (each
server's other samplers at its defaults: llama-server's top-k 40, top-p 0.95 and min-p
0.05 apply; switchyard's are off); `--top-p P` sends that top-p with each request.
`--api completions` sends each prompt as plain text to
/v1/completions instead (for model files without a chat template, such as the random-
weight 1B benchmark model).

`--scored-prompt N` measures something else: what scoring a prompt (`echo` with
`logprobs` on /v1/completions, N prompt tokens) costs the streams running beside it.
Each round runs `--streams` streaming completions of `--max-tokens` tokens (end tokens
ignored) three times: alone, beside a plain prompt of N tokens (one token generated:
what any new request's prompt costs the streams, a normal step's budget at a time), and
beside a scored one, each sent once every stream has its first token; it reports the
streams' inter-token p50 / p99 / max of each, alternating so drifting load hits all
alike. Last, one scored prompt is sent twice alone: the second
should answer from the prefix cache (its hits counter, from /metrics, goes up by one).
"""

import argparse
import asyncio
import json
import statistics
import sys
import time
import urllib.request

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


# The streamed completions' temperature (`--temperature`).
TEMPERATURE = 0.0
# Their top-p (`--top-p`; None: not sent, the server's default).
TOP_P = None


async def one_request(client, model, i, run, max_tokens, api, on_first=None, extra=None):
    """Streams one chat completion (`api` "chat") or text completion ("completions");
    returns (ttft_s, [inter-token gaps], tokens, total_s). `on_first` is called at the
    first piece of text; `extra` goes into the request body as is.

    The stream is read through the client's raw response and each server-sent event
    parsed with `json`, not into the client's typed chunk objects: on a 2-core machine
    the load generator shares the cores with the server it measures, and the typed
    chunks cost twice the client CPU per token (186 against 91 us at 16 streams).
    """
    started = time.perf_counter()
    arrivals, usage = [], None
    common = dict(model=model, max_tokens=max_tokens, temperature=TEMPERATURE, stream=True,
                  stream_options={"include_usage": True}, extra_body=extra)
    if TOP_P is not None:
        common["top_p"] = TOP_P
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
                if on_first is not None and len(arrivals) == 1:
                    on_first()
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


# What each round sends beside the streams: nothing, a plain prompt, a scored one.
KINDS = ("none", "plain", "scored")


def scored_ids(n, run):
    """A prompt of `n` token ids for scoring round `run`: ordinary ids of the vocabulary's
    first 20k, different in every round, so no round's prompt is one cached before."""
    return [1000 + (7 * i + 131 * run) % 19000 for i in range(n)]


async def score(client, model, ids, scored=True):
    """Scores a prompt (echo with log-probabilities, one token generated; or, not
    `scored`, only generates that token); returns the seconds it took and the prompt's
    scores' count (the generated token's left out)."""
    started = time.perf_counter()
    asked = dict(echo=True, logprobs=1) if scored else {}
    reply = await client.completions.create(model=model, prompt=ids, max_tokens=1,
                                            temperature=0, **asked)
    took = time.perf_counter() - started
    if not scored:
        return took, len(ids)
    return took, len(reply.choices[0].logprobs.token_logprobs) - 1


async def scoring_round(client, model, streams, max_tokens, run, tokens, kind):
    """Runs `streams` streams of `max_tokens` tokens and, unless `kind` is "none", one
    prompt of `tokens` tokens sent once every stream has its first token: scored
    ("scored") or only generating one token ("plain", what any new request costs the
    streams); returns (the streams' inter-token gaps, that prompt's seconds or None)."""
    started = asyncio.Event()
    firsts = []

    def first():
        firsts.append(1)
        if len(firsts) == streams:
            started.set()

    extra = {"ignore_eos": True}
    tasks = [asyncio.create_task(one_request(client, model, i, run, max_tokens, "completions",
                                             on_first=first, extra=extra))
             for i in range(streams)]
    took = None
    if kind != "none":
        await started.wait()
        took, count = await score(client, model, scored_ids(tokens, run), kind == "scored")
        if count != tokens:
            raise RuntimeError(f"a scored prompt of {tokens} tokens came back with {count} scores")
    results = await asyncio.gather(*tasks)
    return [g for r in results for g in r[1]], took


def prefix_hits(url):
    """The server's prefix cache hits so far, from its /metrics."""
    with urllib.request.urlopen(url + "/metrics") as response:
        text = response.read().decode()
    for line in text.splitlines():
        if line.startswith("switchyard_prefix_cache_hits_total"):
            return float(line.split()[-1])
    return float("nan")


async def scoring(url, model, streams, max_tokens, tokens, rounds):
    """The `--scored-prompt` measurement on one server: rows of inter-token summaries
    without and with a scored prompt, and the repeat's two latencies and hits."""
    http = openai.DefaultAsyncHttpxClient(limits=limits(max_keepalive_connections=0))
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0,
                                timeout=600, http_client=http)
    # Warm-up: compiles the steps the prompts' chunks ride in, outside the measurement
    # (as many tokens as measured, so the streams are still running as they will be).
    for kind in KINDS[1:]:
        await scoring_round(client, model, streams, max_tokens, len(KINDS) * 1000, tokens,
                            kind)
    rows = []
    for run in range(1, rounds + 1):
        for k, kind in enumerate(KINDS):
            gaps, took = await scoring_round(client, model, streams, max_tokens,
                                             len(KINDS) * run + k, tokens, kind)
            rows.append({"prompt": kind, "round": run, "itl_ms": summary(gaps),
                         "itl_max_ms": 1e3 * max(gaps), "gaps": len(gaps),
                         "prompt_s": took})
    ids = scored_ids(tokens, 10_000)
    before = prefix_hits(url)
    first, _ = await score(client, model, ids)
    second, _ = await score(client, model, ids)
    after = prefix_hits(url)
    await client.close()
    return rows, {"first_s": first, "second_s": second, "prefix_hits": after - before}


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
    ap.add_argument("--scored-prompt", type=int, metavar="N",
                    help="measure a scored prompt of N tokens beside --streams streams")
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--temperature", type=float, default=0.0,
                    help="sampling temperature of the streamed completions (default 0, "
                         "greedy; each server's other samplers at its defaults)")
    ap.add_argument("--top-p", type=float, default=None,
                    help="top-p of the streamed completions (default: not sent)")
    args = ap.parse_args()
    global TEMPERATURE, TOP_P
    TEMPERATURE = args.temperature
    TOP_P = args.top_p
    servers = [s.split("=", 1) for s in args.server]
    levels = [int(c) for c in args.concurrency.split(",")]
    names = {url: await model_name(url) for _, url in servers}
    if args.scored_prompt:
        out = {}
        print(f"{'server':<14}{'prompt':>7}{'round':>6}{'gaps':>6}{'ITL p50':>9}{'p99':>8}"
              f"{'max':>8}{'prompt':>9}  (ms)")
        for name, url in servers:
            rows, repeat = await scoring(url, names[url], args.streams, args.max_tokens,
                                         args.scored_prompt, args.rounds)
            out[name] = {"rows": rows, "repeat": repeat}
            for r in rows:
                i, took = r["itl_ms"], r["prompt_s"]
                took = f"{1e3 * took:>9.0f}" if took is not None else f"{'-':>9}"
                print(f"{name:<14}{r['prompt']:>7}{r['round']:>6}"
                      f"{r['gaps']:>6}{i['p50']:>9.1f}{i['p99']:>8.1f}{r['itl_max_ms']:>8.1f}"
                      f"{took}")
            print(f"{name}: the same scored prompt alone twice: {1e3 * repeat['first_s']:.0f} ms, "
                  f"then {1e3 * repeat['second_s']:.0f} ms; prefix cache hits "
                  f"+{repeat['prefix_hits']:.0f}")
        write_json(args.json, out)
        return
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
    write_json(args.json, rows)


def write_json(path, data):
    """`data` as JSON into `path` (`--json`), when one was given."""
    if path:
        with open(path, "w") as f:
            json.dump(data, f, indent=1)


if __name__ == "__main__":
    asyncio.run(main())
