//! Recording: each unit of fused nodes becomes a fixed list of dispatches (pipeline,
//! bind group with its own parameter uniform, workgroup counts) built once at compile
//! time. A run replays the list; only the inputs (and attention's per-step row table)
//! change. Products live in `products.rs`, attention in `attention.rs`.

use std::sync::Arc;

use super::device::Gpu;
use super::kernels::{self, Binary, Source, Unary};
use crate::backend::BackendError;
use crate::graph::{DType, Node, Op, RopeMode, Shape, ValueId, DRAW_PARAMS};

/// One recorded compute dispatch.
pub(super) struct Dispatch {
    pub kind: &'static str,
    pub pipeline: Arc<wgpu::ComputePipeline>,
    pub bind_group: wgpu::BindGroup,
    pub groups: [u32; 3],
}

impl Dispatch {
    /// Adds this dispatch to `pass`.
    pub fn encode(&self, pass: &mut wgpu::ComputePass<'_>) {
        pass.set_pipeline(&self.pipeline);
        pass.set_bind_group(0, &self.bind_group, &[]);
        let [x, y, z] = self.groups;
        pass.dispatch_workgroups(x, y, z);
    }
}

/// A node operand on the GPU: its buffer and what it holds.
#[derive(Clone)]
pub(super) struct Operand {
    pub buffer: wgpu::Buffer,
    pub dtype: DType,
    pub shape: Shape,
}

/// Threads per workgroup of the element-wise kernels.
const ELEMENTWISE: u32 = 256;

/// Builds one dispatch of `source` with `params` at binding 0 and `buffers` after it.
pub(super) fn dispatch(
    gpu: &Gpu,
    source: &Source,
    params: &[u32],
    buffers: &[&wgpu::Buffer],
    groups: [u32; 3],
) -> Result<Dispatch, BackendError> {
    let pipeline = gpu.pipeline(&source.name, &source.wgsl)?;
    let storage = buffers.len() as u32;
    if storage > gpu.limits.max_storage_buffers_per_shader_stage {
        return Err(BackendError::limit(
            format!("storage buffers bound by {}", source.name),
            storage.into(),
            gpu.limits.max_storage_buffers_per_shader_stage.into(),
        ));
    }
    let limit = gpu.limits.max_compute_workgroups_per_dimension;
    if let Some(&over) = groups.iter().find(|&&g| g > limit) {
        return Err(BackendError::limit(
            format!("workgroups per dimension of {}", source.name),
            over.into(),
            limit.into(),
        ));
    }
    let uniform = gpu.uniform(&source.name, params);
    let bind_group = gpu.checked(&source.name, || {
        let mut entries = vec![wgpu::BindGroupEntry {
            binding: 0,
            resource: uniform.as_entire_binding(),
        }];
        entries.extend(
            buffers
                .iter()
                .enumerate()
                .map(|(i, b)| wgpu::BindGroupEntry {
                    binding: i as u32 + 1,
                    resource: b.as_entire_binding(),
                }),
        );
        gpu.bind_group(&source.name, &pipeline.get_bind_group_layout(0), &entries)
    })?;
    Ok(Dispatch {
        kind: source.kind,
        pipeline,
        bind_group,
        groups,
    })
}

/// Splits `groups` workgroups over x and y so neither exceeds the adapter's limit;
/// kernels rebuild the flat index as `y · groups_x + x`.
pub(super) fn fold(gpu: &Gpu, groups: u32) -> (u32, u32) {
    let limit = gpu.limits.max_compute_workgroups_per_dimension.max(1);
    let x = groups.clamp(1, limit);
    (x, groups.div_ceil(x).max(1))
}

/// A `u32` kernel parameter, or an error when `value` does not fit.
pub(super) fn word(what: &str, value: usize) -> Result<u32, BackendError> {
    u32::try_from(value).map_err(|_| {
        BackendError::limit(
            format!("{what} (a 32-bit GPU index)"),
            value as u64,
            u32::MAX.into(),
        )
    })
}

