//! JSON Schemas compiled for the validator: the subset OpenAI's structured outputs use
//! and Pydantic writes — `type` (a name or a list), `properties`, `required`,
//! `additionalProperties`, `items`, `minItems`, `maxItems`, `minLength`, `maxLength`,
//! `pattern`, the common `format`s, an integer's `minimum`, `maximum` and their
//! exclusive forms, `enum`, `const`, `anyOf` / `oneOf` of branches that start
//! differently, `allOf` of one schema, and local `$ref`s into `$defs` or `definitions`,
//! recursive ones included; annotations such as `description` are read past. Any other
//! keyword is refused by its path, never ignored, since it would constrain the output
//! and we would not.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::pattern::{format_pattern, Pattern, SCHEMA_PATTERN_BYTES};

/// Most properties one object schema may declare (a bit each in the validator).
pub(crate) const MAX_PROPERTIES: usize = 64;

/// Deepest nesting of schemas accepted.
const MAX_DEPTH: usize = 32;

/// Most nodes one schema compiles to.
const MAX_NODES: usize = 4096;

/// Keywords that describe a schema without constraining what matches it.
const ANNOTATIONS: [&str; 8] = [
    "title",
    "description",
    "$schema",
    "$id",
    "$comment",
    "default",
    "examples",
    "deprecated",
];

/// One schema node; children are indices into [`Schema::nodes`].
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Node {
    /// Any JSON value.
    Any,
    /// An object: the declared properties (name, node), which of them are required,
    /// and whether other properties (of any value) may appear.
    Object {
        properties: Vec<(String, usize)>,
        required: u64,
        additional: bool,
    },
    /// An array of `items`, `min..=max` of them.
    Array {
        items: usize,
        min: usize,
        max: Option<usize>,
    },
    /// A string of `min..=max` characters (code points; an escape is one), matching
    /// pattern `pattern` of [`Schema::pattern`] when it has one.
    String {
        min: usize,
        max: usize,
        pattern: Option<usize>,
    },
    /// A number; only integers (no fraction or exponent) when `integer`, then within
    /// `range` when it has one.
    Number {
        integer: bool,
        range: Option<(i64, i64)>,
    },
    /// `true` or `false`.
    Boolean,
    /// `null`.
    Null,
    /// Exactly one of these JSON texts, written compactly (`enum`, `const`).
    Choice(Vec<String>),
    /// A value of one of these nodes, told apart by their first character (`anyOf`,
    /// `oneOf`, a list of types): no two can start alike.
    AnyOf(Vec<usize>),
}

/// A compiled schema: node 0 is any value, 1 any object, 2 any array; the root is
/// [`Schema::root`].
#[derive(Clone, Debug, PartialEq)]
pub struct Schema {
    nodes: Vec<Node>,
    /// The string patterns nodes point at.
    patterns: Vec<Pattern>,
    root: usize,
}

/// Node of any value.
pub(crate) const ANY: usize = 0;
/// Node of any object.
pub(crate) const ANY_OBJECT: usize = 1;
/// Node of any array.
pub(crate) const ANY_ARRAY: usize = 2;

/// Why a schema was refused: where (a JSON-pointer-like path) and what.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct SchemaError {
    /// Where in the schema, e.g. `properties.name.pattern`.
    pub path: String,
    /// What is wrong or not supported.
    pub message: String,
}

impl Schema {
    /// Any JSON object (OpenAI's `json_object` mode).
    pub fn any_object() -> Schema {
        Schema {
            nodes: base_nodes(),
            patterns: Vec::new(),
            root: ANY_OBJECT,
        }
    }

    /// Compiles `schema`, whose top level must be an object type (as OpenAI requires).
    pub fn compile(schema: &Value) -> Result<Schema, SchemaError> {
        let mut compiler = Compiler {
            nodes: base_nodes(),
            patterns: Vec::new(),
            root: schema,
            refs: HashMap::new(),
        };
        let root = compiler.node(schema, "schema", 0)?;
        if !matches!(compiler.nodes[root], Node::Object { .. }) {
            return Err(SchemaError {
                path: "schema".into(),
                message: "the top level must be an object type (\"type\": \"object\")".into(),
            });
        }
        Ok(Schema {
            nodes: compiler.nodes,
            patterns: compiler.patterns,
            root,
        })
    }

