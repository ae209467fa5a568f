#!/usr/bin/env python3
"""Random-weight GGUF models in two steps, for machines that cannot take the real files.

  header SOURCE_GGUF OUT_DIR   writes, for 135m and 1b in Q4_1, Q8_0 and F16, NAME.hdr
                               (the GGUF header: metadata and tensor infos, no data) and
                               NAME.json (each tensor's type, offset and size). 135m has
                               SOURCE_GGUF's metadata and tensor shapes (the default
                               model); 1b has Llama-3.2-1B's shapes and SOURCE_GGUF's
                               tokenizer padded to 128256 entries, as make_bench_model.py
                               writes it. Needs `gguf` and `numpy`. A few MB in all.
  fill PREFIX OUT              writes OUT from PREFIX.hdr and PREFIX.json with random
                               weights: valid blocks of values with std ~0.02 and norms of
                               1, so activations stay finite. Needs only `numpy`; seconds.

Speed does not depend on the weights' values, so these stand in for the real files where
only a small transfer reaches a machine (the device runs of decision 97); their outputs
are meaningless text, and they are compared between backends, never with a reference.
"""
import argparse
import json
import sys

import numpy as np

BLOCK = {"Q4_0": (32, 18), "Q4_1": (32, 20), "Q8_0": (32, 34), "F16": (1, 2), "F32": (1, 4)}


def pad(n, a=32):
    return (n + a - 1) // a * a


def write_header(out_dir, name, writer, specs):
    """Tensor infos of `specs` ((name, shape, type)) into `writer`, header to NAME.hdr."""
    import gguf

    infos, offset = [], 0
    for tname, shape, t in specs:
        per, size = BLOCK[t]
        nbytes = int(np.prod(shape)) // per * size
        dense = t in ("F32", "F16")
        np_dtype = {"F32": np.float32, "F16": np.float16}.get(t, np.uint8)
        stored = shape if dense else (shape[0], shape[1] // per * size)
        writer.add_tensor_info(tname, stored, np_dtype, nbytes,
                               raw_dtype=gguf.GGMLQuantizationType[t])
        infos.append(dict(name=tname, type=t, offset=offset, nbytes=nbytes))
        offset += pad(nbytes)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    path = f"{out_dir}/{name}.hdr"
    data = open(path, "rb").read()
    open(path, "wb").write(data + b"\0" * (pad(len(data)) - len(data)))
    json.dump(infos, open(f"{out_dir}/{name}.json", "w"))
    print(f"{name}: {pad(len(data))} header bytes, {offset / 1e6:.1f} MB of weights", file=sys.stderr)


def header(source, out_dir):
    # make_bench_model.py (beside this file) holds the 1B shapes and imports gguf, which
    # `fill` must not need.
    from gguf import GGUFReader, GGUFWriter, GGMLQuantizationType
    from make_bench_model import copy_field, llama_1b_metadata, llama_1b_tensors

    reader = GGUFReader(source)
    for fmt in ("Q4_1", "Q8_0", "F16"):
        name = f"135m-{fmt.lower()}"
        writer = GGUFWriter(f"{out_dir}/{name}.hdr", "llama")
        for field in reader.fields.values():
            copy_field(writer, field, skip=("general.architecture",))
        specs = [(t.name, tuple(int(x) for x in reversed(t.shape.tolist())),
                  "F32" if t.tensor_type.name == "F32" else fmt) for t in reader.tensors]
        write_header(out_dir, name, writer, specs)
    for fmt in ("Q4_1", "Q8_0", "F16"):
        name = f"1b-{fmt.lower()}"
        writer = GGUFWriter(f"{out_dir}/{name}.hdr", "llama")
        llama_1b_metadata(reader, writer, source)
        specs = [(n, shape, t.name) for n, shape, t in
                 llama_1b_tensors(GGMLQuantizationType[fmt])]
        write_header(out_dir, name, writer, specs)


def f16_column(value, n):
    return np.full(n, value, dtype=np.float16).view(np.uint8).reshape(n, 2)


def weights(kind, nbytes, rng):
    """`nbytes` of one tensor of `kind`: ones for F32 (norms), N(0, 0.02) for F16, and
    blocks of random quants with scales giving a std near 0.02."""
    if kind == "F32":
        return np.ones(nbytes // 4, dtype=np.float32).tobytes()
    if kind == "F16":
        values = rng.standard_normal(nbytes // 2, dtype=np.float32) * 0.02
        return values.astype(np.float16).tobytes()
    size = BLOCK[kind][1]
    n = nbytes // size
    blocks = rng.integers(0, 256, size=(n, size), dtype=np.uint8)
    if kind == "Q8_0":
        blocks[:, 0:2] = f16_column(0.00027, n)
    else:
        blocks[:, 0:2] = f16_column(0.0043, n)
        if kind == "Q4_1":
            blocks[:, 2:4] = f16_column(-8 * 0.0043, n)
    return blocks.tobytes()


def fill(prefix, out, seed=1):
    rng = np.random.default_rng(seed)
    infos = json.load(open(prefix + ".json"))
    with open(out, "wb") as f:
        f.write(open(prefix + ".hdr", "rb").read())
        base = f.tell()
        for info in infos:
            f.seek(base + info["offset"])
            f.write(weights(info["type"], info["nbytes"], rng))
        end = base + infos[-1]["offset"] + infos[-1]["nbytes"]
        f.truncate(pad(end))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    h = sub.add_parser("header")
    h.add_argument("source")
    h.add_argument("out_dir")
    fl = sub.add_parser("fill")
    fl.add_argument("prefix")
    fl.add_argument("out")
    fl.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if args.what == "header":
        header(args.source, args.out_dir)
    else:
        fill(args.prefix, args.out, args.seed)


if __name__ == "__main__":
    main()
