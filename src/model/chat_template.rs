//! Chat templates: renders a conversation into a prompt with the model's Jinja template.
//!
//! Rendering follows Hugging Face `transformers`: `trim_blocks` and `lstrip_blocks` are
//! on, Python string/dict methods (`.strip()`, `.startswith()`, `.items()`) work,
//! `raise_exception(msg)` aborts with `msg`, and `tojson` writes Python-style JSON
//! (`", "` and `": "` separators, non-ASCII kept, optional `indent=`).
//!
//! A template is untrusted input (it comes with the model file), so rendering is
//! bounded by limits rather than by the template's good manners: minijinja's fuel
//! (every instruction and every 64 bytes of data a render creates cost one; the budget
//! grows with the conversation, up to [`MAX_FUEL`]), a nesting limit for macro calls
//! and includes ([`RECURSION_LIMIT`]), a cap on `tojson`'s `indent` and on the
//! rendered prompt's length ([`MAX_RENDERED_BYTES`]). Each limit, when hit, is a
//! [`TemplateError::Render`] naming it.

use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Kwargs, Serde, Value};
use minijinja::{Environment, Error, ErrorKind};
use serde::{Deserialize, Serialize};

mod namespaces;

/// Name under which the template is stored in its environment.
const TEMPLATE_NAME: &str = "chat_template";
/// The roles a message may have (`tool`: a tool's result, for templates that take one).
const ROLES: [&str; 4] = ["system", "user", "assistant", "tool"];

/// Fuel every render gets whatever the conversation (minijinja counts one per
/// instruction and one per 64 bytes of data created).
pub const BASE_FUEL: u64 = 250_000;
/// Fuel added per message of the conversation.
pub const FUEL_PER_MESSAGE: u64 = 500;
/// Fuel added per 16 bytes of message content.
pub const CONTENT_BYTES_PER_FUEL: u64 = 16;
/// The most fuel one render gets, however long the conversation: bounds its time and
/// the data it can create (about 64 bytes per fuel).
pub const MAX_FUEL: u64 = 8_000_000;
/// Deepest nesting of macro calls and includes (minijinja's own default is 500).
pub const RECURSION_LIMIT: usize = 64;
/// Widest `tojson(indent=...)`.
pub const MAX_TOJSON_INDENT: usize = 64;
/// Longest rendered prompt, in bytes: the conversation's own length plus this much.
pub const MAX_RENDERED_BYTES: usize = 16 << 20;

/// Errors from compiling or rendering a chat template.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    /// The template source does not parse.
    #[error("chat template does not compile: {0}")]
    Syntax(String),
    /// A message has a role other than system, user, assistant or tool.
    #[error("unknown chat role {0:?} (expected system, user, assistant or tool)")]
    UnknownRole(String),
    /// Rendering failed, including a `raise_exception(...)` call by the template.
    #[error("chat template failed to render: {0}")]
    Render(String),
}

/// One chat message as templates see it: `message['role']`, `message['content']`, and
/// for tool use `message['tool_calls']` and `message['tool_call_id']` (absent, so
/// undefined to the template, when not given).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// The message text.
    pub content: String,
    /// An assistant's tool calls, as templates read them: a list of `{"id", "type":
    /// "function", "function": {"name", "arguments"}}` with `arguments` a JSON object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<serde_json::Value>,
    /// A tool message's answer to this call id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl Message {
    /// A message with the given role and content.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
            tool_calls: None,
            tool_call_id: None,
        }
    }
}