    /// The root node.
    pub(crate) fn root(&self) -> usize {
        self.root
    }

    /// Node `id`.
    pub(crate) fn node(&self, id: usize) -> &Node {
        &self.nodes[id]
    }

    /// Pattern `id` (of a [`Node::String`]).
    pub(crate) fn pattern(&self, id: usize) -> &Pattern {
        &self.patterns[id]
    }
}

fn base_nodes() -> Vec<Node> {
    vec![
        Node::Any,
        Node::Object {
            properties: Vec::new(),
            required: 0,
            additional: true,
        },
        Node::Array {
            items: ANY,
            min: 0,
            max: None,
        },
    ]
}

struct Compiler<'s> {
    nodes: Vec<Node>,
    patterns: Vec<Pattern>,
    /// The whole schema, which `$ref`s point into.
    root: &'s Value,
    /// Each `$ref` compiled so far and its node, so a recursive one closes a loop.
    refs: HashMap<String, usize>,
}

/// Keywords that only hold schemas for `$ref`s to point at.
const DEFINITIONS: [&str; 2] = ["$defs", "definitions"];

/// Keywords that combine or point at other schemas: each stands alone beside
/// annotations and definitions.
const COMBINING: [&str; 4] = ["$ref", "anyOf", "oneOf", "allOf"];

/// A refusal at `path`.
pub(super) fn error(path: &str, message: impl Into<String>) -> SchemaError {
    SchemaError {
        path: path.to_string(),
        message: message.into(),
    }
}

