//! Operations of the graph IR and their attributes.

use serde::Serialize;

/// How rotary position embedding pairs up the dimensions of a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum RopeMode {
    /// Adjacent pairs `(2i, 2i+1)` rotate together (GGUF llama layout).
    Normal,
    /// Dimension `i` pairs with `i + n_rot/2` (GPT-NeoX, HF Llama layout).
    Neox,
}

/// An operation with its attributes. Inputs, output shape and dtype live on the node.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum Op {
    /// A per-step input supplied by the caller (token ids, positions, activations).
    Input {
        /// Name the caller binds the value by.
        name: String,
    },
    /// A model weight, resolved by name through the weight store. Never computed.
    Weight {
        /// Tensor name in the model file.
        name: String,
    },
    /// Rows of a (possibly quantized) table: inputs `[table [V, D], ids [N] i32]` → `[N, D]`.
    Embedding,
    /// Linear layer `x · Wᵀ`: inputs `[x [.., K], w [N, K]]` → `[.., N]`; `w` may be any dtype.
    MatMul,
    /// Element-wise sum; the right side broadcasts when its shape is a suffix of the left's.
    Add,
    /// Element-wise product, broadcasting like `Add`.
    Mul,
    /// `x · sigmoid(x)`.
    Silu,
    /// GELU, tanh approximation.
    Gelu,
    /// GELU, exact: `x · Φ(x) = ½x(1 + erf(x/√2))`.
    GeluErf,
    /// Fused `silu(gate) · up`: inputs `[gate, up]` of equal shape.
    SwiGlu,
    /// RMS normalisation over the last axis, scaled by `weight [D]`: inputs `[x, weight]`.
    RmsNorm {
        /// Added to the mean square before the square root.
        eps: f32,
    },
    /// Layer normalisation over the last axis: inputs `[x, weight [D], bias [D]]`.
    LayerNorm {
        /// Added to the variance before the square root.
        eps: f32,
    },
    /// Softmax over the last axis.
    Softmax,
    /// Rotary position embedding: inputs `[x [N, H, Dh], positions [N] i32]`.
    Rope {
        /// Which dimensions pair up.
        mode: RopeMode,
        /// Rotated dimensions per head (the rest pass through).
        n_rot: u32,
        /// Frequency base θ.
        freq_base: f32,
        /// Position scale (linear RoPE scaling); 1.0 for none.
        freq_scale: f32,
    },
    /// Rotary position embedding with one inverse frequency per rotated pair, for
    /// band-wise scaled RoPE (Llama 3.1 `llama3`, GGUF `rope_freqs`): pair `i` turns by
    /// `pos · inv_freq[i]`. Inputs `[x [N, H, Dh], positions [N] i32]`; the first
    /// `2 · inv_freq.len()` dims of each head rotate, the rest pass through.
    RopeFreqs {
        /// Which dimensions pair up.
        mode: RopeMode,
        /// Inverse frequency of each rotated pair.
        inv_freq: Vec<f32>,
        /// Multiplier of the rotated dims' cos and sin (Phi-3 `longrope`'s attention
        /// factor; 1 for none).
        attn_factor: f32,
    },
    /// Causal grouped-query attention over the sequence's KV cache for `layer`.
    /// Inputs `[q [N, H·Dh], k [N, Hkv·Dh], v [N, Hkv·Dh]]` → `[N, H·Dh]`. The new
    /// keys and values are written at the cache's current length, which is a runtime
    /// input, so the node is the same at every decode position.
    Attention {
        /// Index of the KV cache layer read and written.
        layer: u32,
        /// Query heads.
        n_heads: u32,
        /// Key/value heads; query head `h` reads kv head `h / (n_heads / n_kv_heads)`.
        n_kv_heads: u32,
        /// Dimensions per head.
        head_dim: u32,
        /// Score scale, usually `1/sqrt(head_dim)`.
        scale: f32,
        /// Sliding window: the query at position `p` sees only positions `> p - w`
        /// (`None`: every earlier position).
        window: Option<u32>,
        /// Score soft-capping (Gemma 2): scores become `c · tanh(s / c)` before the
        /// softmax (`None`: scores as they are).
        softcap: Option<f32>,
    },
    /// `x · scale + bias` element-wise with constant `scale` and `bias` (Gemma's
    /// embedding scale `√d` and its `1 + w` norm weights).
    Affine {
        /// Multiplier.
        scale: f32,
        /// Addend.
        bias: f32,
    },
    /// Soft-capping `cap · tanh(x / cap)` element-wise (Gemma 2's final logits).
    SoftCap {
        /// The cap.
        cap: f32,
    },
    /// Same data, new shape (element count unchanged).
    Reshape,
    /// Axis permutation: output axis `i` is input axis `perm[i]`.
    Transpose {
        /// The permutation.
        perm: Vec<u8>,
    },
    /// Join the inputs along `axis`.
    Concat {
        /// Axis joined along.
        axis: u8,
    },
    /// The range `start..end` of `axis`.
    Slice {
        /// Axis cut.
        axis: u8,
        /// First index kept.
        start: u32,
        /// One past the last index kept.
        end: u32,
    },
    /// Convert to the node's dtype.
    Cast,
    /// Move the input into the node's backend's memory space (converting dtype if the
    /// node's dtype differs). Inserted by the partitioner on cross-backend edges.
    Transfer,
    /// Greedy decoding's pick per row: `[.., V]` → `[..] i32`, the index of the largest
    /// value in [`f32::total_cmp`]'s order after NaN becomes -inf and +inf the largest
    /// finite value, ties to the lowest index; -1 where every value is -inf or NaN.
    /// Appended after the head when only the token is needed, so the device that
    /// computed the logits returns 4 bytes a row instead of the vocabulary's scores.
    Argmax,
    /// A sampled pick per row: `x [n, V]` and `params [n, DRAW_PARAMS] i32` (each row's
    /// temperature and min-p as f32 bits, 32 random bits, top-k's count and top-p in
    /// 2^-16, `crate::backend::cpu::cut::Cut`'s words, then the row's logit edits,
    /// `crate::backend::cpu::edit::Edits`'s words) → `[n] i32`: after the edits, the
    /// token at the uniform point `bits / 2^32` of the row's weights `e^((l − max)/T)`
    /// (0 below min-p and below the cut's floor) by inverse CDF
    /// (`crate::backend::cpu::draw::draw`), or the [`Op::Argmax`] pick where the
    /// temperature is 0; -1 where every value is -inf or NaN. Appended after the head
    /// in place of `Argmax` when some sequence samples on the device. A device may
    /// apply the edits to `x` in place: nothing else reads the head's logits then.
    Draw,
}

