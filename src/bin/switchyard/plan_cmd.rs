//! `switchyard plan`: places a model step (or, with `--demo`, a small transformer block)
//! on the backends, prints node → backend → why, the partitions and transfers, and can
//! write Graphviz.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};

use std::time::Instant;

use switchyard::backend::{BackendSet, KvCache, KvDType, KvLayout, StepState, Tensor};
use switchyard::cache::{
    get_or_compile, CacheBudget, CompileContext, GraphCache, Phase, StepArm, StepKey, WeightStore,
};
use switchyard::graph::{eliminate_dead_code, DType};
use switchyard::model::llama::trace_step;
use switchyard::model::Model;
use switchyard::plan::{self, Policy};
use switchyard::step::PREFILL_CHUNK;

use crate::demo;
use crate::model_args::ModelArgs;

/// Flags of `switchyard plan`.
#[derive(Args)]
pub struct PlanArgs {
    /// Plan the built-in demo transformer block (random weights) and run it a few
    /// steps, instead of a model.
    #[arg(long)]
    demo: bool,
    /// New tokens per step in the demo graph (1 = a decode step).
    #[arg(
        long,
        default_value_t = 1,
        requires = "demo",
        allow_negative_numbers = true
    )]
    tokens: usize,
    /// Which step of the model to plan: a prefill chunk or a decode step.
    #[arg(long, value_enum, default_value_t = PlanPhase::Decode, conflicts_with = "demo")]
    phase: PlanPhase,
    #[command(flatten)]
    model: ModelArgs,
    /// Print the plan as JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Also write the plan as a Graphviz file.
    #[arg(long, value_name = "FILE")]
    dot: Option<PathBuf>,
}

/// The step of a model to plan.
#[derive(Clone, Copy, ValueEnum)]
enum PlanPhase {
    /// A prefill chunk of PREFILL_CHUNK tokens.
    Prefill,
    /// A one-token decode step.
    Decode,
}

/// Most `--tokens` of the demo graph: a step's rows, far past any prefill chunk.
const MAX_DEMO_TOKENS: usize = 1 << 16;

/// Plans the demo block or a model step and prints the result.
pub fn run(args: &PlanArgs) -> Result<()> {
    if args.tokens == 0 || args.tokens > MAX_DEMO_TOKENS {
        bail!(
            "--tokens {} is out of range: it takes 1 to {MAX_DEMO_TOKENS}",
            args.tokens
        );
    }
    let backends = args.model.backend_set()?;
    let graph = if args.demo {
        demo::block(args.tokens, DType::F32).context("building the demo block")?
    } else {
        let path = args.model.model_path()?;
        let model = Model::open(&path)?;
        let n_tokens = match args.phase {
            PlanPhase::Prefill => PREFILL_CHUNK,
            PlanPhase::Decode => 1,
        };
        eliminate_dead_code(&trace_step(
            &model.config,
            model.weights.as_ref(),
            n_tokens,
        )?)
    };
    let plan = plan::partition(&graph, &backends.capabilities(), &Policy::default())?;
    let names = |id| backends.name_of(id);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&plan)?);
    } else {
        print!("{}", plan::to_text(&plan, &names));
    }
    if args.demo && !args.json {
        run_demo_steps(&backends)?;
    }
    if let Some(path) = &args.dot {
        std::fs::write(path, plan::to_dot(&plan, &names))
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// Runs the demo block as a tiny generation would (a 4-token prefill, then 8 decode
/// steps) through the graph cache and reports compile versus hit times.
fn run_demo_steps(backends: &BackendSet) -> Result<()> {
    let prefill_graph = demo::block(4, DType::F32)?;
    let weights = demo::RandomWeights::for_graph(&prefill_graph, 1)?;
    let store = WeightStore::new(weights.into_source());
    let mut cache = GraphCache::new(CacheBudget {
        max_entries: 8,
        max_bytes: 256 << 20,
    });
    let context = CompileContext {
        backends,
        policy: &Policy::default(),
        weights: &store,
    };
    let (n_kv_heads, head_dim) = demo::KV_SHAPE;
    let mut kv = KvCache::new(KvLayout {
        n_layers: 1,
        capacity: 16,
        n_kv_heads,
        head_dim,
        dtype: KvDType::F16,
    })?;
    println!();
    println!("running the demo block: 4-token prefill, then 8 decode steps");
    let mut kv_len = 0;
    for n in [4usize, 1, 1, 1, 1, 1, 1, 1, 1] {
        let phase = if n > 1 { Phase::Prefill } else { Phase::Decode };
        let step = StepKey {
            model: 0,
            phase,
            bucket: n as u32,
            sequences: 1,
            pick: switchyard::cache::Pick::Logits,
            backends: backends.fingerprint(),
            arm: StepArm::Baseline,
        };
        let started = Instant::now();
        let executor = get_or_compile(&mut cache, &step, &context, || demo::block(n, DType::F32))?;
        let lookup = started.elapsed();
        let x = Tensor::from_f32([n, demo::D_MODEL], &vec![0.5; n * demo::D_MODEL])?;
        let positions: Vec<i32> = (kv_len as i32..(kv_len + n) as i32).collect();
        let inputs = [("x", x), ("positions", Tensor::from_i32([n], &positions)?)];
        let mut state = StepState::single(&mut kv, kv_len);
        let started = Instant::now();
        executor.run(&inputs, &mut state)?;
        println!(
            "  {phase:?} n={n} kv_len={kv_len:>2}: get executor {:>9.1} µs, run {:>8.1} µs",
            lookup.as_secs_f64() * 1e6,
            started.elapsed().as_secs_f64() * 1e6
        );
        kv_len += n;
    }
    let stats = cache.stats();
    println!(
        "graph cache: {} compiles, {} hits ({} by step key), {} misses",
        stats.compiles, stats.hits, stats.step_hits, stats.misses
    );
    Ok(())
}
