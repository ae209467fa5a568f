//! Failover on the default model: the test-only `sim` backend, wrapped by the fault
//! injector, dies mid-prefill or mid-decode (or cannot allocate); the runner drops it,
//! re-plans on the CPU and the generation's greedy tokens equal a CPU-only run's. The
//! same through the server with 8 concurrent streams: every stream completes with the
//! tokens it gets alone on the CPU. A weight over the sim's buffer limit is no device
//! failure: the plan puts its product on the CPU and says why, and nothing fails over.

mod server_support;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use switchyard::backend::fault::{FaultKind, Faulty};
use switchyard::backend::{
    cpu::CpuBackend, sim::SimBackend, Backend, BackendId, BackendSet, DTypeSet, Refusal,
};
use switchyard::cache::Phase;
use switchyard::decode::sampler::{Sampler, SamplerConfig};
use switchyard::decode::{generate, GenerateOptions};
use switchyard::graph::{eliminate_dead_code, DType, OpKind};
use switchyard::model::llama::trace_step;
use switchyard::model::{fetch, Model};
use switchyard::plan::{self, Placement, Policy, Reason};
use switchyard::server::{Limits, ServerConfig};
use switchyard::step::Runner;

const STEPS: usize = 12;

/// The CPU, plus the sim backend (taking the model's block-format linears) failing as
/// `fault` says.
fn backends(fault: Option<FaultKind>) -> BackendSet {
    let mut list: Vec<Arc<dyn Backend>> = vec![Arc::new(CpuBackend::new(None).unwrap())];
    if let Some(kind) = fault {
        let mut capability = SimBackend::default_capability();
        capability.operand_dtypes = DTypeSet::of(&[DType::Q4_0, DType::Q4_1, DType::Q8_0]);
        let sim = SimBackend::with_capability(BackendId::SIM, capability).unwrap();
        list.push(Arc::new(Faulty::new(Arc::new(sim), kind)));
    }
    BackendSet::new(list).unwrap()
}

fn runner(model: &Model, fault: Option<FaultKind>) -> Runner {
    model.runner(backends(fault), 512)
}

fn model() -> Model {
    let path = fetch::default_model_path(false).expect("fetching the default model");
    Model::open(&path).unwrap()
}

fn argmax(logits: &[f32]) -> u32 {
    logits
        .iter()
        .enumerate()
        .fold((0, f32::MIN), |b, (i, &v)| if v > b.1 { (i, v) } else { b })
        .0 as u32
}

/// Greedy tokens after `prompt`.
fn greedy(runner: &mut Runner, prompt: &[u32]) -> Vec<u32> {
    let mut seq = runner.new_sequence().unwrap();
    let mut logits = runner.forward(&mut seq, prompt).unwrap();
    let mut tokens = Vec::new();
    for _ in 0..STEPS {
        tokens.push(argmax(&logits));
        logits = runner
            .forward(&mut seq, &[*tokens.last().unwrap()])
            .unwrap();
    }
    tokens
}

#[test]
fn a_backend_lost_mid_prefill_or_mid_decode_or_out_of_memory_leaves_the_cpu_tokens() {
    let model = model();
    let prompt = model
        .tokenizer
        .encode("The three primary colours are", true)
        .unwrap();
    let expected = greedy(&mut runner(&model, None), &prompt);
    // One prefill step runs dozens of sim partitions (every linear of every layer), so
    // run 2 is inside the prefill and run 400 inside decode.
    let cases = [
        (FaultKind::LostAtRun(2), Some(Phase::Prefill)),
        (FaultKind::LostAtRun(400), Some(Phase::Decode)),
        (FaultKind::Alloc, Some(Phase::Prefill)),
        (FaultKind::LostAtRun(u64::MAX), None),
    ];
    for (kind, phase) in cases {
        let mut faulty = runner(&model, Some(kind.clone()));
        let got = greedy(&mut faulty, &prompt);
        assert_eq!(got, expected, "{kind:?}");
        let failovers = faulty.failovers();
        assert_eq!(failovers.len(), usize::from(phase.is_some()), "{kind:?}");
        if let (Some(phase), [failover]) = (phase, failovers) {
            assert_eq!(failover.backend, "sim");
            assert_eq!(failover.phase, phase, "{kind:?}");
            assert!(failover.error.contains("injected"), "{}", failover.error);
            assert_eq!(faulty.backends().iter().count(), 1, "the sim is dropped");
        } else {
            assert!(
                faulty.placement().1.contains_key("sim"),
                "without a fault the sim takes part in decode"
            );
        }
    }
}