impl Compiler<'_> {
    fn add(&mut self, node: Node, path: &str) -> Result<usize, SchemaError> {
        if self.nodes.len() >= MAX_NODES {
            return Err(error(
                path,
                format!("the schema has more than {MAX_NODES} parts"),
            ));
        }
        self.nodes.push(node);
        Ok(self.nodes.len() - 1)
    }

    fn node(&mut self, schema: &Value, path: &str, depth: usize) -> Result<usize, SchemaError> {
        if depth > MAX_DEPTH {
            return Err(error(
                path,
                format!("nested deeper than {MAX_DEPTH} levels"),
            ));
        }
        let map = match schema {
            Value::Bool(true) => return Ok(ANY),
            Value::Object(map) => map,
            _ => return Err(error(path, "a schema must be an object")),
        };
        let read_past = |k: &str| ANNOTATIONS.contains(&k) || DEFINITIONS.contains(&k);
        if let Some(key) = map.keys().find(|k| {
            !["type", "enum", "const"].contains(&k.as_str())
                && !TYPED.iter().any(|(typed, _)| typed == k)
                && !COMBINING.contains(&k.as_str())
                && !read_past(k)
        }) {
            return Err(error(
                &format!("{path}.{key}"),
                format!("'{key}' is not supported yet"),
            ));
        }
        if let Some(&combining) = COMBINING.iter().find(|k| map.contains_key(**k)) {
            if let Some(other) = map
                .keys()
                .find(|k| k.as_str() != combining && !read_past(k))
            {
                return Err(error(
                    &format!("{path}.{other}"),
                    format!("'{other}' beside '{combining}' is not supported yet"),
                ));
            }
            let at = format!("{path}.{combining}");
            return match (combining, &map[combining]) {
                ("$ref", Value::String(target)) => self.reference(target, &at, depth),
                ("$ref", _) => Err(error(&at, "must be a string")),
                ("allOf", Value::Array(all)) if all.len() == 1 => {
                    self.node(&all[0], &format!("{at}.0"), depth + 1)
                }
                ("allOf", _) => Err(error(&at, "only an 'allOf' of one schema is supported")),
                (_, Value::Array(any)) if !any.is_empty() => {
                    let mut branches = Vec::with_capacity(any.len());
                    for (i, branch) in any.iter().enumerate() {
                        branches.push(self.node(branch, &format!("{at}.{i}"), depth + 1)?);
                    }
                    self.union(branches, &at)
                }
                _ => Err(error(&at, "must be a non-empty array of schemas")),
            };
        }
        if let Some(choices) = choices(map, path)? {
            if let Some((key, _)) = TYPED.iter().find(|(key, _)| map.contains_key(*key)) {
                return Err(error(
                    &format!("{path}.{key}"),
                    format!("'{key}' beside 'enum' or 'const' is not supported yet"),
                ));
            }
            return self.add(Node::Choice(choices), path);
        }
        let kinds: Vec<&str> = match map.get("type") {
            None if map.contains_key("properties") => vec!["object"],
            None if map.contains_key("items") => vec!["array"],
            None => vec!["any"],
            Some(Value::String(kind)) => vec![kind.as_str()],
            Some(Value::Array(kinds)) if !kinds.is_empty() => kinds
                .iter()
                .map(|k| {
                    k.as_str()
                        .ok_or_else(|| error(&format!("{path}.type"), "type names are strings"))
                })
                .collect::<Result<_, _>>()?,
            Some(_) => {
                return Err(error(
                    &format!("{path}.type"),
                    "must be a type name or a non-empty list of them",
                ))
            }
        };
        for &(key, needs) in &TYPED {
            if map.contains_key(key) && !kinds.contains(&needs) {
                let message = match needs {
                    "integer" if kinds.contains(&"number") => format!(
                        "'{key}' is supported on integers only (type integer), not yet on numbers with fractions"
                    ),
                    _ => format!("'{key}' needs type {needs}"),
                };
                return Err(error(&format!("{path}.{key}"), message));
            }
        }
        let mut branches = Vec::with_capacity(kinds.len());
        for kind in kinds {
            branches.push(self.typed(map, kind, path, depth)?);
        }
        self.union(branches, &format!("{path}.type"))
    }

    /// The node of `map`'s value when it is of type `kind`.
    fn typed(
        &mut self,
        map: &Map<String, Value>,
        kind: &str,
        path: &str,
        depth: usize,
    ) -> Result<usize, SchemaError> {
        let node = match kind {
            "any" => return Ok(ANY),
            "object" => self.object(map, path, depth)?,
            "array" => self.array(map, path, depth)?,
            "string" => self.string(map, path)?,
            "number" => Node::Number {
                integer: false,
                range: None,
            },
            "integer" => Node::Number {
                integer: true,
                range: range(map, path)?,
            },
            "boolean" => Node::Boolean,
            "null" => Node::Null,
            other => {
                return Err(error(
                    &format!("{path}.type"),
                    format!("unknown type '{other}'"),
                ))
            }
        };
        self.add(node, path)
    }

    /// One node for a value of any of `branches`: the branch itself when there is one,
    /// else an [`Node::AnyOf`], provided no two branches can start alike (the validator
    /// picks the branch by a value's first character).
    fn union(&mut self, branches: Vec<usize>, path: &str) -> Result<usize, SchemaError> {
        if let [only] = branches[..] {
            return Ok(only);
        }
        let mut seen = 0u128;
        for &branch in &branches {
            let starts = self.starts(branch);
            if seen & starts != 0 {
                return Err(error(
                    path,
                    "branches that can start alike (two objects, two strings, a number \
                     and an integer, ...) are not supported yet",
                ));
            }
            seen |= starts;
        }
        self.add(Node::AnyOf(branches), path)
    }

    /// The characters (all ASCII) a value of node `id` can start with, as bits.
    fn starts(&self, id: usize) -> u128 {
        let bit = |c: u8| 1u128 << c;
        match &self.nodes[id] {
            Node::Any => u128::MAX,
            Node::Object { .. } => bit(b'{'),
            Node::Array { .. } => bit(b'['),
            Node::String { .. } => bit(b'"'),
            Node::Number { .. } => (b'0'..=b'9').fold(bit(b'-'), |all, d| all | bit(d)),
            Node::Boolean => bit(b't') | bit(b'f'),
            Node::Null => bit(b'n'),
            Node::Choice(texts) => texts
                .iter()
                .filter_map(|t| t.bytes().next())
                .fold(0, |all, c| {
                    all | if c.is_ascii() { bit(c) } else { u128::MAX }
                }),
            Node::AnyOf(branches) => branches.iter().fold(0, |all, &b| all | self.starts(b)),
        }
    }

    /// The node of the schema `target` points at (`#` and a JSON pointer into the
    /// whole schema, e.g. `#/$defs/Pet`). A target already being compiled (a recursive
    /// schema) is its node, filled in once compiled.
    fn reference(&mut self, target: &str, path: &str, depth: usize) -> Result<usize, SchemaError> {
        if let Some(&id) = self.refs.get(target) {
            return Ok(id);
        }
        let schema = target
            .strip_prefix('#')
            .and_then(|pointer| self.root.pointer(pointer))
            .ok_or_else(|| {
                error(
                    path,
                    format!("'{target}' is not a schema in this document (only local '#/...' references are supported)"),
                )
            })?;
        let slot = self.add(Node::Any, path)?;
        self.refs.insert(target.to_string(), slot);
        let id = self.node(schema, path, depth + 1)?;
        self.nodes[slot] = self.nodes[id].clone();
        Ok(slot)
    }

    fn object(
        &mut self,
        map: &Map<String, Value>,
        path: &str,
        depth: usize,
    ) -> Result<Node, SchemaError> {
        let mut properties = Vec::new();
        match map.get("properties") {
            None => {}
            Some(Value::Object(props)) => {
                if props.len() > MAX_PROPERTIES {
                    return Err(error(
                        &format!("{path}.properties"),
                        format!("more than {MAX_PROPERTIES} properties"),
                    ));
                }
                for (name, schema) in props {
                    let id = self.node(schema, &format!("{path}.properties.{name}"), depth + 1)?;
                    properties.push((name.clone(), id));
                }
            }
            Some(_) => return Err(error(&format!("{path}.properties"), "must be an object")),
        }
        let mut required = 0u64;
        match map.get("required") {
            None => {}
            Some(Value::Array(names)) => {
                for name in names {
                    let at = name
                        .as_str()
                        .and_then(|n| properties.iter().position(|(p, _)| p == n))
                        .ok_or_else(|| {
                            error(
                                &format!("{path}.required"),
                                format!("{name} is not one of the declared properties"),
                            )
                        })?;
                    required |= 1 << at;
                }
            }
            Some(_) => return Err(error(&format!("{path}.required"), "must be an array")),
        }
        let additional = match map.get("additionalProperties") {
            None | Some(Value::Bool(true)) => true,
            Some(Value::Bool(false)) => false,
            Some(_) => {
                return Err(error(
                    &format!("{path}.additionalProperties"),
                    "only true or false is supported",
                ))
            }
        };
        Ok(Node::Object {
            properties,
            required,
            additional,
        })
    }

    fn array(
        &mut self,
        map: &Map<String, Value>,
        path: &str,
        depth: usize,
    ) -> Result<Node, SchemaError> {
        let items = match map.get("items") {
            None => ANY,
            Some(schema) => self.node(schema, &format!("{path}.items"), depth + 1)?,
        };
        let (min, max) = counts(map, path, "minItems", "maxItems")?;
        Ok(Node::Array { items, min, max })
    }
}

