//! Errors raised while locating, fetching and reading model files.

use std::path::PathBuf;

use crate::backend::Fault;

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
    /// A request the model cannot serve (an empty prompt, an out-of-vocabulary id):
    /// the caller's input is at fault. Failures of Switchyard itself are
    /// [`ModelError::Internal`].
    #[error("{0}")]
    Input(String),
    /// A failure of Switchyard itself, whatever the input: a broken invariant (a
    /// sequence asked to hold what it cannot, a token the tokenizer cannot decode
    /// although the model produced it). Servers answer it with 500, the CLI calls it
    /// a bug; see [`ModelError::is_internal`].
    #[error("internal error: {0}")]
    Internal(String),
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
    Sampling(#[from] SamplerError),
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
    /// Whether this is a failure of Switchyard itself rather than of the caller's
    /// input, the model file or the machine's files: a broken invariant
    /// ([`ModelError::Internal`]), a step that failed to trace, plan, compile or run
    /// ([`ModelError::Compile`], [`ModelError::Run`], [`ModelError::Backend`]) but for
    /// a lost or full device or a device's limit ([`ModelError::fault`]), or logits the
    /// sampler cannot draw from (empty, or all NaN). A server answers these with 500;
    /// everything else names what the user can change.
    pub fn is_internal(&self) -> bool {
        match self {
            ModelError::Internal(_) => true,
            ModelError::Compile(_) | ModelError::Run(_) | ModelError::Backend(_) => {
                self.fault().is_none_or(|f| f == Fault::Bug)
            }
            ModelError::Sampling(e) => !matches!(e, SamplerError::InvalidConfig { .. }),
            _ => false,
        }
    }

    /// Whether the request itself is at fault (an empty prompt, a prompt or
    /// `max_tokens` past the context, invalid sampler settings, a chat the template
    /// refuses, text the tokenizer refuses): a server answers these with 400. Neither
    /// this nor [`ModelError::is_internal`] holds for a bad model file, a missing file
    /// or a failed fetch.
    pub fn is_input(&self) -> bool {
        use crate::model::chat_template::TemplateError;
        use crate::model::tokenizer::TokenizerError;
        match self {
            ModelError::Input(_) | ModelError::ContextFull { .. } => true,
            // A template that does not compile is the model file's fault.
            ModelError::Template(e) => !matches!(e, TemplateError::Syntax(_)),
            // Encoding the request's text or decoding its ids; the other tokenizer
            // errors are the model file's, raised while it loads.
            ModelError::Tokenizer(e) => matches!(
                e,
                TokenizerError::TokenOutOfRange { .. } | TokenizerError::Backend(_)
            ),
            ModelError::Sampling(e) => matches!(e, SamplerError::InvalidConfig { .. }),
            _ => false,
        }
    }

    /// What a backend's error behind this one asks of its handler (a lost device, out
    /// of memory, a limit, our bug), when a backend's error is behind it.
    pub fn fault(&self) -> Option<Fault> {
        use crate::cache::CompileError;
        match self {
            ModelError::Run(e) | ModelError::Compile(CompileError::Exec(e)) => {
                e.backend_error().map(|(_, b)| b.fault())
            }
            ModelError::Backend(b) => Some(b.fault()),
            _ => None,
        }
    }

    /// A [`ModelError::Internal`] saying what invariant broke.
    pub fn internal(detail: impl Into<String>) -> ModelError {
        ModelError::Internal(detail.into())
    }

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

impl From<crate::step::StepError> for ModelError {
    /// The same failure, variant for variant: the caller's mistakes stay the caller's.
    fn from(e: crate::step::StepError) -> ModelError {
        use crate::step::StepError;
        match e {
            StepError::Input(detail) => ModelError::Input(detail),
            StepError::ContextFull { needed, context } => {
                ModelError::ContextFull { needed, context }
            }
            StepError::Internal(detail) => ModelError::Internal(detail),
            StepError::Compile(e) => ModelError::Compile(e),
            StepError::Run(e) => ModelError::Run(e),
            StepError::Backend(e) => ModelError::Backend(e),
        }
    }
}

/// Errors from configuring a sampler or sampling.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SamplerError {
    /// A configuration value is outside its valid range.
    #[error("sampler setting {field} = {value} is invalid: {expected}")]
    InvalidConfig {
        /// The offending field.
        field: &'static str,
        /// Its value.
        value: f32,
        /// The valid range.
        expected: &'static str,
    },
    /// The logits slice was empty.
    #[error("cannot sample from an empty logits vector")]
    EmptyLogits,
    /// Every logit was NaN or -inf (after the repetition penalty).
    #[error("no token has a finite logit (all {0} are NaN or -inf)")]
    NoCandidates(usize),
    /// A device's greedy pick found no token with a finite logit.
    #[error("no token has a finite logit (the device's greedy pick found every one NaN or -inf)")]
    NoPick,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::BackendError;
    use crate::cache::CompileError;
    use crate::exec::ExecError;
    use crate::model::chat_template::TemplateError;
    use crate::model::tokenizer::TokenizerError;

    /// Each kind of error is the user's input, ours, or neither (the model file, the
    /// machine's files, a fetch), and never both.
    #[test]
    fn errors_are_classified_as_input_internal_or_neither() {
        let path = || PathBuf::from("m.gguf");
        let ours = [
            ModelError::internal("a sequence forked past its end"),
            ModelError::Backend(BackendError::Bug("a broken invariant".into())),
            ModelError::Run(ExecError::MissingInput("tokens".into())),
            ModelError::Compile(CompileError::Exec(ExecError::UnknownInput("x".into()))),
            ModelError::Sampling(SamplerError::NoCandidates(4)),
            ModelError::Sampling(SamplerError::EmptyLogits),
        ];
        let theirs = [
            ModelError::Input("the prompt is empty".into()),
            ModelError::ContextFull {
                needed: 9,
                context: 8,
            },
            ModelError::Sampling(SamplerError::InvalidConfig {
                field: "temperature",
                value: f32::NAN,
                expected: "finite and >= 0",
            }),
            ModelError::Template(TemplateError::Render("roles must alternate".into())),
            ModelError::Tokenizer(TokenizerError::TokenOutOfRange {
                id: 70_000,
                vocab_size: 49_152,
            }),
        ];
        let neither = [
            ModelError::format(path(), "truncated"),
            ModelError::unsupported(path(), "tensor type 99"),
            ModelError::io(path(), std::io::Error::other("gone")),
            ModelError::Template(TemplateError::Syntax("{% if".into())),
            ModelError::Tokenizer(TokenizerError::InvalidVocab("no tokens".into())),
            ModelError::Fetch {
                detail: "offline".into(),
            },
        ];
        let device = [
            BackendError::Lost("gone".into()),
            BackendError::OutOfMemory("full".into()),
            BackendError::limit("bytes of weight w", 9, 8),
        ];
        let device = device.into_iter().map(|source| {
            ModelError::Run(ExecError::Backend {
                partition: 1,
                id: crate::backend::BackendId::GPU,
                backend: "gpu".into(),
                source,
            })
        });
        for (e, fault) in device.zip([Fault::Lost, Fault::OutOfMemory, Fault::Limit]) {
            assert_eq!(e.fault(), Some(fault), "{e:?}");
            assert!(!e.is_internal() && !e.is_input(), "{e:?}");
        }
        for e in &ours {
            assert!(e.is_internal() && !e.is_input(), "{e:?}");
        }
        for e in &theirs {
            assert!(e.is_input() && !e.is_internal(), "{e:?}");
        }
        for e in &neither {
            assert!(!e.is_input() && !e.is_internal(), "{e:?}");
        }
        assert!(ModelError::internal("x")
            .to_string()
            .starts_with("internal error"));
    }
}
