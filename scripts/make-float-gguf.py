#!/usr/bin/env python3
"""Writes an F16 or BF16 copy of a GGUF model with gguf-py (no llama.cpp needed):
every tensor is dequantized, then stored as f16/bf16 when it is a matrix and as f32
when it is one-dimensional (norm weights, biases), the layout llama.cpp's
`llama-quantize ... F16` writes. Metadata is copied unchanged, except `general.file_type`.

Usage: python3 scripts/make-float-gguf.py IN.gguf OUT.gguf {f16|bf16}
Needs: python3 -m pip install gguf numpy
"""
import sys

import numpy as np
from gguf import GGUFReader, GGUFWriter, GGMLQuantizationType, GGUFValueType, LlamaFileType
from gguf.quants import dequantize, quantize

SKIP = {"GGUF.version", "GGUF.tensor_count", "GGUF.kv_count", "general.architecture"}


def main() -> None:
    if len(sys.argv) != 4 or sys.argv[3] not in ("f16", "bf16"):
        sys.exit(__doc__)
    src, dst, kind = sys.argv[1:]
    qtype = GGMLQuantizationType.F16 if kind == "f16" else GGMLQuantizationType.BF16
    ftype = LlamaFileType.MOSTLY_F16 if kind == "f16" else LlamaFileType.MOSTLY_BF16
    reader = GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    writer = GGUFWriter(dst, arch)
    for name, field in reader.fields.items():
        if name in SKIP or name == "general.file_type":
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == GGUFValueType.ARRAY else None
        writer.add_key_value(name, field.contents(), vtype, sub_type=sub)
    writer.add_file_type(ftype)
    for t in reader.tensors:
        # gguf-py shapes are innermost-first; numpy's are outermost-first.
        values = dequantize(t.data, t.tensor_type).astype(np.float32)
        values = values.reshape(list(reversed([int(d) for d in t.shape])))
        if values.ndim == 1:
            writer.add_tensor(t.name, values)
        else:
            data = quantize(values, qtype)
            writer.add_tensor(t.name, data, raw_shape=data.shape, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    main()
