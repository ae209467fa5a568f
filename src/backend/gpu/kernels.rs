//! WGSL sources of the GPU kernels, assembled per weight format and op. Each kernel
//! has one entry point `main`, a uniform of parameters at binding 0 and its buffers
//! after it; the Rust side of each lives in `record.rs`.

use crate::graph::DType;

/// The name and WGSL source of one pipeline, and the kind its dispatches count as.
pub(super) struct Source {
    pub kind: &'static str,
    pub name: String,
    pub wgsl: String,
}

impl Source {
    /// A fixed kernel: its kind is its name.
    pub fn fixed(kind: &'static str, wgsl: &str) -> Source {
        Source {
            kind,
            name: kind.into(),
            wgsl: wgsl.into(),
        }
    }
}

/// The head of every product kernel (products.rs appends the per-weight parts).
pub(super) const PRODUCTS_HEAD: &str = include_str!("shaders/products_head.wgsl");
/// A block-format product's body: activations quantized by [`QUANTIZE_Q8`].
pub(super) const MATMUL_BLOCKS: &str = include_str!("shaders/matmul_blocks.wgsl");
/// A dense product's body: f32 activations.
pub(super) const MATMUL_DENSE: &str = include_str!("shaders/matmul_dense.wgsl");
/// Activations quantized per block of 32 for the block-format products.
pub(super) const QUANTIZE_Q8: &str = concat!(
    include_str!("shaders/quantize_q8.wgsl"),
    include_str!("shaders/q8_block.wgsl")
);
/// RMS normalisation straight into quantized activations.
pub(super) const NORM_Q8: &str = concat!(
    include_str!("shaders/norm_q8.wgsl"),
    include_str!("shaders/rms_row.wgsl"),
    include_str!("shaders/q8_block.wgsl")
);
/// SwiGLU straight into quantized activations.
pub(super) const SWIGLU_Q8: &str = concat!(
    include_str!("shaders/swiglu_q8.wgsl"),
    include_str!("shaders/q8_block.wgsl")
);
/// Output columns one product workgroup computes (64 threads, 8 lanes a column); the
/// same constant as in `products_head.wgsl`.
pub(super) const MATMUL_COLUMNS: usize = 8;
/// Rows of x one product workgroup computes for decode and small batches (`ROWS` in
/// `products_head.wgsl`; 32 for many rows, `products::rows_per_group`).
pub(super) const MATMUL_ROWS: usize = 8;
/// Bytes of one quantized block of 32 activations (three `vec4<u32>`).
pub(super) const QUANTIZED_BLOCK_BYTES: usize = 48;
const EMBEDDING: &str = include_str!("shaders/embedding.wgsl");
const UNARY: &str = include_str!("shaders/unary.wgsl");
const BINARY: &str = include_str!("shaders/binary.wgsl");
/// RMS normalisation, one workgroup per row.
pub(super) const RMS_NORM: &str = concat!(
    include_str!("shaders/rms_norm.wgsl"),
    include_str!("shaders/rms_row.wgsl")
);
/// The graph's softmax over rows.
pub(super) const SOFTMAX: &str = concat!(
    include_str!("shaders/softmax.wgsl"),
    include_str!("shaders/softmax_row.wgsl")
);
/// Greedy decoding's first pass: the best of each chunk of a row of logits.
pub(super) const ARGMAX_PART: &str = concat!(
    include_str!("shaders/argmax_part.wgsl"),
    include_str!("shaders/argmax_key.wgsl")
);
/// Logits a workgroup of [`ARGMAX_PART`] reads (its `CHUNK`).
pub(super) const ARGMAX_CHUNK: usize = 4096;
/// Greedy decoding's pick per row, from the row's chunk bests.
pub(super) const ARGMAX: &str = concat!(
    include_str!("shaders/argmax.wgsl"),
    include_str!("shaders/argmax_key.wgsl")
);
/// A draw's first pass: each row's logit edits (bias and penalties), in place.
pub(super) const DRAW_EDIT: &str = include_str!("shaders/draw_edit.wgsl");
/// A draw's third pass: the floor top-k and top-p set in each row.
pub(super) const DRAW_CUT: &str = concat!(
    include_str!("shaders/draw_cut.wgsl"),
    include_str!("shaders/draw_weight.wgsl"),
    include_str!("shaders/argmax_key.wgsl")
);
/// A draw's fourth pass: the sum of each chunk's weights at the row's temperature.
pub(super) const DRAW_SUMS: &str = concat!(
    include_str!("shaders/draw_sums.wgsl"),
    include_str!("shaders/draw_weight.wgsl"),
    include_str!("shaders/argmax_key.wgsl")
);
/// A draw's pick per row, from the chunk bests and sums (greedy at temperature 0).
pub(super) const DRAW_PICK: &str = concat!(
    include_str!("shaders/draw_pick.wgsl"),
    include_str!("shaders/draw_weight.wgsl"),
    include_str!("shaders/argmax_key.wgsl")
);
/// Rotary position embedding.
pub(super) const ROPE: &str = include_str!("shaders/rope.wgsl");
/// The kernel writing a step's keys and values into a layer of the paged pool, storing
/// them as the pool's type holds them (`f16`: two to a word, rounded as the CPU's f16
/// cache rounds).
pub(super) fn kv_write(f16: bool) -> Source {
    kv_kernel(
        "kv_write",
        "kv_write",
        f16,
        &[include_str!("shaders/kv_write.wgsl"), kv_store(f16)],
    )
}

