//! RoPE settings of a `config.json` (`rope_theta`, `rope_scaling`, transformers 5's
//! `rope_parameters`) and the per-dimension inverse frequencies that Llama 3 scaling
//! and GGUF `rope_freqs` tensors call for. Scaling types that are not implemented are
//! refused by name.

use std::path::Path;

use serde_json::{Map, Value};

use super::keys::{unsupported, KeySource};
use crate::model::ModelError;

/// How RoPE frequencies are scaled for contexts longer than pre-training.
#[derive(Clone, Debug, PartialEq)]
pub enum RopeScaling {
    /// Plain RoPE.
    None,
    /// Positions divided by `factor` (`linear`).
    Linear {
        /// Position divisor.
        factor: f64,
    },
    /// Llama 3.1's band-wise scaling (`llama3`).
    Llama3 {
        /// Divisor of low frequencies.
        factor: f64,
        /// Wavelengths above `original / low_freq_factor` are divided by `factor`.
        low_freq_factor: f64,
        /// Wavelengths below `original / high_freq_factor` are kept.
        high_freq_factor: f64,
        /// Pre-training context length.
        original_max_position_embeddings: f64,
    },
    /// `dynamic` NTK scaling: θ grows once a sequence passes `max_position_embeddings`;
    /// up to there (the context is capped there) it is plain RoPE, as in transformers.
    Dynamic,
    /// YaRN (`yarn`): each pair's frequency blended between kept and divided by
    /// `factor` along a ramp over the pairs, and cos/sin scaled by an attention factor.
    Yarn {
        /// Divisor of the interpolated frequencies.
        factor: f64,
        /// cos/sin multiplier.
        attention_factor: f64,
        /// Rotations at which extrapolation ends (`beta_fast`, default 32).
        beta_fast: f64,
        /// Rotations at which interpolation begins (`beta_slow`, default 1).
        beta_slow: f64,
        /// Pre-training context length.
        original_max_position_embeddings: f64,
        /// Whether the ramp's ends are rounded to whole pairs (`truncate`, default true).
        truncate: bool,
    },
    /// Phi-3's `longrope`: per-pair frequency divisors, `short_factor` up to the
    /// pre-training length (the only range implemented: the context is capped there,
    /// since transformers switches every position to `long_factor` beyond it), and
    /// cos/sin scaled by an attention factor.
    LongRope {
        /// Divisors of each pair's frequency.
        short_factor: Vec<f64>,
        /// cos/sin multiplier.
        attention_factor: f64,
        /// Pre-training context length.
        original_max_position_embeddings: f64,
    },
}

/// RoPE settings read from a `config.json`.
#[derive(Clone, Debug, PartialEq)]
pub struct HfRope {
    /// Frequency base θ.
    pub theta: f64,
    /// Frequency scaling.
    pub scaling: RopeScaling,
    /// Fraction of each head that rotates (`partial_rotary_factor`, default 1).
    pub partial: f64,
}

/// Sub-keys of a scaling block each type reads; any other is refused.
const KEYS_BY_TYPE: &[(&str, &[&str])] = &[
    ("default", &[]),
    ("linear", &["factor"]),
    (
        "llama3",
        &[
            "factor",
            "low_freq_factor",
            "high_freq_factor",
            "original_max_position_embeddings",
        ],
    ),
    ("dynamic", &["factor"]),
    (
        "yarn",
        &[
            "factor",
            "attention_factor",
            "beta_fast",
            "beta_slow",
            "mscale",
            "mscale_all_dim",
            "original_max_position_embeddings",
            "truncate",
        ],
    ),
    (
        "longrope",
        &[
            "short_factor",
            "long_factor",
            "factor",
            "attention_factor",
            "original_max_position_embeddings",
        ],
    ),
];

/// Sub-keys every scaling block may carry: the type (under either name) and, in
/// `rope_parameters`, θ and the rotated fraction (which must be 1).
const COMMON_KEYS: &[&str] = &["type", "rope_type", "rope_theta", "partial_rotary_factor"];

