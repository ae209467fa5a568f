//! Hugging Face model directories: `config.json` plus `model.safetensors`, or a
//! `model.safetensors.index.json` and its shards. Each file is memory-mapped and its
//! tensors are handed out zero-copy.

mod file;
mod writer;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use serde::Deserialize;

pub use file::{SafetensorsFile, TensorMeta, MAX_HEADER_BYTES};
pub use writer::write_safetensors;

use super::ModelError;
use crate::backend::HostTensor;

/// The model configuration file in a model directory.
pub const CONFIG_FILE: &str = "config.json";
/// The weights file of an unsharded model.
pub const SINGLE_FILE: &str = "model.safetensors";
/// The index of a sharded model, mapping tensor names to shard files.
pub const INDEX_FILE: &str = "model.safetensors.index.json";

/// The commonly used fields of `config.json`; all are optional because they vary by
/// architecture. Anything else is available through [`HfModel::raw_config`].
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct HfConfig {
    /// Model classes, e.g. `["LlamaForCausalLM"]` (none when absent or null, as a
    /// full `to_dict()` dump writes it).
    #[serde(default, deserialize_with = "null_as_empty")]
    pub architectures: Vec<String>,
    /// Architecture family, e.g. `llama`.
    pub model_type: Option<String>,
    /// Width of the residual stream.
    pub hidden_size: Option<usize>,
    /// Width of the feed-forward layer.
    pub intermediate_size: Option<usize>,
    /// Number of transformer blocks.
    pub num_hidden_layers: Option<usize>,
    /// Number of query heads.
    pub num_attention_heads: Option<usize>,
    /// Number of key/value heads (grouped-query attention).
    pub num_key_value_heads: Option<usize>,
    /// Per-head width, when it is not `hidden_size / num_attention_heads`.
    pub head_dim: Option<usize>,
    /// Vocabulary size.
    pub vocab_size: Option<usize>,
    /// Longest context the model was trained for.
    pub max_position_embeddings: Option<usize>,
    /// RMS norm epsilon.
    pub rms_norm_eps: Option<f64>,
    /// RoPE base frequency.
    pub rope_theta: Option<f64>,
    /// Whether the output projection reuses the token embedding.
    pub tie_word_embeddings: Option<bool>,
}

/// The `weight_map` of a sharded model's index.
/// A list that may be written as `null`, read as empty.
fn null_as_empty<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    Ok(Option::<Vec<String>>::deserialize(d)?.unwrap_or_default())
}

#[derive(Deserialize)]
struct Index {
    weight_map: BTreeMap<String, String>,
}

/// A Hugging Face model directory with its weights mapped.
#[derive(Debug)]
pub struct HfModel {
    dir: PathBuf,
    config: HfConfig,
    raw_config: serde_json::Value,
    files: Vec<SafetensorsFile>,
    by_name: BTreeMap<String, usize>,
}

impl HfModel {
    /// Reads `dir/config.json` and maps the (possibly sharded) safetensors weights.
    pub fn open(dir: impl AsRef<Path>) -> Result<HfModel, ModelError> {
        let dir = dir.as_ref();
        let config_path = dir.join(CONFIG_FILE);
        let raw_config: serde_json::Value = read_json(&config_path)?;
        let config = serde_json::from_value(raw_config.clone())
            .map_err(|e| ModelError::format(&config_path, e.to_string()))?;
        let (files, by_name) = if dir.join(SINGLE_FILE).exists() {
            let file = SafetensorsFile::open(dir.join(SINGLE_FILE))?;
            let by_name = file.tensors().map(|(n, _)| (n.to_owned(), 0)).collect();
            (vec![file], by_name)
        } else if dir.join(INDEX_FILE).exists() {
            open_shards(dir)?
        } else {
            return Err(ModelError::format(
                dir,
                format!("neither {SINGLE_FILE} nor {INDEX_FILE} is in this directory"),
            ));
        };
        Ok(HfModel {
            dir: dir.to_owned(),
            config,
            raw_config,
            files,
            by_name,
        })
    }

    /// The model directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The typed configuration.
    pub fn config(&self) -> &HfConfig {
        &self.config
    }

    /// The whole `config.json`, for fields [`HfConfig`] does not name.
    pub fn raw_config(&self) -> &serde_json::Value {
        &self.raw_config
    }

    /// Every tensor name, sorted.
    pub fn tensor_names(&self) -> impl Iterator<Item = &str> {
        self.by_name.keys().map(String::as_str)
    }

    /// Where tensor `name` lives, if present.
    pub fn tensor_meta(&self, name: &str) -> Option<&TensorMeta> {
        let &file = self.by_name.get(name)?;
        self.files[file].tensor_meta(name)
    }

    /// Tensor `name`, sharing its shard's memory map (no copy).
    pub fn tensor(&self, name: &str) -> Result<HostTensor, ModelError> {
        match self.by_name.get(name) {
            Some(&file) => self.files[file].tensor(name),
            None => Err(ModelError::MissingTensor {
                path: self.dir.clone(),
                name: name.to_owned(),
            }),
        }
    }
}

/// Opens every shard the index names; every indexed tensor must be in its shard.
fn open_shards(dir: &Path) -> Result<(Vec<SafetensorsFile>, BTreeMap<String, usize>), ModelError> {
    let index_path = dir.join(INDEX_FILE);
    let index: Index = read_json(&index_path)?;
    let shards: BTreeSet<&str> = index.weight_map.values().map(String::as_str).collect();
    let mut files = Vec::with_capacity(shards.len());
    let mut shard_no = BTreeMap::new();
    for shard in shards {
        let mut parts = Path::new(shard).components();
        if !matches!(
            (parts.next(), parts.next()),
            (Some(Component::Normal(_)), None)
        ) {
            return Err(ModelError::format(
                &index_path,
                format!("shard {shard:?} is not a plain file name in the model directory"),
            ));
        }
        shard_no.insert(shard, files.len());
        files.push(SafetensorsFile::open(dir.join(shard))?);
    }
    let mut by_name = BTreeMap::new();
    for (name, shard) in &index.weight_map {
        let file = shard_no[shard.as_str()];
        if files[file].tensor_meta(name).is_none() {
            return Err(ModelError::MissingTensor {
                path: files[file].path().to_owned(),
                name: name.clone(),
            });
        }
        by_name.insert(name.clone(), file);
    }
    Ok((files, by_name))
}

/// Reads and deserializes a JSON file of at most [`MAX_HEADER_BYTES`].
fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, ModelError> {
    let len = std::fs::metadata(path)
        .map_err(|e| ModelError::io(path, e))?
        .len();
    if len > MAX_HEADER_BYTES {
        return Err(ModelError::format(
            path,
            format!("{len} bytes is too large for a JSON file"),
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| ModelError::io(path, e))?;
    serde_json::from_slice(&bytes).map_err(|e| ModelError::format(path, e.to_string()))
}
