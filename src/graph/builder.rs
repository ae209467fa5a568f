//! The builder a model tracer uses: one method per op, each checking operand shapes and
//! dtypes and inferring the output, so a built graph is always well-formed.

use super::{
    DType, Graph, GraphError, Node, Op, OpKind, RopeMode, Shape, ValueId, DRAW_PARAMS, MAX_RANK,
};

/// Attributes of a grouped-query attention node (see [`Op::Attention`]).
#[derive(Clone, Copy, Debug)]
pub struct AttentionParams {
    /// KV cache layer index.
    pub layer: u32,
    /// Query heads.
    pub n_heads: u32,
    /// Key/value heads (divides `n_heads`).
    pub n_kv_heads: u32,
    /// Dimensions per head.
    pub head_dim: u32,
    /// Score scale.
    pub scale: f32,
}

/// Optional variants of attention (see [`Op::Attention`]); the default is plain
/// causal attention.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AttentionVariant {
    /// Positions each query sees, itself included (`None`: all earlier ones).
    pub window: Option<u32>,
    /// Score soft-capping `c · tanh(s / c)` (`None`: none).
    pub softcap: Option<f32>,
}

/// Builds a [`Graph`] node by node, in topological order by construction.
#[derive(Default)]
pub struct GraphBuilder {
    nodes: Vec<Node>,
}

type Built = Result<ValueId, GraphError>;

impl GraphBuilder {
    /// An empty builder.
    pub fn new() -> GraphBuilder {
        GraphBuilder::default()
    }

    /// The node behind `id`, if it exists.
    pub fn node(&self, id: ValueId) -> Result<&Node, GraphError> {
        self.nodes
            .get(id.index())
            .ok_or(GraphError::UnknownValue(id))
    }

    /// Shape of an existing value.
    pub fn shape(&self, id: ValueId) -> Result<&Shape, GraphError> {
        Ok(&self.node(id)?.shape)
    }

    /// A builder holding `graph`'s nodes, and the graph's outputs: how a caller appends
    /// nodes after a traced graph (the step layer's argmax after the head).
    pub fn extend(graph: Graph) -> (GraphBuilder, Vec<ValueId>) {
        let (nodes, outputs) = graph.into_parts();
        (GraphBuilder { nodes }, outputs)
    }

    /// Finishes the graph with the given outputs.
    pub fn finish(self, outputs: Vec<ValueId>) -> Result<Graph, GraphError> {
        Graph::from_parts(self.nodes, outputs)
    }

    /// A per-step input named `name`.
    pub fn input(&mut self, name: &str, dtype: DType, shape: impl Into<Shape>) -> Built {
        let shape = shape.into();
        if dtype.is_quantized() {
            return Err(dtype_error(
                OpKind::Input,
                0,
                dtype,
                "f32, f16, bf16 or i32",
            ));
        }
        self.push(Op::Input { name: name.into() }, vec![], shape, dtype)
    }

    /// A weight named `name`, resolved from the weight store at compile time.
    pub fn weight(&mut self, name: &str, dtype: DType, shape: impl Into<Shape>) -> Built {
        let shape = shape.into();
        if dtype.bytes_for(shape.last()).is_none() {
            return Err(GraphError::Shape {
                op: OpKind::Weight,
                detail: format!(
                    "{name}: rows of {shape} are not whole {dtype} blocks of {}",
                    dtype.block_elems()
                ),
            });
        }
        self.push(Op::Weight { name: name.into() }, vec![], shape, dtype)
    }

    /// Rows `ids` of `table`.
    pub fn embedding(&mut self, table: ValueId, ids: ValueId) -> Built {
        let t = self.node(table)?.clone();
        let i = self.node(ids)?;
        if t.shape.rank() != 2 || i.shape.rank() != 1 {
            return Err(shape_error(
                OpKind::Embedding,
                format!("table {} must be 2-d and ids {} 1-d", t.shape, i.shape),
            ));
        }
        if i.dtype != DType::I32 {
            return Err(dtype_error(OpKind::Embedding, 1, i.dtype, "i32"));
        }
        let out = Shape::new([i.shape.dims()[0], t.shape.dims()[1]]);
        self.push(Op::Embedding, vec![table, ids], out, activation_of(t.dtype))
    }

