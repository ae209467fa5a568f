//! Criterion benchmarks of the CPU matmul kernel on the default model's shapes
//! (SmolLM2-135M: d_model 576, FFN 1536, vocab 49152), with 2 threads. Ids are
//! `kernels/cpu_matmul_<dtype>_<m>x<k>x<n>`; throughput is weight bytes per second (decode is
//! bound by streaming the weights). The same weights serve every iteration, so they sit in
//! L2/L3 (even the 30 MB head fits a 32 MB L3): these are compute-side figures, above
//! what decode gets streaming ~96 MB of weights from DRAM per token. The
//! `kernels/stream_*` ids are that decode side: one-row products each on the next of
//! 128 MiB of copies, so every weight comes from memory.

use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{
    criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion, Throughput,
};
use half::f16;
use switchyard::backend::cpu::CpuBackend;
use switchyard::graph::DType;

/// `(dtype, m, k, n)` cases: decode (m = 1), batched decode of 16 sequences (m = 16)
/// and prefill (m = 64) projections of the default model (576 wide) and the 1B-class
/// model (2048 wide), and the output heads: the default model's Q8_0 one and the 1B
/// model's 128256 rows (Q6_K in its Q4_K_M file), larger than any cache.
const CASES: &[(DType, usize, usize, usize)] = &[
    (DType::Q4_1, 1, 576, 1536),
    (DType::Q4_1, 1, 1536, 576),
    (DType::Q4_1, 1, 576, 192),
    (DType::Q4_1, 16, 576, 1536),
    (DType::Q4_1, 16, 1536, 576),
    (DType::Q4_1, 64, 576, 1536),
    (DType::Q4_1, 64, 1536, 576),
    (DType::Q4_0, 1, 576, 1536),
    (DType::Q4_0, 64, 576, 1536),
    (DType::Q8_0, 1, 576, 1536),
    (DType::Q8_0, 64, 576, 1536),
    (DType::Q8_0, 1, 576, 49152),
    (DType::Q8_0, 16, 576, 49152),
    (DType::Q4K, 1, 1536, 576),
    (DType::Q4K, 16, 1536, 576),
    (DType::Q4K, 64, 1536, 576),
    (DType::Q4K, 1, 2048, 8192),
    (DType::Q4K, 64, 2048, 8192),
    (DType::Q5K, 64, 2048, 8192),
    (DType::IQ4NL, 64, 576, 1536),
    (DType::Q5_0, 64, 576, 1536),
    (DType::IQ4XS, 64, 2048, 8192),
    (DType::Q6K, 1, 1536, 576),
    (DType::Q6K, 64, 1536, 576),
    (DType::Q6K, 1, 2048, 8192),
    (DType::Q6K, 64, 2048, 8192),
    (DType::Q6K, 1, 2048, 128256),
    (DType::Q4_0, 1, 2048, 128256),
    (DType::F16, 1, 576, 1536),
    (DType::F16, 64, 576, 1536),
    (DType::F16, 1, 576, 49152),
    (DType::F16, 64, 2048, 8192),
    (DType::F16, 64, 8192, 2048),
    (DType::BF16, 1, 576, 1536),
    (DType::BF16, 64, 576, 1536),
];

/// Deterministic weight bytes for `[n, k]` of `dtype`: values in [-1, 1) for f16 and
/// bf16; otherwise random bytes with small finite f16 scales at the start of each
/// block (K-quants: at both f16 slots of Q4_K, at Q6_K's `d`).
fn weights(dtype: DType, n: usize, k: usize) -> Vec<u8> {
    let len = dtype.bytes_for(n * k).expect("whole blocks");
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    let mut bytes: Vec<u8> = (0..len)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1);
            (s >> 56) as u8
        })
        .collect();
    if matches!(dtype, DType::F16 | DType::BF16) {
        for v in bytes.chunks_mut(2) {
            let x = v[0] as f32 / 128.0 - 1.0;
            let b = match dtype {
                DType::F16 => f16::from_f32(x).to_le_bytes(),
                _ => half::bf16::from_f32(x).to_le_bytes(),
            };
            v.copy_from_slice(&b);
        }
        return bytes;
    }
    let scale = f16::from_f32(0.01).to_le_bytes();
    for block in bytes.chunks_mut(dtype.block_bytes()) {
        if dtype == DType::Q6K {
            block[208..210].copy_from_slice(&scale);
            continue;
        }
        block[..2].copy_from_slice(&scale);
        block[2..4].copy_from_slice(&scale);
    }
    bytes
}

