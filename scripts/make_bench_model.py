#!/usr/bin/env python3
"""Writes the unquantized GGUF sources of the benchmark matrix (needs `gguf` and `numpy`).

  random-1b SOURCE_GGUF OUT   a random-weight F16 model with Llama-3.2-1B's shapes (hidden 2048,
                              16 layers, 32 query / 8 KV heads, head dim 64, FFN 8192, vocabulary
                              128256, tied output head, RoPE base 500000). The tokenizer is
                              SOURCE_GGUF's (the default model's byte-level BPE) padded with
                              control tokens up to 128256 entries, so both llama.cpp and
                              Switchyard load it. Weights are N(0, 0.02) from --seed, norms 1:
                              activations stay finite; their values do not matter for speed.
                              The padding tokens' embedding rows are zero, so greedy output
                              is real tokens (text a serving benchmark can time).
  dequantize SOURCE_GGUF OUT  SOURCE_GGUF with every tensor dequantized to F32 (1-D tensors and
                              all metadata as they are): the input `llama-quantize` re-quantizes
                              into each format of the default model.

Tensors are streamed to disk one at a time, so memory stays near one tensor.
"""
import argparse
import sys

import numpy as np
import gguf
from gguf import GGUFReader, GGUFValueType, GGUFWriter, GGMLQuantizationType

LLAMA_1B = dict(d_model=2048, n_layers=16, n_heads=32, n_kv_heads=8, head_dim=64, d_ffn=8192,
                vocab=128256, rope_base=500000.0, rms_eps=1e-5, context=131072)


def copy_field(writer, field, skip=()):
    """Copies one metadata pair of a reader into a writer, with its value types."""
    if field.name in skip or field.name.startswith("GGUF."):
        return
    vtype = field.types[0]
    if vtype == GGUFValueType.ARRAY:
        sub = field.types[-1]
        writer.add_key_value(field.name, field.contents(), vtype, sub_type=sub)
    else:
        writer.add_key_value(field.name, field.contents(), vtype)


def stream(writer, out, tensors):
    """Writes header, metadata and tensor infos, then each (name, make_array) in order."""
    for name, shape, dtype, nbytes, raw, _ in tensors:
        writer.add_tensor_info(name, shape, dtype, nbytes, raw_dtype=raw)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    tty = sys.stderr.isatty()
    for i, (name, *_rest, make) in enumerate(tensors):
        writer.write_tensor_data(make())
        if tty:
            print(f"\r  tensor {i + 1}/{len(tensors)}: {name:<32}", end="", file=sys.stderr, flush=True)
    print(("\r" if tty else "") + f"  wrote {len(tensors)} tensors to {out}", file=sys.stderr)
    writer.close()


def llama_1b_metadata(reader, writer, source):
    """Llama-3.2-1B's hyper-parameters into `writer`, and `reader`'s tokenizer (the
    default model's byte-level BPE) padded with control tokens to its vocabulary."""
    c = LLAMA_1B
    writer.add_context_length(c["context"])
    writer.add_embedding_length(c["d_model"])
    writer.add_block_count(c["n_layers"])
    writer.add_feed_forward_length(c["d_ffn"])
    writer.add_head_count(c["n_heads"])
    writer.add_head_count_kv(c["n_kv_heads"])
    writer.add_key_length(c["head_dim"])
    writer.add_value_length(c["head_dim"])
    writer.add_rope_dimension_count(c["head_dim"])
    writer.add_rope_freq_base(c["rope_base"])
    writer.add_layer_norm_rms_eps(c["rms_eps"])
    writer.add_vocab_size(c["vocab"])

    fields = reader.fields
    tokens = list(fields["tokenizer.ggml.tokens"].contents())
    types = list(fields["tokenizer.ggml.token_type"].contents())
    if len(tokens) > c["vocab"]:
        sys.exit(f"error: {source} has {len(tokens)} tokens, more than {c['vocab']}")
    pad = c["vocab"] - len(tokens)
    tokens += [f"<|reserved_special_token_{i}|>" for i in range(pad)]
    types += [3] * pad  # CONTROL: never produced by the BPE, so tokenization is unchanged
    for f in fields.values():
        if f.name.startswith("tokenizer.") and f.name not in (
                "tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.scores",
                "tokenizer.chat_template"):
            copy_field(writer, f)
    writer.add_key_value("tokenizer.ggml.tokens", tokens, GGUFValueType.ARRAY,
                         sub_type=GGUFValueType.STRING)
    writer.add_key_value("tokenizer.ggml.token_type", types, GGUFValueType.ARRAY,
                         sub_type=GGUFValueType.INT32)