/// A compiled chat template plus the BOS/EOS strings it may reference.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    bos: String,
    eos: String,
    /// The template's source, as given.
    source: String,
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
    if indent.is_some_and(|n| n > MAX_TOJSON_INDENT) {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("tojson indent is limited to {MAX_TOJSON_INDENT}"),
        ));
    }
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
        let original = source;
        let mut env = Environment::new();
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| TemplateError::Syntax(describe(&e)))?;
        let source = namespaces::guard_attribute_writes(source, syntax.clone())?;
        env.set_syntax(syntax);
        env.set_recursion_limit(RECURSION_LIMIT);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("namespace", namespaces::namespace);
        env.add_function(namespaces::GUARD, namespaces::plain_only);
        env.add_filter("tojson", tojson);
        env.add_template_owned(TEMPLATE_NAME, source)
            .map_err(|e| TemplateError::Syntax(describe(&e)))?;
        Ok(Self {
            env,
            bos: bos.to_string(),
            eos: eos.to_string(),
            source: original.to_string(),
        })
    }

    /// The template's source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Another template `source` with this one's BOS and EOS strings (a template file
    /// given in place of the model's).
    pub fn with_source(&self, source: &str) -> Result<Self, TemplateError> {
        ChatTemplate::new(source, &self.bos, &self.eos)
    }

    /// Renders `messages`; with `add_generation_prompt` the template appends the header
    /// that opens the assistant's reply.
    pub fn render(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> Result<String, TemplateError> {
        self.render_with_tools(messages, None, add_generation_prompt)
    }

    /// [`ChatTemplate::render`] with `tools` (a list of OpenAI function tools,
    /// `{"type": "function", "function": {"name", "description", "parameters"}}`) as the
    /// template's `tools` variable; `None` leaves it none.
    pub fn render_with_tools(
        &self,
        messages: &[Message],
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
    ) -> Result<String, TemplateError> {
        if let Some(bad) = messages.iter().find(|m| !ROLES.contains(&m.role.as_str())) {
            return Err(TemplateError::UnknownRole(bad.role.clone()));
        }
        let tool_bytes = tools.map_or(0, |t| t.to_string().len());
        let content_bytes: usize = messages
            .iter()
            .map(|m| m.content.len() + m.tool_calls.as_ref().map_or(0, |c| c.to_string().len()))
            .sum::<usize>()
            + tool_bytes;
        let fuel = fuel_for(messages.len(), content_bytes);
        // Fuel is a setting of the environment; a render gets its own copy, so that
        // renders on several threads each get their own budget.
        let mut env = self.env.clone();
        env.set_fuel(Some(fuel));
        let template = env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| TemplateError::Render(describe(&e)))?;
        let ctx = minijinja::context! {
            messages => Value::from(Serde(messages)),
            tools => tools.map_or(Value::from(()), |t| Value::from(Serde(t))),
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos.as_str(),
            eos_token => self.eos.as_str(),
        };
        let limit = MAX_RENDERED_BYTES.saturating_add(content_bytes);
        let mut out = Bounded {
            bytes: Vec::new(),
            limit,
        };
        namespaces::with_copy_budget(fuel, || template.render_captured_to(ctx, &mut out)).map_err(
            |e| {
                TemplateError::Render(match e.kind() {
                    ErrorKind::OutOfFuel => format!(
                        "{} (the limit is {fuel} fuel for {} messages of {content_bytes} bytes; \
                     see chat_template::MAX_FUEL)",
                        describe(&e),
                        messages.len()
                    ),
                    _ if out.bytes.len() >= limit => format!(
                        "the rendered prompt exceeds {limit} bytes (the conversation plus \
                     {MAX_RENDERED_BYTES})"
                    ),
                    _ => describe(&e),
                })
            },
        )?;
        String::from_utf8(out.bytes).map_err(|e| TemplateError::Render(e.to_string()))
    }
}

/// The fuel a render of `messages` messages holding `content_bytes` bytes gets.
fn fuel_for(messages: usize, content_bytes: usize) -> u64 {
    let per_message = (messages as u64).saturating_mul(FUEL_PER_MESSAGE);
    let per_byte = content_bytes as u64 / CONTENT_BYTES_PER_FUEL;
    BASE_FUEL
        .saturating_add(per_message)
        .saturating_add(per_byte)
        .min(MAX_FUEL)
}

/// A writer that refuses to grow past `limit` bytes.
struct Bounded {
    bytes: Vec<u8>,
    limit: usize,
}