    /// `x · wᵀ` with `w` of shape `[N, K]`.
    pub fn matmul(&mut self, x: ValueId, w: ValueId) -> Built {
        let xs = self.float_operand(OpKind::MatMul, 0, x)?.clone();
        let wn = self.node(w)?;
        if wn.shape.rank() != 2 || xs.shape.last() != wn.shape.dims()[1] {
            return Err(shape_error(
                OpKind::MatMul,
                format!(
                    "x {} needs w [N, {}], got {}",
                    xs.shape,
                    xs.shape.last(),
                    wn.shape
                ),
            ));
        }
        let mut dims = xs.shape.dims().to_vec();
        *dims.last_mut().expect("rank checked above") = wn.shape.dims()[0];
        self.push(Op::MatMul, vec![x, w], Shape::new(dims), xs.dtype)
    }

    /// `a + b`, `b` broadcasting over the leading axes of `a`.
    pub fn add(&mut self, a: ValueId, b: ValueId) -> Built {
        self.broadcast_binary(Op::Add, a, b)
    }

    /// `a · b`, `b` broadcasting over the leading axes of `a`.
    pub fn mul(&mut self, a: ValueId, b: ValueId) -> Built {
        self.broadcast_binary(Op::Mul, a, b)
    }

    /// `x · sigmoid(x)`.
    pub fn silu(&mut self, x: ValueId) -> Built {
        self.unary(Op::Silu, x)
    }

    /// GELU (tanh approximation).
    pub fn gelu(&mut self, x: ValueId) -> Built {
        self.unary(Op::Gelu, x)
    }

    /// GELU, exact (erf).
    pub fn gelu_erf(&mut self, x: ValueId) -> Built {
        self.unary(Op::GeluErf, x)
    }

    /// `x · scale + bias` element-wise.
    pub fn affine(&mut self, x: ValueId, scale: f32, bias: f32) -> Built {
        self.unary(Op::Affine { scale, bias }, x)
    }

    /// `cap · tanh(x / cap)` element-wise; `cap` must be positive.
    pub fn softcap(&mut self, x: ValueId, cap: f32) -> Built {
        if !(cap.is_finite() && cap > 0.0) {
            return Err(GraphError::Attribute {
                op: OpKind::SoftCap,
                detail: format!("cap {cap} must be positive"),
            });
        }
        self.unary(Op::SoftCap { cap }, x)
    }

    /// Softmax over the last axis.
    pub fn softmax(&mut self, x: ValueId) -> Built {
        self.unary(Op::Softmax, x)
    }

    /// `silu(gate) · up`.
    pub fn swiglu(&mut self, gate: ValueId, up: ValueId) -> Built {
        let g = self.float_operand(OpKind::SwiGlu, 0, gate)?.clone();
        let u = self.float_operand(OpKind::SwiGlu, 1, up)?;
        if g.shape != u.shape {
            return Err(shape_error(
                OpKind::SwiGlu,
                format!("gate {} and up {} differ", g.shape, u.shape),
            ));
        }
        self.push(Op::SwiGlu, vec![gate, up], g.shape, g.dtype)
    }

    /// RMS normalisation of `x` over its last axis, scaled by `weight`.
    pub fn rms_norm(&mut self, x: ValueId, weight: ValueId, eps: f32) -> Built {
        let xs = self.float_operand(OpKind::RmsNorm, 0, x)?.clone();
        self.check_vector(OpKind::RmsNorm, weight, xs.shape.last())?;
        self.push(Op::RmsNorm { eps }, vec![x, weight], xs.shape, xs.dtype)
    }