/// The sim holding buffers of at most 16 MiB (4 Mi f32 elements), as a smaller device
/// would: the output head's weight (the tied 49,152 × 576 embedding, 28 Mi elements)
/// is over it, every layer's weights are not. Its capability refuses the head's
/// product, so the plan puts that on the CPU and says why; the layers still run on the
/// sim, nothing fails over, and the tokens are the CPU's.
#[test]
fn a_weight_over_the_buffer_limit_is_placed_on_the_cpu_by_the_plan_without_failover() {
    const LIMIT: u64 = 16 << 20;
    let model = model();
    let prompt = model
        .tokenizer
        .encode("The three primary colours are", true)
        .unwrap();
    let expected = greedy(&mut runner(&model, None), &prompt);
    let mut limited = runner(&model, Some(FaultKind::BufferLimit(LIMIT)));
    assert_eq!(greedy(&mut limited, &prompt), expected);
    assert_eq!(limited.failovers(), []);
    assert!(
        limited.placement().1.contains_key("sim"),
        "the layers stay on the sim"
    );

    let set = backends(Some(FaultKind::BufferLimit(LIMIT)));
    let traced = trace_step(&model.config, model.weights.as_ref(), 1).unwrap();
    let plan = plan::partition(
        &eliminate_dead_code(&traced),
        &set.capabilities(),
        &Policy::default(),
    )
    .unwrap();
    let g = &plan.graph;
    let products = g.ids().filter(|&id| g.node(id).op.kind() == OpKind::MatMul);
    let (over, under): (Vec<_>, Vec<_>) = products.partition(|&id| {
        let weight = g.node(id).inputs[1];
        g.node(weight).shape.numel() as u64 > LIMIT / 4
    });
    assert_eq!(over.len(), 1, "the output head alone is over the limit");
    assert_eq!(
        plan.placement[over[0].index()],
        Placement::On(BackendId::CPU)
    );
    let Reason::Preferred { refused } = &plan.why[over[0].index()] else {
        panic!("{:?}", plan.why[over[0].index()]);
    };
    assert!(
        refused
            .iter()
            .any(|(b, why)| *b == BackendId::SIM && matches!(why, Refusal::TooLarge { .. })),
        "{refused:?}"
    );
    for id in under {
        assert_eq!(plan.placement[id.index()], Placement::On(BackendId::SIM));
    }
    let text = plan::to_text(&plan, &|id| set.name_of(id));
    let why = format!(
        "refused by sim: {} elements exceed limit {}",
        49_152 * 576,
        LIMIT / 4
    );
    assert!(text.contains(&why), "{text}");
}

/// Runs the in-process server over `runner` on a free port; returns its address.
fn serve(model: Model, runner: Runner) -> std::net::SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            let config = ServerConfig {
                limits: Limits::parallel(8).unwrap(),
                max_queue: 16,
                ..ServerConfig::default()
            };
            switchyard::server::serve(listener, model, runner, config, std::future::pending())
                .await
                .unwrap();
        });
    });
    rx.recv_timeout(Duration::from_secs(60)).unwrap()
}

fn completion(prompt: &str) -> Value {
    json!({"prompt": prompt, "max_tokens": STEPS, "temperature": 0})
}

#[test]
fn eight_concurrent_streams_survive_a_backend_lost_mid_step() {
    let prompts: Vec<String> = (0..8)
        .map(|i| format!("Story {i}: once upon a time, in a land of {i} rivers,"))
        .collect();
    let model = model();
    let mut cpu = runner(&model, None);
    let options = GenerateOptions {
        max_tokens: STEPS,
        stop_ids: model.stop_ids.clone(),
        ..GenerateOptions::default()
    };
    let expected: Vec<String> = prompts
        .iter()
        .map(|p| {
            let ids = model.tokenizer.encode(p, false).unwrap();
            let config = SamplerConfig {
                temperature: 0.0,
                ..SamplerConfig::default()
            };
            let mut sampler = Sampler::new(config).unwrap();
            generate(
                &mut cpu,
                &model.tokenizer,
                &mut sampler,
                &ids,
                &options,
                &mut |_| true,
            )
            .unwrap()
            .text
        })
        .collect();
    // Several hundred sim partition runs: the loss strikes while streams decode.
    let faulty = runner(&model, Some(FaultKind::LostAtRun(300)));
    let addr = serve(model, faulty);
    let handles: Vec<_> = prompts
        .iter()
        .map(|p| {
            let body = completion(p);
            std::thread::spawn(move || server_support::post(addr, "/v1/completions", &body))
        })
        .collect();
    for (i, handle) in handles.into_iter().enumerate() {
        let response = handle.join().unwrap();
        assert_eq!(response.status, 200, "stream {i}: {}", response.text());
        let text = response.json()["choices"][0]["text"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(text, expected[i], "stream {i}");
    }
    let metrics = server_support::get(addr, "/metrics").text();
    assert_eq!(
        server_support::metric(&metrics, "switchyard_backend_failovers_total"),
        Some(1.0),
        "{metrics}"
    );
    let again = server_support::post(addr, "/v1/completions", &completion(&prompts[0]));
    assert_eq!(again.status, 200, "the server keeps serving");
    assert_eq!(again.json()["choices"][0]["text"], expected[0]);
}