def llama_1b_tensors(linear):
    """(name, shape, type) of every tensor of the 1B model: linears and the tied
    embedding of type `linear`, norms F32."""
    c = LLAMA_1B
    d, f, hd = c["d_model"], c["d_ffn"], c["head_dim"]
    q, kv = c["n_heads"] * hd, c["n_kv_heads"] * hd
    f32 = GGMLQuantizationType.F32
    specs = [("token_embd.weight", (c["vocab"], d), linear)]
    for b in range(c["n_layers"]):
        specs += [(f"blk.{b}.attn_norm.weight", (d,), f32),
                  (f"blk.{b}.attn_q.weight", (q, d), linear),
                  (f"blk.{b}.attn_k.weight", (kv, d), linear),
                  (f"blk.{b}.attn_v.weight", (kv, d), linear),
                  (f"blk.{b}.attn_output.weight", (d, q), linear),
                  (f"blk.{b}.ffn_norm.weight", (d,), f32),
                  (f"blk.{b}.ffn_gate.weight", (f, d), linear),
                  (f"blk.{b}.ffn_up.weight", (f, d), linear),
                  (f"blk.{b}.ffn_down.weight", (d, f), linear)]
    specs.append(("output_norm.weight", (d,), f32))
    return specs


def random_1b(source, out, seed):
    reader = GGUFReader(source)
    writer = GGUFWriter(out, "llama")
    writer.add_name("Switchyard bench model (random weights, Llama-3.2-1B shapes)")
    writer.add_file_type(1)  # mostly F16
    llama_1b_metadata(reader, writer, source)

    rng = np.random.default_rng(seed)

    def linear(rows, cols, real_rows=None):
        def make():
            w = rng.standard_normal((rows, cols), dtype=np.float32) * 0.02
            if real_rows is not None:
                w[real_rows:] = 0.0
            return w.astype(np.float16)
        return make

    # The padding tokens' rows of the tied embedding are zero, so their logits are 0 and
    # greedy decoding picks a real token (the largest of ~49k N(0, ~0.9) logits): served
    # completions are text, which a serving benchmark times token by token.
    real = len(reader.fields["tokenizer.ggml.tokens"].contents())

    def ones(n):
        return lambda: np.ones(n, dtype=np.float32)

    f16, f32 = GGMLQuantizationType.F16, GGMLQuantizationType.F32
    specs = llama_1b_tensors(f16)
    tensors = []
    for name, shape, t in specs:
        n = int(np.prod(shape))
        if t == f32:
            tensors.append((name, shape, np.float32, 4 * n, f32, ones(n)))
        else:
            rows = real if name == "token_embd.weight" else None
            tensors.append((name, shape, np.float16, 2 * n, f16, linear(*shape, rows)))
    stream(writer, out, tensors)


def dequantize(source, out):
    reader = GGUFReader(source)
    arch = reader.fields["general.architecture"].contents()
    writer = GGUFWriter(out, arch)
    for f in reader.fields.values():
        copy_field(writer, f, skip=("general.architecture", "general.file_type"))
    writer.add_file_type(0)  # all F32
    tensors = []
    for t in reader.tensors:
        shape = tuple(int(x) for x in reversed(t.shape.tolist()))
        n = int(np.prod(shape))

        def make(t=t, shape=shape):
            return gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(shape)
        tensors.append((t.name, shape, np.float32, 4 * n, GGMLQuantizationType.F32, make))
    stream(writer, out, tensors)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["random-1b", "dequantize"])
    ap.add_argument("source")
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if args.what == "random-1b":
        random_1b(args.source, args.out, args.seed)
    else:
        dequantize(args.source, args.out)


if __name__ == "__main__":
    main()
