//! A bounds-checked little-endian cursor over the bytes of a GGUF file.

use std::path::Path;

use crate::model::ModelError;

/// Reads GGUF primitives from `buf`, failing (never panicking) at the end of the data.
pub(super) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl<'a> Reader<'a> {
    /// A cursor at the start of `buf`, which came from `path`.
    pub(super) fn new(buf: &'a [u8], path: &'a Path) -> Reader<'a> {
        Reader { buf, pos: 0, path }
    }

    /// Offset of the next byte to read.
    pub(super) fn pos(&self) -> usize {
        self.pos
    }

    /// Bytes left after the cursor.
    pub(super) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// A format error located at the cursor.
    pub(super) fn err(&self, detail: impl std::fmt::Display) -> ModelError {
        ModelError::format(self.path, format!("at byte {}: {detail}", self.pos))
    }

    /// An "unsupported" error located at the cursor.
    pub(super) fn unsupported(&self, detail: impl std::fmt::Display) -> ModelError {
        ModelError::unsupported(self.path, format!("at byte {}: {detail}", self.pos))
    }

    /// The next `n` bytes.
    pub(super) fn bytes(&mut self, n: usize, what: &str) -> Result<&'a [u8], ModelError> {
        if n > self.remaining() {
            return Err(self.err(format_args!(
                "truncated: {what} needs {n} bytes, {} left",
                self.remaining()
            )));
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    /// The next `N` bytes as an array.
    pub(super) fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], ModelError> {
        let mut out = [0; N];
        out.copy_from_slice(self.bytes(N, what)?);
        Ok(out)
    }

    /// A little-endian `u32`.
    pub(super) fn u32(&mut self, what: &str) -> Result<u32, ModelError> {
        self.array(what).map(u32::from_le_bytes)
    }

    /// A little-endian `u64`.
    pub(super) fn u64(&mut self, what: &str) -> Result<u64, ModelError> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// A `u64` that must fit in `usize`.
    pub(super) fn usize(&mut self, what: &str) -> Result<usize, ModelError> {
        let v = self.u64(what)?;
        usize::try_from(v).map_err(|_| self.err(format_args!("{what} {v} is too large")))
    }

    /// A `u64` element count for items of at least `min_elem_bytes` each, checked
    /// against the bytes left so that callers may allocate `count` items.
    pub(super) fn count(&mut self, min_elem_bytes: usize, what: &str) -> Result<usize, ModelError> {
        let n = self.u64(what)?;
        self.check_count(n, min_elem_bytes, what)
    }

    /// Checks a count read earlier against the bytes left, as [`Reader::count`] does.
    pub(super) fn check_count(
        &self,
        n: u64,
        min_elem_bytes: usize,
        what: &str,
    ) -> Result<usize, ModelError> {
        usize::try_from(n)
            .ok()
            .filter(|&n| {
                n.checked_mul(min_elem_bytes)
                    .is_some_and(|b| b <= self.remaining())
            })
            .ok_or_else(|| {
                self.err(format_args!(
                    "{what} {n} cannot fit in the {} bytes left",
                    self.remaining()
                ))
            })
    }

    /// A GGUF string: a `u64` byte length, then UTF-8 bytes.
    pub(super) fn string(&mut self, what: &str) -> Result<String, ModelError> {
        let len = self.count(1, what)?;
        let bytes = self.bytes(len, what)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(_) => Err(ModelError::format(
                self.path,
                format!("at byte {}: {what} is not UTF-8", self.pos - len),
            )),
        }
    }
}
