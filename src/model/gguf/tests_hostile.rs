//! Hostile GGUF inputs: each must yield an error, never a panic or a huge allocation.

use super::tests::sample_file;
use super::*;

/// Raw little-endian GGUF bytes, for files the writer would never produce.
#[derive(Default)]
struct Raw(Vec<u8>);

impl Raw {
    fn header(version: u32, n_tensors: u64, n_kv: u64) -> Raw {
        Raw::default()
            .bytes(b"GGUF")
            .u32(version)
            .u64(n_tensors)
            .u64(n_kv)
    }
    fn bytes(mut self, b: &[u8]) -> Raw {
        self.0.extend_from_slice(b);
        self
    }
    fn u32(self, v: u32) -> Raw {
        self.bytes(&v.to_le_bytes())
    }
    fn u64(self, v: u64) -> Raw {
        self.bytes(&v.to_le_bytes())
    }
    fn str(self, s: &str) -> Raw {
        self.u64(s.len() as u64).bytes(s.as_bytes())
    }
    /// A tensor info; `dims` in GGUF order (innermost first).
    fn info(self, name: &str, dims: &[u64], ty: u32, offset: u64) -> Raw {
        let r = self.str(name).u32(dims.len() as u32);
        dims.iter().fold(r, |r, &d| r.u64(d)).u32(ty).u64(offset)
    }
    /// Pads to 32 and appends `n` data bytes.
    fn data(mut self, n: usize) -> Raw {
        self.0.resize(self.0.len().next_multiple_of(32) + n, 0);
        self
    }
    fn open(&self) -> Result<GgufFile, ModelError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.gguf");
        std::fs::write(&path, &self.0).unwrap();
        GgufFile::open(&path)
    }
}

/// Opens `raw`, expecting an error whose message contains `needle`.
fn fails(raw: Raw, needle: &str) -> ModelError {
    let err = raw.open().expect_err("hostile file was accepted");
    assert!(err.to_string().contains(needle), "{err:?} lacks {needle:?}");
    err
}

/// One tensor info of F32 `[4]` at `offset` with 64 data bytes.
fn one_tensor(dims: &[u64], ty: u32, offset: u64) -> Raw {
    Raw::header(3, 1, 0).info("t", dims, ty, offset).data(64)
}

#[test]
fn bad_magic_and_versions() {
    let mut raw = Raw::header(3, 0, 0).data(8);
    raw.0[0] = b'X';
    fails(raw, "bad magic");
    for v in [1, 4, 0x0300_0000] {
        let err = fails(Raw::header(v, 0, 0).data(8), &format!("version {v}"));
        assert!(matches!(err, ModelError::Unsupported { .. }));
    }
    assert!(Raw::header(2, 0, 0).data(8).open().is_ok());
}

#[test]
fn every_truncation_is_an_error() {
    let (_dir, path) = sample_file();
    let full = std::fs::read(&path).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let cut = tmp.path().join("cut.gguf");
    for len in 0..full.len() {
        std::fs::write(&cut, &full[..len]).unwrap();
        assert!(
            GgufFile::open(&cut).is_err(),
            "prefix of {len} bytes was accepted"
        );
    }
}

#[test]
fn random_corruption_never_panics() {
    use rand::{Rng, SeedableRng};
    let (_dir, path) = sample_file();
    let full = std::fs::read(&path).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("bad.gguf");
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for _ in 0..300 {
        let mut bytes = full.clone();
        for _ in 0..rng.gen_range(1..4) {
            let i = rng.gen_range(0..bytes.len());
            bytes[i] = rng.gen();
        }
        std::fs::write(&bad, &bytes).unwrap();
        if let Ok(f) = GgufFile::open(&bad) {
            for t in f.tensors() {
                f.tensor(&t.name).unwrap();
            }
        }
    }
}

#[test]
fn absurd_counts_and_lengths() {
    fails(Raw::header(3, 0, u64::MAX).data(8), "metadata count");
    fails(Raw::header(3, u64::MAX, 0).data(8), "tensor count");
    fails(
        Raw::header(3, 0, 1).u64(u64::MAX).bytes(b"key").data(8),
        "metadata key",
    );
    // A string value whose length exceeds the bytes left.
    fails(
        Raw::header(3, 0, 1).str("k").u32(8).u64(1 << 40).data(8),
        "string",
    );
    // An array whose count cannot fit.
    fails(
        Raw::header(3, 0, 1)
            .str("k")
            .u32(9)
            .u32(4)
            .u64(u64::MAX / 2)
            .data(8),
        "array length",
    );
    // A tensor name longer than the file.
    fails(Raw::header(3, 1, 0).u64(1 << 50).data(64), "tensor name");
}

