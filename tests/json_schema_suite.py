"""The official JSON-Schema-Test-Suite (draft 2020-12) against `switchyard constrain`.

For every schema of the suite, each instance is serialized compactly and checked with
`switchyard constrain --json --json-schema SCHEMA TEXT`: a schema the engine refuses is
counted with the reason it gives; for the others, the verdict is compared with the suite's.

Usage (the suite ships inside the `jsonschema` source distribution):
    python3 -m pip download --no-deps --no-binary jsonschema jsonschema -d /tmp/jsts
    tar xzf /tmp/jsts/jsonschema-*.tar.gz -C /tmp/jsts
    python3 tests/json_schema_suite.py target/debug/switchyard /tmp/jsts/jsonschema-*/json/tests/draft2020-12
"""

import collections
import glob
import json
import os
import subprocess
import sys


def main(binary: str, suite: str) -> None:
    counts = collections.Counter()
    refused = collections.Counter()
    disagreements = []
    for path in sorted(glob.glob(os.path.join(suite, "*.json"))):
        name = os.path.basename(path)
        for case in json.load(open(path)):
            schema = json.dumps(case["schema"])
            counts["schemas"] += 1
            compiled = False
            for test in case["tests"]:
                text = json.dumps(test["data"], separators=(",", ":"), ensure_ascii=False)
                out = subprocess.run(
                    [binary, "constrain", "--json", "--json-schema", schema, text],
                    capture_output=True,
                    text=True,
                )
                if not out.stdout.strip():
                    reason = (out.stderr.strip().splitlines() or ["?"])[-1]
                    refused[(name, reason[:150])] += 1
                    counts["instances of refused schemas"] += 1
                    continue
                compiled = True
                accepted = json.loads(out.stdout)["accepted"]
                kind = "valid" if test["valid"] else "invalid"
                agree = accepted == test["valid"]
                counts[f"{kind} instances {'agreeing' if agree else 'disagreeing'}"] += 1
                if not agree:
                    disagreements.append((name, case["description"], test["description"], text))
            counts["schemas compiled"] += compiled
    for key, value in sorted(counts.items()):
        print(f"{value:5} {key}")
    print("refused (instances, file, reason):")
    for (name, reason), n in sorted(refused.items()):
        print(f"  {n:3} {name}: {reason}")
    print("disagreements (file, schema, instance, text):")
    for d in disagreements:
        print("  ", d)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