/// Keywords that constrain values of one type, with that type: the only ones read
/// beside `type`, refused where that type is not declared, and beside `enum` or `const`.
const TYPED: [(&str, &str); 14] = [
    ("properties", "object"),
    ("required", "object"),
    ("additionalProperties", "object"),
    ("items", "array"),
    ("minItems", "array"),
    ("maxItems", "array"),
    ("minLength", "string"),
    ("maxLength", "string"),
    ("pattern", "string"),
    ("format", "string"),
    ("minimum", "integer"),
    ("maximum", "integer"),
    ("exclusiveMinimum", "integer"),
    ("exclusiveMaximum", "integer"),
];

/// An integer's bounds (the last four of [`TYPED`]).
const INTEGER_BOUNDS: &[(&str, &str)] = TYPED.split_at(10).1;

impl Compiler<'_> {
    /// A string node with `map`'s `minLength` and `maxLength`, or its `pattern` or
    /// `format` (one of them, and neither beside a length: a length and a pattern could
    /// leave a reply that can neither go on nor end).
    fn string(&mut self, map: &Map<String, Value>, path: &str) -> Result<Node, SchemaError> {
        let source = match (map.get("pattern"), map.get("format")) {
            (Some(_), Some(_)) => {
                return Err(error(
                    &format!("{path}.format"),
                    "'format' beside 'pattern' is not supported yet",
                ))
            }
            (Some(Value::String(p)), None) => Some((p.clone(), "pattern")),
            (Some(_), None) => return Err(error(&format!("{path}.pattern"), "must be a string")),
            (None, Some(Value::String(f))) => match format_pattern(f) {
                Some(p) => Some((p, "format")),
                None => {
                    return Err(error(
                        &format!("{path}.format"),
                        format!("the format '{f}' is not supported yet (date, time, date-time, uuid, email and ipv4 are)"),
                    ))
                }
            },
            (None, Some(_)) => return Err(error(&format!("{path}.format"), "must be a string")),
            (None, None) => None,
        };
        let Some((source, key)) = source else {
            return lengths(map, path);
        };
        if let Some(length) = ["minLength", "maxLength"]
            .iter()
            .find(|k| map.contains_key(**k))
        {
            return Err(error(
                &format!("{path}.{length}"),
                format!("'{length}' beside '{key}' is not supported yet"),
            ));
        }
        let at = format!("{path}.{key}");
        // A pattern written twice (a `$ref`'d string, a repeated format) compiles once.
        let id = match self.patterns.iter().position(|p| p.source() == source) {
            Some(id) => id,
            None => {
                let pattern = Pattern::compile(&source, &at)?;
                let held: usize = self.patterns.iter().map(Pattern::memory).sum();
                if held + pattern.memory() > SCHEMA_PATTERN_BYTES {
                    return Err(error(
                        &at,
                        format!(
                            "the schema's patterns take more than {} MiB",
                            SCHEMA_PATTERN_BYTES >> 20
                        ),
                    ));
                }
                self.patterns.push(pattern);
                self.patterns.len() - 1
            }
        };
        Ok(Node::String {
            min: 0,
            max: usize::MAX,
            pattern: Some(id),
        })
    }
}

