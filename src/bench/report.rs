//! The fairness bench's result and its outputs: the whole report as JSON (stamp, seed,
//! every round's order and every run's sample), a markdown table of medians, intervals
//! and speedups, and the SVG plot of [`super::plot`], written side by side.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::env::EnvStamp;
use super::plot::speedup_svg;
use super::stats::{MedianSummary, Ratio};

/// Everything one fairness run measured, and under what conditions.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FairnessReport {
    /// The environment, stamped before any warm-up.
    pub stamp: EnvStamp,
    /// Seed of the per-round shuffles (warm-up rounds draw first, then timed rounds).
    pub seed: u64,
    /// Rounds run before timing and not recorded.
    pub warmup_rounds: usize,
    /// Rounds recorded.
    pub timed_rounds: usize,
    /// Name of the arm the speedups compare with.
    pub baseline: String,
    /// Whether a check refused the run and `--force` overrode it.
    pub forced: bool,
    /// Why the run had to be forced (precision mismatch, memory), one line each.
    pub forced_reasons: Vec<String>,
    /// Caveats that did not need forcing (e.g. available memory unknown).
    pub notes: Vec<String>,
    /// Per-arm statistics, in the order the arms were given.
    pub arms: Vec<ArmSummary>,
    /// Every timed round, in the order run.
    pub rounds: Vec<Round>,
}

/// One arm's medians, intervals and speedups over the timed rounds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ArmSummary {
    /// The arm's name (`cpu`, `gpu`, `split`, `gate`).
    pub name: String,
    /// The precision it declared (`q4_1 weights, f16 kv`).
    pub precision: String,
    /// Time to first token, milliseconds.
    pub ttft_ms: MedianSummary,
    /// Decode speed, tokens per second.
    pub decode_tok_s: MedianSummary,
    /// Baseline median TTFT over this arm's: above 1 means this arm's prefill is faster.
    pub prefill_speedup: Ratio,
    /// This arm's median decode speed over the baseline's: above 1 means faster.
    pub decode_speedup: Ratio,
}

/// One timed round: every arm once, in a shuffled order.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Round {
    /// Arm names in the order they ran.
    pub order: Vec<String>,
    /// The runs, in the same order.
    pub runs: Vec<Run>,
}

/// One timed run of one arm, as the arm measured it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Run {
    /// The arm's name.
    pub arm: String,
    /// Time to first token, milliseconds.
    pub ttft_ms: f64,
    /// Time of the decode steps, milliseconds.
    pub decode_ms: f64,
    /// Tokens decoded in `decode_ms`.
    pub decode_tokens: usize,
    /// `decode_tokens` per second.
    pub decode_tok_s: f64,
}

/// Where [`write_outputs`] put the three files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputPaths {
    /// `<prefix>.json`: the whole report.
    pub json: PathBuf,
    /// `<prefix>.md`: the table.
    pub markdown: PathBuf,
    /// `<prefix>.svg`: the speedup plot.
    pub svg: PathBuf,
}

/// Writing the outputs failed.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// A file or its directory could not be written.
    #[error("writing {}: {source}", path.display())]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The report could not be serialized.
    #[error("serializing the report: {0}")]
    Json(#[from] serde_json::Error),
}

