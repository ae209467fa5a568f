//! Errors raised while locating, fetching and reading model files.

use std::path::PathBuf;

/// Why a model file could not be found, fetched or read. Every variant names the file
/// (or, for metadata, the key) so that the user can tell which input is at fault.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The file could not be opened, read, mapped or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The file is malformed: truncated, inconsistent or out of bounds.
    #[error("{}: malformed model file: {detail}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong, and where.
        detail: String,
    },
    /// The file is well formed but uses something we do not support (a version, a
    /// tensor type, a dtype).
    #[error("{}: unsupported: {detail}", path.display())]
    Unsupported {
        /// The file.
        path: PathBuf,
        /// What is unsupported.
        detail: String,
    },
    /// A metadata key is missing or has the wrong type.
    #[error("{}: metadata key {key:?}: {detail}", path.display())]
    Metadata {
        /// The file.
        path: PathBuf,
        /// The key.
        key: String,
        /// What is wrong with it.
        detail: String,
    },
    /// A tensor the caller asked for is not in the model.
    #[error("{}: tensor {name:?} not found", path.display())]
    MissingTensor {
        /// The file (or model directory).
        path: PathBuf,
        /// The tensor's name.
        name: String,
    },
    /// A file's SHA-256 digest is not the expected one.
    #[error("{}: SHA-256 is {actual}, expected {expected}", path.display())]
    Checksum {
        /// The file.
        path: PathBuf,
        /// The expected digest, lower-case hex.
        expected: String,
        /// The digest of the file, lower-case hex.
        actual: String,
    },
    /// The model's hyper-parameters are missing, inconsistent or unsupported.
    #[error("{}: {detail}", path.display())]
    Config {
        /// The model file or directory.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// A request the model cannot serve (an empty prompt, an out-of-vocabulary id).
    #[error("{0}")]
    Input(String),
    /// The prompt plus the tokens to generate do not fit in the context.
    #[error("{needed} positions are needed but the context holds {context}; shorten the prompt, lower --max-tokens or raise --ctx")]
    ContextFull {
        /// Positions the request needs.
        needed: usize,
        /// Positions the sequence can hold.
        context: usize,
    },
    /// Tracing, planning or compiling a step failed.
    #[error(transparent)]
    Compile(#[from] crate::cache::CompileError),
    /// Running a step failed.
    #[error(transparent)]
    Run(#[from] crate::exec::ExecError),
    /// The sampler's settings are invalid or the logits hold no candidate.
    #[error(transparent)]
    Sampling(#[from] crate::model::sampler::SamplerError),
    /// The tokenizer could not encode or decode.
    #[error(transparent)]
    Tokenizer(#[from] crate::model::tokenizer::TokenizerError),
    /// The chat template failed to render.
    #[error(transparent)]
    Template(#[from] crate::model::chat_template::TemplateError),
    /// A backend refused a tensor or input.
    #[error(transparent)]
    Backend(#[from] crate::backend::BackendError),
    /// The default model could not be downloaded or installed.
    #[error(
        "could not fetch the default model: {detail}; pass `--model PATH` with a GGUF \
         file or a Hugging Face model directory instead"
    )]
    Fetch {
        /// What failed.
        detail: String,
    },
}

impl ModelError {
    /// An [`ModelError::Io`] for `path`.
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> ModelError {
        ModelError::Io {
            path: path.into(),
            source,
        }
    }

    /// A [`ModelError::Format`] for `path`.
    pub(crate) fn format(path: impl Into<PathBuf>, detail: impl Into<String>) -> ModelError {
        ModelError::Format {
            path: path.into(),
            detail: detail.into(),
        }
    }

    /// A [`ModelError::Unsupported`] for `path`.
    pub(crate) fn unsupported(path: impl Into<PathBuf>, detail: impl Into<String>) -> ModelError {
        ModelError::Unsupported {
            path: path.into(),
            detail: detail.into(),
        }
    }
}
