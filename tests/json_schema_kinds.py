"""The schema kinds issue 48 found refused, run through `switchyard generate
--json-schema` on the default model (greedy, 256 tokens at most), each reply checked by
Python's `jsonschema` (an implementation independent of the engine), formats included.

Each schema is closed (no extra properties, bounded strings and integers) so that the
135M model's reply ends: under an open object it keeps adding keys until the token
limit, and a truncated reply cannot validate.

Usage: python3 tests/json_schema_kinds.py SWITCHYARD_BINARY
Prints one line per kind; exits 1 when any reply does not validate.
"""

import json
import subprocess
import sys

import jsonschema

KINDS = {
    "annotations": {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "id": "http://example.com/person",
        "title": "T",
        "description": "d",
        "$comment": "c",
        "examples": [{}],
        "readonly": True,
        "type": "object",
        "properties": {"name": {"type": "string", "example": "Ann", "maxLength": 20}},
        "required": ["name"],
        "additionalProperties": False,
    },
    "vendor keywords": {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
        "properties": {
            "kind": {"type": "string", "maxLength": 12, "x-kubernetes-list-type": "atomic"},
            "replicas": {"type": "integer"},
        },
        "required": ["kind", "replicas"],
        "additionalProperties": False,
    },
    "patternProperties": {
        "type": "object",
        "patternProperties": {"^[a-z]{1,8}$": {"type": "integer", "minimum": 0, "maximum": 999}},
        "additionalProperties": False,
        "minProperties": 1,
        "maxProperties": 3,
    },
    "schema-valued additionalProperties": {
        "type": "object",
        "properties": {"id": {"type": "integer"}},
        "required": ["id"],
        "additionalProperties": {"type": "string", "maxLength": 10},
        "maxProperties": 3,
    },
    "allOf of several": {
        "properties": {"a": {}, "b": {}},
        "additionalProperties": False,
        "allOf": [
            {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
            {"type": "object", "properties": {"b": {"type": "string", "maxLength": 10}}, "required": ["b"]},
        ],
    },
    "union with like starts": {
        "anyOf": [
            {"type": "object", "properties": {"cat": {"type": "string", "maxLength": 10}},
             "required": ["cat"], "additionalProperties": False},
            {"type": "object", "properties": {"cow": {"type": "integer"}},
             "required": ["cow"], "additionalProperties": False},
        ]
    },
    "array top level": {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 4},
    "string top level": {"type": "string", "maxLength": 20},
    "number bounds": {
        "type": "object",
        "properties": {
            "x": {"type": "number", "minimum": -1.5, "maximum": 2.5},
            "n": {"type": "integer", "exclusiveMinimum": 3, "maximum": 9},
        },
        "required": ["x", "n"],
        "additionalProperties": False,
    },
    "uri format": {
        "type": "object",
        "properties": {"home": {"type": "string", "format": "uri", "maxLength": 40}},
        "required": ["home"],
        "additionalProperties": False,
    },
}


def main() -> int:
    binary = sys.argv[1]
    failed = 0
    for name, schema in KINDS.items():
        run = subprocess.run(
            [binary, "generate", "--chat", "--temperature", "0", "-n", "256",
             "--json-schema", json.dumps(schema), "Answer with JSON."],
            capture_output=True, text=True, timeout=600,
        )
        reply = run.stdout.strip()
        try:
            if run.returncode != 0:
                raise RuntimeError(f"exit {run.returncode}: {run.stderr.strip()[-300:]}")
            jsonschema.validate(json.loads(reply), schema,
                                format_checker=jsonschema.FormatChecker())
            print(f"{name}: valid: {reply}")
        except Exception as error:  # any failure is this kind's, reported with its reply
            failed += 1
            print(f"{name}: NOT VALID ({type(error).__name__}: {error}): {reply!r}")
    print(f"{len(KINDS) - failed} of {len(KINDS)} replies valid")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
