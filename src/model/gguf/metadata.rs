//! The metadata key/value section of a GGUF file, with typed getters.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::reader::Reader;
use super::value::{read_value, Array, Value};
use crate::model::ModelError;

/// Smallest encoding of one key/value pair: key length, value type, one byte.
const MIN_KV_BYTES: usize = 8 + 4 + 1;

/// A GGUF file's metadata. Getters name the key (and the file) in their errors.
#[derive(Clone, Debug, PartialEq)]
pub struct Metadata {
    path: PathBuf,
    entries: BTreeMap<String, Value>,
}

impl Metadata {
    /// Reads the pair count, then the pairs; duplicate keys are errors.
    pub(super) fn read(r: &mut Reader<'_>, path: &Path) -> Result<Metadata, ModelError> {
        let n_kv = r.count(MIN_KV_BYTES, "metadata count")?;
        let mut entries = BTreeMap::new();
        for _ in 0..n_kv {
            let key = r.string("metadata key")?;
            let ty = r.u32("metadata value type")?;
            let value = read_value(r, ty).map_err(|e| in_key(e, &key))?;
            if entries.insert(key.clone(), value).is_some() {
                return Err(r.err(format_args!("duplicate metadata key {key:?}")));
            }
        }
        Ok(Metadata {
            path: path.to_owned(),
            entries,
        })
    }

    /// The file the metadata came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The value under `key`, if any.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.entries.get(key)
    }

    /// All pairs, sorted by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Number of pairs.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no pairs.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// An unsigned integer of any width that fits in `u32`.
    pub fn get_u32(&self, key: &str) -> Result<u32, ModelError> {
        let v = self.require(key)?;
        let n = v
            .as_integer()
            .ok_or_else(|| self.wrong(key, "an integer", v))?;
        u32::try_from(n).map_err(|_| self.err(key, format!("{n} does not fit in u32")))
    }

    /// A float (`f32`, or `f64` narrowed).
    pub fn get_f32(&self, key: &str) -> Result<f32, ModelError> {
        match self.require(key)? {
            Value::F32(v) => Ok(*v),
            Value::F64(v) => Ok(*v as f32),
            v => Err(self.wrong(key, "a float", v)),
        }
    }

    /// A bool.
    pub fn get_bool(&self, key: &str) -> Result<bool, ModelError> {
        match self.require(key)? {
            Value::Bool(b) => Ok(*b),
            v => Err(self.wrong(key, "a bool", v)),
        }
    }

    /// A string.
    pub fn get_str(&self, key: &str) -> Result<&str, ModelError> {
        match self.require(key)? {
            Value::Str(s) => Ok(s),
            v => Err(self.wrong(key, "a string", v)),
        }
    }

    /// An array of strings.
    pub fn get_str_array(&self, key: &str) -> Result<&[String], ModelError> {
        match self.require(key)? {
            Value::Array(Array::Str(v)) => Ok(v),
            v => Err(self.wrong(key, "an array of strings", v)),
        }
    }

    /// An array of integers of any width, each of which must fit in `i32`.
    pub fn get_i32_array(&self, key: &str) -> Result<Vec<i32>, ModelError> {
        let v = self.require(key)?;
        let ints = match v {
            Value::Array(a) => a.integers(),
            _ => None,
        }
        .ok_or_else(|| self.wrong(key, "an array of integers", v))?;
        ints.into_iter()
            .enumerate()
            .map(|(i, n)| {
                i32::try_from(n)
                    .map_err(|_| self.err(key, format!("element {i} ({n}) does not fit in i32")))
            })
            .collect()
    }

    /// An array of floats (`f32`, or `f64` narrowed).
    pub fn get_f32_array(&self, key: &str) -> Result<Vec<f32>, ModelError> {
        match self.require(key)? {
            Value::Array(Array::F32(v)) => Ok(v.clone()),
            Value::Array(Array::F64(v)) => Ok(v.iter().map(|&x| x as f32).collect()),
            v => Err(self.wrong(key, "an array of floats", v)),
        }
    }

    fn require(&self, key: &str) -> Result<&Value, ModelError> {
        self.get(key).ok_or_else(|| self.err(key, "missing".into()))
    }

    fn wrong(&self, key: &str, want: &str, got: &Value) -> ModelError {
        let got = match got {
            Value::Array(a) => format!("an array of {} elements", a.len()),
            v => format!("a {}", v.type_name()),
        };
        self.err(key, format!("expected {want}, found {got}"))
    }

    fn err(&self, key: &str, detail: String) -> ModelError {
        ModelError::Metadata {
            path: self.path.clone(),
            key: key.to_owned(),
            detail,
        }
    }
}

/// Prefixes a parse error with the key whose value it was reading.
fn in_key(e: ModelError, key: &str) -> ModelError {
    match e {
        ModelError::Format { path, detail } => ModelError::Format {
            path,
            detail: format!("metadata {key:?}: {detail}"),
        },
        other => other,
    }
}
