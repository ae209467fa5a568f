//! Model-side components: tokenizer and chat templates.

pub mod chat_template;
pub mod tokenizer;
