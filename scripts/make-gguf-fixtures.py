#!/usr/bin/env python3
"""Adds llama.cpp's GGUF conversion to the fixtures under tests/data/hf_fixtures/.

Run once by a developer, after scripts/make-hf-fixtures.py, with torch, transformers
and llama.cpp's sources (scripts/llamacpp-tools.sh fetches them; or pass the source
directory as --llamacpp-src). The tests need none of this.

For every fixture this rebuilds the model directory from the seeds, converts it with
llama.cpp's own convert_hf_to_gguf.py (--outtype f32), and stores under the fixture's
"gguf" key what the Rust test needs to rebuild that file exactly without the converter:

  * every metadata key with its GGUF type and value (the tokenizer's three arrays,
    the same for every fixture, go once into gguf_tokenizer.json),
  * every tensor in file order: its name, ggml shape, and its recipe, i.e. which
    Hugging Face tensor it came from and how the converter changed it ("copy",
    "add_one" for Gemma's (1 + w) norms, "permute" with a head count for Llama's
    q/k rows), or its values inline for the small tensors the converter computes
    (rope_freqs, rope_factors_*). Each recipe is checked here bit for bit against the
    converter's output, so the test's rebuilt file is the converter's file.

Fixtures whose config the GGUF format cannot express (llama.cpp's loader would
compute something else from the converted file) get "gguf": {"skip": reason}.

The fixtures' tokenizer is a byte-level BPE with the GPT-2 pre-tokenizer, which the
converter's pre-tokenizer fingerprinting does not know, and some converters insist on
a SentencePiece model: both vocabulary paths are pointed at the GPT-2 one. The
vocabulary is not what these fixtures test (tests/tokenizer_reference.rs does that).
"""

import argparse
import importlib.util
import json
import os
import pathlib
import sys
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "data" / "hf_fixtures"
TOKENIZER_KEYS = ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges")
INLINE_LIMIT = 1024
ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "gemma2": "Gemma2ForCausalLM",
    "gemma3_text": "Gemma3ForCausalLM",
    "phi3": "Phi3ForCausalLM",
}

# Config facts the converter drops or llama.cpp's loader does not read for the
# architecture, so a GGUF of these fixtures means something else to llama.cpp.
SKIP = {
    "gemma2": "query_pre_attn_scalar 24 != head_dim 16: GGUF has no key for it; "
    "llama.cpp takes 1/sqrt(head_dim) (gemma2_gguf covers the GGUF path)",
    "gemma3": "query_pre_attn_scalar and sliding_window_pattern 2 are not written; "
    "llama.cpp takes 1/sqrt(head_dim) and a pattern of 6 (gemma3_gguf covers it)",
    "gemma3_legacy": "as gemma3",
    "llama_gelu_tanh": "hidden_act is not written for llama; llama.cpp computes SiLU",
    "llama_gelu": "hidden_act is not written for llama; llama.cpp computes SiLU",
    "llama_yarn": "Switchyard refuses GGUF rope.scaling.type yarn (not implemented for GGUF)",
    "mistral_window": "llama.cpp's llama architecture reads no sliding window",
    "qwen3_window": "llama.cpp's qwen3 architecture reads no sliding window",
}
# The full config dumps test the Hugging Face config's generic fields, which no GGUF
# carries; their architectures' GGUF paths are the other fixtures'.
for _arch in ("llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "phi3"):
    SKIP[f"full_dump_{_arch}"] = "a full config.json dump: its generic fields have no GGUF form"


def load_hf_script():
    spec = importlib.util.spec_from_file_location("hf_fixtures", ROOT / "scripts" / "make-hf-fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_converter(src):
    sys.path.insert(0, str(src))
    sys.path.insert(1, str(src / "gguf-py"))
    import convert_hf_to_gguf
    from conversion import base

    base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt2"
    base.TextModel._set_vocab_sentencepiece = base.TextModel._set_vocab_gpt2
    return convert_hf_to_gguf


def write_hf_dir(hf, fixture, directory):
    from safetensors.numpy import save_file

    seed = fixture["seed"]
    tensors = {}
    for t in fixture["tensors"]:
        values = hf.splitmix_uniform(hf.fnv1a64(t["name"]) ^ seed, int(np.prod(t["shape"])))
        values = (values * (2.0 * t["scale"]) + t["offset"]).astype(np.float32)
        tensors[t["name"]] = values.reshape(t["shape"])
    save_file(tensors, str(directory / "model.safetensors"))
    config = dict(fixture["config"])
    # The hand-written legacy configs lack the class name every saved checkpoint has.
    config.setdefault("architectures", [ARCHITECTURES[config["model_type"]]])
    (directory / "config.json").write_text(json.dumps(config))
    (directory / "tokenizer.json").write_text((FIXTURES / "tokenizer.json").read_text())
    (directory / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "GPT2Tokenizer"}))
    return tensors