/// Dispatches of an element-wise kernel over `len` elements.
fn elementwise(
    gpu: &Gpu,
    source: &Source,
    len: usize,
    extra: &[u32],
    buffers: &[&wgpu::Buffer],
) -> Result<Dispatch, BackendError> {
    let len = word("elements", len)?;
    let (gx, gy) = fold(gpu, len.div_ceil(ELEMENTWISE));
    let mut params = vec![len, gx];
    params.extend_from_slice(extra);
    dispatch(gpu, source, &params, buffers, [gx, gy, 1])
}

/// The dispatches computing `node` (every op but products and attention) from `ops`
/// into `out`.
pub(super) fn record_node(
    gpu: &Gpu,
    id: ValueId,
    node: &Node,
    ops: &[Operand],
    out: &wgpu::Buffer,
) -> Result<Vec<Dispatch>, BackendError> {
    let arg = |i: usize| {
        ops.get(i).ok_or_else(|| {
            BackendError::Input(format!("node {id} ({}) lacks operand {i}", node.op.kind()))
        })
    };
    let unsupported =
        |detail: String| BackendError::Input(format!("node {id} ({}): {detail}", node.op.kind()));
    let numel = node.shape.numel();
    Ok(match &node.op {
        Op::Embedding => {
            let (table, ids) = (arg(0)?, arg(1)?);
            let (rows, d) = (table.shape.dims()[0], table.shape.last());
            let source = kernels::embedding(table.dtype)
                .ok_or_else(|| unsupported(format!("no embedding kernel for {}", table.dtype)))?;
            let n = word("ids", ids.shape.numel())?;
            let (gx, gy) = fold(gpu, word("elements", numel)?.div_ceil(ELEMENTWISE));
            let params = [n, word("width", d)?, word("table rows", rows)?, gx];
            vec![dispatch(
                gpu,
                &source,
                &params,
                &[&table.buffer, &ids.buffer, out],
                [gx, gy, 1],
            )?]
        }
        Op::Add | Op::Mul | Op::SwiGlu => {
            let (a, b) = (arg(0)?, arg(1)?);
            let len_b = b.shape.numel();
            if len_b == 0 || !numel.is_multiple_of(len_b) {
                return Err(unsupported(format!(
                    "{} does not broadcast over {}",
                    b.shape, a.shape
                )));
            }
            let op = match node.op {
                Op::Add => Binary::Add,
                Op::Mul => Binary::Mul,
                _ => Binary::SwiGlu,
            };
            let extra = [word("broadcast length", len_b)?];
            vec![elementwise(
                gpu,
                &kernels::binary(op),
                numel,
                &extra,
                &[&a.buffer, &b.buffer, out],
            )?]
        }
        Op::Silu | Op::Gelu => {
            let op = match node.op {
                Op::Silu => Unary::Silu,
                _ => Unary::Gelu,
            };
            vec![elementwise(
                gpu,
                &kernels::unary(op),
                numel,
                &[],
                &[&arg(0)?.buffer, out],
            )?]
        }
        Op::RmsNorm { eps } => {
            let (x, w) = (arg(0)?, arg(1)?);
            let d = x.shape.last();
            let rows = word("rows", x.shape.numel() / d.max(1))?;
            let source = Source::fixed("rms_norm", kernels::RMS_NORM);
            let params = [word("width", d)?, eps.to_bits()];
            vec![dispatch(
                gpu,
                &source,
                &params,
                &[&x.buffer, &w.buffer, out],
                [rows, 1, 1],
            )?]
        }
        Op::Rope {
            mode,
            n_rot,
            freq_base,
            freq_scale,
        } => {
            let (x, positions) = (arg(0)?, arg(1)?);
            let dims = x.shape.dims();
            if dims.len() != 3 || positions.shape.numel() != dims[0] {
                return Err(unsupported(format!(
                    "x {} with positions {}",
                    x.shape, positions.shape
                )));
            }
            let extra = [
                word("head dim", dims[2])?,
                word("token width", dims[1] * dims[2])?,
                *n_rot,
                u32::from(*mode == RopeMode::Neox),
                freq_base.to_bits(),
                freq_scale.to_bits(),
            ];
            let source = Source::fixed("rope", kernels::ROPE);
            vec![elementwise(
                gpu,
                &source,
                numel,
                &extra,
                &[&x.buffer, &positions.buffer, out],
            )?]
        }
        Op::Argmax => {
            // Two passes: many workgroups find each chunk's best, one a row the pick.
            let bests = ChunkBests::record(gpu, arg(0)?, "argmax", unsupported)?;
            let (rows, chunks) = (bests.rows, bests.chunks);
            let (gx, gy) = fold(gpu, rows);
            let pick = dispatch(
                gpu,
                &Source {
                    kind: "argmax",
                    name: "argmax_pick".into(),
                    wgsl: kernels::ARGMAX.into(),
                },
                &[chunks, rows, gx],
                &[&bests.parts, out],
                [gx, gy, 1],
            )?;
            vec![bests.dispatch, pick]
        }
        Op::Draw => {
            // Five passes: one thread a row makes its logit edits in place (the head's
            // logits are read by nothing else), each chunk's best (argmax's first),
            // one workgroup a row the floor top-k and top-p set, each chunk's sum of
            // weights, then one workgroup a row walks the sums to its token.
            let (x, settings) = (arg(0)?, arg(1)?);
            // The kernels index each row's settings by their width, a constant.
            let row_source = |name: &str, wgsl: &str| Source {
                kind: "draw",
                name: name.into(),
                wgsl: format!("const SETTINGS_WORDS: u32 = {DRAW_PARAMS}u;\n{wgsl}"),
            };
            let rows = word("rows", x.shape.numel() / x.shape.last().max(1))?;
            let (gx, gy) = fold(gpu, rows);
            let edit = dispatch(
                gpu,
                &row_source("draw_edit", kernels::DRAW_EDIT),
                &[word("width", x.shape.last())?, rows, gx],
                &[&x.buffer, &settings.buffer],
                [gx, gy, 1],
            )?;
            let bests = ChunkBests::record(gpu, x, "draw", unsupported)?;
            let (chunks, width) = (bests.chunks, bests.width);
            let floors = gpu.storage("draw floors", 4 * rows as usize);
            let cut = dispatch(
                gpu,
                &row_source("draw_cut", kernels::DRAW_CUT),
                &[width, chunks, rows, gx],
                &[&x.buffer, &bests.parts, &settings.buffer, &floors],
                [gx, gy, 1],
            )?;
            let sums = gpu.storage("draw sums", 4 * rows as usize * chunks as usize);
            let sum = dispatch(
                gpu,
                &row_source("draw", kernels::DRAW_SUMS),
                &[width, chunks],
                &[&x.buffer, &bests.parts, &settings.buffer, &floors, &sums],
                [chunks, rows, 1],
            )?;
            let pick = dispatch(
                gpu,
                &row_source("draw_pick", kernels::DRAW_PICK),
                &[width, chunks, rows, gx],
                &[
                    &x.buffer,
                    &bests.parts,
                    &settings.buffer,
                    &floors,
                    &sums,
                    out,
                ],
                [gx, gy, 1],
            )?;
            vec![edit, bests.dispatch, cut, sum, pick]
        }
        other => {
            return Err(unsupported(format!(
                "the GPU backend does not record {}",
                other.kind()
            )))
        }
    })
}