/// Most logit edits (bias and penalties) a row of [`Op::Draw`]'s parameters carries.
pub const DRAW_EDITS: usize = 128;

/// Words of each row of [`Op::Draw`]'s parameters: five settings, the count of edits,
/// then three words for each of [`DRAW_EDITS`] edits.
pub const DRAW_PARAMS: usize = 6 + 3 * DRAW_EDITS;

/// The kind of an operation without attributes: what capabilities are declared over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[repr(u8)]
#[allow(missing_docs)]
pub enum OpKind {
    Input = 0,
    Weight,
    Embedding,
    MatMul,
    Add,
    Mul,
    Silu,
    Gelu,
    SwiGlu,
    RmsNorm,
    LayerNorm,
    Softmax,
    Rope,
    Attention,
    Reshape,
    Transpose,
    Concat,
    Slice,
    Cast,
    Transfer,
    RopeFreqs,
    Affine,
    SoftCap,
    GeluErf,
    Argmax,
    /// A sampled pick per row.
    Draw,
}

impl OpKind {
    /// Every kind, in tag order.
    pub const ALL: [OpKind; 26] = [
        OpKind::Input,
        OpKind::Weight,
        OpKind::Embedding,
        OpKind::MatMul,
        OpKind::Add,
        OpKind::Mul,
        OpKind::Silu,
        OpKind::Gelu,
        OpKind::SwiGlu,
        OpKind::RmsNorm,
        OpKind::LayerNorm,
        OpKind::Softmax,
        OpKind::Rope,
        OpKind::Attention,
        OpKind::Reshape,
        OpKind::Transpose,
        OpKind::Concat,
        OpKind::Slice,
        OpKind::Cast,
        OpKind::Transfer,
        OpKind::RopeFreqs,
        OpKind::Affine,
        OpKind::SoftCap,
        OpKind::GeluErf,
        OpKind::Argmax,
        OpKind::Draw,
    ];

