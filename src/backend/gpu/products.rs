//! Products of one activation by up to [`MAX_PARTS`] weights of one format in a single
//! dispatch (q, k and v; gate and up), each optionally adding a residual in its
//! epilogue. The kernel is generated: the weight format's reader and the product body
//! are repeated once per weight with their identifiers renamed (`w` → `w1`,
//! `block_load` → `block_load1`, ...), because WGSL cannot choose a storage buffer at
//! run time. A column's arithmetic is the single product's, so a part computes exactly
//! what it computed alone.

use super::device::Gpu;
use super::kernels::{self, Source};
use super::record::{dispatch, fold, word, Dispatch};
use crate::backend::BackendError;
use crate::graph::DType;

/// Most weights one product dispatch reads.
pub(super) const MAX_PARTS: usize = 4;

/// One weight of a product dispatch: its buffer and rows, its output, and the residual
/// added to the output, if any.
pub(super) struct PartBuffers<'a> {
    pub weight: &'a wgpu::Buffer,
    pub rows: usize,
    pub out: &'a wgpu::Buffer,
    pub residual: Option<&'a wgpu::Buffer>,
}

/// Renames the identifiers of `source` found in `names` by appending `suffix`; a
/// token-level rename, so `w` becomes `w1` while `wlo` and a field access `v.w` stay.
fn rename(source: &str, names: &[&str], suffix: &str) -> String {
    let mut out = String::with_capacity(source.len() + 64);
    let mut chars = source.char_indices().peekable();
    while let Some((start, c)) = chars.next() {
        if c.is_ascii_alphabetic() || c == '_' {
            let mut end = start + c.len_utf8();
            while let Some(&(i, d)) = chars.peek() {
                if d.is_ascii_alphanumeric() || d == '_' {
                    end = i + d.len_utf8();
                    chars.next();
                } else {
                    break;
                }
            }
            let ident = &source[start..end];
            out.push_str(ident);
            let field = source[..start].ends_with('.');
            if names.contains(&ident) && !field {
                out.push_str(suffix);
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Rows of x one product workgroup computes for a product of `m` rows: 8 for decode,
/// small batches and a prompt's 64-row chunks, where a GPU needs many workgroups, and 32
/// from [`MANY_ROWS`] rows on, where workgroups of 8 rows would read each weight row 16
/// times or more (decision 200). Either way each output's arithmetic is the same
/// (`products_head.wgsl`), so the choice never changes a result.
pub(super) fn rows_per_group(m: usize) -> usize {
    if m >= MANY_ROWS {
        32
    } else {
        kernels::MATMUL_ROWS
    }
}

/// Rows of a product from which its workgroups compute 32 rows each.
pub(super) const MANY_ROWS: usize = 128;

/// The kernel for `parts` weights of `dtype` computing `rows` rows a workgroup (8 or
/// 32); `residual[i]` says whether part `i` adds one.
pub(super) fn source(dtype: DType, residual: &[bool], rows: usize) -> Option<Source> {
    let (word, reader) = kernels::format(dtype)?;
    let blocks = dtype.is_quantized();
    let (xtype, body) = if blocks {
        ("vec4<u32>", kernels::MATMUL_BLOCKS)
    } else {
        ("f32", kernels::MATMUL_DENSE)
    };
    let mut names = kernels::FORMAT_NAMES.to_vec();
    names.push("accumulate");
    let parts = residual.len();
    let rows_n = format!("{rows}u");
    let mut wgsl = kernels::PRODUCTS_HEAD
        .replace("XTYPE", xtype)
        .replace("ROWS_N", &rows_n);
    let mut binding = 2;
    for g in 0..parts {
        wgsl += &format!("@group(0) @binding({binding}) var<storage, read> w{g}: array<{word}>;\n");
        binding += 1;
    }
    for g in 0..parts {
        wgsl +=
            &format!("@group(0) @binding({binding}) var<storage, read_write> y{g}: array<f32>;\n");
        binding += 1;
    }
    for (g, _) in residual.iter().enumerate().filter(|(_, r)| **r) {
        wgsl += &format!("@group(0) @binding({binding}) var<storage, read> r{g}: array<f32>;\n");
        binding += 1;
    }
    let mut accumulate = String::new();
    let mut store = String::new();
    for (g, has_residual) in residual.iter().enumerate() {
        let suffix = g.to_string();
        wgsl += &rename(reader, &names, &suffix);
        wgsl += "\n";
        wgsl += &rename(body, &names, &suffix);
        wgsl += "\n";
        let otherwise = if g == 0 { "" } else { " else" };
        accumulate += &format!(
            "{otherwise} if (g == {g}u) {{\n        accumulate{g}(col, row0, lane, acc);\n    }}"
        );
        let sum = if *has_residual {
            format!("sum + r{g}[i]")
        } else {
            "sum".into()
        };
        store += &format!("{otherwise} if (g == {g}u) {{\n        y{g}[i] = {sum};\n    }}");
    }
    wgsl += &format!(
        "fn accumulate_part(g: u32, col: u32, row0: u32, lane: u32, acc: ptr<function, array<f32, ROWS>>) {{\n   {accumulate}\n}}\n\nfn store(g: u32, i: u32, sum: f32) {{\n   {store}\n}}\n"
    );
    let flags: String = residual
        .iter()
        .map(|&r| if r { 'r' } else { '-' })
        .collect();
    Some(Source {
        kind: "matmul",
        name: format!("products/{dtype}/{rows}/{flags}"),
        wgsl,
    })
}

/// The dispatch computing every part's product of `x` (`m` rows of `k`; quantized
/// activations for block formats) by its weight of `dtype`.
pub(super) fn record(
    gpu: &Gpu,
    dtype: DType,
    x: &wgpu::Buffer,
    m: usize,
    k: usize,
    parts: &[PartBuffers<'_>],
) -> Result<Dispatch, BackendError> {
    let residual: Vec<bool> = parts.iter().map(|p| p.residual.is_some()).collect();
    let rows = rows_per_group(m);
    let source = source(dtype, &residual, rows)
        .ok_or_else(|| BackendError::Input(format!("the GPU has no product kernel for {dtype}")))?;
    let mut ends = [0u32; MAX_PARTS];
    let mut total = 0;
    for (g, part) in parts.iter().enumerate() {
        total += part.rows;
        ends[g] = word("product columns", total)?;
    }
    for end in ends.iter_mut().skip(parts.len()) {
        *end = word("product columns", total)?;
    }
    let (gx, gy) = fold(
        gpu,
        word("column groups", total.div_ceil(kernels::MATMUL_COLUMNS))?,
    );
    let mut params = vec![word("rows", m)?, word("k", k)?, gx, word("columns", total)?];
    params.extend_from_slice(&ends);
    let mut buffers = vec![x];
    buffers.extend(parts.iter().map(|p| p.weight));
    buffers.extend(parts.iter().map(|p| p.out));
    buffers.extend(parts.iter().filter_map(|p| p.residual));
    let groups = [gx, gy, word("row blocks", m.div_ceil(rows))?];
    dispatch(gpu, &source, &params, &buffers, groups)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rename_touches_whole_identifiers_only() {
        let src = "fn block_load(w: u32) -> u32 { let wlo = w[BLOCK_WORDS]; return wlo.w + w_x; }";
        let got = rename(src, &["w", "block_load", "BLOCK_WORDS"], "2");
        assert_eq!(
            got,
            "fn block_load2(w2: u32) -> u32 { let wlo = w2[BLOCK_WORDS2]; return wlo.w + w_x; }"
        );
    }

    /// Parses and validates `s` as naga (the WGSL front end wgpu compiles with) does.
    fn valid(s: &Source) {
        use wgpu::naga::{front::wgsl, valid};
        let module = wgsl::parse_str(&s.wgsl)
            .unwrap_or_else(|e| panic!("{}: {}", s.name, e.emit_to_string(&s.wgsl)));
        valid::Validator::new(valid::ValidationFlags::all(), valid::Capabilities::all())
            .validate(&module)
            .unwrap_or_else(|e| panic!("{}: {e:?}", s.name));
    }

    #[test]
    fn every_format_generates_a_valid_kernel_for_each_part_count() {
        for dtype in [
            DType::F32,
            DType::F16,
            DType::Q4_0,
            DType::Q4_1,
            DType::Q8_0,
            DType::BF16,
            DType::Q5_0,
            DType::Q5_1,
            DType::Q4K,
            DType::Q5K,
            DType::Q6K,
        ] {
            for (parts, rows) in (1..=MAX_PARTS).flat_map(|p| [(p, 8), (p, 32)]) {
                let residual: Vec<bool> = (0..parts).map(|g| g % 2 == 1).collect();
                let s = source(dtype, &residual, rows).expect("a kernel");
                for g in 0..parts {
                    assert!(s.wgsl.contains(&format!("fn accumulate{g}(")), "{}", s.name);
                    assert!(s.wgsl.contains(&format!("var<storage, read> w{g}:")));
                }
                assert_eq!(s.wgsl.contains("r1["), parts > 1, "{}", s.name);
                assert!(s.wgsl.contains(&format!("const ROWS: u32 = {rows}u;")));
                valid(&s);
            }
            valid(&kernels::embedding(dtype).expect("an embedding kernel"));
        }
        assert!(source(DType::Q3K, &[false], 8).is_none());
    }
}
