//! Criterion benchmarks of picking one token from a step's logits, at the vocabularies
//! of the two benchmark models (SmolLM2-135M: 49152, Llama-3.2-1B: 128256): greedy
//! (`Sampler::sample` at temperature 0, and the bare `sampler::argmax` that `bench`
//! uses), temperature sampling with top-k 40 and top-p 0.95, and the server's default
//! path: temperature 1 over the whole vocabulary (`t1_<vocab>`), and with top-p 0.9
//! (`t1_top_p0.9_<vocab>`). Sampling runs on the engine's thread between steps, once
//! per stream, while the CPU pool waits. Ids are `sampling/<what>_<vocab>`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use switchyard::backend::cpu::argmax;
use switchyard::decode::sampler::{History, Sampler, SamplerConfig};

/// Deterministic logits in about [-10, 10), a handful of them equal maxima.
fn logits(vocab: usize) -> Vec<f32> {
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    (0..vocab)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 20.0 - 10.0
        })
        .collect()
}

fn sampling(c: &mut Criterion) {
    let mut group = c.benchmark_group("sampling");
    group
        .sample_size(50)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    let history: Vec<u32> = (0..64).map(|i| i * 7).collect();
    for vocab in [49152, 128256] {
        let l = logits(vocab);
        group.bench_function(
            BenchmarkId::from_parameter(format!("argmax_{vocab}")),
            |b| b.iter(|| argmax(black_box(&l))),
        );
        let mut greedy = Sampler::new(SamplerConfig::default()).expect("greedy config");
        group.bench_function(
            BenchmarkId::from_parameter(format!("greedy_{vocab}")),
            |b| {
                b.iter(|| {
                    greedy
                        .sample(black_box(&l), History::prompt(&history))
                        .expect("a token")
                })
            },
        );
        for (name, top_p) in [("t1", 1.0), ("t1_top_p0.9", 0.9)] {
            let mut default = Sampler::new(SamplerConfig {
                temperature: 1.0,
                top_p,
                ..SamplerConfig::default()
            })
            .expect("default config");
            group.bench_function(
                BenchmarkId::from_parameter(format!("{name}_{vocab}")),
                |b| {
                    b.iter(|| {
                        default
                            .sample(black_box(&l), History::prompt(&history))
                            .expect("a token")
                    })
                },
            );
        }
        let mut drawn = Sampler::new(SamplerConfig {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            repetition_penalty: 1.1,
            ..SamplerConfig::default()
        })
        .expect("sampling config");
        group.bench_function(
            BenchmarkId::from_parameter(format!("top_k40_{vocab}")),
            |b| {
                b.iter(|| {
                    drawn
                        .sample(black_box(&l), History::prompt(&history))
                        .expect("a token")
                })
            },
        );
    }
    group.finish();
}

criterion_group!(benches, sampling);
criterion_main!(benches);
