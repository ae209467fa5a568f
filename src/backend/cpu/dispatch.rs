//! Runs one node: picks its operands apart, calls the kernel, converts the result to
//! the node's dtype.

use super::kernels::argmax::argmax_rows;
use super::kernels::attention::{attention, AttentionParams};
use super::kernels::check_len;
use super::kernels::draw::draw_rows;
use super::kernels::elementwise::{binary, swiglu, unary, Binary, Unary};
use super::kernels::embedding::embedding;
use super::kernels::layout::{concat, slice, transpose};
use super::kernels::matmul::{matmul, Weight};
use super::kernels::norm::{layer_norm, rms_norm, softmax};
use super::kernels::rope::{rope, rope_table, RopeParams, RopeTable};
use super::packed;
use super::view::{with_f32_out, write_f32, View};
use crate::backend::{BackendError, Refusal, StepState};
use crate::graph::{DType, Node, Op, ValueId};

/// Computes `node` (id `id`) from `inputs` into `out`, exactly the node's bytes.
pub(super) fn run_node(
    id: ValueId,
    node: &Node,
    inputs: &[View<'_>],
    out: &mut [u8],
    state: &mut StepState<'_>,
) -> Result<(), BackendError> {
    let arg = |i: usize| {
        inputs.get(i).copied().ok_or_else(|| {
            BackendError::Input(format!("node {id} ({}) lacks operand {i}", node.op.kind()))
        })
    };
    let dtype = node.dtype;
    match &node.op {
        Op::Embedding => {
            let (table, ids) = (arg(0)?, arg(1)?.to_i32()?);
            let (rows, d) = matrix_dims(id, &table)?;
            with_f32_out(dtype, out, |o| {
                embedding(table.bytes, table.mapped, table.dtype, rows, d, &ids, o)
            })
        }
        Op::MatMul => {
            let (x, w) = (arg(0)?.to_f32()?, arg(1)?);
            let (n, k) = matrix_dims(id, &w)?;
            let m = x.len().checked_div(k).unwrap_or(0);
            let weight = Weight {
                dtype: w.dtype,
                bytes: w.bytes,
                n,
                k,
            };
            // Padding rows of a bucketed step are not multiplied (they come out zero).
            let live = state.live_rows(m);
            let x = &x[..live * k];
            with_f32_out(dtype, out, |o| {
                let (o, padding) = o.split_at_mut((live * n).min(o.len()));
                padding.fill(0.0);
                match w.packed {
                    Some(p) if p.rows() == n && p.cols() == k => packed::matmul(x, live, p, o),
                    _ => matmul(x, live, weight, o),
                }
            })
        }
        Op::Add | Op::Mul => {
            let (a, b) = (arg(0)?.to_f32()?, arg(1)?.to_f32()?);
            let op = if matches!(node.op, Op::Add) {
                Binary::Add
            } else {
                Binary::Mul
            };
            with_f32_out(dtype, out, |o| binary(op, &a, &b, o))
        }
        Op::Silu | Op::Gelu | Op::GeluErf | Op::Affine { .. } | Op::SoftCap { .. } => {
            let x = arg(0)?.to_f32()?;
            let op = match node.op {
                Op::Silu => Unary::Silu,
                Op::Gelu => Unary::Gelu,
                Op::GeluErf => Unary::GeluErf,
                Op::Affine { scale, bias } => Unary::Affine { scale, bias },
                Op::SoftCap { cap } => Unary::SoftCap { cap },
                _ => unreachable!("matched above"),
            };
            with_f32_out(dtype, out, |o| unary(op, &x, o))
        }
        Op::SwiGlu => {
            let (gate, up) = (arg(0)?.to_f32()?, arg(1)?.to_f32()?);
            with_f32_out(dtype, out, |o| swiglu(&gate, &up, o))
        }
        Op::RmsNorm { eps } => {
            let (x, w) = (arg(0)?.to_f32()?, arg(1)?.to_f32()?);
            with_f32_out(dtype, out, |o| rms_norm(&x, &w, *eps, o))
        }
        Op::LayerNorm { eps } => {
            let (x, w, b) = (arg(0)?.to_f32()?, arg(1)?.to_f32()?, arg(2)?.to_f32()?);
            with_f32_out(dtype, out, |o| layer_norm(&x, &w, &b, *eps, o))
        }
        Op::Draw => {
            let (x, params) = (arg(0)?, arg(1)?);
            let values = x.to_f32()?;
            let mut picks = vec![0i32; node.shape.numel()];
            draw_rows(&values, x.shape.last(), &params.to_i32()?, &mut picks)?;
            check_len("draw output", out.len(), picks.len() * 4)?;
            for (o, p) in out.chunks_exact_mut(4).zip(&picks) {
                o.copy_from_slice(&p.to_le_bytes());
            }
            Ok(())
        }
        Op::Argmax => {
            let x = arg(0)?;
            let values = x.to_f32()?;
            let mut picks = vec![0i32; node.shape.numel()];
            argmax_rows(&values, x.shape.last(), &mut picks)?;
            check_len("argmax output", out.len(), picks.len() * 4)?;
            for (o, p) in out.chunks_exact_mut(4).zip(&picks) {
                o.copy_from_slice(&p.to_le_bytes());
            }
            Ok(())
        }
        Op::Softmax => {
            let x = arg(0)?;
            let values = x.to_f32()?;
            with_f32_out(dtype, out, |o| softmax(&values, x.shape.last(), o))
        }
        Op::Rope {
            mode,
            n_rot,
            freq_base,
            freq_scale,
        } => {
            let x = arg(0)?;
            let (values, positions) = (x.to_f32()?, arg(1)?.to_i32()?);
            let params = RopeParams {
                mode: *mode,
                n_rot: *n_rot as usize,
                freq_base: *freq_base,
                freq_scale: *freq_scale,
            };
            with_f32_out(dtype, out, |o| {
                rope(&values, &positions, x.shape.last(), params, o)
            })
        }
        Op::RopeFreqs {
            mode,
            inv_freq,
            attn_factor,
        } => {
            let x = arg(0)?;
            let (values, positions) = (x.to_f32()?, arg(1)?.to_i32()?);
            with_f32_out(dtype, out, |o| {
                let table = RopeTable {
                    mode: *mode,
                    inv_freq,
                    freq_scale: 1.0,
                    attn_factor: *attn_factor,
                };
                rope_table(&values, &positions, x.shape.last(), table, o)
            })
        }
        Op::Attention {
            layer,
            n_heads,
            n_kv_heads,
            head_dim,
            scale,
            window,
            softcap,
        } => {
            let (q, k, v) = (arg(0)?.to_f32()?, arg(1)?.to_f32()?, arg(2)?.to_f32()?);
            let params = AttentionParams {
                layer: *layer as usize,
                n_heads: *n_heads as usize,
                n_kv_heads: *n_kv_heads as usize,
                head_dim: *head_dim as usize,
                scale: *scale,
                window: window.map(|w| w as usize),
                softcap: *softcap,
            };
            with_f32_out(dtype, out, |o| attention(&q, &k, &v, params, state, o))
        }
        Op::Reshape => copy(arg(0)?.bytes, out),
        Op::Transpose { perm } => {
            let x = arg(0)?;
            let perm: Vec<usize> = perm.iter().map(|&p| p as usize).collect();
            transpose(x.bytes, x.shape.dims(), &perm, x.dtype.block_bytes(), out)
        }
        Op::Concat { axis } => {
            let parts: Vec<(&[u8], &[usize])> =
                inputs.iter().map(|v| (v.bytes, v.shape.dims())).collect();
            concat(&parts, *axis as usize, dtype.block_bytes(), out)
        }
        Op::Slice { axis, start, end } => {
            let x = arg(0)?;
            let range = (*start as usize, *end as usize);
            slice(
                x.bytes,
                x.shape.dims(),
                *axis as usize,
                range,
                x.dtype.block_bytes(),
                out,
            )
        }
        Op::Cast | Op::Transfer => cast(arg(0)?, dtype, out),
        Op::Input { .. } | Op::Weight { .. } => Err(BackendError::Unsupported {
            node: id,
            op: node.op.kind(),
            why: Refusal::Op(node.op.kind()),
        }),
    }
}

/// `[rows, cols]` of a 2-d operand.
fn matrix_dims(id: ValueId, v: &View<'_>) -> Result<(usize, usize), BackendError> {
    match v.shape.dims() {
        &[rows, cols] => Ok((rows, cols)),
        _ => Err(BackendError::Input(format!(
            "node {id}: operand {} must be 2-d",
            v.shape
        ))),
    }
}

/// Copies `src` into `out`, which must be the same size.
fn copy(src: &[u8], out: &mut [u8]) -> Result<(), BackendError> {
    if src.len() != out.len() {
        return Err(BackendError::Input(format!(
            "cannot copy {} bytes into {}",
            src.len(),
            out.len()
        )));
    }
    out.copy_from_slice(src);
    Ok(())
}

/// Converts `x` to `dtype`; i32 to i32 and same-dtype casts copy exactly.
fn cast(x: View<'_>, dtype: DType, out: &mut [u8]) -> Result<(), BackendError> {
    if x.dtype == dtype {
        return copy(x.bytes, out);
    }
    write_f32(&x.to_f32()?, dtype, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Shape;

    #[test]
    fn cast_converts_and_sources_are_refused() {
        let shape = Shape::new([2]);
        let bytes: Vec<u8> = [1.75f32, -3.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let x = View {
            dtype: DType::F32,
            shape: &shape,
            bytes: &bytes,
            packed: None,
            mapped: None,
        };
        let node = Node {
            op: Op::Cast,
            inputs: vec![ValueId(0)],
            shape: shape.clone(),
            dtype: DType::I32,
        };
        let mut out = [0u8; 8];
        let mut state = StepState::stateless();
        run_node(ValueId(1), &node, &[x], &mut out, &mut state).unwrap();
        assert_eq!(out[..4], 1i32.to_le_bytes());
        assert_eq!(out[4..], (-3i32).to_le_bytes());
        let input = Node {
            op: Op::Input { name: "x".into() },
            ..node
        };
        let err = run_node(ValueId(1), &input, &[], &mut out, &mut state);
        assert!(matches!(err, Err(BackendError::Unsupported { .. })));
    }
}
