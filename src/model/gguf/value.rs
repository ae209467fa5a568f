//! GGUF metadata values: every scalar type, strings, and (nested) typed arrays.

use super::reader::Reader;
use crate::model::ModelError;

/// Deepest array nesting we accept; real files use at most one level.
const MAX_ARRAY_DEPTH: usize = 4;

/// GGUF value type ids, as written in the file.
mod type_id {
    pub const U8: u32 = 0;
    pub const I8: u32 = 1;
    pub const U16: u32 = 2;
    pub const I16: u32 = 3;
    pub const U32: u32 = 4;
    pub const I32: u32 = 5;
    pub const F32: u32 = 6;
    pub const BOOL: u32 = 7;
    pub const STRING: u32 = 8;
    pub const ARRAY: u32 = 9;
    pub const U64: u32 = 10;
    pub const I64: u32 = 11;
    pub const F64: u32 = 12;
}

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `uint8`.
    U8(u8),
    /// `int8`.
    I8(i8),
    /// `uint16`.
    U16(u16),
    /// `int16`.
    I16(i16),
    /// `uint32`.
    U32(u32),
    /// `int32`.
    I32(i32),
    /// `uint64`.
    U64(u64),
    /// `int64`.
    I64(i64),
    /// `float32`.
    F32(f32),
    /// `float64`.
    F64(f64),
    /// `bool`.
    Bool(bool),
    /// A UTF-8 string.
    Str(String),
    /// A homogeneous array.
    Array(Array),
}

/// A homogeneous metadata array, stored compactly by element type.
#[derive(Clone, Debug, PartialEq)]
pub enum Array {
    /// `uint8` elements.
    U8(Vec<u8>),
    /// `int8` elements.
    I8(Vec<i8>),
    /// `uint16` elements.
    U16(Vec<u16>),
    /// `int16` elements.
    I16(Vec<i16>),
    /// `uint32` elements.
    U32(Vec<u32>),
    /// `int32` elements.
    I32(Vec<i32>),
    /// `uint64` elements.
    U64(Vec<u64>),
    /// `int64` elements.
    I64(Vec<i64>),
    /// `float32` elements.
    F32(Vec<f32>),
    /// `float64` elements.
    F64(Vec<f64>),
    /// `bool` elements.
    Bool(Vec<bool>),
    /// String elements.
    Str(Vec<String>),
    /// Nested arrays (each with its own element type).
    Array(Vec<Array>),
}

impl Value {
    /// The value as an integer, whatever its width and signedness.
    pub fn as_integer(&self) -> Option<i128> {
        Some(match *self {
            Value::U8(v) => v.into(),
            Value::I8(v) => v.into(),
            Value::U16(v) => v.into(),
            Value::I16(v) => v.into(),
            Value::U32(v) => v.into(),
            Value::I32(v) => v.into(),
            Value::U64(v) => v.into(),
            Value::I64(v) => v.into(),
            _ => return None,
        })
    }

    /// Short name of the value's type, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::U8(_) => "u8",
            Value::I8(_) => "i8",
            Value::U16(_) => "u16",
            Value::I16(_) => "i16",
            Value::U32(_) => "u32",
            Value::I32(_) => "i32",
            Value::U64(_) => "u64",
            Value::I64(_) => "i64",
            Value::F32(_) => "f32",
            Value::F64(_) => "f64",
            Value::Bool(_) => "bool",
            Value::Str(_) => "string",
            Value::Array(_) => "array",
        }
    }
}

impl Array {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Array::U8(v) => v.len(),
            Array::I8(v) => v.len(),
            Array::U16(v) => v.len(),
            Array::I16(v) => v.len(),
            Array::U32(v) => v.len(),
            Array::I32(v) => v.len(),
            Array::U64(v) => v.len(),
            Array::I64(v) => v.len(),
            Array::F32(v) => v.len(),
            Array::F64(v) => v.len(),
            Array::Bool(v) => v.len(),
            Array::Str(v) => v.len(),
            Array::Array(v) => v.len(),
        }
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements as integers, or `None` when they are not integers.
    pub fn integers(&self) -> Option<Vec<i128>> {
        fn widen<T: Copy + Into<i128>>(v: &[T]) -> Option<Vec<i128>> {
            Some(v.iter().map(|&x| x.into()).collect())
        }
        match self {
            Array::U8(v) => widen(v),
            Array::I8(v) => widen(v),
            Array::U16(v) => widen(v),
            Array::I16(v) => widen(v),
            Array::U32(v) => widen(v),
            Array::I32(v) => widen(v),
            Array::U64(v) => widen(v),
            Array::I64(v) => widen(v),
            _ => None,
        }
    }
}

