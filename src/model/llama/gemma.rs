//! What Gemma 2 and Gemma 3 add to a Llama block, read from `config.json` with
//! transformers' defaults: the scaled embedding, the attention scale from
//! `query_pre_attn_scalar`, and the attention and final logit soft-capping. The
//! feed-forward activation of every family is read here too, since Gemma names its
//! key differently.

use std::path::Path;

use serde_json::{Map, Value};

use super::keys::{unsupported, KeySource};
use super::{Family, FfnActivation};
use crate::model::ModelError;

/// Gemma's additions to the Llama hyper-parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct GemmaExtras {
    /// `query_pre_attn_scalar^-½`.
    pub attn_scale: f32,
    /// `attn_logit_softcapping` (Gemma 2 default 50; Gemma 3 none).
    pub attn_softcap: Option<f32>,
    /// `final_logit_softcapping` (Gemma 2 default 30; Gemma 3 none).
    pub final_softcap: Option<f32>,
    /// `√hidden_size`.
    pub embed_scale: f32,
}

impl GemmaExtras {
    /// Reads them for `arch` (`gemma2` or `gemma3_text`).
    pub fn read(
        path: &Path,
        arch: &str,
        o: &Map<String, Value>,
        d_model: usize,
    ) -> Result<GemmaExtras, ModelError> {
        let refuse = |name: &str| unsupported(path, KeySource::ConfigJson, name, &o[name]);
        if o.get("use_bidirectional_attention")
            .is_some_and(|v| !(v.is_null() || *v == Value::Bool(false)))
        {
            return Err(refuse("use_bidirectional_attention"));
        }
        let gemma2 = arch == "gemma2";
        // A cap: absent takes transformers' default, null means none.
        let cap = |name: &str, default: Option<f32>| match o.get(name) {
            None => Ok(default),
            Some(Value::Null) => Ok(None),
            Some(v) => match v.as_f64() {
                Some(c) if c.is_finite() && c > 0.0 => Ok(Some(c as f32)),
                _ => Err(refuse(name)),
            },
        };
        let scalar = match o.get("query_pre_attn_scalar") {
            None => 256.0,
            Some(v) => match v.as_f64() {
                Some(s) if s.is_finite() && s > 0.0 => s,
                _ => return Err(refuse("query_pre_attn_scalar")),
            },
        };
        Ok(GemmaExtras {
            attn_scale: scalar.powf(-0.5) as f32,
            attn_softcap: cap("attn_logit_softcapping", gemma2.then_some(50.0))?,
            final_softcap: cap("final_logit_softcapping", gemma2.then_some(30.0))?,
            embed_scale: (d_model as f64).sqrt() as f32,
        })
    }
}

/// The feed-forward activation: `hidden_act` (Llama family, default SiLU) or
/// `hidden_activation` (Gemma, default tanh GELU; a `hidden_act` beside it must agree).
pub fn activation(
    path: &Path,
    family: Family,
    o: &Map<String, Value>,
) -> Result<FfnActivation, ModelError> {
    let read = |name: &str| -> Result<Option<FfnActivation>, ModelError> {
        match o.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => match v.as_str() {
                Some("silu") => Ok(Some(FfnActivation::Silu)),
                Some("gelu_pytorch_tanh" | "gelu_new") => Ok(Some(FfnActivation::GeluTanh)),
                Some("gelu") => Ok(Some(FfnActivation::GeluErf)),
                _ => Err(unsupported(path, KeySource::ConfigJson, name, v)),
            },
        }
    };
    let act = read("hidden_act")?;
    match family {
        Family::Llama => Ok(act.unwrap_or(FfnActivation::Silu)),
        Family::Gemma => {
            let gemma = read("hidden_activation")?.unwrap_or(FfnActivation::GeluTanh);
            if act.is_some_and(|a| a != gemma) {
                return Err(unsupported(
                    path,
                    KeySource::ConfigJson,
                    "hidden_act",
                    &o["hidden_act"],
                ));
            }
            Ok(gemma)
        }
    }
}