/// A string node with `map`'s `minLength` and `maxLength`.
fn lengths(map: &Map<String, Value>, path: &str) -> Result<Node, SchemaError> {
    let (min, max) = counts(map, path, "minLength", "maxLength")?;
    Ok(Node::String {
        min,
        max: max.unwrap_or(usize::MAX),
        pattern: None,
    })
}

/// `map`'s count bounds `low` and `high` (`minItems` and `maxItems`, `minLength` and
/// `maxLength`): non-negative integers, the upper one not below the lower.
fn counts(
    map: &Map<String, Value>,
    path: &str,
    low: &str,
    high: &str,
) -> Result<(usize, Option<usize>), SchemaError> {
    let count = |key: &str| match map.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .map(|n| Some(usize::try_from(n).unwrap_or(usize::MAX)))
            .ok_or_else(|| error(&format!("{path}.{key}"), "must be a non-negative integer")),
    };
    let (min, max) = (count(low)?.unwrap_or(0), count(high)?);
    if max.is_some_and(|max| max < min) {
        return Err(error(&format!("{path}.{high}"), format!("is below {low}")));
    }
    Ok((min, max))
}

/// The inclusive range an integer's `minimum`, `maximum`, `exclusiveMinimum` and
/// `exclusiveMaximum` leave (`None` without any), within what an i64 holds.
fn range(map: &Map<String, Value>, path: &str) -> Result<Option<(i64, i64)>, SchemaError> {
    if !INTEGER_BOUNDS.iter().any(|(k, _)| map.contains_key(*k)) {
        return Ok(None);
    }
    let (mut lo, mut hi) = (i64::MIN as f64, i64::MAX as f64);
    for &(key, _) in INTEGER_BOUNDS {
        let Some(value) = map.get(key) else {
            continue;
        };
        let x = value
            .as_f64()
            .ok_or_else(|| error(&format!("{path}.{key}"), "must be a number"))?;
        match key {
            "minimum" => lo = lo.max(x.ceil()),
            "exclusiveMinimum" => lo = lo.max(x.floor() + 1.0),
            "maximum" => hi = hi.min(x.floor()),
            _ => hi = hi.min(x.ceil() - 1.0),
        }
    }
    if lo > hi {
        return Err(error(path, "no integer lies within its bounds"));
    }
    // Exact for the bounds schemas write (|x| < 2^53); `as` saturates beyond i64.
    Ok(Some((lo as i64, hi as i64)))
}

