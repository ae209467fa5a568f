#!/usr/bin/env python3
"""Writes dequant.bin: random blocks of every GGUF weight type Switchyard reads, with
gguf-py's dequantized values, the independent reference that
src/backend/cpu/quant.rs is tested against bit for bit.

Usage: python3 -m pip install gguf numpy && python3 tests/data/quant/make_fixture.py

Format (little-endian), one record per type: u32 ggml type id, u32 element count,
the raw bytes, then the f32 values.
"""

import pathlib
import struct

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T
from gguf.quants import dequantize

# Type, blocks, byte offsets of the f16 fields (scales, minima) in each block.
TYPES = [
    (T.F16, 32, []),
    (T.BF16, 32, []),
    (T.Q4_0, 4, [0]),
    (T.Q4_1, 4, [0, 2]),
    (T.Q5_0, 4, [0]),
    (T.Q5_1, 4, [0, 2]),
    (T.Q8_0, 4, [0]),
    (T.IQ4_NL, 4, [0]),
    (T.Q2_K, 1, [80, 82]),
    (T.Q3_K, 1, [108]),
    (T.Q4_K, 1, [0, 2]),
    (T.Q5_K, 1, [0, 2]),
    (T.Q6_K, 1, [208]),
    (T.IQ4_XS, 1, [0]),
]


def finite_halves(rng, n):
    """`n` f16 values of both signs in [1e-3, 0.1] as bytes: random bytes would hold
    NaN and infinity."""
    v = rng.uniform(1e-3, 0.1, n) * rng.choice([-1.0, 1.0], n)
    return v.astype(np.float16).view(np.uint8)


def record(rng, qtype, blocks, half_at):
    elems, size = GGML_QUANT_SIZES[qtype]
    if qtype in (T.F16, T.BF16):
        values = rng.uniform(-4.0, 4.0, blocks).astype(np.float32)
        if qtype == T.F16:
            raw = values.astype(np.float16).view(np.uint8)
        else:
            raw = (values.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
    else:
        raw = rng.integers(0, 256, blocks * size, dtype=np.uint8).reshape(blocks, size)
        for at in half_at:
            raw[:, at:at + 2] = finite_halves(rng, blocks).reshape(blocks, 2)
        raw = raw.reshape(-1)
    out = dequantize(raw, qtype).astype(np.float32).reshape(-1)
    assert out.size == blocks * elems
    return struct.pack("<II", qtype.value, out.size) + raw.tobytes() + out.tobytes()


def main():
    rng = np.random.default_rng(12)
    data = b"".join(record(rng, *t) for t in TYPES)
    path = pathlib.Path(__file__).with_name("dequant.bin")
    path.write_bytes(data)
    print(f"wrote {path} ({len(data)} bytes)")


if __name__ == "__main__":
    main()
