//! Model-side components: tokenizer.

pub mod tokenizer;