impl std::io::Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len().saturating_add(buf.len()) > self.limit {
            self.bytes.resize(self.limit, 0);
            return Err(std::io::Error::other("rendered prompt too long"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// Marks its flag when dropped, to see whether a render's values are freed.
    #[derive(Debug)]
    struct DropProbe(Arc<AtomicBool>);

    impl Drop for DropProbe {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    impl minijinja::value::Object for DropProbe {}

    /// Renders `src` with a `probe` in its context: the output (or error) and whether
    /// the probe was freed after.
    fn render_with_probe(src: &str) -> (Result<String, String>, bool) {
        let t = ChatTemplate::new(src, "", "").unwrap();
        let dropped = Arc::new(AtomicBool::new(false));
        let ctx = minijinja::context! {
            probe => Value::from_object(DropProbe(dropped.clone())),
            messages => Value::from(Serde([Message::new("user", "hi")])),
        };
        let template = t.env.get_template(TEMPLATE_NAME).unwrap();
        let out = template.render(ctx).map_err(|e| describe(&e));
        drop(t);
        (out, dropped.load(Ordering::SeqCst))
    }

    #[test]
    fn namespaces_refuse_what_could_make_a_cycle() {
        let cycles = [
            "{% set ns = namespace(p=probe) %}{% set ns.me = ns %}{{ ns }}",
            "{% set a = namespace() %}{% set b = namespace(a=a, p=probe) %}ok",
            "{% set ns = namespace(d={'p': probe}) %}{% set ns.true = {'x': [1, (ns, 2)]} %}{{ ns }}",
            "{% set ns = namespace(n=0) %}{% set ns.n = ns, messages|length %}{{ ns.n }}",
            "{% set ns = namespace() %}{% with x = [ns] %}{% set ns.x = x %}{% endwith %}{{ ns }}",
            "{% set ns = namespace() %}{% set x = ns %}{% set ns.a, y = [x], 1 %}{{ ns }}",
            "{% set ns = namespace() %}{% for m in messages %}{% set ns.l = loop %}{% endfor %}",
        ];
        for src in cycles {
            let (out, freed) = render_with_probe(src);
            let err = out.expect_err(src);
            assert!(err.contains("namespace"), "{src}: {err}");
            assert!(freed, "leaked: {src}");
        }
        let plain = [
            ("{% set ns = namespace(p=1) %}{% set ns.p = ns.p + 1 %}{{ ns.p }}", "2"),
            (
                "{% set ns = namespace(m=[]) %}{% for m in messages %}{% set ns.m = ns.m + [m] %}{% endfor %}{{ ns.m[0].content }}",
                "hi",
            ),
            ("{% set ns = namespace() %}{% set ns.all = messages %}{{ ns.all|length }}", "1"),
            ("{% set ns = namespace(d={'a': [1, none]}) %}{% set ns.s = 'x' ~ ns.d.a|length %}{{ ns.s }}", "x2"),
            ("{% set ns = namespace() %}{% set ns.i, j = range(2) %}{{ ns.i }}{{ j }}", "01"),
        ];
        for (src, want) in plain {
            let (out, freed) = render_with_probe(src);
            assert_eq!(out.as_deref(), Ok(want), "{src}");
            assert!(freed);
        }
        // A lazy sequence over a namespace is evaluated into plain strings when stored.
        let src = "{% set ns = namespace(p=[probe]|map('string')|list|length) %}{% set ns.x = [ns, probe]|map('string') %}{{ ns.x|length }}";
        let (out, freed) = render_with_probe(src);
        assert_eq!(out.as_deref(), Ok("2"));
        assert!(freed);
    }

    #[test]
    fn guarded_expressions_keep_their_place_after_multibyte_text() {
        let src = "héllo ✓ {% set ns = namespace(a='é') %}{% set ns.a = ns.a ~ 'ü' if true else 'x' %}{{ ns.a }} {% set ns.t = 1, 'ß' %}{{ ns.t|length }}";
        let t = ChatTemplate::new(src, "", "").unwrap();
        assert_eq!(t.render(&[], false).unwrap(), "héllo ✓ éü 2");
    }

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
        let err = t.render(&[Message::new("robot", "x")], false).unwrap_err();
        assert!(err.to_string().contains("\"robot\""), "{err}");
        let err = ChatTemplate::new("{% for %}", "", "").unwrap_err();
        assert!(matches!(err, TemplateError::Syntax(_)), "{err}");
    }

    /// `tools`, an assistant's `tool_calls` and a tool's `tool_call_id` reach the
    /// template; without tools, `tools` is none and the fields are undefined.
    #[test]
    fn tools_and_tool_messages_reach_the_template() {
        let src = "{% if tools %}{% for t in tools %}[{{ t.function.name }}]{% endfor %}{% endif %}\
                   {% for m in messages %}{{ m.role }}:{% if m.tool_calls is defined %}\
                   {% for c in m.tool_calls %}{{ c.function.name }}{{ c.function.arguments|tojson }}{% endfor %}\
                   {% elif m.tool_call_id is defined %}{{ m.tool_call_id }}={{ m.content }}\
                   {% else %}{{ m.content }}{% endif %};{% endfor %}";
        let t = ChatTemplate::new(src, "", "").unwrap();
        let mut call = Message::new("assistant", "");
        call.tool_calls = Some(serde_json::json!([
            {"id": "c1", "type": "function", "function": {"name": "add", "arguments": {"a": 1}}}
        ]));
        let mut result = Message::new("tool", "2");
        result.tool_call_id = Some("c1".into());
        let msgs = [Message::new("user", "sum?"), call, result];
        let tools = serde_json::json!([{"type": "function", "function": {"name": "add"}}]);
        let out = t.render_with_tools(&msgs, Some(&tools), false).unwrap();
        assert_eq!(out, "[add]user:sum?;assistant:add{\"a\": 1};tool:c1=2;");
        let plain = t.render(&msgs[..1], false).unwrap();
        assert_eq!(plain, "user:sum?;");
    }

    /// The Qwen2.5-style and Llama-3.1-style fixtures render tools, calls and results
    /// in their models' forms.
    #[test]
    fn tool_template_fixtures_render_calls_and_results() {
        let root = env!("CARGO_MANIFEST_DIR");
        let mut call = Message::new("assistant", "");
        call.tool_calls = Some(serde_json::json!([
            {"id": "c1", "type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 2}}}
        ]));
        let mut result = Message::new("tool", "3");
        result.tool_call_id = Some("c1".into());
        let msgs = [Message::new("user", "Add 1 and 2."), call, result];
        let tools = serde_json::json!([{"type": "function", "function": {"name": "add",
            "parameters": {"type": "object"}}}]);
        let cases = [
            ("qwen2.5-style.jinja", [
                "<tools>\n{\"type\": \"function\"",
                "<|im_start|>assistant\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call><|im_end|>",
                "<|im_start|>user\n<tool_response>\n3\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
            ]),
            ("llama3.1-style.jinja", [
                "\"name\": \"add\"",
                "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}<|eot_id|>",
                "<|start_header_id|>ipython<|end_header_id|>\n\n3<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
            ]),
        ];
        for (file, wanted) in cases {
            let source =
                std::fs::read_to_string(format!("{root}/tests/data/tool_templates/{file}"))
                    .unwrap();
            let t = ChatTemplate::new(&source, "<s>", "</s>").unwrap();
            let out = t.render_with_tools(&msgs, Some(&tools), true).unwrap();
            for piece in wanted {
                assert!(out.contains(piece), "{file}: {piece:?} not in\n{out}");
            }
        }
    }

    /// Real templates render long conversations well inside the limits.
    #[test]
    fn real_templates_pass_the_limits() {
        let root = env!("CARGO_MANIFEST_DIR");
        let mut sources = vec![CHATML.to_string()];
        for dir in ["llama2", "llama3", "plain"] {
            let path = format!("{root}/tests/data/special_tokens/{dir}/tokenizer_config.json");
            let config: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
            sources.push(config["chat_template"].as_str().unwrap().to_string());
        }
        // 2,000 turns, and one turn of 1 MiB (the server's default body limit).
        let long: Vec<Message> = (0..2000)
            .map(|i| match i % 2 {
                0 => Message::new("user", format!("question {i} with some words")),
                _ => Message::new("assistant", format!("answer {i} with some more words")),
            })
            .collect();
        let big = [Message::new("user", "x".repeat(1 << 20))];
        for source in &sources {
            let t = ChatTemplate::new(source, "<s>", "</s>").unwrap();
            for msgs in [&long[..], &big[..]] {
                t.render(msgs, true)
                    .unwrap_or_else(|e| panic!("{source}: {e}"));
            }
        }
    }

    /// Hostile templates stop at a limit with an error naming it, quickly.
    #[test]
    fn hostile_templates_hit_limits_not_luck() {
        let msgs = [Message::new("user", "hi")];
        let cases = [
            (
                "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
                "fuel",
            ),
            (
                "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
                "recursion",
            ),
            (
                "{% set s = 'x' * 1000000 %}{% for i in range(100000) %}{{ s }}{% endfor %}",
                "exceeds",
            ),
            ("{{ messages | tojson(indent=1000000000) }}", "indent"),
            (
                "{% set ns = namespace() %}{% set big = range(100000)|list %}{% for i in range(100000) %}{% set ns.x = big %}{% endfor %}",
                "copy at most",
            ),
        ];
        // The output limit is reached before the fuel runs out only when the budget
        // grows with a long conversation (emitting 16 MiB costs 262,144 fuel).
        let long = [Message::new("user", "y".repeat(4 << 20))];
        for (source, want) in cases {
            let t = ChatTemplate::new(source, "", "").unwrap();
            let started = std::time::Instant::now();
            let msgs: &[Message] = if want == "exceeds" { &long } else { &msgs };
            let err = t.render(msgs, false).unwrap_err().to_string();
            assert!(err.contains(want), "{source}: {err}");
            assert!(started.elapsed().as_secs() < 5, "{source}");
        }
    }
}