    /// Layer normalisation of `x` over its last axis.
    pub fn layer_norm(&mut self, x: ValueId, weight: ValueId, bias: ValueId, eps: f32) -> Built {
        let xs = self.float_operand(OpKind::LayerNorm, 0, x)?.clone();
        self.check_vector(OpKind::LayerNorm, weight, xs.shape.last())?;
        self.check_vector(OpKind::LayerNorm, bias, xs.shape.last())?;
        self.push(
            Op::LayerNorm { eps },
            vec![x, weight, bias],
            xs.shape,
            xs.dtype,
        )
    }

    /// Rotary embedding of `x [N, H, Dh]` at `positions [N]`.
    pub fn rope(
        &mut self,
        x: ValueId,
        positions: ValueId,
        mode: RopeMode,
        n_rot: u32,
        freq_base: f32,
        freq_scale: f32,
    ) -> Built {
        let xs = self.float_operand(OpKind::Rope, 0, x)?.clone();
        let p = self.node(positions)?;
        if xs.shape.rank() != 3 || p.shape.dims() != [xs.shape.dims()[0]] {
            return Err(shape_error(
                OpKind::Rope,
                format!(
                    "x {} must be [N, H, Dh] and positions [N], got {}",
                    xs.shape, p.shape
                ),
            ));
        }
        if p.dtype != DType::I32 {
            return Err(dtype_error(OpKind::Rope, 1, p.dtype, "i32"));
        }
        if n_rot == 0 || !n_rot.is_multiple_of(2) || n_rot as usize > xs.shape.last() {
            return Err(GraphError::Attribute {
                op: OpKind::Rope,
                detail: format!(
                    "n_rot {n_rot} must be even, positive and ≤ head dim {}",
                    xs.shape.last()
                ),
            });
        }
        let op = Op::Rope {
            mode,
            n_rot,
            freq_base,
            freq_scale,
        };
        self.push(op, vec![x, positions], xs.shape, xs.dtype)
    }

    /// Rotary embedding of `x [N, H, Dh]` at `positions [N]`, pair `i` turning by
    /// `pos · inv_freq[i]` (band-wise scaled RoPE), the rotated dims' cos and sin
    /// multiplied by `attn_factor`.
    pub fn rope_freqs(
        &mut self,
        x: ValueId,
        positions: ValueId,
        mode: RopeMode,
        inv_freq: Vec<f32>,
        attn_factor: f32,
    ) -> Built {
        let n_rot = 2 * inv_freq.len();
        // Same operand checks as plain RoPE, on a throwaway node.
        let checked = self.rope(x, positions, mode, n_rot as u32, 1.0, 1.0)?;
        let node = self.nodes.pop().expect("rope just pushed a node");
        debug_assert_eq!(checked.index(), self.nodes.len());
        if inv_freq.iter().any(|f| !f.is_finite()) || !attn_factor.is_finite() {
            return Err(GraphError::Attribute {
                op: OpKind::RopeFreqs,
                detail: "inverse frequencies and the attention factor must be finite".into(),
            });
        }
        let op = Op::RopeFreqs {
            mode,
            inv_freq,
            attn_factor,
        };
        self.push(op, node.inputs, node.shape, node.dtype)
    }

    /// Causal grouped-query attention of `q` over the KV cache, after appending `k`, `v`.
    pub fn attention(&mut self, q: ValueId, k: ValueId, v: ValueId, p: AttentionParams) -> Built {
        self.attention_variant(q, k, v, p, AttentionVariant::default())
    }