/// Writes `<prefix>.json`, `<prefix>.md` and `<prefix>.svg`, creating the prefix's
/// directory if needed; `prefix` keeps any dots it has (`runs/v0.1` → `runs/v0.1.json`).
pub fn write_outputs(report: &FairnessReport, prefix: &Path) -> Result<OutputPaths, OutputError> {
    if let Some(dir) = prefix.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| OutputError::Write {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    let with = |extension: &str| {
        let mut name = prefix.as_os_str().to_os_string();
        name.push(".");
        name.push(extension);
        PathBuf::from(name)
    };
    let paths = OutputPaths {
        json: with("json"),
        markdown: with("md"),
        svg: with("svg"),
    };
    let mut json = serde_json::to_string_pretty(report)?;
    json.push('\n');
    write_file(&paths.json, &json)?;
    write_file(&paths.markdown, &markdown(report))?;
    write_file(&paths.svg, &speedup_svg(report))?;
    Ok(paths)
}

/// The report as markdown: a heading with the protocol, any forced reasons and notes,
/// the environment in one line, and one table row per arm.
pub fn markdown(report: &FairnessReport) -> String {
    let mut out = format!(
        "## Fairness bench: {} arms, {} timed rounds after {} warm-up rounds, seed {}\n\n",
        report.arms.len(),
        report.timed_rounds,
        report.warmup_rounds,
        report.seed
    );
    for reason in &report.forced_reasons {
        out += &format!("**FORCED:** {}\n\n", cell(reason));
    }
    for note in &report.notes {
        out += &format!("Note: {}\n\n", cell(note));
    }
    out += &format!("{}\n\n", environment_line(&report.stamp));
    out += "| arm | precision | TTFT ms median (95% CI) | TTFT mean | TTFT p99 \
            | decode tok/s median (95% CI) | decode tok/s mean \
            | prefill speedup (95% CI) | decode speedup (95% CI) \
            | mean-TTFT speedup | mean-decode speedup |\n";
    out += "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    let baseline = report.arms.iter().find(|a| a.name == report.baseline);
    for arm in &report.arms {
        let mean_ratio = |of: fn(&ArmSummary) -> f64, invert: bool| match baseline {
            Some(b) if of(b) > 0.0 && of(arm) > 0.0 => {
                let ratio = if invert {
                    of(b) / of(arm)
                } else {
                    of(arm) / of(b)
                };
                format!("{ratio:.3}")
            }
            _ => "n/a".into(),
        };
        let name = if arm.name == report.baseline {
            format!("{} (baseline)", cell(&arm.name))
        } else {
            cell(&arm.name)
        };
        out += &format!(
            "| {name} | {} | {} | {:.2} | {:.2} | {} | {:.2} | {} | {} | {} | {} |\n",
            cell(&arm.precision),
            median_cell(&arm.ttft_ms),
            arm.ttft_ms.mean,
            arm.ttft_ms.p99,
            median_cell(&arm.decode_tok_s),
            arm.decode_tok_s.mean,
            ratio_cell(&arm.prefill_speedup),
            ratio_cell(&arm.decode_speedup),
            mean_ratio(|a| a.ttft_ms.mean, true),
            mean_ratio(|a| a.decode_tok_s.mean, false),
        );
    }
    out
}

fn environment_line(stamp: &EnvStamp) -> String {
    let unknown = || "unknown".to_string();
    let gib = |b: u64| format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64);
    format!(
        "CPU {} ({} logical cores); GPU {} ({}); {} {}; {} available; power {}; \
         switchyard {} ({}); model sha256 {}",
        cell(stamp.cpu_model.as_deref().unwrap_or("unknown")),
        stamp.cores_logical,
        cell(stamp.gpu_adapter.as_deref().unwrap_or("none")),
        cell(stamp.gpu_driver.as_deref().unwrap_or("no driver info")),
        stamp.os,
        stamp.kernel.clone().unwrap_or_else(unknown),
        stamp.mem_available_bytes.map_or_else(unknown, gib),
        stamp.power_source,
        stamp.version,
        stamp.git_commit,
        stamp.model_sha256.clone().unwrap_or_else(unknown),
    )
}

fn median_cell(summary: &MedianSummary) -> String {
    match summary.ci95 {
        Some([low, high]) => format!("{:.2} [{low:.2}–{high:.2}]", summary.median),
        None => format!("{:.2} [n/a]", summary.median),
    }
}

fn ratio_cell(ratio: &Ratio) -> String {
    match ratio.ci95 {
        Some([low, high]) => format!("{:.3}× [{low:.3}–{high:.3}]", ratio.value),
        None => format!("{:.3}× [n/a]", ratio.value),
    }
}

/// Text safe inside a markdown table cell: pipes escaped, line breaks flattened.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace(['\n', '\r'], " ")
}

fn write_file(path: &Path, text: &str) -> Result<(), OutputError> {
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::File::create(path)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()
    };
    write().map_err(|source| OutputError::Write {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_cannot_break_the_table() {
        assert_eq!(cell("a|b\nc"), "a\\|b c");
        let ratio = Ratio {
            value: 1.5,
            ci95: None,
        };
        assert_eq!(ratio_cell(&ratio), "1.500× [n/a]");
    }
}