impl HfRope {
    /// Reads θ and scaling from the top-level `config` object: `rope_theta` and
    /// `rope_scaling`, or `rope_parameters` (transformers 5). θ defaults to 10000;
    /// Llama 3's pre-training length defaults to `max_positions`, as in transformers.
    pub fn read(
        path: &Path,
        config: &Map<String, Value>,
        max_positions: usize,
    ) -> Result<HfRope, ModelError> {
        let block = |name: &'static str| match config.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(o)) => Ok(Some((name, o))),
            Some(other) => Err(unsupported(path, KeySource::ConfigJson, name, other)),
        };
        let scaling_block = block("rope_scaling")?;
        let parameters_block = block("rope_parameters")?;
        if let (Some(_), Some(_)) = (scaling_block, parameters_block) {
            return Err(ModelError::Config {
                path: path.to_path_buf(),
                detail: "config.json has both rope_scaling and rope_parameters".into(),
            });
        }
        let top_theta = number(path, config, "rope_theta", "rope_theta")?;
        let top_partial = number(
            path,
            config,
            "partial_rotary_factor",
            "partial_rotary_factor",
        )?;
        let top_original = number(
            path,
            config,
            "original_max_position_embeddings",
            "original_max_position_embeddings",
        )?;
        let lengths = Lengths {
            max_positions,
            top_original,
        };
        let (theta_in_block, partial_in_block, scaling) = match scaling_block.or(parameters_block) {
            Some((name, o)) => (
                number(path, o, "rope_theta", &format!("{name}.rope_theta"))?,
                number(
                    path,
                    o,
                    "partial_rotary_factor",
                    &format!("{name}.partial_rotary_factor"),
                )?,
                scaling(path, name, o, lengths)?,
            ),
            None => (None, None, RopeScaling::None),
        };
        let partial = partial_in_block.or(top_partial).unwrap_or(1.0);
        if !(partial > 0.0 && partial <= 1.0) {
            return Err(unsupported(
                path,
                KeySource::ConfigJson,
                "partial_rotary_factor",
                &partial,
            ));
        }
        let theta = match (top_theta, theta_in_block) {
            (Some(a), Some(b)) if a != b => {
                return Err(ModelError::Config {
                    path: path.to_path_buf(),
                    detail: format!(
                        "config.json rope_theta {a} contradicts rope_parameters.rope_theta {b}"
                    ),
                })
            }
            (a, b) => a.or(b).unwrap_or(10_000.0),
        };
        if !(theta.is_finite() && theta > 1.0) {
            return Err(unsupported(
                path,
                KeySource::ConfigJson,
                "rope_theta",
                &theta,
            ));
        }
        Ok(HfRope {
            theta,
            scaling,
            partial,
        })
    }

    /// Rotated dimensions of a head of `head_dim`, as transformers computes them
    /// (`int(head_dim · partial_rotary_factor)`).
    pub fn n_rot(&self, head_dim: usize) -> usize {
        (head_dim as f64 * self.partial) as usize
    }

    /// The longest context computed exactly: `longrope`'s pre-training length.
    pub fn max_exact_positions(&self) -> Option<usize> {
        match self.scaling {
            RopeScaling::LongRope {
                original_max_position_embeddings,
                ..
            } => Some(original_max_position_embeddings as usize),
            _ => None,
        }
    }

    /// The cos/sin multiplier (`longrope`'s and `yarn`'s attention factor; 1 otherwise).
    pub fn attn_factor(&self) -> f32 {
        match self.scaling {
            RopeScaling::LongRope {
                attention_factor, ..
            }
            | RopeScaling::Yarn {
                attention_factor, ..
            } => attention_factor as f32,
            _ => 1.0,
        }
    }

    /// Gemma 3's two RoPEs: `(full_attention, sliding_attention)`, from
    /// `rope_parameters` nested by layer type (transformers 5) or from `rope_theta`
    /// and `rope_scaling` (full layers) and `rope_local_base_freq` (sliding layers).
    /// θ defaults to 10⁶ for full and 10⁴ for sliding layers, as in transformers.
    pub fn read_per_layer_type(
        path: &Path,
        config: &Map<String, Value>,
        max_positions: usize,
    ) -> Result<(HfRope, HfRope), ModelError> {
        let nested = match config.get("rope_parameters") {
            None | Some(Value::Null) => None,
            Some(Value::Object(o)) => Some(o),
            Some(other) => {
                return Err(unsupported(
                    path,
                    KeySource::ConfigJson,
                    "rope_parameters",
                    other,
                ))
            }
        };
        let Some(nested) = nested else {
            let mut global = HfRope::read(path, config, max_positions)?;
            let partial = global.partial;
            if number(path, config, "rope_theta", "rope_theta")?.is_none() {
                global.theta = 1e6;
            }
            let local = number(path, config, "rope_local_base_freq", "rope_local_base_freq")?;
            let local = HfRope {
                theta: local.unwrap_or(1e4),
                scaling: RopeScaling::None,
                partial,
            };
            return Ok((global, local));
        };
        for (key, value) in nested {
            if !matches!(key.as_str(), "full_attention" | "sliding_attention") {
                let shown = format!("rope_parameters.{key}");
                return Err(unsupported(path, KeySource::ConfigJson, &shown, value));
            }
        }
        let lengths = Lengths {
            max_positions,
            top_original: None,
        };
        let one = |layer_type: &str, default_theta: f64| -> Result<HfRope, ModelError> {
            let name = format!("rope_parameters.{layer_type}");
            match nested.get(layer_type) {
                None | Some(Value::Null) => Ok(HfRope {
                    theta: default_theta,
                    scaling: RopeScaling::None,
                    partial: 1.0,
                }),
                Some(Value::Object(o)) => Ok(HfRope {
                    theta: number(path, o, "rope_theta", &format!("{name}.rope_theta"))?
                        .unwrap_or(default_theta),
                    scaling: scaling(path, &name, o, lengths)?,
                    partial: 1.0,
                }),
                Some(other) => Err(unsupported(path, KeySource::ConfigJson, &name, other)),
            }
        };
        // As transformers does, top-level values fill in a θ the nested blocks omit.
        let full_theta = number(path, config, "rope_theta", "rope_theta")?.unwrap_or(1e6);
        let local = number(path, config, "rope_local_base_freq", "rope_local_base_freq")?;
        Ok((
            one("full_attention", full_theta)?,
            one("sliding_attention", local.unwrap_or(1e4))?,
        ))
    }

    /// Per-dimension inverse frequencies for `n_rot` rotated dims, when the scaling
    /// needs a table (`llama3`, `longrope`); `None` when θ and a linear scale
    /// describe it. A `longrope` factor list of the wrong length is an error.
    pub fn inv_freq(&self, path: &Path, n_rot: usize) -> Result<Option<Vec<f32>>, ModelError> {
        let base = |i: usize| self.theta.powf(-2.0 * i as f64 / n_rot as f64);
        Ok(match &self.scaling {
            RopeScaling::None | RopeScaling::Linear { .. } | RopeScaling::Dynamic => None,
            &RopeScaling::Yarn {
                factor,
                beta_fast,
                beta_slow,
                original_max_position_embeddings,
                truncate,
                ..
            } => {
                let (low, high) = yarn_range(
                    beta_fast,
                    beta_slow,
                    n_rot,
                    self.theta,
                    original_max_position_embeddings,
                    truncate,
                );
                Some(
                    (0..n_rot / 2)
                        .map(|i| {
                            // 1 keeps the frequency (fast pairs), 0 divides it by `factor`.
                            let keep = 1.0 - ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
                            let f = base(i);
                            (f / factor * (1.0 - keep) + f * keep) as f32
                        })
                        .collect(),
                )
            }
            RopeScaling::LongRope { short_factor, .. } => {
                if short_factor.len() != n_rot / 2 {
                    return Err(ModelError::Config {
                        path: path.to_path_buf(),
                        detail: format!(
                            "config.json longrope short_factor has {} entries, {} rotated pairs need as many",
                            short_factor.len(),
                            n_rot / 2
                        ),
                    });
                }
                Some(
                    short_factor
                        .iter()
                        .enumerate()
                        .map(|(i, f)| (base(i) / f) as f32)
                        .collect(),
                )
            }
            &RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings: original,
            } => Some(
                (0..n_rot / 2)
                    .map(|i| {
                        llama3_inv_freq(
                            base(i),
                            factor,
                            low_freq_factor,
                            high_freq_factor,
                            original,
                        ) as f32
                    })
                    .collect(),
            ),
        })
    }

    /// The linear position scale (1.0 unless `linear` scaling).
    pub fn freq_scale(&self) -> f32 {
        match self.scaling {
            RopeScaling::Linear { factor } => (1.0 / factor) as f32,
            _ => 1.0,
        }
    }
}

