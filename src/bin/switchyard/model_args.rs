//! Flags shared by every command that runs a model, and loading it: the default model
//! is fetched and cached on first use.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};

use switchyard::backend::fault::{self, FaultSpec};
use switchyard::backend::{cpu::CpuBackend, Backend, BackendSet, KvDType};
use switchyard::model::{fetch, Model};
use switchyard::step::{CoexecMode, Runner};

/// KV cache element type, as a flag value.
#[derive(Clone, Copy, ValueEnum)]
pub enum KvType {
    /// Half precision.
    F16,
    /// Single precision.
    F32,
}

/// Which model to run and on what.
#[derive(Args, Clone)]
pub struct ModelArgs {
    /// A GGUF file or a Hugging Face model directory (config.json, *.safetensors,
    /// tokenizer.json). Default: SmolLM2-135M-Instruct Q4_1, fetched and cached under
    /// $SWITCHYARD_HOME (default ~/.cache/switchyard) on first use.
    #[arg(long, short = 'm', value_name = "PATH")]
    pub model: Option<PathBuf>,
    /// Context length: most positions (prompt + generated tokens) one sequence holds.
    #[arg(
        long,
        default_value_t = 2048,
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub ctx: usize,
    /// CPU threads (default: one per physical core).
    #[arg(long, short = 't', value_name = "N", allow_negative_numbers = true)]
    pub threads: Option<usize>,
    /// How the KV cache stores keys and values: f16 halves its memory, f32 is exact.
    #[arg(long, value_enum, default_value_t = KvType::F16, value_name = "TYPE")]
    pub kv_type: KvType,
    /// Backends to use: `auto` (the CPU, plus a hardware GPU when one is found), or a
    /// comma-separated list of `cpu` and `gpu`. Listing `gpu` also accepts a software
    /// adapter such as lavapipe and fails when there is none; `cpu` alone forces CPU
    /// only. Nodes go to the highest-priority listed backend that can run them.
    #[arg(long, default_value = "auto", value_name = "LIST")]
    pub backends: String,
    /// Prefill co-execution with a second backend: `gate` measures the plain plan, the
    /// row split (large linears split by rows across CPU and GPU at once, ratios
    /// calibrated on first use) and single-backend plans, and keeps the fastest, never
    /// losing to the plain plan; `split` always splits; `off` never. Decode never splits.
    #[arg(long, value_enum, default_value_t = CoexecFlag::Gate, value_name = "MODE")]
    pub coexec: CoexecFlag,
}

/// Co-execution mode, as a flag value.
#[derive(Clone, Copy, ValueEnum)]
pub enum CoexecFlag {
    /// The capability-greedy plan only.
    Off,
    /// The no-regression gate picks the arm by measurement.
    Gate,
    /// Always the row split.
    Split,
}

impl From<CoexecFlag> for CoexecMode {
    fn from(flag: CoexecFlag) -> CoexecMode {
        match flag {
            CoexecFlag::Off => CoexecMode::Off,
            CoexecFlag::Gate => CoexecMode::Gate,
            CoexecFlag::Split => CoexecMode::Split,
        }
    }
}

impl ModelArgs {
    /// The model file or directory, fetching the default model when none was given.
    pub fn model_path(&self) -> Result<PathBuf> {
        match &self.model {
            Some(path) => Ok(path.clone()),
            None => Ok(fetch::default_model_path(true)?),
        }
    }

    /// The backends named by `--backends`.
    pub fn backend_set(&self) -> Result<BackendSet> {
        backend_set(&self.backends, self.threads)
    }

    /// The KV cache type named by `--kv-type`.
    pub fn kv_dtype(&self) -> KvDType {
        match self.kv_type {
            KvType::F16 => KvDType::F16,
            KvType::F32 => KvDType::F32,
        }
    }