/// The first pass of `Argmax` and `Draw`: each 4,096-logit chunk's best (total-order
/// key, index) of every row of `x`, into a buffer made here.
struct ChunkBests {
    rows: u32,
    chunks: u32,
    width: u32,
    parts: wgpu::Buffer,
    dispatch: Dispatch,
}

impl ChunkBests {
    /// Records the pass over `x`'s rows of f32 logits, its dispatch counted as `kind`;
    /// other logits are refused through `unsupported`.
    fn record(
        gpu: &Gpu,
        x: &Operand,
        kind: &'static str,
        unsupported: impl Fn(String) -> BackendError,
    ) -> Result<ChunkBests, BackendError> {
        let width = x.shape.last();
        if width == 0 || x.dtype != DType::F32 {
            return Err(unsupported(format!("logits {} of {}", x.shape, x.dtype)));
        }
        let rows = word("rows", x.shape.numel() / width)?;
        let chunks = word("logit chunks", width.div_ceil(kernels::ARGMAX_CHUNK))?;
        let width = word("width", width)?;
        let parts = gpu.storage("chunk bests", 8 * rows as usize * chunks as usize);
        let source = Source {
            kind,
            name: "argmax".into(),
            wgsl: kernels::ARGMAX_PART.into(),
        };
        let dispatch = dispatch(
            gpu,
            &source,
            &[width, chunks],
            &[&x.buffer, &parts],
            [chunks, rows, 1],
        )?;
        Ok(ChunkBests {
            rows,
            chunks,
            width,
            parts,
            dispatch,
        })
    }
}