/// Llama 3.1 scaling of one inverse frequency: wavelengths longer than
/// `original / low` are slowed by `factor`, shorter than `original / high` kept, and
/// those between interpolated smoothly.
fn llama3_inv_freq(inv_freq: f64, factor: f64, low: f64, high: f64, original: f64) -> f64 {
    let wavelen = 2.0 * std::f64::consts::PI / inv_freq;
    if wavelen < original / high {
        inv_freq
    } else if wavelen > original / low {
        inv_freq / factor
    } else {
        let smooth = (original / wavelen - low) / (high - low);
        (1.0 - smooth) * inv_freq / factor + smooth * inv_freq
    }
}

/// YaRN's ramp over the pairs, as transformers computes it: from the pair that turns
/// `beta_fast` times over the pre-training length to the one that turns `beta_slow`
/// times, rounded outwards when `truncate`, kept within `[0, n_rot - 1]`, and never
/// empty.
fn yarn_range(
    beta_fast: f64,
    beta_slow: f64,
    n_rot: usize,
    theta: f64,
    original: f64,
    truncate: bool,
) -> (f64, f64) {
    let dim = n_rot as f64;
    let pair = |rotations: f64| {
        dim * (original / (rotations * 2.0 * std::f64::consts::PI)).ln() / (2.0 * theta.ln())
    };
    let (mut low, mut high) = (pair(beta_fast), pair(beta_slow));
    if truncate {
        (low, high) = (low.floor(), high.ceil());
    }
    let (low, high) = (low.max(0.0), high.min(dim - 1.0));
    if low == high {
        (low, high + 0.001)
    } else {
        (low, high)
    }
}

