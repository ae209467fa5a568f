#!/usr/bin/env python3
"""A load client for OpenAI-compatible chat servers that needs nothing but the standard
library, for machines where `scripts/bench_serve.py`'s `openai` package cannot be
installed (the lent GPU machines of decision 97). CLIENTS threads each send REQUESTS
non-streaming chat completions of MAX_TOKENS tokens (temperature 0, `ignore_eos`, so
every request generates all of them) one after another; prints the aggregate output
tok/s from the servers' `usage`, request latency p50 / p99 and the failed requests.
It measures no time to first token or inter-token latency: bench_serve.py does.

    serve_load.py http://127.0.0.1:8080/v1/chat/completions 16 3 64
"""
import argparse
import json
import sys
import threading
import time
import urllib.request


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("url", help="the chat completions endpoint")
    ap.add_argument("clients", type=int)
    ap.add_argument("requests", type=int, help="requests per client, one after another")
    ap.add_argument("max_tokens", type=int)
    args = ap.parse_args()
    latencies, tokens, failed = [], [0], [0]
    lock = threading.Lock()

    def client(i):
        for r in range(args.requests):
            body = json.dumps({
                "messages": [{"role": "user",
                              "content": f"Client {i} request {r}: tell me a story."}],
                "max_tokens": args.max_tokens, "temperature": 0, "ignore_eos": True,
            }).encode()
            request = urllib.request.Request(args.url, body,
                                             {"Content-Type": "application/json"})
            start = time.time()
            try:
                with urllib.request.urlopen(request, timeout=120) as reply:
                    n = json.load(reply)["usage"]["completion_tokens"]
                with lock:
                    latencies.append(time.time() - start)
                    tokens[0] += n
            except Exception as e:  # a failed request is counted, not fatal
                with lock:
                    failed[0] += 1
                print(f"client {i}: {e}", file=sys.stderr)

    start = time.time()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.time() - start
    if not latencies:
        sys.exit(f"clients {args.clients}: every request failed ({failed[0]})")
    latencies.sort()
    p50 = latencies[len(latencies) // 2] * 1000
    p99 = latencies[int(len(latencies) * 0.99)] * 1000
    print(f"clients {args.clients}: {tokens[0]} tokens in {elapsed:.2f} s = "
          f"{tokens[0] / elapsed:.1f} tok/s; request latency p50 {p50:.0f} ms "
          f"p99 {p99:.0f} ms; errors {failed[0]}")


if __name__ == "__main__":
    main()
