//! Model-side components: tokenizer, chat templates and sampling.

pub mod chat_template;
pub mod sampler;
pub mod tokenizer;
