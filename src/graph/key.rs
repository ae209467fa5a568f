//! Structural keys: canonical bytes of a graph (plus whatever callers append) and
//! their 128-bit hash. Equality compares the bytes, so a hash collision can never make
//! two different graphs equal.

use std::sync::Arc;

use super::{Graph, Op, RopeMode};

/// A function from canonical bytes to a 128-bit hash. Tests swap in a colliding one.
pub type KeyHasher = fn(&[u8]) -> u128;

/// The default key hash (XXH3, 128-bit).
pub fn default_hasher(bytes: &[u8]) -> u128 {
    xxhash_rust::xxh3::xxh3_128(bytes)
}

/// A 128-bit hash together with the canonical bytes it was computed from.
#[derive(Clone, Debug, Eq)]
pub struct StructuralKey {
    hash: u128,
    bytes: Arc<[u8]>,
}

impl StructuralKey {
    /// A key over `bytes`, hashed with `hasher`.
    pub fn from_bytes(bytes: Vec<u8>, hasher: KeyHasher) -> StructuralKey {
        StructuralKey {
            hash: hasher(&bytes),
            bytes: bytes.into(),
        }
    }

    /// The 128-bit hash (the fast, fallible part of the key).
    pub fn hash(&self) -> u128 {
        self.hash
    }

    /// The canonical bytes (the exact part of the key).
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Short hex prefix of the hash for logs.
    pub fn short(&self) -> String {
        format!("{:08x}", (self.hash >> 96) as u32)
    }
}

impl PartialEq for StructuralKey {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash && self.bytes == other.bytes
    }
}

impl std::hash::Hash for StructuralKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u128(self.hash);
    }
}

/// Appends fixed-width little-endian fields to a byte string. Every variable-length
/// field is length-prefixed so that the encoding is unambiguous.
#[derive(Default, Debug)]
pub struct CanonicalWriter {
    bytes: Vec<u8>,
}

impl CanonicalWriter {
    /// An empty writer.
    pub fn new() -> CanonicalWriter {
        CanonicalWriter::default()
    }

    /// Appends one byte.
    pub fn u8(&mut self, v: u8) {
        self.bytes.push(v);
    }

    /// Appends a `u32`.
    pub fn u32(&mut self, v: u32) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }

    /// Appends a `u64`.
    pub fn u64(&mut self, v: u64) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }

    /// Appends an `f32` by its bit pattern.
    pub fn f32(&mut self, v: f32) {
        self.u32(v.to_bits());
    }

    /// Appends a length-prefixed string.
    pub fn str(&mut self, s: &str) {
        self.u64(s.len() as u64);
        self.bytes.extend_from_slice(s.as_bytes());
    }

    /// The bytes written so far.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The key over everything written, with the default hash.
    pub fn finish(self) -> StructuralKey {
        self.finish_with(default_hasher)
    }

    /// The key over everything written, with `hasher`.
    pub fn finish_with(self, hasher: KeyHasher) -> StructuralKey {
        StructuralKey::from_bytes(self.bytes, hasher)
    }
}

/// Writes `graph` in canonical form: node count, then per node the op tag and
/// attributes, dtype, shape and input ids, then the outputs.
pub(super) fn write_graph(graph: &Graph, w: &mut CanonicalWriter) {
    w.str("graph/1");
    w.u64(graph.len() as u64);
    for node in graph.nodes() {
        w.u8(node.op.kind() as u8);
        write_attributes(&node.op, w);
        w.u8(node.dtype as u8);
        w.u8(node.shape.rank() as u8);
        for &d in node.shape.dims() {
            w.u64(d as u64);
        }
        w.u8(node.inputs.len() as u8);
        for input in &node.inputs {
            w.u32(input.0);
        }
    }
    w.u64(graph.outputs().len() as u64);
    for out in graph.outputs() {
        w.u32(out.0);
    }
}

fn write_attributes(op: &Op, w: &mut CanonicalWriter) {
    match op {
        Op::Input { name } | Op::Weight { name } => w.str(name),
        Op::RmsNorm { eps } | Op::LayerNorm { eps } => w.f32(*eps),
        Op::Rope {
            mode,
            n_rot,
            freq_base,
            freq_scale,
        } => {
            w.u8(match mode {
                RopeMode::Normal => 0,
                RopeMode::Neox => 1,
            });
            w.u32(*n_rot);
            w.f32(*freq_base);
            w.f32(*freq_scale);
        }
        Op::RopeFreqs {
            mode,
            inv_freq,
            attn_factor,
        } => {
            w.u8(match mode {
                RopeMode::Normal => 0,
                RopeMode::Neox => 1,
            });
            w.u64(inv_freq.len() as u64);
            for f in inv_freq {
                w.f32(*f);
            }
            w.f32(*attn_factor);
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
            w.u32(*layer);
            w.u32(*n_heads);
            w.u32(*n_kv_heads);
            w.u32(*head_dim);
            w.f32(*scale);
            w.u32(window.unwrap_or(0));
            w.f32(softcap.unwrap_or(0.0));
        }
        Op::Affine { scale, bias } => {
            w.f32(*scale);
            w.f32(*bias);
        }
        Op::SoftCap { cap } => {
            w.f32(*cap);
        }
        Op::Transpose { perm } => {
            w.u8(perm.len() as u8);
            perm.iter().for_each(|&p| w.u8(p));
        }
        Op::Concat { axis } => w.u8(*axis),
        Op::Slice { axis, start, end } => {
            w.u8(*axis);
            w.u32(*start);
            w.u32(*end);
        }
        Op::Embedding
        | Op::MatMul
        | Op::Add
        | Op::Mul
        | Op::Silu
        | Op::Gelu
        | Op::GeluErf
        | Op::SwiGlu
        | Op::Softmax
        | Op::Reshape
        | Op::Cast
        | Op::Transfer
        | Op::Argmax
        | Op::Draw => {}
    }
}

#[cfg(test)]
mod tests {
    use crate::graph::{DType, GraphBuilder};

    fn block(width: usize, eps: f32) -> crate::graph::Graph {
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F32, [2, width]).unwrap();
        let w = b.weight("norm", DType::F32, [width]).unwrap();
        let y = b.rms_norm(x, w, eps).unwrap();
        b.finish(vec![y]).unwrap()
    }

    #[test]
    fn equal_graphs_have_equal_keys_and_any_change_differs() {
        assert_eq!(
            block(8, 1e-5).structural_key(),
            block(8, 1e-5).structural_key()
        );
        assert_ne!(
            block(8, 1e-5).structural_key(),
            block(16, 1e-5).structural_key()
        );
        assert_ne!(
            block(8, 1e-5).structural_key(),
            block(8, 1e-6).structural_key()
        );
    }

    #[test]
    fn colliding_hash_still_compares_bytes() {
        let collide: super::KeyHasher = |_| 7;
        let a = super::StructuralKey::from_bytes(vec![1, 2], collide);
        let b = super::StructuralKey::from_bytes(vec![1, 3], collide);
        assert_eq!(a.hash(), b.hash());
        assert_ne!(a, b);
    }
}
