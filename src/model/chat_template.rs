//! Chat templates: renders a conversation into a prompt with the model's Jinja template.
//!
//! Rendering follows Hugging Face `transformers`: `trim_blocks` and `lstrip_blocks` are
//! on, Python string/dict methods (`.strip()`, `.startswith()`, `.items()`) work,
//! `raise_exception(msg)` aborts with `msg`, and `tojson` writes Python-style JSON
//! (`", "` and `": "` separators, non-ASCII kept, optional `indent=`).

use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Kwargs, Serde, Value};
use minijinja::{Environment, Error, ErrorKind};
use serde::{Deserialize, Serialize};

/// Name under which the template is stored in its environment.
const TEMPLATE_NAME: &str = "chat_template";
/// The roles a message may have.
const ROLES: [&str; 3] = ["system", "user", "assistant"];

/// Errors from compiling or rendering a chat template.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    /// The template source does not parse.
    #[error("chat template does not compile: {0}")]
    Syntax(String),
    /// A message has a role other than system, user or assistant.
    #[error("unknown chat role {0:?} (expected system, user or assistant)")]
    UnknownRole(String),
    /// Rendering failed, including a `raise_exception(...)` call by the template.
    #[error("chat template failed to render: {0}")]
    Render(String),
}

/// One chat message as templates see it: `message['role']`, `message['content']`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The message text.
    pub content: String,
}

impl Message {
    /// A message with the given role and content.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// A compiled chat template plus the BOS/EOS strings it may reference.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    bos: String,
    eos: String,
}

/// Formats a minijinja error with its full cause chain.
fn describe(err: &Error) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

/// `raise_exception(msg)`: lets a template reject a conversation with a message.
fn raise_exception(msg: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, msg))
}

/// `tojson` as `transformers` defines it: Python `json.dumps` with `ensure_ascii=False`.
fn tojson(value: Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    kwargs.assert_all_used()?;
    let mut out = Vec::new();
    let result = match indent {
        Some(n) => {
            let pad = vec![b' '; n];
            let fmt = serde_json::ser::PrettyFormatter::with_indent(&pad);
            value.serialize(&mut serde_json::Serializer::with_formatter(&mut out, fmt))
        }
        None => value.serialize(&mut serde_json::Serializer::with_formatter(
            &mut out,
            PythonFormatter,
        )),
    };
    result.map_err(|e| Error::new(ErrorKind::BadSerialization, e.to_string()))?;
    let text = String::from_utf8(out)
        .map_err(|e| Error::new(ErrorKind::BadSerialization, e.to_string()))?;
    Ok(Value::from_safe_string(text))
}

/// Compact JSON with Python's default `", "` and `": "` separators.
struct PythonFormatter;

impl serde_json::ser::Formatter for PythonFormatter {
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            writer.write_all(b", ")
        }
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.begin_array_value(writer, first)
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
    ) -> std::io::Result<()> {
        writer.write_all(b": ")
    }
}

impl ChatTemplate {
    /// Compiles `source` (a `tokenizer.chat_template`); `bos` and `eos` are exposed to it
    /// as `bos_token` and `eos_token`.
    pub fn new(source: &str, bos: &str, eos: &str) -> Result<Self, TemplateError> {
        let mut env = Environment::new();
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| TemplateError::Syntax(describe(&e)))?;
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_filter("tojson", tojson);
        env.add_template_owned(TEMPLATE_NAME, source.to_string())
            .map_err(|e| TemplateError::Syntax(describe(&e)))?;
        Ok(Self {
            env,
            bos: bos.to_string(),
            eos: eos.to_string(),
        })
    }

    /// Renders `messages`; with `add_generation_prompt` the template appends the header
    /// that opens the assistant's reply.
    pub fn render(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> Result<String, TemplateError> {
        if let Some(bad) = messages.iter().find(|m| !ROLES.contains(&m.role.as_str())) {
            return Err(TemplateError::UnknownRole(bad.role.clone()));
        }
        let template = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| TemplateError::Render(describe(&e)))?;
        let ctx = minijinja::context! {
            messages => Value::from(Serde(messages)),
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos.as_str(),
            eos_token => self.eos.as_str(),
        };
        template
            .render(ctx)
            .map_err(|e| TemplateError::Render(describe(&e)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHATML: &str = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    #[test]
    fn renders_chatml_with_generation_prompt() {
        let t = ChatTemplate::new(CHATML, "<s>", "</s>").unwrap();
        let msgs = [
            Message::new("system", "Be brief."),
            Message::new("user", "Hi"),
        ];
        let want = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n";
        assert_eq!(t.render(&msgs, false).unwrap(), want);
        let with_prompt = t.render(&msgs, true).unwrap();
        assert_eq!(with_prompt, format!("{want}<|im_start|>assistant\n"));
    }

    #[test]
    fn raise_exception_is_a_clear_error() {
        let src = "{% if messages[0]['role'] != 'system' %}{{ raise_exception('System message required') }}{% endif %}ok";
        let t = ChatTemplate::new(src, "", "").unwrap();
        let err = t.render(&[Message::new("user", "x")], false).unwrap_err();
        assert!(matches!(err, TemplateError::Render(_)));
        assert!(err.to_string().contains("System message required"), "{err}");
        assert_eq!(
            t.render(&[Message::new("system", "x")], false).unwrap(),
            "ok"
        );
    }

    #[test]
    fn python_methods_tojson_and_special_tokens() {
        let src = "{{ bos_token }}{% for m in messages %}{% if m.content.startswith('  ') %}{{ m.content.strip() }}|{{ m | tojson }}{% endif %}{% endfor %}{{ eos_token }}";
        let t = ChatTemplate::new(src, "<s>", "</s>").unwrap();
        let out = t.render(&[Message::new("user", "  héllo \"x\"  ")], false);
        let want = r#"<s>héllo "x"|{"role": "user", "content": "  héllo \"x\"  "}</s>"#;
        assert_eq!(out.unwrap(), want);
    }

    #[test]
    fn tojson_indent_and_loop_controls() {
        let src = "{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}{{ m | tojson(indent=2) }}{% endfor %}";
        let t = ChatTemplate::new(src, "", "").unwrap();
        let out = t.render(
            &[Message::new("user", "a"), Message::new("user", "b")],
            false,
        );
        assert_eq!(
            out.unwrap(),
            "{\n  \"role\": \"user\",\n  \"content\": \"a\"\n}"
        );
    }

    #[test]
    fn trims_blocks_like_transformers() {
        let src = "{% for m in messages %}\n  {% if true %}\n{{ m.content }}\n  {% endif %}\n{% endfor %}";
        let t = ChatTemplate::new(src, "", "").unwrap();
        let out = t.render(
            &[Message::new("user", "a"), Message::new("user", "b")],
            false,
        );
        assert_eq!(out.unwrap(), "a\nb\n");
    }

    #[test]
    fn unknown_role_and_bad_syntax_are_named() {
        let t = ChatTemplate::new(CHATML, "", "").unwrap();
        let err = t.render(&[Message::new("tool", "x")], false).unwrap_err();
        assert!(err.to_string().contains("\"tool\""), "{err}");
        let err = ChatTemplate::new("{% for %}", "", "").unwrap_err();
        assert!(matches!(err, TemplateError::Syntax(_)), "{err}");
    }
}