/// Reads one value of GGUF type `ty`.
pub(super) fn read_value(r: &mut Reader<'_>, ty: u32) -> Result<Value, ModelError> {
    Ok(match ty {
        type_id::U8 => Value::U8(u8::from_le_bytes(r.array("u8")?)),
        type_id::I8 => Value::I8(i8::from_le_bytes(r.array("i8")?)),
        type_id::U16 => Value::U16(u16::from_le_bytes(r.array("u16")?)),
        type_id::I16 => Value::I16(i16::from_le_bytes(r.array("i16")?)),
        type_id::U32 => Value::U32(r.u32("u32")?),
        type_id::I32 => Value::I32(i32::from_le_bytes(r.array("i32")?)),
        type_id::U64 => Value::U64(r.u64("u64")?),
        type_id::I64 => Value::I64(i64::from_le_bytes(r.array("i64")?)),
        type_id::F32 => Value::F32(f32::from_le_bytes(r.array("f32")?)),
        type_id::F64 => Value::F64(f64::from_le_bytes(r.array("f64")?)),
        type_id::BOOL => Value::Bool(read_bool(r)?),
        type_id::STRING => Value::Str(r.string("string")?),
        type_id::ARRAY => Value::Array(read_array(r, 1)?),
        other => return Err(r.err(format_args!("unknown metadata value type {other}"))),
    })
}

fn read_bool(r: &mut Reader<'_>) -> Result<bool, ModelError> {
    match r.array::<1>("bool")?[0] {
        0 => Ok(false),
        1 => Ok(true),
        b => Err(r.err(format_args!("bool byte {b} is neither 0 nor 1"))),
    }
}

/// Smallest encoding of one element of type `ty`, so counts can be bounded up front.
fn min_elem_bytes(r: &Reader<'_>, ty: u32) -> Result<usize, ModelError> {
    Ok(match ty {
        type_id::U8 | type_id::I8 | type_id::BOOL => 1,
        type_id::U16 | type_id::I16 => 2,
        type_id::U32 | type_id::I32 | type_id::F32 => 4,
        type_id::U64 | type_id::I64 | type_id::F64 | type_id::STRING => 8,
        type_id::ARRAY => 12,
        other => return Err(r.err(format_args!("unknown array element type {other}"))),
    })
}

fn read_array(r: &mut Reader<'_>, depth: usize) -> Result<Array, ModelError> {
    if depth > MAX_ARRAY_DEPTH {
        return Err(r.err(format_args!("arrays nested deeper than {MAX_ARRAY_DEPTH}")));
    }
    let ty = r.u32("array element type")?;
    let n = r.count(min_elem_bytes(r, ty)?, "array length")?;
    // `n` is bounded by the bytes left, so each `Vec` is at most a few times the file.
    fn many<T>(
        r: &mut Reader<'_>,
        n: usize,
        mut one: impl FnMut(&mut Reader<'_>) -> Result<T, ModelError>,
    ) -> Result<Vec<T>, ModelError> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(one(r)?);
        }
        Ok(out)
    }
    Ok(match ty {
        type_id::U8 => Array::U8(r.bytes(n, "u8 array")?.to_vec()),
        type_id::I8 => Array::I8(many(r, n, |r| Ok(i8::from_le_bytes(r.array("i8")?)))?),
        type_id::U16 => Array::U16(many(r, n, |r| Ok(u16::from_le_bytes(r.array("u16")?)))?),
        type_id::I16 => Array::I16(many(r, n, |r| Ok(i16::from_le_bytes(r.array("i16")?)))?),
        type_id::U32 => Array::U32(many(r, n, |r| r.u32("u32"))?),
        type_id::I32 => Array::I32(many(r, n, |r| Ok(i32::from_le_bytes(r.array("i32")?)))?),
        type_id::U64 => Array::U64(many(r, n, |r| r.u64("u64"))?),
        type_id::I64 => Array::I64(many(r, n, |r| Ok(i64::from_le_bytes(r.array("i64")?)))?),
        type_id::F32 => Array::F32(many(r, n, |r| Ok(f32::from_le_bytes(r.array("f32")?)))?),
        type_id::F64 => Array::F64(many(r, n, |r| Ok(f64::from_le_bytes(r.array("f64")?)))?),
        type_id::BOOL => Array::Bool(many(r, n, read_bool)?),
        type_id::STRING => Array::Str(many(r, n, |r| r.string("string"))?),
        type_id::ARRAY => Array::Array(many(r, n, |r| read_array(r, depth + 1))?),
        other => return Err(r.err(format_args!("unknown array element type {other}"))),
    })
}