#[test]
fn bad_metadata_values() {
    fails(
        Raw::header(3, 0, 1).str("k").u32(13).data(8),
        "unknown metadata value type 13",
    );
    fails(
        Raw::header(3, 0, 1).str("k").u32(9).u32(99).u64(0).data(8),
        "unknown array element type 99",
    );
    fails(
        Raw::header(3, 0, 1).str("k").u32(7).bytes(&[2]).data(8),
        "bool",
    );
    let bad_value = Raw::header(3, 0, 1)
        .str("k")
        .u32(8)
        .u64(1)
        .bytes(&[0xff])
        .data(8);
    fails(bad_value, "metadata \"k\": at byte 45: string is not UTF-8");
    let dup = Raw::header(3, 0, 2)
        .str("k")
        .u32(4)
        .u32(1)
        .str("k")
        .u32(4)
        .u32(2)
        .data(8);
    fails(dup, "duplicate metadata key \"k\"");
    let not_utf8 = Raw::header(3, 0, 1)
        .u64(1)
        .bytes(&[0xff])
        .u32(4)
        .u32(1)
        .data(8);
    fails(not_utf8, "not UTF-8");
    // Arrays of arrays nested five deep.
    let mut deep = Raw::header(3, 0, 1).str("k").u32(9);
    for _ in 0..5 {
        deep = deep.u32(9).u64(1);
    }
    fails(deep.u32(0).u64(0).data(8), "nested deeper");
}

#[test]
fn bad_alignment() {
    for a in [0u32, 24] {
        let raw = Raw::header(3, 0, 1)
            .str("general.alignment")
            .u32(4)
            .u32(a)
            .data(8);
        fails(raw, "not a power of two");
    }
    let raw = Raw::header(3, 0, 1)
        .str("general.alignment")
        .u32(8)
        .str("x")
        .data(8);
    fails(raw, "general.alignment");
}

#[test]
fn bad_dims() {
    fails(one_tensor(&[], 0, 0), "0 dims");
    fails(one_tensor(&[1, 1, 1, 1, 1], 0, 0), "5 dims");
    fails(one_tensor(&[4, 0], 0, 0), "dimension 0");
    fails(one_tensor(&[u64::MAX], 0, 0), "dimension");
    fails(
        one_tensor(&[1 << 40, 1 << 40], 0, 0),
        "larger than the file",
    );
    fails(one_tensor(&[1 << 20], 0, 0), "larger than the file");
    fails(one_tensor(&[16], 3, 0), "not a multiple of the q4_1 block");
}

#[test]
fn unknown_tensor_type_names_tensor_and_type() {
    // Types ggml has but we do not read are named; ids ggml never had say so.
    for (id, name) in [
        (16, "has type IQ2_XXS, which Switchyard does not read"),
        (34, "has type TQ1_0"),
        (39, "has type MXFP4"),
        (15, "has type Q8_K"),
        (26, "has type I32"),
        (4, "has type Q4_2 (retired)"),
        (1000, "has unknown ggml type id 1000"),
        (u32::MAX, "unknown ggml type id 4294967295"),
    ] {
        let err = fails(
            Raw::header(3, 1, 0)
                .info("blk.0.attn_k.weight", &[256], id, 0)
                .data(512),
            name,
        );
        let msg = err.to_string();
        assert!(msg.contains("\"blk.0.attn_k.weight\""), "{msg}");
        assert!(msg.contains("supported: F32, F16, Q4_0"), "{msg}");
        assert!(matches!(err, ModelError::Unsupported { .. }));
    }
}

#[test]
fn newer_block_types_are_sized_by_their_blocks() {
    // One block of each: Q5_0 22 bytes per 32, IQ4_XS 136 per 256, ... .
    for (id, elems, bytes) in [
        (6, 32, 22),
        (7, 32, 24),
        (10, 256, 84),
        (11, 256, 110),
        (20, 32, 18),
        (23, 256, 136),
    ] {
        let f = Raw::header(3, 1, 0)
            .info("w", &[elems, 2], id, 0)
            .data(2 * bytes)
            .open()
            .unwrap();
        assert_eq!(f.tensor("w").unwrap().data.as_bytes().len(), 2 * bytes);
        // Half a block per row, and a file one byte short, are refused.
        fails(one_tensor(&[elems / 2], id, 0), "not a multiple of the");
        fails(
            Raw::header(3, 1, 0)
                .info("w", &[elems, 2], id, 0)
                .data(2 * bytes - 1),
            "past the end",
        );
    }
}

#[test]
fn bad_offsets() {
    fails(one_tensor(&[4], 0, 64), "past the end");
    fails(one_tensor(&[4], 0, u64::MAX - 31), "past the end");
    fails(one_tensor(&[4], 0, 8), "not a multiple of the alignment");
    let overlap = Raw::header(3, 2, 0)
        .info("a", &[16], 0, 0)
        .info("b", &[4], 0, 32)
        .data(96);
    fails(overlap, "overlap");
    let dup = Raw::header(3, 2, 0)
        .info("a", &[4], 0, 0)
        .info("a", &[4], 0, 32)
        .data(64);
    fails(dup, "duplicate tensor name \"a\"");
    // Sanity: the same shapes without the fault are accepted.
    let ok = Raw::header(3, 2, 0)
        .info("a", &[8], 0, 0)
        .info("b", &[4], 0, 32)
        .data(64);
    let f = ok.open().unwrap();
    assert_eq!(f.tensor("b").unwrap().data.as_bytes().len(), 16);
}