def permute(w, n_head):
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def recipe(name, data, hf_tensors, config):
    """How the converter made `data` (numpy, HF's row-major shape) from HF tensors."""
    n_heads = config["num_attention_heads"]
    n_kv = config.get("num_key_value_heads") or n_heads
    for hf_name, w in hf_tensors.items():
        if w.size != data.size:
            continue
        w = w.reshape(data.shape)
        if np.array_equal(w, data):
            return {"from": hf_name, "op": "copy"}
        if np.array_equal(w + np.float32(1.0), data):
            return {"from": hf_name, "op": "add_one"}
        for heads in {n_heads, n_kv}:
            if w.shape[0] % (2 * heads) == 0 and np.array_equal(permute(w, heads), data):
                return {"from": hf_name, "op": "permute", "heads": heads}
    if data.size <= INLINE_LIMIT:
        return {"op": "values", "values": [float(v) for v in data.reshape(-1)]}
    raise SystemExit(f"{name}: no recipe reproduces the converter's tensor")


def field_value(field):
    from gguf import GGUFValueType

    kind = field.types[0]
    if kind == GGUFValueType.ARRAY:
        element = field.types[1]
        return f"array[{element.name.lower()}]", field.contents()
    return kind.name.lower(), field.contents()


def convert(hf, converter, fixture, work):
    from gguf import GGUFReader

    hf_dir = work / "hf"
    hf_dir.mkdir()
    hf_tensors = write_hf_dir(hf, fixture, hf_dir)
    out = work / "model.gguf"
    argv = sys.argv
    sys.argv = ["convert_hf_to_gguf.py", str(hf_dir), "--outtype", "f32", "--outfile", str(out)]
    try:
        converter.main()
    finally:
        sys.argv = argv
    reader = GGUFReader(str(out))
    metadata, tokenizer = [], {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        kind, value = field_value(field)
        if key in TOKENIZER_KEYS:
            tokenizer[key] = [kind, value]
        else:
            metadata.append([key, kind, value])
    tensors = []
    for t in reader.tensors:
        data = np.asarray(t.data, dtype=np.float32)
        shape = [int(d) for d in t.shape]
        data = data.reshape(list(reversed(shape)))
        tensors.append({"name": t.name, "shape": shape, **recipe(t.name, data, hf_tensors, fixture["config"])})
    return {"metadata": metadata, "tensors": tensors}, tokenizer


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_src = pathlib.Path.home() / ".cache" / "switchyard" / "llamacpp-tools" / "src"
    parser.add_argument("--llamacpp-src", type=pathlib.Path, default=default_src)
    parser.add_argument("only", nargs="*", help="fixture names (default: all)")
    args = parser.parse_args()
    os.environ.setdefault("NO_LOCAL_GGUF", "")
    hf = load_hf_script()
    converter = load_converter(args.llamacpp_src)
    shared = None
    for path in sorted(FIXTURES.glob("*.json")):
        name = path.stem
        if name in ("tokenizer", "gguf_tokenizer") or (args.only and name not in args.only):
            continue
        fixture = json.loads(path.read_text())
        if name in SKIP:
            fixture["gguf"] = {"skip": SKIP[name]}
        else:
            with tempfile.TemporaryDirectory() as d:
                fixture["gguf"], tokenizer = convert(hf, converter, fixture, pathlib.Path(d))
            if shared is None:
                shared = tokenizer
            assert tokenizer == shared, f"{name}: the converter wrote another vocabulary"
            print(f"{name}: {len(fixture['gguf']['tensors'])} tensors, "
                  f"{len(fixture['gguf']['metadata'])} metadata keys")
        path.write_text(json.dumps(fixture, indent=1) + "\n")
    if shared is not None:
        (FIXTURES / "gguf_tokenizer.json").write_text(json.dumps(shared) + "\n")


if __name__ == "__main__":
    main()
