//! `switchyard calibrate`: times the concurrent CPU+GPU row split of every prefill
//! linear shape of a model over the ratio grid and saves the fastest ratios, so later
//! runs start with them instead of calibrating on first use.

use anyhow::{bail, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use crate::model_args::ModelArgs;

/// Flags of `switchyard calibrate`.
#[derive(Args)]
pub struct CalibrateArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Timed runs per grid point (the median is kept).
    #[arg(
        long,
        default_value_t = 3,
        value_name = "N",
        allow_negative_numbers = true
    )]
    reps: u32,
}

/// Most `--reps` per grid point: each is a timed run of every linear shape.
const MAX_REPS: u32 = 1000;

/// Runs the command.
pub fn run(args: &CalibrateArgs) -> Result<()> {
    if args.reps == 0 || args.reps > MAX_REPS {
        bail!(
            "--reps {} is out of range: it takes 1 to {MAX_REPS}",
            args.reps
        );
    }
    let (_model, mut runner) = args.model.load()?;
    let bar = ProgressBar::new(0).with_style(
        ProgressStyle::with_template("{msg:40} [{bar:30}] {pos}/{len} grid points")?
            .progress_chars("=> "),
    );
    let table = runner.calibrate(args.reps, &mut |key, done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
        bar.set_message(format!(
            "rows {} · {}×{} {}",
            key.rows_bucket(),
            key.n(),
            key.k(),
            key.dtype()
        ));
    })?;
    bar.finish_and_clear();
    let Some(table) = table else {
        bail!("nothing to calibrate: co-execution needs a second backend (try --backends cpu,gpu)");
    };
    println!("rows   N×K            dtype  best ρ   (times per ρ in ms)");
    for c in table.calibrations() {
        let key = c.key();
        let times: Vec<String> = c
            .per_point()
            .iter()
            .map(|(rho, t)| format!("{:.2}:{:.2}", *rho as f32 / 1000.0, t.as_secs_f64() * 1e3))
            .collect();
        println!(
            "{:<6} {:<14} {:<6} {:<8.2} {}",
            key.rows_bucket(),
            format!("{}×{}", key.n(), key.k()),
            key.dtype().name(),
            c.rho_permille() as f32 / 1000.0,
            times.join(" ")
        );
    }
    Ok(())
}
