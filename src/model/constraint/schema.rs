//! JSON Schemas compiled for the validator: the subset OpenAI's structured outputs use
//! (`type`, `properties`, `required`, `additionalProperties`, `items`, `minItems`,
//! `maxItems`, `enum`, `const`; annotations such as `description` are read past). Any
//! other keyword is refused by its path, never ignored, since it would constrain the
//! output and we would not.

use serde_json::{Map, Value};

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
    /// A string.
    String,
    /// A number; only integers (no fraction or exponent) when `integer`.
    Number { integer: bool },
    /// `true` or `false`.
    Boolean,
    /// `null`.
    Null,
    /// Exactly one of these JSON texts, written compactly (`enum`, `const`).
    Choice(Vec<String>),
}

/// A compiled schema: node 0 is any value, 1 any object, 2 any array; the root is
/// [`Schema::root`].
#[derive(Clone, Debug, PartialEq)]
pub struct Schema {
    nodes: Vec<Node>,
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
            root: ANY_OBJECT,
        }
    }

    /// Compiles `schema`, whose top level must be an object type (as OpenAI requires).
    pub fn compile(schema: &Value) -> Result<Schema, SchemaError> {
        let mut compiler = Compiler {
            nodes: base_nodes(),
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

struct Compiler {
    nodes: Vec<Node>,
}

fn error(path: &str, message: impl Into<String>) -> SchemaError {
    SchemaError {
        path: path.to_string(),
        message: message.into(),
    }
}

impl Compiler {
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
        let known = [
            "type",
            "properties",
            "required",
            "additionalProperties",
            "items",
            "minItems",
            "maxItems",
            "enum",
            "const",
        ];
        if let Some(key) = map
            .keys()
            .find(|k| !known.contains(&k.as_str()) && !ANNOTATIONS.contains(&k.as_str()))
        {
            return Err(error(
                &format!("{path}.{key}"),
                format!("'{key}' is not supported yet"),
            ));
        }
        if let Some(choices) = choices(map, path)? {
            return self.add(Node::Choice(choices), path);
        }
        let kind = match map.get("type") {
            None if map.contains_key("properties") => "object",
            None if map.contains_key("items") => "array",
            None => "any",
            Some(Value::String(kind)) => kind.as_str(),
            Some(_) => {
                return Err(error(
                    &format!("{path}.type"),
                    "only a single type name is supported (not a list)",
                ))
            }
        };
        let node = match kind {
            "any" => return Ok(ANY),
            "object" => self.object(map, path, depth)?,
            "array" => self.array(map, path, depth)?,
            "string" => Node::String,
            "number" => Node::Number { integer: false },
            "integer" => Node::Number { integer: true },
            "boolean" => Node::Boolean,
            "null" => Node::Null,
            other => {
                return Err(error(
                    &format!("{path}.type"),
                    format!("unknown type '{other}'"),
                ))
            }
        };
        for key in ["properties", "required", "additionalProperties"] {
            if kind != "object" && map.contains_key(key) {
                return Err(error(
                    &format!("{path}.{key}"),
                    format!("'{key}' needs type object"),
                ));
            }
        }
        for key in ["items", "minItems", "maxItems"] {
            if kind != "array" && map.contains_key(key) {
                return Err(error(
                    &format!("{path}.{key}"),
                    format!("'{key}' needs type array"),
                ));
            }
        }
        self.add(node, path)
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
        let count = |key: &str| match map.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .map(|n| Some(n as usize))
                .ok_or_else(|| error(&format!("{path}.{key}"), "must be a non-negative integer")),
        };
        let (min, max) = (count("minItems")?.unwrap_or(0), count("maxItems")?);
        if max.is_some_and(|max| max < min) {
            return Err(error(&format!("{path}.maxItems"), "is below minItems"));
        }
        Ok(Node::Array { items, min, max })
    }
}

/// The compact JSON texts an `enum` or `const` allows, if it has either.
fn choices(map: &Map<String, Value>, path: &str) -> Result<Option<Vec<String>>, SchemaError> {
    let values = match (map.get("enum"), map.get("const")) {
        (Some(_), Some(_)) => return Err(error(path, "'enum' and 'const' together")),
        (Some(Value::Array(values)), None) if !values.is_empty() => values.clone(),
        (Some(_), None) => return Err(error(&format!("{path}.enum"), "must be a non-empty array")),
        (None, Some(value)) => vec![value.clone()],
        (None, None) => return Ok(None),
    };
    Ok(Some(values.iter().map(Value::to_string).collect()))
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
            refused(person(json!({"type": "string", "pattern": "^a"}))),
            "schema.properties.name.pattern"
        );
        assert_eq!(
            refused(person(json!({"anyOf": []}))),
            "schema.properties.name.anyOf"
        );
        assert_eq!(
            refused(person(json!({"$ref": "#/x"}))),
            "schema.properties.name.$ref"
        );
        assert_eq!(
            refused(person(json!({"type": ["string", "null"]}))),
            "schema.properties.name.type"
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