    /// Lower-case name used in plans and error messages.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Input => "input",
            OpKind::Weight => "weight",
            OpKind::Embedding => "embedding",
            OpKind::MatMul => "matmul",
            OpKind::Add => "add",
            OpKind::Mul => "mul",
            OpKind::Silu => "silu",
            OpKind::Gelu => "gelu",
            OpKind::SwiGlu => "swiglu",
            OpKind::RmsNorm => "rms_norm",
            OpKind::LayerNorm => "layer_norm",
            OpKind::Softmax => "softmax",
            OpKind::Rope => "rope",
            OpKind::Attention => "attention",
            OpKind::Reshape => "reshape",
            OpKind::Transpose => "transpose",
            OpKind::Concat => "concat",
            OpKind::Slice => "slice",
            OpKind::Cast => "cast",
            OpKind::Transfer => "transfer",
            OpKind::RopeFreqs => "rope_freqs",
            OpKind::Affine => "affine",
            OpKind::SoftCap => "softcap",
            OpKind::GeluErf => "gelu_erf",
            OpKind::Argmax => "argmax",
            OpKind::Draw => "draw",
        }
    }

    /// Whether nodes of this kind hold data rather than compute it.
    pub fn is_source(self) -> bool {
        matches!(self, OpKind::Input | OpKind::Weight)
    }
}

impl std::fmt::Display for OpKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Op {
    /// The attribute-free kind of this op.
    pub fn kind(&self) -> OpKind {
        match self {
            Op::Input { .. } => OpKind::Input,
            Op::Weight { .. } => OpKind::Weight,
            Op::Embedding => OpKind::Embedding,
            Op::MatMul => OpKind::MatMul,
            Op::Add => OpKind::Add,
            Op::Mul => OpKind::Mul,
            Op::Silu => OpKind::Silu,
            Op::Gelu => OpKind::Gelu,
            Op::GeluErf => OpKind::GeluErf,
            Op::SwiGlu => OpKind::SwiGlu,
            Op::RmsNorm { .. } => OpKind::RmsNorm,
            Op::LayerNorm { .. } => OpKind::LayerNorm,
            Op::Softmax => OpKind::Softmax,
            Op::Rope { .. } => OpKind::Rope,
            Op::RopeFreqs { .. } => OpKind::RopeFreqs,
            Op::Affine { .. } => OpKind::Affine,
            Op::SoftCap { .. } => OpKind::SoftCap,
            Op::Attention { .. } => OpKind::Attention,
            Op::Reshape => OpKind::Reshape,
            Op::Transpose { .. } => OpKind::Transpose,
            Op::Concat { .. } => OpKind::Concat,
            Op::Slice { .. } => OpKind::Slice,
            Op::Cast => OpKind::Cast,
            Op::Transfer => OpKind::Transfer,
            Op::Argmax => OpKind::Argmax,
            Op::Draw => OpKind::Draw,
        }
    }

    /// Whether running the node has an effect beyond its output (the KV cache write),
    /// so dead-code elimination must keep it.
    pub fn has_side_effect(&self) -> bool {
        matches!(self, Op::Attention { .. })
    }
}
