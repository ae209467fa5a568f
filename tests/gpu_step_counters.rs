//! What a decode step costs the GPU, counted: for random-weight models with the layer
//! shapes of the default model (SmolLM2-135M: 576 wide, 9 heads over 3 KV heads, FFN
//! 1536) and of the 1B class (Llama 3.2 1B: 2048 wide, 32 heads over 8, FFN 8192),
//! two layers each and a small vocabulary, every node on the GPU: 9 dispatches a layer
//! with weights of one format, 10 for a Q4_K_M-like mix (the embedding, the logits
//! rows' gathers, the final norm and the head come on top), one compute pass, one
//! submit, one wait, no buffer or bind group created after the first decode step, and
//! the logits the only bytes read back. The fused step also gives the
//! unfused CPU's logits (within the block formats' quantization noise). A greedy step
//! (only the token asked for) adds two argmax dispatches (chunks, then the pick) and
//! reads back 4 bytes a sequence, alone and batched, and its token is the greedy pick
//! of the logits.
#![cfg(feature = "gpu")]

mod gpu_data;
mod gpu_support;

use std::sync::Arc;

use gpu_data::{quantized, Lcg};
use half::f16;
use switchyard::backend::cpu::cut::Cut;
use switchyard::backend::cpu::draw::{draw, Scratch};
use switchyard::backend::cpu::edit::{self, Edit, EditOp, Edits};
use switchyard::backend::cpu::greedy;
use switchyard::backend::{
    cpu::CpuBackend, Backend, BackendSet, DeviceCounters, HostTensor, KvDType, SharedBytes,
};
use switchyard::graph::DType;
use switchyard::model::gguf::{write_gguf, GgufFile, Value};
use switchyard::model::llama::{LlamaConfig, TensorRole};
use switchyard::model::{GgufWeights, LlamaStep};
use switchyard::plan::Policy;
use switchyard::step::{CoexecMode, DrawSettings, Returned, Returns, Runner, Work};

const VOCAB: usize = 320;
const LAYERS: usize = 2;
/// Dispatches outside the layers: the embedding, the last layer's two gathers of
/// the rows that get logits (its attention output and residual) and the quantization
/// of the gathered attention output for the output product, the final norm and the
/// head.
const OUTSIDE_LAYERS: u64 = 6;
/// Most bytes a greedy step may read back per sequence (the bound; 4 are read).
const GREEDY_BYTES: u64 = 16;

/// A layer shape: width, heads, KV heads, FFN width.
#[derive(Clone, Copy)]
struct Shape {
    d: usize,
    heads: usize,
    kv_heads: usize,
    ffn: usize,
}

const SMOLLM2_135M: Shape = Shape {
    d: 576,
    heads: 9,
    kv_heads: 3,
    ffn: 1536,
};
const LLAMA_1B: Shape = Shape {
    d: 2048,
    heads: 32,
    kv_heads: 8,
    ffn: 8192,
};

fn tensor(rng: &mut Lcg, dtype: DType, shape: &[usize]) -> HostTensor {
    let n: usize = shape.iter().product();
    let bytes = match dtype {
        DType::F32 => rng
            .vec(n, 0.2)
            .iter()
            .flat_map(|v| (1.0 + v).to_le_bytes())
            .collect(),
        DType::F16 => rng
            .vec(n, 0.05)
            .iter()
            .flat_map(|v| f16::from_f32(*v).to_le_bytes())
            .collect(),
        _ => quantized(rng, dtype, n / shape[1], shape[1]).0,
    };
    HostTensor::new(dtype, shape.to_vec().into(), SharedBytes::from_vec(bytes)).unwrap()
}