/// `len` deterministic activation values in [-1, 1].
fn activations(len: usize) -> Vec<f32> {
    (0..len)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
        .collect()
}

/// The `kernels` group: 20 samples of 2 s after a 0.3 s warm-up.
fn kernels_group(c: &mut Criterion) -> BenchmarkGroup<'_, WallTime> {
    let mut group = c.benchmark_group("kernels");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    group
}

fn matmul(c: &mut Criterion) {
    let cpu = CpuBackend::new(Some(2)).expect("thread pool");
    let mut group = kernels_group(c);
    for &(dtype, m, k, n) in CASES {
        let w = weights(dtype, n, k);
        let x = activations(m * k);
        let mut out = vec![0.0f32; m * n];
        group.throughput(Throughput::Bytes(w.len() as u64));
        let id = format!("cpu_matmul_{}_{m}x{k}x{n}", dtype.name().to_lowercase());
        // Timed inside the pool, as partitions run: no per-call thread wake-up.
        // Packed once per case, as a model's compile does, not once per sample.
        let weight = cpu.bench_weight((dtype, &w, n, k)).expect("weight");
        group.bench_function(BenchmarkId::from_parameter(id), |b| {
            b.iter_custom(|reps| {
                cpu.bench_matmul(reps, &x, m, &weight, &mut out)
                    .expect("matmul")
            })
        });
    }
    group.finish();
}

/// `(dtype, k, n)` of the one-row products [`streaming`] times: the default model's
/// gate/up and down projections and its head, the same gate/up in the other per-block
/// formats, and 1B-class FFN products in a K-quant and in F16 (every one a type the CPU
/// packs, so each copy is a weight of its own).
const STREAMING: &[(DType, usize, usize)] = &[
    (DType::Q4_1, 576, 1536),
    (DType::Q4_1, 1536, 576),
    (DType::Q8_0, 576, 49152),
    (DType::Q4_0, 576, 1536),
    (DType::Q5_0, 576, 1536),
    (DType::IQ4NL, 576, 1536),
    (DType::Q4K, 2048, 8192),
    (DType::Q6K, 2048, 8192),
    (DType::F16, 2048, 2048),
];

/// Packed bytes of distinct weights each [`streaming`] case cycles through: 4× a
/// 32 MiB L3, so every product reads its weight from memory.
const STREAMING_BYTES: usize = 128 << 20;

/// One-row products (decode) each on the next of many copies of a weight, so that they
/// stream from memory as a decode step's do; ids `kernels/stream_<dtype>_1x<k>x<n>`,
/// throughput in weight bytes per second, to set beside `benches/read_bandwidth.rs`.
fn streaming(c: &mut Criterion) {
    let cpu = CpuBackend::new(Some(2)).expect("thread pool");
    let mut group = kernels_group(c);
    for &(dtype, k, n) in STREAMING {
        let w = weights(dtype, n, k);
        let copies = STREAMING_BYTES.div_ceil(w.len());
        let ws: Vec<_> = (0..copies)
            .map(|_| cpu.bench_weight((dtype, &w, n, k)).expect("weight"))
            .collect();
        let x = activations(k);
        let mut out = vec![0.0f32; n];
        group.throughput(Throughput::Bytes(w.len() as u64));
        let id = format!("stream_{}_1x{k}x{n}", dtype.name().to_lowercase());
        group.bench_function(BenchmarkId::from_parameter(id), |b| {
            b.iter_custom(|reps| {
                cpu.bench_matmul_streaming(reps, &x, 1, &ws, &mut out)
                    .expect("matmul")
            })
        });
    }
    group.finish();
}

criterion_group!(benches, matmul, streaming);
criterion_main!(benches);