/// Appends the GGUF encoding of `value` (type id, then payload) to `out`.
pub(super) fn write_value(out: &mut Vec<u8>, value: &Value) {
    let (ty, payload): (u32, Vec<u8>) = match value {
        Value::U8(v) => (type_id::U8, v.to_le_bytes().to_vec()),
        Value::I8(v) => (type_id::I8, v.to_le_bytes().to_vec()),
        Value::U16(v) => (type_id::U16, v.to_le_bytes().to_vec()),
        Value::I16(v) => (type_id::I16, v.to_le_bytes().to_vec()),
        Value::U32(v) => (type_id::U32, v.to_le_bytes().to_vec()),
        Value::I32(v) => (type_id::I32, v.to_le_bytes().to_vec()),
        Value::U64(v) => (type_id::U64, v.to_le_bytes().to_vec()),
        Value::I64(v) => (type_id::I64, v.to_le_bytes().to_vec()),
        Value::F32(v) => (type_id::F32, v.to_le_bytes().to_vec()),
        Value::F64(v) => (type_id::F64, v.to_le_bytes().to_vec()),
        Value::Bool(v) => (type_id::BOOL, vec![u8::from(*v)]),
        Value::Str(s) => {
            let mut p = Vec::new();
            write_string(&mut p, s);
            (type_id::STRING, p)
        }
        Value::Array(a) => {
            let mut p = Vec::new();
            write_array(&mut p, a);
            (type_id::ARRAY, p)
        }
    };
    out.extend_from_slice(&ty.to_le_bytes());
    out.extend_from_slice(&payload);
}

/// Appends a GGUF string (u64 length, then bytes).
pub(super) fn write_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn write_array(out: &mut Vec<u8>, array: &Array) {
    fn put<T, const N: usize>(out: &mut Vec<u8>, ty: u32, v: &[T], le: impl Fn(&T) -> [u8; N]) {
        out.extend_from_slice(&ty.to_le_bytes());
        out.extend_from_slice(&(v.len() as u64).to_le_bytes());
        v.iter().for_each(|x| out.extend_from_slice(&le(x)));
    }
    match array {
        Array::U8(v) => put(out, type_id::U8, v, |x| x.to_le_bytes()),
        Array::I8(v) => put(out, type_id::I8, v, |x| x.to_le_bytes()),
        Array::U16(v) => put(out, type_id::U16, v, |x| x.to_le_bytes()),
        Array::I16(v) => put(out, type_id::I16, v, |x| x.to_le_bytes()),
        Array::U32(v) => put(out, type_id::U32, v, |x| x.to_le_bytes()),
        Array::I32(v) => put(out, type_id::I32, v, |x| x.to_le_bytes()),
        Array::U64(v) => put(out, type_id::U64, v, |x| x.to_le_bytes()),
        Array::I64(v) => put(out, type_id::I64, v, |x| x.to_le_bytes()),
        Array::F32(v) => put(out, type_id::F32, v, |x| x.to_le_bytes()),
        Array::F64(v) => put(out, type_id::F64, v, |x| x.to_le_bytes()),
        Array::Bool(v) => put(out, type_id::BOOL, v, |&x| [u8::from(x)]),
        Array::Str(v) => {
            out.extend_from_slice(&type_id::STRING.to_le_bytes());
            out.extend_from_slice(&(v.len() as u64).to_le_bytes());
            v.iter().for_each(|s| write_string(out, s));
        }
        Array::Array(v) => {
            out.extend_from_slice(&type_id::ARRAY.to_le_bytes());
            out.extend_from_slice(&(v.len() as u64).to_le_bytes());
            v.iter().for_each(|a| write_array(out, a));
        }
    }
}