/// Context lengths a scaling block may default its own from.
#[derive(Clone, Copy)]
struct Lengths {
    /// `max_position_embeddings`.
    max_positions: usize,
    /// A top-level `original_max_position_embeddings` (Phi-3 writes one), which
    /// transformers prefers over the block's.
    top_original: Option<f64>,
}

/// The scaling a block describes; its type and every sub-key are checked.
fn scaling(
    path: &Path,
    name: &str,
    o: &Map<String, Value>,
    lengths: Lengths,
) -> Result<RopeScaling, ModelError> {
    let (type_key, kind) = match (o.get("rope_type"), o.get("type")) {
        (Some(t), _) => ("rope_type", t),
        (None, Some(t)) => ("type", t),
        (None, None) => {
            return Err(ModelError::Config {
                path: path.to_path_buf(),
                detail: format!("config.json {name} has no type"),
            })
        }
    };
    let refuse = |key: &str, value: &dyn std::fmt::Display| {
        unsupported(path, KeySource::ConfigJson, &format!("{name}.{key}"), value)
    };
    let kind_str = kind.as_str().ok_or_else(|| refuse(type_key, kind))?;
    let Some((_, keys)) = KEYS_BY_TYPE.iter().find(|(t, _)| *t == kind_str) else {
        return Err(refuse(type_key, kind));
    };
    for (key, value) in o {
        if !keys.contains(&key.as_str()) && !COMMON_KEYS.contains(&key.as_str()) {
            return Err(refuse(key, value));
        }
    }
    let need = |key: &str| -> Result<f64, ModelError> {
        let v =
            number(path, o, key, &format!("{name}.{key}"))?.ok_or_else(|| ModelError::Config {
                path: path.to_path_buf(),
                detail: format!("config.json {name} of type {kind_str:?} has no {key}"),
            })?;
        if v.is_finite() && v > 0.0 {
            Ok(v)
        } else {
            Err(refuse(key, &v))
        }
    };
    Ok(match kind_str {
        "linear" => RopeScaling::Linear {
            factor: need("factor")?,
        },
        "llama3" => {
            let (low, high) = (need("low_freq_factor")?, need("high_freq_factor")?);
            if high <= low {
                return Err(refuse("high_freq_factor", &high));
            }
            RopeScaling::Llama3 {
                factor: need("factor")?,
                low_freq_factor: low,
                high_freq_factor: high,
                original_max_position_embeddings: match o.get("original_max_position_embeddings") {
                    Some(_) => need("original_max_position_embeddings")?,
                    None => lengths.max_positions as f64,
                },
            }
        }
        "longrope" => {
            let original = match lengths.top_original {
                Some(v) => v,
                None => need("original_max_position_embeddings")?,
            };
            let factors = |key: &str| -> Result<Vec<f64>, ModelError> {
                let list =
                    o.get(key)
                        .and_then(Value::as_array)
                        .ok_or_else(|| ModelError::Config {
                            path: path.to_path_buf(),
                            detail: format!(
                                "config.json {name} of type longrope has no {key} list"
                            ),
                        })?;
                list.iter()
                    .map(|v| v.as_f64().filter(|f| f.is_finite() && *f > 0.0))
                    .collect::<Option<Vec<f64>>>()
                    .ok_or_else(|| refuse(key, &Value::Array(list.clone())))
            };
            let short_factor = factors("short_factor")?;
            factors("long_factor")?;
            // transformers: the attention factor given, or sqrt(1 + ln s / ln L) for
            // s = factor (default max_positions / L), 1 when s <= 1.
            let shown = format!("{name}.attention_factor");
            let attention_factor = match number(path, o, "attention_factor", &shown)? {
                Some(a) => a,
                None => {
                    let factor = match o.get("factor") {
                        Some(_) => need("factor")?,
                        None => lengths.max_positions as f64 / original,
                    };
                    if factor <= 1.0 {
                        1.0
                    } else {
                        (1.0 + factor.ln() / original.ln()).sqrt()
                    }
                }
            };
            RopeScaling::LongRope {
                short_factor,
                attention_factor,
                original_max_position_embeddings: original,
            }
        }
        "dynamic" => {
            need("factor")?;
            RopeScaling::Dynamic
        }
        "yarn" => {
            let original = match (
                lengths.top_original,
                o.get("original_max_position_embeddings"),
            ) {
                (Some(v), _) => v,
                (None, Some(_)) => need("original_max_position_embeddings")?,
                (None, None) => lengths.max_positions as f64,
            };
            let optional = |key: &str, default: f64| -> Result<f64, ModelError> {
                match o.get(key) {
                    None | Some(Value::Null) => Ok(default),
                    Some(_) => need(key),
                }
            };
            let factor = match o.get("factor") {
                None | Some(Value::Null) => lengths.max_positions as f64 / original,
                Some(_) => need("factor")?,
            };
            // transformers: the attention factor given, else 0.1·m·ln(factor) + 1 (1
            // when factor <= 1), m = mscale / mscale_all_dim when both are given.
            let mscale = |m: f64| {
                if factor <= 1.0 {
                    1.0
                } else {
                    0.1 * m * factor.ln() + 1.0
                }
            };
            let shown = format!("{name}.attention_factor");
            let attention_factor = match number(path, o, "attention_factor", &shown)? {
                Some(a) => a,
                None => match (o.get("mscale"), o.get("mscale_all_dim")) {
                    (Some(a), Some(b)) if !a.is_null() && !b.is_null() => {
                        mscale(need("mscale")?) / mscale(need("mscale_all_dim")?)
                    }
                    _ => mscale(1.0),
                },
            };
            let truncate = match o.get("truncate") {
                None | Some(Value::Null) => true,
                Some(Value::Bool(b)) => *b,
                Some(other) => return Err(refuse("truncate", other)),
            };
            RopeScaling::Yarn {
                factor,
                attention_factor,
                beta_fast: optional("beta_fast", 32.0)?,
                beta_slow: optional("beta_slow", 1.0)?,
                original_max_position_embeddings: original,
                truncate,
            }
        }
        _ => RopeScaling::None,
    })
}

