//! Model tensors seen by the runtime: declared dtype and shape per role (for tracing)
//! and bytes per name (for the weight store), for GGUF files and HF directories.

use crate::backend::{BackendError, HostTensor};
use crate::cache::WeightSource;
use crate::graph::{DType, Shape};

use super::gguf::GgufFile;
use super::llama::{TensorRole, WeightInfo};
use super::safetensors::HfModel;
use super::ModelError;

/// A model's tensors: both their declared shapes (for tracing) and their bytes.
pub trait ModelWeights: WeightInfo + WeightSource {}

impl<T: WeightInfo + WeightSource> ModelWeights for T {}

/// The tensors of a GGUF file, named the GGUF way.
pub struct GgufWeights(pub GgufFile);

/// The tensors of a Hugging Face directory, named the HF way.
pub struct HfWeights(pub HfModel);

impl WeightInfo for GgufFile {
    fn info(&self, role: TensorRole) -> Option<(DType, Shape)> {
        let t = self.tensor_info(&self.name(role))?;
        Some((t.dtype, t.shape.clone()))
    }

    fn name(&self, role: TensorRole) -> String {
        role.gguf_name_in(self.architecture().unwrap_or_default())
    }
}

impl WeightInfo for HfModel {
    fn info(&self, role: TensorRole) -> Option<(DType, Shape)> {
        let t = self.tensor_meta(&role.hf_name())?;
        Some((t.dtype, t.shape.clone()))
    }

    fn name(&self, role: TensorRole) -> String {
        role.hf_name()
    }
}

impl WeightInfo for GgufWeights {
    fn info(&self, role: TensorRole) -> Option<(DType, Shape)> {
        self.0.info(role)
    }

    fn name(&self, role: TensorRole) -> String {
        self.0.name(role)
    }
}

impl WeightInfo for HfWeights {
    fn info(&self, role: TensorRole) -> Option<(DType, Shape)> {
        self.0.info(role)
    }

    fn name(&self, role: TensorRole) -> String {
        role.hf_name()
    }
}

impl WeightSource for GgufWeights {
    fn host_tensor(&self, name: &str) -> Result<HostTensor, BackendError> {
        self.0.tensor(name).map_err(|e| load_error(name, e))
    }
}

impl WeightSource for HfWeights {
    fn host_tensor(&self, name: &str) -> Result<HostTensor, BackendError> {
        self.0.tensor(name).map_err(|e| load_error(name, e))
    }
}

/// A model-file error while loading weight `name`, as the weight store reports it.
fn load_error(name: &str, e: ModelError) -> BackendError {
    BackendError::WeightMismatch {
        name: name.to_string(),
        detail: e.to_string(),
    }
}
