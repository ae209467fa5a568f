//! Opens a model from a path — a GGUF file or a Hugging Face directory — into its
//! hyper-parameters, weights, tokenizer and chat template.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::chat_template::ChatTemplate;
use super::gguf::{self, GgufFile};
use super::hf_chat;
use super::llama::LlamaConfig;
use super::safetensors::HfModel;
use super::tokenizer::{token_text, Tokenizer};
use super::{GgufWeights, HfWeights, ModelError, ModelWeights};

/// Everything needed to run and talk to a model.
pub struct Model {
    /// Where it was loaded from.
    pub path: PathBuf,
    /// Hyper-parameters.
    pub config: LlamaConfig,
    /// Tensors (declared shapes and bytes).
    pub weights: Arc<dyn ModelWeights>,
    /// Text ↔ token ids.
    pub tokenizer: Tokenizer,
    /// The model's own chat template, when it has one.
    pub chat_template: Option<ChatTemplate>,
    /// Token ids that end a generation (EOS, end-of-turn, end-of-message, and every
    /// `eos_token_id` of a Hugging Face generation config).
    pub stop_ids: Vec<u32>,
    /// Identifies the model in cache step keys.
    pub fingerprint: u64,
}

impl Model {
    /// Opens `path`: a `.gguf` file, or a directory with `config.json`,
    /// `*.safetensors` and `tokenizer.json`.
    pub fn open(path: &Path) -> Result<Model, ModelError> {
        if path.is_dir() {
            Model::open_hf(path)
        } else {
            Model::open_gguf(path)
        }
    }

    fn open_gguf(path: &Path) -> Result<Model, ModelError> {
        let file = GgufFile::open(path)?;
        // Metadata against tensor shapes, before anything is allocated or traced for the
        // model, so a contradiction is reported by its key rather than by a traced op.
        gguf::check_dimensions(&file)?;
        let config = LlamaConfig::from_gguf(&file)?;
        let meta = file.metadata();
        let spec = gguf::vocab_spec(meta)?;
        let tokenizer = Tokenizer::from_gguf_vocab(&spec).map_err(|e| tokenizer_error(path, e))?;
        let piece = |id: Option<u32>| {
            id.and_then(|i| spec.tokens.get(i as usize).cloned())
                .unwrap_or_default()
        };
        let chat_template = match meta.get("tokenizer.chat_template") {
            Some(_) => {
                let source = meta.get_str("tokenizer.chat_template")?;
                Some(
                    ChatTemplate::new(source, &piece(spec.bos), &piece(spec.eos))
                        .map_err(|e| template_error(path, e))?,
                )
            }
            None => None,
        };
        let stop_ids = gguf::stop_ids(meta, spec.tokens.len())?;
        let fingerprint = fingerprint_of(path, &file_identity(path)?);
        Ok(Model {
            path: path.to_path_buf(),
            config,
            weights: Arc::new(GgufWeights(file)),
            tokenizer,
            chat_template,
            stop_ids,
            fingerprint,
        })
    }

    fn open_hf(dir: &Path) -> Result<Model, ModelError> {
        let hf = HfModel::open(dir)?;
        let config = LlamaConfig::from_hf(&hf)?;
        let tokenizer = Tokenizer::from_file(dir.join("tokenizer.json"))
            .map_err(|e| tokenizer_error(dir, e))?;
        let config_path = dir.join("tokenizer_config.json");
        let tokenizer_config: serde_json::Value = match std::fs::read_to_string(&config_path) {
            Ok(text) => serde_json::from_str(&text)
                .map_err(|e| ModelError::format(&config_path, e.to_string()))?,
            Err(_) => serde_json::Value::Null,
        };
        // `Tokenizer::from_file` has checked these keys; absent ones render as "".
        let token_text = |key: &str| {
            token_text(&tokenizer_config, key)
                .ok()
                .flatten()
                .unwrap_or_default()
        };
        let (bos, eos) = (token_text("bos_token"), token_text("eos_token"));
        let chat_template = match hf_chat::template_source(dir, &tokenizer_config)? {
            Some(source) => {
                Some(ChatTemplate::new(&source, &bos, &eos).map_err(|e| template_error(dir, e))?)
            }
            None => None,
        };
        let stop_ids = hf_chat::stop_ids(dir, tokenizer.eos(), tokenizer.vocab_size())?;
        let fingerprint = fingerprint_of(dir, &file_identity(&dir.join("config.json"))?);
        Ok(Model {
            path: dir.to_path_buf(),
            config,
            weights: Arc::new(HfWeights(hf)),
            tokenizer,
            chat_template,
            stop_ids,
            fingerprint,
        })
    }
}

/// Size and modification time: enough to tell two files apart for cache keys.
fn file_identity(path: &Path) -> Result<String, ModelError> {
    let meta = std::fs::metadata(path).map_err(|e| ModelError::io(path, e))?;
    let modified = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    Ok(format!("{}:{modified}", meta.len()))
}

fn fingerprint_of(path: &Path, identity: &str) -> u64 {
    crate::cache::fingerprint(format!("{}|{identity}", path.display()).as_bytes())
}

fn tokenizer_error(path: &Path, e: super::tokenizer::TokenizerError) -> ModelError {
    ModelError::Config {
        path: path.to_path_buf(),
        detail: format!("tokenizer: {e}"),
    }
}

fn template_error(path: &Path, e: super::chat_template::TemplateError) -> ModelError {
    ModelError::Config {
        path: path.to_path_buf(),
        detail: format!("chat template: {e}"),
    }
}
