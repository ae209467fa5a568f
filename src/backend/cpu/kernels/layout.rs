//! Data-movement kernels on raw bytes of any element size: transpose, concat, slice.
//! Reshape is a plain copy and needs no kernel.

use crate::backend::BackendError;

/// Row-major strides (in elements) of `dims`.
fn strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1; dims.len()];
    for a in (0..dims.len().saturating_sub(1)).rev() {
        s[a] = s[a + 1] * dims[a + 1];
    }
    s
}

/// The error for operands whose byte sizes contradict their shapes.
fn size_error(what: &str) -> BackendError {
    BackendError::Input(format!("{what}: operand sizes do not match their shapes"))
}

/// Output axis `i` is input axis `perm[i]`; `elem` bytes per element.
pub(crate) fn transpose(
    x: &[u8],
    dims: &[usize],
    perm: &[usize],
    elem: usize,
    out: &mut [u8],
) -> Result<(), BackendError> {
    let mut seen = vec![false; dims.len()];
    let valid = perm.len() == dims.len()
        && perm
            .iter()
            .all(|&p| p < dims.len() && !std::mem::replace(&mut seen[p], true));
    let numel: usize = dims.iter().product();
    if !valid || x.len() != numel * elem || out.len() != x.len() {
        return Err(size_error("transpose"));
    }
    let in_strides = strides(dims);
    let out_dims: Vec<usize> = perm.iter().map(|&p| dims[p]).collect();
    // Input stride of each output axis, walked with an odometer over output indices.
    let walk: Vec<usize> = perm.iter().map(|&p| in_strides[p]).collect();
    let mut index = vec![0usize; dims.len()];
    let mut src = 0usize;
    for o in out.chunks_exact_mut(elem.max(1)).take(numel) {
        o.copy_from_slice(&x[src * elem..(src + 1) * elem]);
        for a in (0..index.len()).rev() {
            index[a] += 1;
            src += walk[a];
            if index[a] < out_dims[a] {
                break;
            }
            src -= walk[a] * index[a];
            index[a] = 0;
        }
    }
    Ok(())
}

/// Joins `parts` (bytes and dims, equal off `axis`) along `axis`.
pub(crate) fn concat(
    parts: &[(&[u8], &[usize])],
    axis: usize,
    elem: usize,
    out: &mut [u8],
) -> Result<(), BackendError> {
    let Some(&(_, first)) = parts.first() else {
        return Err(size_error("concat"));
    };
    if axis >= first.len() {
        return Err(size_error("concat"));
    }
    let outer: usize = first[..axis].iter().product();
    let inner: usize = first[axis + 1..].iter().product::<usize>() * elem;
    let mut chunks = Vec::with_capacity(parts.len());
    for &(bytes, dims) in parts {
        if dims.len() != first.len() {
            return Err(size_error("concat"));
        }
        let chunk = dims[axis] * inner;
        if bytes.len() != outer * chunk {
            return Err(size_error("concat"));
        }
        chunks.push(chunk);
    }
    if out.len() != outer * chunks.iter().sum::<usize>() {
        return Err(size_error("concat"));
    }
    let mut at = 0;
    for o in 0..outer {
        for (&(bytes, _), &chunk) in parts.iter().zip(&chunks) {
            out[at..at + chunk].copy_from_slice(&bytes[o * chunk..(o + 1) * chunk]);
            at += chunk;
        }
    }
    Ok(())
}

/// The range `start..end` of `axis` of `x`.
pub(crate) fn slice(
    x: &[u8],
    dims: &[usize],
    axis: usize,
    (start, end): (usize, usize),
    elem: usize,
    out: &mut [u8],
) -> Result<(), BackendError> {
    if axis >= dims.len() || start > end || end > dims[axis] {
        return Err(size_error("slice"));
    }
    let outer: usize = dims[..axis].iter().product();
    let inner: usize = dims[axis + 1..].iter().product::<usize>() * elem;
    let (full, kept) = (dims[axis] * inner, (end - start) * inner);
    if x.len() != outer * full || out.len() != outer * kept {
        return Err(size_error("slice"));
    }
    for o in 0..outer {
        out[o * kept..(o + 1) * kept].copy_from_slice(&x[o * full + start * inner..][..kept]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(v: &[u32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    fn words(b: &[u8]) -> Vec<u32> {
        b.chunks(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    #[test]
    fn transpose_matches_naive_3d() {
        let dims = [2, 3, 5];
        let x: Vec<u32> = (0..30).collect();
        let perm = [2, 0, 1];
        let mut out = vec![0u8; 120];
        transpose(&bytes(&x), &dims, &perm, 4, &mut out).unwrap();
        let got = words(&out);
        // out[c][a][b] = x[a][b][c]
        for a in 0..2 {
            for b in 0..3 {
                for c in 0..5 {
                    assert_eq!(got[c * 6 + a * 3 + b], x[a * 15 + b * 5 + c]);
                }
            }
        }
        assert!(transpose(&bytes(&x), &dims, &[0, 0, 1], 4, &mut out).is_err());
    }

    #[test]
    fn concat_and_slice_round_trip() {
        let a: Vec<u32> = (0..6).collect();
        let b: Vec<u32> = (100..109).collect();
        let (ab, bb) = (bytes(&a), bytes(&b));
        let mut out = vec![0u8; 60];
        concat(&[(&ab, &[3, 2]), (&bb, &[3, 3])], 1, 4, &mut out).unwrap();
        assert_eq!(
            words(&out),
            [0, 1, 100, 101, 102, 2, 3, 103, 104, 105, 4, 5, 106, 107, 108]
        );
        let mut back = vec![0u8; 36];
        slice(&out, &[3, 5], 1, (2, 5), 4, &mut back).unwrap();
        assert_eq!(words(&back), b);
        assert!(slice(&out, &[3, 5], 1, (2, 6), 4, &mut back).is_err());
    }
}