/// The kernel roping a step's queries and keys and writing its keys and values into
/// the pool, stored as [`kv_write`] stores them.
pub(super) fn rope_kv(f16: bool) -> Source {
    kv_kernel(
        "rope_kv",
        "rope_kv",
        f16,
        &[include_str!("shaders/rope_kv.wgsl"), kv_store(f16)],
    )
}

/// Attention over the cached keys and values with an online softmax, reading the pool
/// as its type holds values; `quantized`: its output quantized for the product that
/// alone reads it.
pub(super) fn attend(quantized: bool, f16: bool) -> Source {
    let body = include_str!("shaders/attend.wgsl");
    if quantized {
        let out = include_str!("shaders/attend_q8.wgsl");
        let q8 = include_str!("shaders/q8_block.wgsl");
        kv_kernel(
            "attention",
            "attention_q8",
            f16,
            &[body, out, q8, kv_load(f16)],
        )
    } else {
        let out = include_str!("shaders/attend_out.wgsl");
        kv_kernel("attention", "attention", f16, &[body, out, kv_load(f16)])
    }
}

/// How the pool's writers store a pair of elements in an f16 or an f32 pool.
fn kv_store(f16: bool) -> &'static str {
    if f16 {
        include_str!("shaders/kv_store_f16.wgsl")
    } else {
        include_str!("shaders/kv_store_f32.wgsl")
    }
}

/// How attention reads an f16 or an f32 pool.
fn kv_load(f16: bool) -> &'static str {
    if f16 {
        include_str!("shaders/kv_load_f16.wgsl")
    } else {
        include_str!("shaders/kv_load_f32.wgsl")
    }
}

/// The variant of a `kind` kernel made of `parts` for an f32 or an f16 pool, named
/// apart for the pipeline cache.
fn kv_kernel(kind: &'static str, name: &str, f16: bool, parts: &[&str]) -> Source {
    let name = if f16 {
        format!("{name}_f16")
    } else {
        name.to_string()
    };
    Source {
        kind,
        name,
        wgsl: parts.concat(),
    }
}

/// The top-level names a weight format's snippet may declare: products.rs renames them
/// per weight of a dispatch.
pub(super) const FORMAT_NAMES: [&str; 8] = [
    "w",
    "weight_at",
    "block_load",
    "block_dot",
    "BLOCK_WORDS",
    "fifth_bits",
    "scale_byte",
    "scale_min",
];

/// Reads a block format's snippet followed by the shared pieces it uses.
macro_rules! block_format {
    ($file:literal $(, $extra:literal)*) => {
        concat!(
            include_str!($file),
            $("\n", include_str!($extra),)*
            "\n",
            include_str!("shaders/block_dot.wgsl")
        )
    };
}

/// The WGSL element type of a weight buffer and the snippet that reads it: `weight_at`
/// for every format, and for block formats `block_load` and `block_dot`.
pub(super) fn format(dtype: DType) -> Option<(&'static str, &'static str)> {
    Some(match dtype {
        DType::F32 => ("f32", include_str!("shaders/format_f32.wgsl")),
        DType::F16 => ("u32", include_str!("shaders/format_f16.wgsl")),
        DType::BF16 => ("u32", include_str!("shaders/format_bf16.wgsl")),
        DType::Q4_0 => ("u32", block_format!("shaders/format_q4_0.wgsl")),
        DType::Q4_1 => ("u32", block_format!("shaders/format_q4_1.wgsl")),
        DType::Q8_0 => ("u32", block_format!("shaders/format_q8_0.wgsl")),
        DType::Q5_0 => (
            "u32",
            block_format!("shaders/format_q5_0.wgsl", "shaders/fifth_bits.wgsl"),
        ),
        DType::Q5_1 => (
            "u32",
            block_format!("shaders/format_q5_1.wgsl", "shaders/fifth_bits.wgsl"),
        ),
        DType::Q4K => (
            "u32",
            block_format!("shaders/format_q4_k.wgsl", "shaders/k_scales.wgsl"),
        ),
        DType::Q5K => (
            "u32",
            block_format!("shaders/format_q5_k.wgsl", "shaders/k_scales.wgsl"),
        ),
        // Q6_K brings its own block_dot (two scales a block).
        DType::Q6K => ("u32", include_str!("shaders/format_q6_k.wgsl")),
        _ => return None,
    })
}

/// Row lookup in a table of `dtype`, or `None` when there is no kernel.
pub(super) fn embedding(dtype: DType) -> Option<Source> {
    let (word, reader) = format(dtype)?;
    Some(Source {
        kind: "embedding",
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
        kind: name,
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
        kind: name,
        name: format!("binary/{name}"),
        wgsl: BINARY.replace("EXPR", expr),
    }
}