/// `o[key]` as a number, `None` when absent or null; `shown` names it in errors.
fn number(
    path: &Path,
    o: &Map<String, Value>,
    key: &str,
    shown: &str,
) -> Result<Option<f64>, ModelError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .map(Some)
            .ok_or_else(|| unsupported(path, KeySource::ConfigJson, shown, v)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(json: serde_json::Value) -> Result<HfRope, ModelError> {
        HfRope::read(Path::new("m"), json.as_object().unwrap(), 4096)
    }

    #[test]
    fn theta_at_top_level_and_in_rope_parameters() {
        let top = read(serde_json::json!({"rope_theta": 500000.0})).unwrap();
        assert_eq!(top.theta, 500000.0);
        let v5 =
            serde_json::json!({"rope_parameters": {"rope_type": "default", "rope_theta": 1e6}});
        assert_eq!(read(v5).unwrap().theta, 1e6);
        assert_eq!(read(serde_json::json!({})).unwrap().theta, 10_000.0);
        let both = serde_json::json!({"rope_theta": 1e4, "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}});
        assert!(read(both).unwrap_err().to_string().contains("contradicts"));
    }

    #[test]
    fn unsupported_types_and_keys_are_named() {
        for (kind, key) in [("su", "type"), ("ntk", "type")] {
            let json = serde_json::json!({"rope_scaling": {"type": kind, "factor": 2.0}});
            let err = read(json).unwrap_err().to_string();
            let want = format!("unsupported: config.json rope_scaling.{key} = \"{kind}\"");
            assert!(err.contains(&want), "{err}");
        }
        let json = serde_json::json!({"rope_parameters": {"rope_type": "linear", "factor": 2.0, "beta_fast": 32}});
        let err = read(json).unwrap_err().to_string();
        assert!(
            err.contains("config.json rope_parameters.beta_fast = 32"),
            "{err}"
        );
        let json = serde_json::json!({"rope_scaling": {"type": "linear", "factor": -2.0}});
        let err = read(json).unwrap_err().to_string();
        assert!(err.contains("rope_scaling.factor = -2"), "{err}");
    }

    #[test]
    fn gemma3_reads_both_layouts() {
        let read = |json: serde_json::Value| {
            HfRope::read_per_layer_type(Path::new("m"), json.as_object().unwrap(), 4096)
        };
        let v4 = serde_json::json!({"rope_theta": 1e6, "rope_local_base_freq": 1e4,
            "rope_scaling": {"rope_type": "linear", "factor": 8.0}});
        let (full, sliding) = read(v4).unwrap();
        assert_eq!((full.theta, full.freq_scale()), (1e6, 0.125));
        assert_eq!((sliding.theta, sliding.freq_scale()), (1e4, 1.0));
        let v5 = serde_json::json!({"rope_parameters": {
            "full_attention": {"rope_type": "default", "rope_theta": 5e5},
            "sliding_attention": {"rope_type": "default", "rope_theta": 2e4}}});
        let (full, sliding) = read(v5).unwrap();
        assert_eq!((full.theta, sliding.theta), (5e5, 2e4));
        let (full, sliding) = read(serde_json::json!({})).unwrap();
        assert_eq!((full.theta, sliding.theta), (1e6, 1e4));
        let bad = serde_json::json!({"rope_parameters": {"chunked_attention": {}}});
        let err = read(bad).unwrap_err().to_string();
        assert!(
            err.contains("config.json rope_parameters.chunked_attention = {}"),
            "{err}"
        );
    }

    /// Llama 3.1 8B's scaling (factor 8, bands 1 and 4 over 8192 positions), checked
    /// band by band against the formula of Meta's reference `apply_scaling`.
    #[test]
    fn llama3_bands_follow_the_reference_formula() {
        let json = serde_json::json!({"rope_theta": 500000.0, "rope_scaling": {
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}});
        let rope = read(json).unwrap();
        let table = rope.inv_freq(Path::new("m"), 128).unwrap().unwrap();
        assert_eq!(table.len(), 64);
        let (mut kept, mut slowed, mut smoothed) = (0, 0, 0);
        for (i, &got) in table.iter().enumerate() {
            let freq = 500000f64.powf(-2.0 * i as f64 / 128.0);
            let wavelen = 2.0 * std::f64::consts::PI / freq;
            let want = if wavelen < 8192.0 / 4.0 {
                kept += 1;
                freq
            } else if wavelen > 8192.0 {
                slowed += 1;
                freq / 8.0
            } else {
                smoothed += 1;
                let s = (8192.0 / wavelen - 1.0) / 3.0;
                (1.0 - s) * freq / 8.0 + s * freq
            };
            assert!(((got as f64) - want).abs() <= 1e-6 * want, "dim {i}");
        }
        assert!(
            kept > 0 && slowed > 0 && smoothed > 0,
            "{kept} {slowed} {smoothed}"
        );
    }
}
