//! WGSL sources of the GPU kernels, assembled per weight format and op. Each kernel
//! has one entry point `main`, a uniform of parameters at binding 0 and its buffers
//! after it; the Rust side of each lives in `record.rs`.

use crate::graph::DType;

/// The name and WGSL source of one pipeline.
pub(super) struct Source {
    pub name: String,
    pub wgsl: String,
}

const MATMUL_HEAD: &str = include_str!("shaders/matmul_head.wgsl");
const MATMUL_BLOCKS: &str = include_str!("shaders/matmul_blocks.wgsl");
const MATMUL_DENSE: &str = include_str!("shaders/matmul_dense.wgsl");
/// Activations quantized per block of 32 for the block-format matmul.
pub(super) const QUANTIZE_Q8: &str = include_str!("shaders/quantize_q8.wgsl");
/// Output columns one matmul workgroup computes (64 threads, 8 lanes a column); the
/// same constant as in `matmul_head.wgsl`.
pub(super) const MATMUL_COLUMNS: usize = 8;
/// Rows of x one matmul workgroup computes; `ROWS` in `matmul_head.wgsl`.
pub(super) const MATMUL_ROWS: usize = 8;
/// Bytes of one quantized block of 32 activations (three `vec4<u32>`).
pub(super) const QUANTIZED_BLOCK_BYTES: usize = 48;
const EMBEDDING: &str = include_str!("shaders/embedding.wgsl");
const UNARY: &str = include_str!("shaders/unary.wgsl");
const BINARY: &str = include_str!("shaders/binary.wgsl");
/// RMS normalisation, one workgroup per row.
pub(super) const RMS_NORM: &str = include_str!("shaders/rms_norm.wgsl");
/// The graph's softmax over rows.
pub(super) const SOFTMAX: &str = concat!(
    include_str!("shaders/softmax.wgsl"),
    include_str!("shaders/softmax_row.wgsl")
);
/// Rotary position embedding.
pub(super) const ROPE: &str = include_str!("shaders/rope.wgsl");
/// Writes a step's keys and values into a layer of the paged pool.
pub(super) const KV_WRITE: &str = include_str!("shaders/kv_write.wgsl");
/// Attention scores of every query against the cached keys.
pub(super) const ATTN_SCORES: &str = include_str!("shaders/attn_scores.wgsl");
/// Softmax over each query row's visible scores.
pub(super) const ATTN_SOFTMAX: &str = concat!(
    include_str!("shaders/attn_softmax.wgsl"),
    include_str!("shaders/softmax_row.wgsl")
);
/// Attention output: probabilities times cached values.
pub(super) const ATTN_VALUES: &str = include_str!("shaders/attn_values.wgsl");

/// The WGSL element type of a weight buffer and the snippet that reads it.
fn format(dtype: DType) -> Option<(&'static str, &'static str)> {
    Some(match dtype {
        DType::F32 => ("f32", include_str!("shaders/format_f32.wgsl")),
        DType::F16 => ("u32", include_str!("shaders/format_f16.wgsl")),
        DType::Q4_0 => ("u32", include_str!("shaders/format_q4_0.wgsl")),
        DType::Q4_1 => ("u32", include_str!("shaders/format_q4_1.wgsl")),
        DType::Q8_0 => ("u32", include_str!("shaders/format_q8_0.wgsl")),
        _ => return None,
    })
}

/// Matrix product against a weight of `dtype`, or `None` when there is no kernel. A
/// block-format kernel reads activations quantized by [`QUANTIZE_Q8`], a dense one
/// reads them as f32.
pub(super) fn matmul(dtype: DType) -> Option<Source> {
    let (word, reader) = format(dtype)?;
    let (x, body) = if dtype.is_quantized() {
        ("vec4<u32>", MATMUL_BLOCKS)
    } else {
        ("f32", MATMUL_DENSE)
    };
    Some(Source {
        name: format!("matmul/{dtype}"),
        wgsl: [
            MATMUL_HEAD.replace("WORD", word).replace("XTYPE", x),
            reader.into(),
            body.into(),
        ]
        .join("\n"),
    })
}

/// Row lookup in a table of `dtype`, or `None` when there is no kernel.
pub(super) fn embedding(dtype: DType) -> Option<Source> {
    let (word, reader) = format(dtype)?;
    Some(Source {
        name: format!("embedding/{dtype}"),
        wgsl: [EMBEDDING.replace("WORD", word), reader.into()].join("\n"),
    })
}

/// One-input element-wise ops.
#[derive(Clone, Copy, Debug)]
pub(super) enum Unary {
    Silu,
    Gelu,
    Copy,
}

/// Two-input element-wise ops.
#[derive(Clone, Copy, Debug)]
pub(super) enum Binary {
    Add,
    Mul,
    SwiGlu,
}

/// The kernel for a unary op.
pub(super) fn unary(op: Unary) -> Source {
    let (name, expr) = match op {
        Unary::Silu => ("silu", "v / (1.0 + exp(-v))"),
        Unary::Gelu => (
            "gelu",
            "0.5 * v * (1.0 + tanh(0.7978845608 * (v + 0.044715 * v * v * v)))",
        ),
        Unary::Copy => ("copy", "v"),
    };
    Source {
        name: format!("unary/{name}"),
        wgsl: UNARY.replace("EXPR", expr),
    }
}

/// The kernel for a binary op.
pub(super) fn binary(op: Binary) -> Source {
    let (name, expr) = match op {
        Binary::Add => ("add", "u + v"),
        Binary::Mul => ("mul", "u * v"),
        Binary::SwiGlu => ("swiglu", "u / (1.0 + exp(-u)) * v"),
    };
    Source {
        name: format!("binary/{name}"),
        wgsl: BINARY.replace("EXPR", expr),
    }
}