/// The compact JSON texts an `enum` or `const` allows, if it has either.
fn choices(map: &Map<String, Value>, path: &str) -> Result<Option<Vec<String>>, SchemaError> {
    let (key, values) = match (map.get("enum"), map.get("const")) {
        (Some(_), Some(_)) => return Err(error(path, "'enum' and 'const' together")),
        (Some(Value::Array(values)), None) if !values.is_empty() => ("enum", values.clone()),
        (Some(_), None) => return Err(error(&format!("{path}.enum"), "must be a non-empty array")),
        (None, Some(value)) => ("const", vec![value.clone()]),
        (None, None) => return Ok(None),
    };
    // A `type` beside them keeps the values of that type (a value of another type can
    // never match both).
    let kinds: Vec<&str> = match map.get("type") {
        None => Vec::new(),
        Some(Value::String(kind)) => vec![kind.as_str()],
        Some(Value::Array(kinds)) => kinds.iter().filter_map(Value::as_str).collect(),
        Some(_) => {
            return Err(error(
                &format!("{path}.type"),
                "must be a type name or a list of them",
            ))
        }
    };
    let mut kept = Vec::with_capacity(values.len());
    for value in &values {
        let mut matches = kinds.is_empty();
        for kind in &kinds {
            matches |= is_of(value, kind)
                .ok_or_else(|| error(&format!("{path}.type"), format!("unknown type '{kind}'")))?;
        }
        if matches {
            kept.push(value.to_string());
        }
    }
    if kept.is_empty() {
        return Err(error(
            &format!("{path}.{key}"),
            "no value is of the type the schema declares",
        ));
    }
    Ok(Some(kept))
}

