//! Every ggml tensor type id with its name, and the ones Switchyard reads with their
//! dtypes, so that a file using a type we do not read is refused by name
//! (`IQ2_XXS`, not `type 16`).

use crate::graph::DType;

/// ggml's type ids and names (`enum ggml_type`), including ids ggml has since retired
/// (`Q4_2`, `Q4_0_4_4`, ...), which no current file should hold but which name an old
/// one better than a number.
const NAMES: [(u32, &str); 42] = [
    (0, "F32"),
    (1, "F16"),
    (2, "Q4_0"),
    (3, "Q4_1"),
    (4, "Q4_2 (retired)"),
    (5, "Q4_3 (retired)"),
    (6, "Q5_0"),
    (7, "Q5_1"),
    (8, "Q8_0"),
    (9, "Q8_1"),
    (10, "Q2_K"),
    (11, "Q3_K"),
    (12, "Q4_K"),
    (13, "Q5_K"),
    (14, "Q6_K"),
    (15, "Q8_K"),
    (16, "IQ2_XXS"),
    (17, "IQ2_XS"),
    (18, "IQ3_XXS"),
    (19, "IQ1_S"),
    (20, "IQ4_NL"),
    (21, "IQ3_S"),
    (22, "IQ2_S"),
    (23, "IQ4_XS"),
    (24, "I8"),
    (25, "I16"),
    (26, "I32"),
    (27, "I64"),
    (28, "F64"),
    (29, "IQ1_M"),
    (30, "BF16"),
    (31, "Q4_0_4_4 (retired)"),
    (32, "Q4_0_4_8 (retired)"),
    (33, "Q4_0_8_8 (retired)"),
    (34, "TQ1_0"),
    (35, "TQ2_0"),
    (36, "IQ4_NL_4_4 (retired)"),
    (37, "IQ4_NL_4_8 (retired)"),
    (38, "IQ4_NL_8_8 (retired)"),
    (39, "MXFP4"),
    (40, "NVFP4"),
    (41, "Q1_0"),
];

/// ggml type ids we read and write, with their dtypes. ggml's `I32` (26) is not here:
/// GGUF weights are never integer tensors in the models we load.
const SUPPORTED: [(u32, DType); 15] = [
    (0, DType::F32),
    (1, DType::F16),
    (2, DType::Q4_0),
    (3, DType::Q4_1),
    (6, DType::Q5_0),
    (7, DType::Q5_1),
    (8, DType::Q8_0),
    (10, DType::Q2K),
    (11, DType::Q3K),
    (12, DType::Q4K),
    (13, DType::Q5K),
    (14, DType::Q6K),
    (20, DType::IQ4NL),
    (23, DType::IQ4XS),
    (30, DType::BF16),
];

/// The dtype of ggml type `id`, if we support it.
pub fn dtype_from_ggml(id: u32) -> Option<DType> {
    SUPPORTED.iter().find(|(t, _)| *t == id).map(|&(_, d)| d)
}

/// The ggml type id of `dtype`, if GGUF files may hold it.
pub fn ggml_from_dtype(dtype: DType) -> Option<u32> {
    SUPPORTED.iter().find(|(_, d)| *d == dtype).map(|&(t, _)| t)
}

/// ggml's name of type `id` (`Q5_0`, `IQ2_XXS`), or `None` for an id ggml never had.
pub fn ggml_type_name(id: u32) -> Option<&'static str> {
    NAMES.iter().find(|(t, _)| *t == id).map(|&(_, n)| n)
}

/// The names of the ggml types we read, comma-separated, for error messages.
pub(super) fn supported_names() -> String {
    SUPPORTED
        .iter()
        .filter_map(|&(id, _)| ggml_type_name(id))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_every_supported_id_has_a_name() {
        for (i, (id, _)) in NAMES.iter().enumerate() {
            assert!(NAMES[i + 1..].iter().all(|(other, _)| other != id), "{id}");
        }
        for (id, dtype) in SUPPORTED {
            let name = ggml_type_name(id).unwrap();
            // Our dtype names are ggml's, lower-cased.
            assert_eq!(name.to_lowercase(), dtype.name(), "{id}");
            assert_eq!(dtype_from_ggml(id), Some(dtype));
            assert_eq!(ggml_from_dtype(dtype), Some(id));
        }
    }

    #[test]
    fn every_block_dtype_and_float_is_readable() {
        for dtype in DType::ALL {
            assert_eq!(
                ggml_from_dtype(dtype).is_some(),
                dtype != DType::I32,
                "{dtype}"
            );
        }
    }

    #[test]
    fn names_follow_ggml() {
        assert_eq!(ggml_type_name(6), Some("Q5_0"));
        assert_eq!(ggml_type_name(16), Some("IQ2_XXS"));
        assert_eq!(ggml_type_name(34), Some("TQ1_0"));
        assert_eq!(ggml_type_name(39), Some("MXFP4"));
        assert_eq!(ggml_type_name(1000), None);
    }
}