/// Bytes of the 8-bit activations of `x` (blocks of 32 along its last axis).
pub(super) fn quants_bytes(x: &Shape) -> usize {
    x.numel() / 32 * kernels::QUANTIZED_BLOCK_BYTES
}

/// Quantizes `x` (`len` elements) into `quants` for a block-format product, `group`
/// blocks of 32 sharing one scale (`fuse::scale_group`).
pub(super) fn record_quantize(
    gpu: &Gpu,
    x: &wgpu::Buffer,
    len: usize,
    quants: &wgpu::Buffer,
    group: u32,
) -> Result<Dispatch, BackendError> {
    let source = Source::fixed("quantize", kernels::QUANTIZE_Q8);
    elementwise(gpu, &source, len / 32, &[group], &[x, quants])
}

/// RMS norm of `x` (rows of `d`) by `weight`, written to `quants` as 8-bit activations
/// with `group` blocks sharing one scale.
pub(super) fn record_norm_q8(
    gpu: &Gpu,
    x: &Operand,
    weight: &wgpu::Buffer,
    eps: f32,
    quants: &wgpu::Buffer,
    group: u32,
) -> Result<Dispatch, BackendError> {
    let d = x.shape.last();
    let rows = word("rows", x.shape.numel() / d.max(1))?;
    let source = Source::fixed("norm_q8", kernels::NORM_Q8);
    let params = [word("width", d)?, eps.to_bits(), group];
    dispatch(
        gpu,
        &source,
        &params,
        &[&x.buffer, weight, quants],
        [rows, 1, 1],
    )
}

/// `silu(gate) · up` written to `quants` as 8-bit activations with `group` blocks
/// sharing one scale.
pub(super) fn record_swiglu_q8(
    gpu: &Gpu,
    gate: &Operand,
    up: &wgpu::Buffer,
    quants: &wgpu::Buffer,
    group: u32,
) -> Result<Dispatch, BackendError> {
    let source = Source::fixed("swiglu_q8", kernels::SWIGLU_Q8);
    let len = gate.shape.numel() / 32;
    elementwise(gpu, &source, len, &[group], &[&gate.buffer, up, quants])
}

/// Softmax over the last axis of `x` into `out`: a copy, then the in-place row kernel.
pub(super) fn record_softmax(
    gpu: &Gpu,
    x: &Operand,
    out: &wgpu::Buffer,
) -> Result<Vec<Dispatch>, BackendError> {
    let width = x.shape.last();
    let rows = word("rows", x.shape.numel() / width.max(1))?;
    let copy = elementwise(
        gpu,
        &kernels::unary(Unary::Copy),
        x.shape.numel(),
        &[],
        &[&x.buffer, out],
    )?;
    let (gx, gy) = fold(gpu, rows);
    let source = Source::fixed("softmax", kernels::SOFTMAX);
    let params = [word("width", width)?, word("width", width)?, gx, rows];
    let rows_kernel = dispatch(gpu, &source, &params, &[out], [gx, gy, 1])?;
    Ok(vec![copy, rows_kernel])
}