/// A two-layer Llama of `shape` whose products are all `dtype` (Q4_K: a Q4_K_M-like
/// mix), written as GGUF. An F16
/// model keeps an F32 token table: an F16 table's lookup yields F16 activations, whose
/// cast to F32 the GPU does not run yet (it would put a node of every step on the CPU).
fn write_model(path: &std::path::Path, shape: Shape, dtype: DType) {
    // A Q4_K model is a Q4_K_M-like mix: V and down in Q6_K, as llama.cpp's preset
    // writes them, so q/k/v cannot share one product dispatch.
    let second = if dtype == DType::Q4K {
        DType::Q6K
    } else {
        dtype
    };
    let table = if dtype == DType::F16 {
        DType::F32
    } else {
        dtype
    };
    let mut rng = Lcg(7);
    let Shape {
        d,
        heads,
        kv_heads,
        ffn,
    } = shape;
    let kv = kv_heads * d / heads;
    let mut roles = vec![
        (TensorRole::TokenEmbedding, table, vec![VOCAB, d]),
        (TensorRole::OutputNorm, DType::F32, vec![d]),
    ];
    for l in 0..LAYERS {
        roles.extend([
            (TensorRole::AttnNorm(l), DType::F32, vec![d]),
            (TensorRole::AttnQ(l), dtype, vec![d, d]),
            (TensorRole::AttnK(l), dtype, vec![kv, d]),
            (TensorRole::AttnV(l), second, vec![kv, d]),
            (TensorRole::AttnOutput(l), dtype, vec![d, d]),
            (TensorRole::FfnNorm(l), DType::F32, vec![d]),
            (TensorRole::FfnGate(l), dtype, vec![ffn, d]),
            (TensorRole::FfnUp(l), dtype, vec![ffn, d]),
            (TensorRole::FfnDown(l), second, vec![d, ffn]),
        ]);
    }
    let tensors: Vec<(String, HostTensor)> = roles
        .into_iter()
        .map(|(role, dtype, shape)| (role.gguf_name(), tensor(&mut rng, dtype, &shape)))
        .collect();
    let metadata = [
        ("general.architecture", Value::Str("llama".into())),
        ("llama.block_count", Value::U32(LAYERS as u32)),
        ("llama.embedding_length", Value::U32(d as u32)),
        ("llama.feed_forward_length", Value::U32(ffn as u32)),
        ("llama.attention.head_count", Value::U32(heads as u32)),
        ("llama.attention.head_count_kv", Value::U32(kv_heads as u32)),
        ("llama.context_length", Value::U32(256)),
        ("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5)),
        ("llama.rope.freq_base", Value::F32(10_000.0)),
    ];
    let refs: Vec<(&str, &HostTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    write_gguf(path, &metadata, &refs).unwrap();
}

fn runner(backends: Vec<Arc<dyn Backend>>, path: &std::path::Path) -> Runner {
    let file = GgufFile::open(path).unwrap();
    let config = LlamaConfig::from_gguf(&file).unwrap();
    let policy = Policy {
        min_run: 0,
        ..Policy::default()
    };
    Runner::new(
        LlamaStep::new(config, Arc::new(GgufWeights(file)), 1),
        BackendSet::new(backends).unwrap(),
        64,
    )
    .with_policy(policy)
    .with_kv_dtype(KvDType::F16)
    .with_calibration_file(None)
    .with_coexec(CoexecMode::Off)
}

/// max |a - b| over max |b|.
fn relative_error(got: &[f32], want: &[f32]) -> f32 {
    let diff = got
        .iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    diff / want.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6)
}

/// The counters of decode steps: returning logits, returning one sequence's greedy
/// token, and returning three sequences' greedy tokens in one step.
struct Counted {
    logits: DeviceCounters,
    greedy: DeviceCounters,
    batch: DeviceCounters,
    drawn: DeviceCounters,
}

/// Runs a prompt and decode steps on `gpu` (and the same on the CPU alone), checks the
/// logits against the CPU's, and returns the counters of the decode steps after the
/// first; then the same steps asking only for greedy tokens, one sequence and three,
/// whose tokens must be the greedy picks of the logits.
fn decode_counters(gpu: &Arc<dyn Backend>, shape: Shape, dtype: DType) -> Counted {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.gguf");
    write_model(&path, shape, dtype);
    let cpu = || Arc::new(CpuBackend::new(Some(2)).unwrap()) as Arc<dyn Backend>;
    let mut on_gpu = runner(vec![cpu(), gpu.clone()], &path);
    let mut on_cpu = runner(vec![cpu()], &path);
    let (mut seq, mut cpu_seq) = (
        on_gpu.new_sequence().unwrap(),
        on_cpu.new_sequence().unwrap(),
    );
    let prompt = [3u32, 17, 250, 9, 41];
    let decode = [5u32, 200, 77, 12, 301];
    let mut logits = vec![on_gpu.forward(&mut seq, &prompt).unwrap()];
    let mut want = vec![on_cpu.forward(&mut cpu_seq, &prompt).unwrap()];
    let mut before = DeviceCounters::default();
    for (i, &t) in decode.iter().enumerate() {
        if i == 1 {
            before = gpu.counters().expect("the GPU counts");
        }
        logits.push(on_gpu.forward(&mut seq, &[t]).unwrap());
        want.push(on_cpu.forward(&mut cpu_seq, &[t]).unwrap());
    }
    let after = gpu.counters().expect("the GPU counts");
    let (_, decode_plan) = on_gpu.placement();
    assert_eq!(
        decode_plan.keys().collect::<Vec<_>>(),
        ["gpu"],
        "every decode node on the GPU"
    );
    for (step, (got, want)) in logits.iter().zip(&want).enumerate() {
        let err = relative_error(got, want);
        assert!(
            err <= 2e-2,
            "{dtype}, step {step}: GPU vs CPU relative error {err}"
        );
    }
    let steps = (decode.len() - 1) as u64;
    let total = after.since(&before);
    assert_eq!(total.runs, steps, "one GPU partition run per decode step");

    // The same tokens again, asking only for each step's greedy token.
    let mut greedy_seq = on_gpu.new_sequence().unwrap();
    let first = on_gpu.forward_greedy(&mut greedy_seq, &prompt).unwrap();
    assert_eq!(
        first,
        pick(&logits[0]),
        "{dtype}: the prompt's greedy token"
    );
    let mut before = DeviceCounters::default();
    for (i, &t) in decode.iter().enumerate() {
        if i == 1 {
            before = gpu.counters().expect("the GPU counts");
        }
        let token = on_gpu.forward_greedy(&mut greedy_seq, &[t]).unwrap();
        assert_eq!(
            token,
            pick(&logits[i + 1]),
            "{dtype}, step {i}: greedy token"
        );
    }
    let greedy_counted = gpu.counters().unwrap().since(&before);

    // Three sequences stepped together, each asking for its token.
    let mut seqs: Vec<_> = (0..3).map(|_| on_gpu.new_sequence().unwrap()).collect();
    for seq in &mut seqs {
        on_gpu.forward_greedy(seq, &prompt).unwrap();
    }
    let mut before = DeviceCounters::default();
    for (i, &t) in decode.iter().enumerate() {
        if i == 1 {
            before = gpu.counters().expect("the GPU counts");
        }
        let tokens = [t];
        let mut work: Vec<Work> = seqs
            .iter_mut()
            .map(|seq| Work {
                seq,
                tokens: &tokens,
                returns: Returns::Token,
            })
            .collect();
        let out = on_gpu.forward_batch(&mut work).unwrap();
        let got: Vec<Returned> = out.iter().collect();
        assert_eq!(got.len(), 3);
        for returned in got {
            assert_eq!(
                returned,
                Returned::Token(pick(&logits[i + 1])),
                "{dtype}, step {i}"
            );
        }
    }
    let batch = gpu.counters().unwrap().since(&before);

    // The three again, each drawing its token at a temperature on the device (whole
    // vocabulary, top-k, top-p after a penalty's edits): the CPU's draw from the GPU's
    // logits picks the same (but where the point falls within rounding of a boundary
    // between two tokens, which these few draws never meet).
    let mut seqs: Vec<_> = (0..3).map(|_| on_gpu.new_sequence().unwrap()).collect();
    for seq in &mut seqs {
        on_gpu.forward_greedy(seq, &prompt).unwrap();
    }
    let mut scratch = Scratch::default();
    let cuts = [Cut::NONE, Cut::new(40, 1.0), Cut::new(0, 0.9)];
    let mut before = DeviceCounters::default();
    for (i, &t) in decode.iter().enumerate() {
        if i == 1 {
            before = gpu.counters().expect("the GPU counts");
        }
        let tokens = [t];
        let mut settings: Vec<DrawSettings> = (0..3u32)
            .map(|s| {
                DrawSettings::new(
                    0.8,
                    0.02 * s as f32,
                    cuts[s as usize],
                    0x9E37_79B9u32.wrapping_mul(i as u32 * 3 + s + 1),
                )
                .unwrap()
            })
            .collect();
        // The third also penalizes the decode's tokens so far, as a repetition penalty.
        let penalized = decode[..=i]
            .iter()
            .map(|&id| Edit::new(id, EditOp::Scale, 1.3));
        settings[2] = settings[2].with_edits(Edits::of(&penalized.collect::<Vec<_>>()).unwrap());
        let mut work: Vec<Work> = seqs
            .iter_mut()
            .zip(&settings)
            .map(|(seq, &d)| Work {
                seq,
                tokens: &tokens,
                returns: Returns::Draw(d),
            })
            .collect();
        let out = on_gpu.forward_batch(&mut work).unwrap();
        for (returned, d) in out.iter().zip(&settings) {
            let mut edited = logits[i + 1].clone();
            edit::apply(d.edits(), &mut edited);
            let want = draw(
                &edited,
                d.temperature(),
                d.min_p(),
                d.cut(),
                d.bits(),
                &mut scratch,
            );
            assert_eq!(
                returned,
                Returned::Token(want.map(|t| t as u32)),
                "{dtype}, step {i}: drawn token"
            );
        }
    }
    let drawn = gpu.counters().unwrap().since(&before);
    Counted {
        logits: total,
        greedy: greedy_counted,
        batch,
        drawn,
    }
}

/// Greedy decoding's token from `logits`.
fn pick(logits: &[f32]) -> Option<u32> {
    greedy(logits).map(|t| t as u32)
}

/// Checks a decode step of `shape` in `dtype`, whose layers take at most `per_layer`
/// dispatches each.
fn check(gpu: &Arc<dyn Backend>, name: &str, shape: Shape, dtype: DType, per_layer: u64) {
    let counted = decode_counters(gpu, shape, dtype);
    let c = counted.logits;
    let steps = c.runs;
    let per_step = c.total_dispatches() / steps;
    eprintln!(
        "{name} {dtype}: {per_step} dispatches a step ({:?}), {} µs recording and {} µs submitting a step",
        c.dispatches,
        c.record_nanos / steps / 1000,
        c.submit_nanos / steps / 1000
    );
    assert!(
        per_step <= per_layer * LAYERS as u64 + OUTSIDE_LAYERS,
        "{name} {dtype}: {per_step} dispatches a decode step for {LAYERS} layers: {:?}",
        c.dispatches
    );
    assert_eq!(c.passes, steps, "{name} {dtype}: one compute pass a step");
    assert_eq!(c.submits, steps, "{name} {dtype}: one submit a step");
    assert_eq!(
        c.waits, steps,
        "{name} {dtype}: one wait a step (the logits)"
    );
    assert_eq!(
        c.buffers_created, 0,
        "{name} {dtype}: buffers made per step"
    );
    assert_eq!(
        c.bind_groups_created, 0,
        "{name} {dtype}: bind groups made per step"
    );
    // The first counted step recorded the next one's commands while it was submitted
    // (its plan repeated the step before it); every step after it took them.
    assert_eq!(
        c.ahead_runs,
        steps - 1,
        "{name} {dtype}: decode steps whose commands were recorded ahead"
    );
    assert_eq!(
        c.bytes_read,
        steps * VOCAB as u64 * 4,
        "{name} {dtype}: only the logits come back"
    );
    for (what, g, sequences, more) in [
        ("one", counted.greedy, 1, 2),
        ("three", counted.batch, 3, 2),
        ("three drawing", counted.drawn, 3, 5),
    ] {
        assert_eq!(g.runs, steps, "{name} {dtype}: a run per greedy step");
        let dispatches = g.total_dispatches() / steps;
        eprintln!(
            "{name} {dtype}: a greedy step of {what} sequence(s) is {dispatches} dispatches, \
             {} bytes read back",
            g.bytes_read / steps
        );
        assert!(
            dispatches <= per_layer * LAYERS as u64 + OUTSIDE_LAYERS + more,
            "{name} {dtype}: {dispatches} dispatches a greedy step: {:?}",
            g.dispatches
        );
        assert!(
            g.bytes_read <= steps * GREEDY_BYTES * sequences,
            "{name} {dtype}: {} bytes read back a greedy step of {what} sequence(s)",
            g.bytes_read / steps
        );
        assert_eq!(
            (g.passes, g.submits, g.waits),
            (steps, steps, steps),
            "{name} {dtype}: one pass, submit and wait a greedy step"
        );
        assert_eq!(
            (g.buffers_created, g.bind_groups_created),
            (0, 0),
            "{name} {dtype}: nothing made per greedy step"
        );
        assert_eq!(
            g.ahead_runs,
            steps - 1,
            "{name} {dtype}: greedy steps of {what} sequence(s) recorded ahead"
        );
    }
}

#[test]
fn a_decode_step_of_the_default_models_shape_is_a_few_fused_dispatches_and_creates_nothing() {
    let Some(gpu) = gpu_support::gpu() else {
        return;
    };
    let gpu: Arc<dyn Backend> = Arc::new(gpu);
    check(&gpu, "135M", SMOLLM2_135M, DType::Q4_0, 9);
    check(&gpu, "135M", SMOLLM2_135M, DType::F16, 9);
}

#[test]
fn a_decode_step_of_the_1b_shape_is_a_few_fused_dispatches_and_creates_nothing() {
    let Some(gpu) = gpu_support::gpu() else {
        return;
    };
    let gpu: Arc<dyn Backend> = Arc::new(gpu);
    check(&gpu, "1B", LLAMA_1B, DType::Q4_1, 9);
    // Q, K in Q4_K and V in Q6_K: two product dispatches where one format takes one.
    check(&gpu, "1B", LLAMA_1B, DType::Q4K, 10);
}

/// With the backend's profile on, where the adapter writes timestamps inside passes,
/// a decode step's every dispatch is timed under its kind: the profile's calls per run
/// are the counters' dispatches per run, kind by kind, and the run's time is the span
/// of its timestamps.
#[test]
fn a_profiled_decode_step_times_every_dispatch_by_kind() {
    let Some(gpu) = gpu_support::gpu() else {
        return;
    };
    let gpu: Arc<dyn Backend> = Arc::new(gpu);
    let Some(profile) = gpu.op_profile() else {
        eprintln!("SKIPPED: this adapter writes no timestamps inside passes");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.gguf");
    write_model(&path, SMOLLM2_135M, DType::Q4_0);
    let cpu = Arc::new(CpuBackend::new(Some(2)).unwrap()) as Arc<dyn Backend>;
    let mut on_gpu = runner(vec![cpu, gpu.clone()], &path);
    let mut seq = on_gpu.new_sequence().unwrap();
    on_gpu.forward_greedy(&mut seq, &[3, 17, 250]).unwrap();
    on_gpu.forward_greedy(&mut seq, &[5]).unwrap();
    let before = gpu.counters().unwrap();
    profile.take();
    profile.set_enabled(true);
    for t in [200, 77, 12] {
        on_gpu.forward_greedy(&mut seq, &[t]).unwrap();
    }
    profile.set_enabled(false);
    let counted = gpu.counters().unwrap().since(&before);
    let steps = profile.take();
    let [decode] = steps.as_slice() else {
        panic!("one row count profiled: {steps:?}");
    };
    assert_eq!((decode.rows, decode.runs), (1, 3), "{decode:?}");
    assert!(decode.nanos > 0, "the runs took time: {decode:?}");
    let timed: std::collections::BTreeMap<String, u64> = decode
        .ops
        .iter()
        .map(|op| (op.label.op.clone(), op.calls))
        .collect();
    let dispatched: std::collections::BTreeMap<String, u64> =
        counted.dispatches.into_iter().collect();
    assert_eq!(timed, dispatched, "every dispatch timed under its kind");
    let inside: u64 = decode.ops.iter().map(|op| op.nanos).sum();
    assert!(
        inside <= decode.nanos,
        "the dispatches lie inside the runs' spans"
    );
}