    /// [`GraphBuilder::attention`] with a sliding window and/or score soft-capping.
    pub fn attention_variant(
        &mut self,
        q: ValueId,
        k: ValueId,
        v: ValueId,
        p: AttentionParams,
        variant: AttentionVariant,
    ) -> Built {
        let AttentionVariant { window, softcap } = variant;
        if window == Some(0) || softcap.is_some_and(|c| !(c.is_finite() && c > 0.0)) {
            return Err(GraphError::Attribute {
                op: OpKind::Attention,
                detail: format!(
                    "window {window:?} must hold a position and softcap {softcap:?} be positive"
                ),
            });
        }
        let qs = self.float_operand(OpKind::Attention, 0, q)?.clone();
        let ks = self.float_operand(OpKind::Attention, 1, k)?.shape.clone();
        let vs = self.float_operand(OpKind::Attention, 2, v)?.shape.clone();
        if p.n_kv_heads == 0 || p.head_dim == 0 || !p.n_heads.is_multiple_of(p.n_kv_heads) {
            return Err(GraphError::Attribute {
                op: OpKind::Attention,
                detail: format!(
                    "n_heads {} must be a positive multiple of n_kv_heads {} (head_dim {})",
                    p.n_heads, p.n_kv_heads, p.head_dim
                ),
            });
        }
        let n = qs.shape.dims().first().copied().unwrap_or(0);
        let q_want = Shape::new([n, (p.n_heads * p.head_dim) as usize]);
        let kv_want = Shape::new([n, (p.n_kv_heads * p.head_dim) as usize]);
        if qs.shape != q_want || ks != kv_want || vs != kv_want {
            return Err(shape_error(
                OpKind::Attention,
                format!(
                    "want q {q_want}, k and v {kv_want}; got q {}, k {ks}, v {vs}",
                    qs.shape
                ),
            ));
        }
        let op = Op::Attention {
            layer: p.layer,
            n_heads: p.n_heads,
            n_kv_heads: p.n_kv_heads,
            head_dim: p.head_dim,
            scale: p.scale,
            window,
            softcap,
        };
        self.push(op, vec![q, k, v], qs.shape, qs.dtype)
    }

    /// The same data as `x` with shape `shape`.
    pub fn reshape(&mut self, x: ValueId, shape: impl Into<Shape>) -> Built {
        let shape = shape.into();
        let n = self.node(x)?.clone();
        if n.shape.numel() != shape.checked_numel().unwrap_or(usize::MAX) {
            return Err(shape_error(
                OpKind::Reshape,
                format!("{} and {shape} hold different element counts", n.shape),
            ));
        }
        self.push(Op::Reshape, vec![x], shape, n.dtype)
    }

    /// `x` with axes permuted: output axis `i` is input axis `perm[i]`.
    pub fn transpose(&mut self, x: ValueId, perm: &[usize]) -> Built {
        let n = self.node(x)?.clone();
        let mut seen = vec![false; n.shape.rank()];
        let valid = perm.len() == n.shape.rank()
            && perm
                .iter()
                .all(|&p| p < seen.len() && !std::mem::replace(&mut seen[p], true));
        if !valid {
            return Err(shape_error(
                OpKind::Transpose,
                format!("{perm:?} is not a permutation of the axes of {}", n.shape),
            ));
        }
        let dims: Vec<usize> = perm.iter().map(|&p| n.shape.dims()[p]).collect();
        let op = Op::Transpose {
            perm: perm.iter().map(|&p| p as u8).collect(),
        };
        self.push(op, vec![x], Shape::new(dims), n.dtype)
    }

