//! The default model against llama.cpp's reference outputs (`tests/data/reference/`), with
//! the tolerances of the reference README: last-prompt-position logits, 32 teacher-forced
//! steps, and free-running greedy up to the first low-margin step. The model is fetched
//! with the project's own code (`model::fetch`), as a user's first run would.

mod default_reference;
mod reference_support;

use std::sync::Arc;

use switchyard::backend::{cpu::CpuBackend, Backend, BackendSet};
use switchyard::model::LlamaStep;
use switchyard::model::{fetch, gguf::GgufFile, llama::LlamaConfig, GgufWeights};
use switchyard::step::Runner;

fn runner() -> Runner {
    let path = fetch::default_model_path(false).expect("fetching the default model");
    let file = GgufFile::open(&path).unwrap();
    let config = LlamaConfig::from_gguf(&file).unwrap();
    let cpu: Arc<dyn Backend> = Arc::new(CpuBackend::new(None).unwrap());
    Runner::new(
        LlamaStep::new(config, Arc::new(GgufWeights(file)), 1),
        BackendSet::new(vec![cpu]).unwrap(),
        512,
    )
}

#[test]
fn default_model_matches_llama_cpp_within_reference_tolerances() {
    let reference = default_reference::reference();
    let mut runner = runner();
    for case in reference["cases"].as_array().unwrap() {
        default_reference::check_case(&mut runner, case, usize::MAX);
    }
}
