//! A small random-weight Llama model, written as GGUF here, gives the same logits on the
//! CPU, on a GPU-only plan, and on a mixed plan whose GPU capability is narrowed so
//! transfers happen in the middle of every layer; decode on the GPU compiles once and
//! then hits, with dense (f32, f16) and with block-format weights. A prefill whose
//! linears are row-split across CPU and GPU (co-execution) matches them within 3.9e-3.
//! Sequences stepped together on the GPU (prompt chunks beside decodes, then batched
//! decode over the paged KV pool) get bit for bit the logits each gets alone there.
#![cfg(feature = "gpu")]

mod gpu_data;
mod gpu_support;

use std::sync::Arc;

use gpu_data::{quantized, Lcg};
use half::f16;
use switchyard::backend::{cpu::CpuBackend, Backend, BackendSet, HostTensor, KvDType, SharedBytes};
use switchyard::graph::{DType, OpKind};
use switchyard::model::gguf::{write_gguf, GgufFile, Value};
use switchyard::model::llama::{LlamaConfig, TensorRole};
use switchyard::model::LlamaStep;
use switchyard::model::{GgufWeights, ModelWeights};
use switchyard::plan::Policy;
use switchyard::step::{CoexecMode, Returns, Runner, Sequence, Work};

const VOCAB: usize = 96;
const D: usize = 64;
const H: usize = 4;
const HKV: usize = 2;
const F: usize = 128;
const LAYERS: usize = 2;

fn weight(rng: &mut Lcg, role: TensorRole, shape: &[usize], blocks: bool) -> HostTensor {
    let n: usize = shape.iter().product();
    let (dtype, bytes) = match role {
        TensorRole::AttnNorm(_) | TensorRole::FfnNorm(_) | TensorRole::OutputNorm => (
            DType::F32,
            rng.vec(n, 0.2)
                .iter()
                .flat_map(|v| (1.0 + v).to_le_bytes())
                .collect(),
        ),
        TensorRole::FfnDown(_) | TensorRole::AttnQ(_) | TensorRole::AttnK(_) if !blocks => (
            DType::F16,
            rng.vec(n, 0.6)
                .iter()
                .flat_map(|v| f16::from_f32(*v).to_le_bytes())
                .collect(),
        ),
        _ if !blocks => (
            DType::F32,
            rng.vec(n, 0.6)
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect(),
        ),
        TensorRole::TokenEmbedding | TensorRole::FfnGate(_) => {
            (DType::Q8_0, quantized(rng, DType::Q8_0, n / D, D).0)
        }
        TensorRole::AttnQ(_) | TensorRole::AttnK(_) | TensorRole::FfnUp(_) => {
            (DType::Q4_0, quantized(rng, DType::Q4_0, n / D, D).0)
        }
        TensorRole::AttnV(_) | TensorRole::AttnOutput(_) => {
            (DType::Q4_1, quantized(rng, DType::Q4_1, n / D, D).0)
        }
        TensorRole::FfnDown(_) => (
            DType::F16,
            rng.vec(n, 0.3)
                .iter()
                .flat_map(|v| f16::from_f32(*v).to_le_bytes())
                .collect(),
        ),
        _ => unreachable!("norms are handled above"),
    };
    HostTensor::new(dtype, shape.to_vec().into(), SharedBytes::from_vec(bytes)).unwrap()
}