    /// `parts` joined along `axis`; all other dimensions and dtypes must agree.
    pub fn concat(&mut self, parts: &[ValueId], axis: usize) -> Built {
        let first = match parts.first() {
            Some(&p) => self.node(p)?.clone(),
            None => return Err(shape_error(OpKind::Concat, "no inputs".into())),
        };
        if axis >= first.shape.rank() {
            return Err(shape_error(
                OpKind::Concat,
                format!("axis {axis} out of range for {}", first.shape),
            ));
        }
        let mut dims = first.shape.dims().to_vec();
        dims[axis] = 0;
        for (i, &p) in parts.iter().enumerate() {
            let n = self.node(p)?;
            let same_other = n.shape.rank() == dims.len()
                && (0..dims.len()).all(|a| a == axis || n.shape.dims()[a] == dims[a]);
            if !same_other {
                return Err(shape_error(
                    OpKind::Concat,
                    format!(
                        "part {i} {} does not match {} off axis {axis}",
                        n.shape, first.shape
                    ),
                ));
            }
            if n.dtype != first.dtype {
                return Err(dtype_error(
                    OpKind::Concat,
                    i,
                    n.dtype,
                    "the first part's dtype",
                ));
            }
            dims[axis] += n.shape.dims()[axis];
        }
        let op = Op::Concat { axis: axis as u8 };
        self.push(op, parts.to_vec(), Shape::new(dims), first.dtype)
    }

    /// The range `start..end` of `axis` of `x`.
    pub fn slice(&mut self, x: ValueId, axis: usize, start: usize, end: usize) -> Built {
        let n = self.node(x)?.clone();
        if axis >= n.shape.rank() || start >= end || end > n.shape.dims()[axis] {
            return Err(shape_error(
                OpKind::Slice,
                format!("{start}..{end} of axis {axis} is outside {}", n.shape),
            ));
        }
        let mut dims = n.shape.dims().to_vec();
        dims[axis] = end - start;
        let op = Op::Slice {
            axis: axis as u8,
            start: start as u32,
            end: end as u32,
        };
        self.push(op, vec![x], Shape::new(dims), n.dtype)
    }

    /// Each row's greedy pick (see [`Op::Argmax`]): `x [.., V]` → `[..] i32`.
    pub fn argmax(&mut self, x: ValueId) -> Built {
        let n = self.float_operand(OpKind::Argmax, 0, x)?.clone();
        let dims = n.shape.dims();
        if dims.len() < 2 || n.shape.last() == 0 {
            return Err(shape_error(
                OpKind::Argmax,
                format!("x {} must be [.., V] with V > 0", n.shape),
            ));
        }
        let rows = Shape::new(dims[..dims.len() - 1].to_vec());
        self.push(Op::Argmax, vec![x], rows, DType::I32)
    }

    /// Each row's sampled pick (see [`Op::Draw`]): `x [n, V]`, `params [n, DRAW_PARAMS] i32` →
    /// `[n] i32`.
    pub fn draw(&mut self, x: ValueId, params: ValueId) -> Built {
        let n = self.float_operand(OpKind::Draw, 0, x)?.clone();
        let dims = n.shape.dims();
        if dims.len() != 2 || dims[1] == 0 {
            return Err(shape_error(
                OpKind::Draw,
                format!("x {} must be [n, V] with V > 0", n.shape),
            ));
        }
        let p = self.node(params)?;
        if p.dtype != DType::I32 {
            return Err(dtype_error(OpKind::Draw, 1, p.dtype, "i32"));
        }
        if p.shape.dims() != [dims[0], DRAW_PARAMS] {
            return Err(shape_error(
                OpKind::Draw,
                format!("params {} must be [{}, {DRAW_PARAMS}]", p.shape, dims[0]),
            ));
        }
        let rows = Shape::new(vec![dims[0]]);
        self.push(Op::Draw, vec![x, params], rows, DType::I32)
    }

    /// `x` converted to `dtype` (any activation dtype).
    pub fn cast(&mut self, x: ValueId, dtype: DType) -> Built {
        let n = self.node(x)?.clone();
        if dtype.is_quantized() || n.dtype.is_quantized() {
            return Err(dtype_error(OpKind::Cast, 0, dtype, "f32, f16, bf16 or i32"));
        }
        self.push(Op::Cast, vec![x], n.shape, dtype)
    }