/// Whether `value` is of JSON Schema type `kind` (`None`: no such type).
fn is_of(value: &Value, kind: &str) -> Option<bool> {
    Some(match kind {
        "string" => value.is_string(),
        "number" => value.is_number(),
        "integer" => {
            value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|x| x.fract() == 0.0)
        }
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        "object" => value.is_object(),
        "array" => value.is_array(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_schema_compiles_to_nodes() {
        let schema = Schema::compile(&json!({
            "type": "object",
            "description": "a person",
            "properties": {
                "name": {"type": "string"},
                "age": {"type": "integer"},
                "tags": {"type": "array", "items": {"enum": ["a", 1, null]}, "maxItems": 3},
            },
            "required": ["name", "age"],
            "additionalProperties": false,
        }))
        .unwrap();
        let Node::Object {
            properties,
            required,
            additional,
        } = schema.node(schema.root())
        else {
            panic!("{schema:?}");
        };
        assert_eq!(properties.len(), 3);
        assert_eq!((*required, *additional), (0b011, false));
        let tags = properties[2].1;
        let Node::Array { items, min, max } = schema.node(tags) else {
            panic!("{schema:?}");
        };
        assert_eq!((*min, *max), (0, Some(3)));
        assert_eq!(
            schema.node(*items),
            &Node::Choice(vec!["\"a\"".into(), "1".into(), "null".into()])
        );
    }

    #[test]
    fn what_is_not_supported_is_refused_by_path() {
        let refused = |schema: Value| Schema::compile(&schema).unwrap_err().path;
        let person = |name: Value| json!({"type": "object", "properties": {"name": name}});
        assert_eq!(
            refused(person(json!({"type": "string", "pattern": "^(?=a)"}))),
            "schema.properties.name.pattern"
        );
        assert_eq!(
            refused(person(json!({"type": "string", "pattern": "a^b"}))),
            "schema.properties.name.pattern"
        );
        assert_eq!(
            refused(person(json!({"type": "string", "format": "uri"}))),
            "schema.properties.name.format"
        );
        assert_eq!(
            refused(person(
                json!({"type": "string", "pattern": "a", "maxLength": 3})
            )),
            "schema.properties.name.maxLength"
        );
        assert_eq!(
            refused(person(json!({"type": "integer", "format": "date"}))),
            "schema.properties.name.format"
        );
        assert_eq!(
            refused(person(json!({"type": "integer", "enum": ["a", "b"]}))),
            "schema.properties.name.enum"
        );
        assert_eq!(
            refused(person(json!({"enum": [{"a": 1}], "properties": {"a": {}}}))),
            "schema.properties.name.properties"
        );
        // A type beside an enum keeps the values of that type.
        let typed = Schema::compile(&person(
            json!({"type": ["string", "null"], "enum": ["a", 1, null, 2.0]}),
        ))
        .unwrap();
        let Node::Object { properties, .. } = typed.node(typed.root()) else {
            panic!("{typed:?}");
        };
        assert_eq!(
            typed.node(properties[0].1),
            &Node::Choice(vec!["\"a\"".into(), "null".into()])
        );
        // Many distinct large patterns are refused, not all held.
        let properties: Map<String, Value> = (0..64)
            .map(|i| {
                let pattern = format!("^[a-p]{{1,1000}}{i}[0-9]{{1,300}}$");
                (
                    format!("p{i}"),
                    json!({"type": "string", "pattern": pattern}),
                )
            })
            .collect();
        let many = Schema::compile(&json!({"type": "object", "properties": properties}));
        assert!(many.unwrap_err().message.contains("MiB"));
        assert_eq!(
            refused(person(json!({"anyOf": []}))),
            "schema.properties.name.anyOf"
        );
        assert_eq!(
            refused(person(json!({"$ref": "#/x"}))),
            "schema.properties.name.$ref"
        );
        assert_eq!(
            refused(person(json!({"type": ["integer", "number"]}))),
            "schema.properties.name.type"
        );
        assert_eq!(
            refused(person(
                json!({"anyOf": [{"type": "object"}, {"properties": {}}]})
            )),
            "schema.properties.name.anyOf"
        );
        assert_eq!(
            refused(person(
                json!({"anyOf": [{"type": "string"}], "type": "string"})
            )),
            "schema.properties.name.type"
        );
        assert_eq!(
            refused(person(
                json!({"allOf": [{"type": "string"}, {"maxLength": 3}]})
            )),
            "schema.properties.name.allOf"
        );
        assert_eq!(
            refused(person(json!({"$ref": "other.json#/Pet"}))),
            "schema.properties.name.$ref"
        );
        assert_eq!(
            refused(person(json!({"type": ["string", "null"], "items": {}}))),
            "schema.properties.name.items"
        );
        assert_eq!(
            refused(person(json!({"type": "number", "minimum": 0}))),
            "schema.properties.name.minimum"
        );
        assert_eq!(
            refused(person(
                json!({"type": "string", "enum": ["a"], "maxLength": 3})
            )),
            "schema.properties.name.maxLength"
        );
        assert_eq!(
            refused(person(
                json!({"type": "string", "minLength": 3, "maxLength": 2})
            )),
            "schema.properties.name.maxLength"
        );
        assert_eq!(
            refused(person(
                json!({"type": "integer", "exclusiveMinimum": 1, "maximum": 1.5})
            )),
            "schema.properties.name"
        );
        assert_eq!(
            refused(person(json!({"type": "integer", "minimum": "0"}))),
            "schema.properties.name.minimum"
        );
        assert_eq!(refused(json!({"type": "array"})), "schema");
        assert_eq!(
            refused(json!({"type": "object", "required": ["x"]})),
            "schema.required"
        );
        assert_eq!(
            refused(json!({"type": "string", "items": {}})),
            "schema.items"
        );
        let mut deep = json!({"type": "string"});
        for _ in 0..40 {
            deep = json!({"type": "object", "properties": {"a": deep}});
        }
        assert!(Schema::compile(&deep)
            .unwrap_err()
            .message
            .contains("deeper"));
    }
}