    /// Opens the model and a runner for it.
    pub fn load(&self) -> Result<(Model, Runner)> {
        if self.ctx == 0 {
            bail!("--ctx must be at least 1");
        }
        let path = self.model_path()?;
        let model = Model::open(&path).with_context(|| format!("loading {}", path.display()))?;
        if self.ctx > model.config.context_length {
            eprintln!(
                "note: --ctx {} exceeds the model's trained context; using {}",
                self.ctx, model.config.context_length
            );
        }
        let ctx = self.ctx.min(model.config.context_length);
        let kv_dtype = self.kv_dtype();
        let runner = model
            .runner(self.backend_set()?, ctx)
            .with_kv_dtype(kv_dtype)
            .with_coexec(self.coexec.into());
        Ok((model, runner))
    }
}

/// Opens the backends of a `--backends` value (see [`ModelArgs::backends`]).
pub fn backend_set(spec: &str, threads: Option<usize>) -> Result<BackendSet> {
    check_threads(threads)?;
    let names: Vec<&str> = spec
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    let mut list: Vec<Arc<dyn Backend>> = vec![Arc::new(CpuBackend::new(threads)?)];
    match names.as_slice() {
        ["auto"] => {
            if let Some(gpu) = open_gpu(false, false)? {
                list.push(gpu);
            }
        }
        _ => {
            if let Some(other) = names.iter().find(|n| !matches!(**n, "cpu" | "gpu")) {
                bail!("unknown backend {other:?} in --backends (available: auto, cpu, gpu)");
            }
            if !names.contains(&"cpu") {
                bail!(
                    "--backends must include cpu: it holds the inputs and runs what others cannot"
                );
            }
            if names.contains(&"gpu") {
                list.extend(open_gpu(true, true)?);
            }
        }
    }
    let faults = FaultSpec::from_env().map_err(anyhow::Error::msg)?;
    let list = list
        .into_iter()
        .map(|b| fault::inject(b, &faults))
        .collect::<Result<Vec<_>, _>>()
        .map_err(anyhow::Error::msg)?;
    BackendSet::new(list).map_err(anyhow::Error::msg)
}

/// The GPU backend: `required` makes a missing adapter an error, otherwise it is logged.
#[cfg(feature = "gpu")]
fn open_gpu(allow_software: bool, required: bool) -> Result<Option<Arc<dyn Backend>>> {
    use switchyard::backend::gpu::GpuBackend;
    match GpuBackend::open(allow_software) {
        Ok(gpu) => {
            log::info!("using GPU: {}", gpu.capability().version);
            Ok(Some(Arc::new(gpu)))
        }
        Err(e) if required => bail!("--backends asks for gpu, but {e}"),
        Err(e) => {
            log::info!("no GPU used: {e}");
            Ok(None)
        }
    }
}

/// Without the `gpu` feature there is never a GPU.
#[cfg(not(feature = "gpu"))]
fn open_gpu(_allow_software: bool, required: bool) -> Result<Option<Arc<dyn Backend>>> {
    if required {
        bail!("--backends asks for gpu, but this build has no GPU backend (built without the `gpu` feature)");
    }
    Ok(None)
}

/// Most `--threads` per logical CPU: more only adds contention, and a typo such as
/// `--threads 5000` would otherwise start thousands of spinning workers.
const MAX_THREADS_PER_CPU: usize = 4;

/// Refuses a `--threads` of 0 or above [`MAX_THREADS_PER_CPU`] × the logical CPUs.
fn check_threads(threads: Option<usize>) -> Result<()> {
    let logical = std::thread::available_parallelism().map_or(1, |n| n.get());
    let most = logical.saturating_mul(MAX_THREADS_PER_CPU);
    match threads {
        Some(0) => bail!("--threads must be at least 1 (omit it for one per physical core)"),
        Some(n) if n > most => bail!(
            "--threads {n} is more than {MAX_THREADS_PER_CPU} per logical CPU ({logical} here, so at \
             most {most}); omit it for one per physical core"
        ),
        _ => Ok(()),
    }
}