    fn push(&mut self, op: Op, inputs: Vec<ValueId>, shape: Shape, dtype: DType) -> Built {
        if shape.rank() > MAX_RANK || shape.checked_numel().is_none() {
            return Err(GraphError::TooLarge(shape));
        }
        for &input in &inputs {
            self.node(input)?;
        }
        let id = ValueId(self.nodes.len() as u32);
        self.nodes.push(Node {
            op,
            inputs,
            shape,
            dtype,
        });
        Ok(id)
    }

    fn float_operand(&self, op: OpKind, operand: usize, id: ValueId) -> Result<&Node, GraphError> {
        let n = self.node(id)?;
        if !n.dtype.is_float() {
            return Err(dtype_error(op, operand, n.dtype, "f32, f16 or bf16"));
        }
        Ok(n)
    }

    fn check_vector(&self, op: OpKind, id: ValueId, len: usize) -> Result<(), GraphError> {
        let n = self.node(id)?;
        if n.shape.dims() != [len] {
            return Err(shape_error(
                op,
                format!("parameter {} must be [{len}]", n.shape),
            ));
        }
        if n.dtype.is_quantized() || n.dtype == DType::I32 {
            return Err(dtype_error(op, 1, n.dtype, "f32, f16 or bf16"));
        }
        Ok(())
    }

    fn unary(&mut self, op: Op, x: ValueId) -> Built {
        let n = self.float_operand(op.kind(), 0, x)?.clone();
        self.push(op, vec![x], n.shape, n.dtype)
    }

    fn broadcast_binary(&mut self, op: Op, a: ValueId, b: ValueId) -> Built {
        let kind = op.kind();
        let an = self.float_operand(kind, 0, a)?.clone();
        let bn = self.node(b)?;
        if bn.dtype.is_quantized() || bn.dtype == DType::I32 {
            return Err(dtype_error(kind, 1, bn.dtype, "f32, f16 or bf16"));
        }
        if !an.shape.dims().ends_with(bn.shape.dims()) {
            return Err(shape_error(
                kind,
                format!("{} does not broadcast over {}", bn.shape, an.shape),
            ));
        }
        self.push(op, vec![a, b], an.shape, an.dtype)
    }
}

/// The activation dtype produced by reading rows of a table of `dtype`.
fn activation_of(dtype: DType) -> DType {
    match dtype {
        DType::F16 | DType::BF16 => dtype,
        _ => DType::F32,
    }
}

fn shape_error(op: OpKind, detail: String) -> GraphError {
    GraphError::Shape { op, detail }
}

fn dtype_error(op: OpKind, operand: usize, dtype: DType, expected: &'static str) -> GraphError {
    GraphError::DType {
        op,
        operand,
        dtype,
        expected,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matmul_infers_output_and_rejects_mismatch() {
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F32, [3, 64]).unwrap();
        let w = b.weight("w", DType::Q4_1, [96, 64]).unwrap();
        let y = b.matmul(x, w).unwrap();
        assert_eq!(b.shape(y).unwrap().dims(), &[3, 96]);
        let bad = b.weight("bad", DType::F32, [96, 63]).unwrap();
        assert!(matches!(b.matmul(x, bad), Err(GraphError::Shape { .. })));
    }

    #[test]
    fn quantized_weight_rows_must_be_whole_blocks() {
        let mut b = GraphBuilder::new();
        assert!(b.weight("w", DType::Q4_0, [4, 48]).is_err());
    }

    #[test]
    fn attention_checks_head_grouping() {
        let mut b = GraphBuilder::new();
        let q = b.input("q", DType::F32, [2, 8]).unwrap();
        let k = b.input("k", DType::F32, [2, 4]).unwrap();
        let p = AttentionParams {
            layer: 0,
            n_heads: 3,
            n_kv_heads: 2,
            head_dim: 2,
            scale: 1.0,
        };
        assert!(matches!(
            b.attention(q, k, k, p),
            Err(GraphError::Attribute { .. })
        ));
    }
}
