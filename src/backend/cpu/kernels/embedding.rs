//! Embedding lookup: rows of a (possibly quantized) table by token id.

use super::check_len;
use crate::backend::cpu::quant::dequantize;
use crate::backend::{BackendError, SharedBytes};
use crate::graph::DType;

/// Writes rows `ids` of `table` (`rows` rows of `d` elements of `dtype`) to `out`
/// (`[ids.len(), d]`); an id outside the table is an input error naming it. Where the
/// table is mapped from the model file (`mapped`, the same bytes), each row is read
/// from the file instead of through the map: a lookup then maps none of the table's
/// pages, so a few hundred distinct tokens do not make the whole table resident (a
/// tied table would count twice beside the output head's packed copy), and no page has
/// to be given back after each step (decision 205).
pub(crate) fn embedding(
    table: &[u8],
    mapped: Option<&SharedBytes>,
    dtype: DType,
    rows: usize,
    d: usize,
    ids: &[i32],
    out: &mut [f32],
) -> Result<(), BackendError> {
    let row_bytes = dtype
        .bytes_for(d)
        .filter(|&b| b.checked_mul(rows) == Some(table.len()))
        .ok_or_else(|| {
            BackendError::Input(format!(
                "embedding table of {} bytes is not {rows} {dtype} rows of {d}",
                table.len()
            ))
        })?;
    check_len("embedding output", out.len(), ids.len() * d)?;
    let mut copied = Vec::new();
    for (&id, o) in ids.iter().zip(out.chunks_exact_mut(d.max(1))) {
        let row = usize::try_from(id)
            .ok()
            .filter(|&r| r < rows)
            .ok_or_else(|| {
                BackendError::Input(format!("token id {id} is outside the vocabulary of {rows}"))
            })?;
        let range = row * row_bytes..(row + 1) * row_bytes;
        let bytes = match mapped {
            Some(stored) if stored.as_bytes().len() == table.len() => {
                copied.resize(row_bytes, 0);
                if !stored.copy_range(range.clone(), &mut copied) {
                    return Err(BackendError::Bug(format!(
                        "embedding row {row} ({row_bytes} bytes) outside its {} stored bytes",
                        stored.as_bytes().len()
                    )));
                }
                &copied[..]
            }
            _ => &table[range],
        };
        dequantize(dtype, bytes, o)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use half::f16;

    use super::super::testutil::lcg;
    use super::*;

    #[test]
    fn rows_match_table_in_f32_f16_and_q8_0() {
        let (rows, d) = (5, 32);
        let table = lcg(30, rows * d);
        let ids = [4, 0, 4, 2];
        let f32_bytes: Vec<u8> = table.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut out = vec![0.0; ids.len() * d];
        embedding(&f32_bytes, None, DType::F32, rows, d, &ids, &mut out).unwrap();
        for (i, &id) in ids.iter().enumerate() {
            assert_eq!(
                out[i * d..(i + 1) * d],
                table[id as usize * d..(id as usize + 1) * d]
            );
        }
        let f16_bytes: Vec<u8> = table
            .iter()
            .flat_map(|&v| f16::from_f32(v).to_le_bytes())
            .collect();
        embedding(&f16_bytes, None, DType::F16, rows, d, &ids, &mut out).unwrap();
        assert_eq!(out[0], f16::from_f32(table[4 * d]).to_f32());
        // One Q8_0 block per row: scale 1/64, value j - 16 at position j.
        let block: Vec<u8> = f16::from_f32(1.0 / 64.0)
            .to_le_bytes()
            .into_iter()
            .chain((0..32).map(|j| (j as i8 - 16) as u8))
            .collect();
        let q8: Vec<u8> = block.iter().copied().cycle().take(rows * 34).collect();
        embedding(&q8, None, DType::Q8_0, rows, d, &ids, &mut out).unwrap();
        assert_eq!(out[d + 3], (3.0 - 16.0) / 64.0);
    }

    /// Rows read through the stored bytes (`mapped`) are the rows read in place.
    #[test]
    fn rows_read_from_stored_bytes_match_rows_read_in_place() {
        let (rows, d) = (7, 64);
        let block: Vec<u8> = f16::from_f32(0.5)
            .to_le_bytes()
            .into_iter()
            .chain((0..32).map(|j| (j as i8 * 3 - 40) as u8))
            .collect();
        let table: Vec<u8> = (0..rows * 2)
            .flat_map(|b| block.iter().map(move |&v| v.wrapping_add(b as u8)))
            .collect();
        let stored = crate::backend::SharedBytes::from_vec(table.clone());
        let ids = [6, 0, 3, 3];
        let (mut direct, mut copied) = (vec![0.0; ids.len() * d], vec![1.0; ids.len() * d]);
        embedding(&table, None, DType::Q8_0, rows, d, &ids, &mut direct).unwrap();
        embedding(
            &table,
            Some(&stored),
            DType::Q8_0,
            rows,
            d,
            &ids,
            &mut copied,
        )
        .unwrap();
        assert_eq!(direct, copied);
    }

    #[test]
    fn out_of_range_id_is_named() {
        let table = vec![0u8; 2 * 3 * 4];
        let mut out = vec![0.0; 3];
        for id in [2, -1] {
            match embedding(&table, None, DType::F32, 2, 3, &[id], &mut out) {
                Err(BackendError::Input(msg)) => assert!(msg.contains(&id.to_string())),
                other => panic!("expected input error, got {other:?}"),
            }
        }
    }
}