fn write_model(path: &std::path::Path, blocks: bool) {
    let mut rng = Lcg(21);
    let mut roles = vec![
        (TensorRole::TokenEmbedding, vec![VOCAB, D]),
        (TensorRole::OutputNorm, vec![D]),
    ];
    for l in 0..LAYERS {
        roles.extend([
            (TensorRole::AttnNorm(l), vec![D]),
            (TensorRole::AttnQ(l), vec![D, D]),
            (TensorRole::AttnK(l), vec![HKV * D / H, D]),
            (TensorRole::AttnV(l), vec![HKV * D / H, D]),
            (TensorRole::AttnOutput(l), vec![D, D]),
            (TensorRole::FfnNorm(l), vec![D]),
            (TensorRole::FfnGate(l), vec![F, D]),
            (TensorRole::FfnUp(l), vec![F, D]),
            (TensorRole::FfnDown(l), vec![D, F]),
        ]);
    }
    let tensors: Vec<(String, HostTensor)> = roles
        .into_iter()
        .map(|(role, shape)| (role.gguf_name(), weight(&mut rng, role, &shape, blocks)))
        .collect();
    let metadata = [
        ("general.architecture", Value::Str("llama".into())),
        ("llama.block_count", Value::U32(LAYERS as u32)),
        ("llama.embedding_length", Value::U32(D as u32)),
        ("llama.feed_forward_length", Value::U32(F as u32)),
        ("llama.attention.head_count", Value::U32(H as u32)),
        ("llama.attention.head_count_kv", Value::U32(HKV as u32)),
        ("llama.context_length", Value::U32(256)),
        ("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5)),
        ("llama.rope.freq_base", Value::F32(10_000.0)),
    ];
    let refs: Vec<(&str, &HostTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    write_gguf(path, &metadata, &refs).unwrap();
}

/// The model of [`write_model`] (block-format weights or dense ones), opened, with the
/// folder that holds its file.
fn open_model(blocks: bool) -> (tempfile::TempDir, LlamaConfig, Arc<dyn ModelWeights>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.gguf");
    write_model(&path, blocks);
    let file = GgufFile::open(&path).unwrap();
    let config = LlamaConfig::from_gguf(&file).unwrap();
    (dir, config, Arc::new(GgufWeights(file)))
}

/// Logits after the prompt and after each decode token.
fn run(runner: &mut Runner, prompt: &[u32], decode: &[u32]) -> Vec<Vec<f32>> {
    let mut seq = runner.new_sequence().unwrap();
    let mut all = vec![runner.forward(&mut seq, prompt).unwrap()];
    for &t in decode {
        all.push(runner.forward(&mut seq, &[t]).unwrap());
    }
    all
}

fn relative_error(got: &[f32], want: &[f32]) -> f32 {
    let max_ref = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    let max_diff = got
        .iter()
        .zip(want)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    max_diff / max_ref
}

#[test]
fn dense_weights_give_the_same_logits_on_cpu_gpu_only_mixed_and_split_plans() {
    compare_plans(false, KvDType::F32);
}

#[test]
fn block_format_weights_give_the_same_logits_on_cpu_gpu_only_mixed_and_split_plans() {
    compare_plans(true, KvDType::F16);
}

/// Runs the three plans and the row split on one model, with keys and values stored
/// as `kv_dtype`, and compares them.
fn compare_plans(blocks: bool, kv_dtype: KvDType) {
    let Some(gpu) = gpu_support::gpu() else {
        return;
    };
    let (_dir, config, weights) = open_model(blocks);
    let cpu = || Arc::new(CpuBackend::new(Some(2)).unwrap()) as Arc<dyn Backend>;
    // No smoothing: the plans must be exactly GPU-only and exactly mixed.
    let policy = Policy {
        min_run: 0,
        ..Policy::default()
    };
    let narrowed = gpu_support::gpu().unwrap().with_ops(&[
        OpKind::Embedding,
        OpKind::MatMul,
        OpKind::Attention,
        OpKind::Add,
        OpKind::Reshape,
    ]);
    let gpu: Arc<dyn Backend> = Arc::new(gpu);
    let sets = [
        ("cpu", BackendSet::new(vec![cpu()]).unwrap()),
        (
            "gpu-only",
            BackendSet::new(vec![cpu(), gpu.clone()]).unwrap(),
        ),
        (
            "mixed",
            BackendSet::new(vec![cpu(), Arc::new(narrowed)]).unwrap(),
        ),
        ("split", BackendSet::new(vec![cpu(), gpu]).unwrap()),
    ];
    // 20 tokens: a prefill bucket of 32 rows, enough for linears to split.
    let prompt: Vec<u32> = (0..20).map(|i| (i * 37 + 3) % VOCAB as u32).collect();
    let decode = [7, 61, 2, 95, 30];
    let mut results = Vec::new();
    for (name, set) in sets {
        let mut runner = Runner::new(LlamaStep::new(config.clone(), weights.clone(), 1), set, 64)
            .with_policy(policy.clone())
            .with_kv_dtype(kv_dtype)
            .with_calibration_file(None)
            .with_split_ratio(300)
            .with_coexec(if name == "split" {
                CoexecMode::Split
            } else {
                CoexecMode::Off
            });
        let logits = run(&mut runner, &prompt, &decode);
        let (prefill, decode_plan) = runner.placement();
        match name {
            "cpu" => assert_eq!(decode_plan.keys().collect::<Vec<_>>(), ["cpu"]),
            "gpu-only" | "split" => assert_eq!(
                decode_plan.keys().collect::<Vec<_>>(),
                ["gpu"],
                "{decode_plan:?}"
            ),
            "mixed" => {
                assert!(
                    decode_plan["gpu"] > 0 && decode_plan["cpu"] > 0,
                    "{decode_plan:?}"
                );
                assert!(
                    prefill["cpu"] >= 4 * LAYERS,
                    "norms, rope and swiglu on the CPU: {prefill:?}"
                );
            }
            _ => assert!(
                prefill["cpu"] >= 7 * LAYERS * 3,
                "every linear's slices, CPU half and concat on the CPU: {prefill:?}"
            ),
        }
        let (_, decode_stats) = runner.phase_stats();
        assert_eq!(decode_stats.compiles, 1, "{name}: one decode compile");
        assert_eq!(
            decode_stats.hits,
            decode.len() as u64 - 1,
            "{name}: then only hits"
        );
        results.push((name, logits));
    }
    // The split is held to 3.9e-3 at the logits, the other plans to 3e-3.
    for (a, b, bound) in [
        (1, 0, 3e-3),
        (2, 0, 3e-3),
        (2, 1, 3e-3),
        (3, 0, 3.9e-3),
        (3, 1, 3.9e-3),
    ] {
        let ((name, got), (reference, want)) = (&results[a], &results[b]);
        for (step, (got, want)) in got.iter().zip(want).enumerate() {
            let err = relative_error(got, want);
            assert!(
                err <= bound,
                "{name} vs {reference}, step {step}: relative error {err}"
            );
        }
    }
}

/// A runner of the random-weight model on the CPU and `gpu` as the batched GPU tests
/// use it: every op the GPU takes placed there, f16 KV, no co-execution.
fn gpu_batch_runner(
    gpu: Arc<dyn Backend>,
    config: LlamaConfig,
    weights: Arc<dyn ModelWeights>,
) -> Runner {
    let cpu = Arc::new(CpuBackend::new(Some(2)).unwrap()) as Arc<dyn Backend>;
    let set = BackendSet::new(vec![cpu, gpu]).unwrap();
    let policy = Policy {
        min_run: 0,
        ..Policy::default()
    };
    Runner::new(LlamaStep::new(config, weights, 1), set, 96)
        .with_policy(policy)
        .with_kv_dtype(KvDType::F16)
        .with_calibration_file(None)
        .with_coexec(CoexecMode::Off)
}

/// Each sequence's logits, step by step, are bit for bit those it got alone.
fn assert_same_logits(alone: &[Vec<Vec<f32>>], together: &[Vec<Vec<f32>>]) {
    for (s, (alone, together)) in alone.iter().zip(together).enumerate() {
        assert_eq!(together.len(), alone.len(), "sequence {s}: steps");
        for (step, (a, t)) in alone.iter().zip(together).enumerate() {
            assert!(
                a == t,
                "sequence {s}, step {step}: batched logits differ from alone"
            );
        }
    }
}

#[test]
fn sequences_stepped_together_on_the_gpu_get_the_logits_they_get_alone() {
    let Some(gpu) = gpu_support::gpu() else {
        return;
    };
    let (_dir, config, weights) = open_model(true);
    let mut runner = gpu_batch_runner(Arc::new(gpu), config, weights);
    // Prompts of different lengths (past a 32-position block; the second step, two decodes
    // and two whole prompts, is 129 rows: products of 32 rows a workgroup), four decodes.
    let prompts: Vec<Vec<u32>> = [5usize, 1, 64, 63]
        .iter()
        .enumerate()
        .map(|(s, &n)| {
            (0..n as u32)
                .map(|i| (i * 29 + 7 * s as u32 + 1) % VOCAB as u32)
                .collect()
        })
        .collect();
    let decode = |s: usize, step: usize| ((s * 13 + step * 31 + 5) % VOCAB) as u32;
    let alone: Vec<Vec<Vec<f32>>> = prompts
        .iter()
        .enumerate()
        .map(|(s, p)| {
            run(
                &mut runner,
                p,
                &(0..4).map(|t| decode(s, t)).collect::<Vec<_>>(),
            )
        })
        .collect();
    let mut seqs: Vec<_> = prompts
        .iter()
        .map(|_| runner.new_sequence().unwrap())
        .collect();
    // The first two sequences' prompts, then they decode while the others' prompts join.
    let mut together: Vec<Vec<Vec<f32>>> = vec![Vec::new(); prompts.len()];
    // One batched step of `work`, whose first sequence is number `first`.
    let mut step = |work: &mut [Work], first: usize| {
        for (s, logits) in runner.forward_batch(work).unwrap().iter().enumerate() {
            together[s + first].push(logits.logits().unwrap().to_vec());
        }
    };
    let (first, rest) = seqs.split_at_mut(2);
    let mut work: Vec<Work> = first
        .iter_mut()
        .zip(&prompts)
        .map(|(seq, p)| Work {
            seq,
            tokens: p,
            returns: Returns::Logits,
        })
        .collect();
    step(&mut work, 0);
    let tokens: Vec<[u32; 1]> = (0..2).map(|s| [decode(s, 0)]).collect();
    let mut work: Vec<Work> = first
        .iter_mut()
        .zip(&tokens)
        .map(|(seq, t)| Work {
            seq,
            tokens: t,
            returns: Returns::Logits,
        })
        .chain(rest.iter_mut().zip(&prompts[2..]).map(|(seq, p)| Work {
            seq,
            tokens: p,
            returns: Returns::Logits,
        }))
        .collect();
    step(&mut work, 0);
    for turn in 0..4 {
        let tokens: Vec<[u32; 1]> = (0..prompts.len())
            .map(|s| [decode(s, if s < 2 { turn + 1 } else { turn })])
            .collect();
        // The first two, a step ahead, have had their four decodes before the last turn.
        let first = if turn == 3 { 2 } else { 0 };
        let mut work: Vec<Work> = seqs
            .iter_mut()
            .zip(&tokens)
            .skip(first)
            .map(|(seq, t)| Work {
                seq,
                tokens: t,
                returns: Returns::Logits,
            })
            .collect();
        step(&mut work, first);
    }
    assert_same_logits(&alone, &together);
    let (_, decode_plan) = runner.placement();
    assert_eq!(
        decode_plan.keys().collect::<Vec<_>>(),
        ["gpu"],
        "{decode_plan:?}"
    );
}

/// A prompt longer than a chunk on the GPU: its first chunk runs the graph that returns
/// no logits (no output head); the logits after the prompt and the decodes after it are
/// bit for bit those of the same prompt fed one chunk per call (every chunk returning
/// logits), on the GPU-only plan and on the mixed one.
#[test]
fn a_prompt_chunk_without_logits_fills_the_gpu_cache_as_one_with_them() {
    let Some(gpu) = gpu_support::gpu() else {
        return;
    };
    let (_dir, config, weights) = open_model(true);
    let narrowed = gpu_support::gpu().unwrap().with_ops(&[
        OpKind::Embedding,
        OpKind::MatMul,
        OpKind::Attention,
    ]);
    let plans: [Arc<dyn Backend>; 2] = [Arc::new(gpu), Arc::new(narrowed)];
    for backend in plans {
        let cpu = Arc::new(CpuBackend::new(Some(2)).unwrap()) as Arc<dyn Backend>;
        let set = BackendSet::new(vec![cpu, backend]).unwrap();
        let policy = Policy {
            min_run: 0,
            ..Policy::default()
        };
        let mut runner = Runner::new(LlamaStep::new(config.clone(), weights.clone(), 1), set, 128)
            .with_policy(policy)
            .with_calibration_file(None)
            .with_coexec(CoexecMode::Off);
        let prompt: Vec<u32> = (0..84).map(|i| (i * 37 + 3) % VOCAB as u32).collect();
        let decode = [7, 61, 2];
        let whole = run(&mut runner, &prompt, &decode);
        let mut seq = runner.new_sequence().unwrap();
        runner.forward(&mut seq, &prompt[..64]).unwrap();
        let mut chunked = vec![runner.forward(&mut seq, &prompt[64..]).unwrap()];
        for &t in &decode {
            chunked.push(runner.forward(&mut seq, &[t]).unwrap());
        }
        let bits = |v: &[Vec<f32>]| -> Vec<Vec<u32>> {
            v.iter()
                .map(|l| l.iter().map(|x| x.to_bits()).collect())
                .collect()
        };
        assert_eq!(bits(&whole), bits(&chunked));
        assert!(runner.placement().0.contains_key("gpu"));
    }
}

/// A batched step on the GPU where no sequence wants logits (two prompts' first parts)
/// runs the graph without the output head and returns no rows; the steps after it give,
/// bit for bit, the logits each prompt and its decodes get alone.
#[test]
fn a_batched_step_without_logits_fills_the_gpu_caches_as_one_with_them() {
    let Some(gpu) = gpu_support::gpu() else {
        return;
    };
    let (_dir, config, weights) = open_model(true);
    let mut runner = gpu_batch_runner(Arc::new(gpu), config, weights);
    let prompts: Vec<Vec<u32>> = [40u32, 24]
        .iter()
        .map(|&n| (0..n).map(|i| (i * 23 + n) % VOCAB as u32).collect())
        .collect();
    let decodes = [[11u32, 5], [42, 9]];
    let alone: Vec<Vec<Vec<f32>>> = prompts
        .iter()
        .zip(&decodes)
        .map(|(p, d)| run(&mut runner, p, d))
        .collect();
    let mut seqs: Vec<_> = (0..2).map(|_| runner.new_sequence().unwrap()).collect();
    let split = [24, 10];
    let mut together: Vec<Vec<Vec<f32>>> = vec![Vec::new(); 2];
    let mut step = |seqs: &mut [Sequence], tokens: [&[u32]; 2], logits: bool| {
        let mut work: Vec<Work> = seqs
            .iter_mut()
            .zip(tokens)
            .map(|(seq, tokens)| Work {
                seq,
                tokens,
                returns: if logits {
                    Returns::Logits
                } else {
                    Returns::Nothing
                },
            })
            .collect();
        let out = runner.forward_batch(&mut work).unwrap();
        assert_eq!(out.len(), if logits { 2 } else { 0 });
        for (s, row) in out.iter().enumerate() {
            together[s].push(row.logits().unwrap().to_vec());
        }
    };
    step(
        &mut seqs,
        [&prompts[0][..split[0]], &prompts[1][..split[1]]],
        false,
    );
    step(
        &mut seqs,
        [&prompts[0][split[0]..], &prompts[1][split[1]..]],
        true,
    );
    for t in 0..2 {
        step(
            &mut seqs,
            [&decodes[0][t..t + 1], &decodes[1][t..t + 1]],
            true,
        );
    }
    assert_same_logits(&alone, &together);
}
