//! Summary statistics of repeated measurements: median, min, max and a 95% confidence
//! interval of the mean.

use serde::Serialize;

/// Median, extremes and spread of a set of measurements.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Summary {
    /// Number of measurements.
    pub n: usize,
    /// Middle value (mean of the two middle values for an even count).
    pub median: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// 95% confidence interval of the mean, `[low, high]`; `None` below two values.
    pub ci95: Option<[f64; 2]>,
}

impl Summary {
    /// Summarizes `values`; `None` when there are none or any is not finite.
    pub fn of(values: &[f64]) -> Option<Summary> {
        let sorted = sorted_finite(values)?;
        Some(Summary {
            n: sorted.len(),
            median: median_of_sorted(&sorted),
            min: sorted[0],
            max: sorted[sorted.len() - 1],
            ci95: mean_ci95(values),
        })
    }
}

/// The median of `values`; `None` when there are none or any is not finite.
pub fn median(values: &[f64]) -> Option<f64> {
    sorted_finite(values).map(|s| median_of_sorted(&s))
}

/// Mean of `values`; `None` when there are none or any is not finite.
pub fn mean(values: &[f64]) -> Option<f64> {
    sorted_finite(values).map(|s| s.iter().sum::<f64>() / s.len() as f64)
}

/// The 95% confidence interval of the mean, `[low, high]`, from Student's t
/// distribution; `None` for fewer than two values or any value that is not finite.
pub fn mean_ci95(values: &[f64]) -> Option<[f64; 2]> {
    let n = values.len();
    if n < 2 {
        return None;
    }
    let m = mean(values)?;
    let variance = values.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (n - 1) as f64;
    let half = t95(n - 1) * (variance / n as f64).sqrt();
    Some([m - half, m + half])
}

/// Two-sided 95% critical value of Student's t with `df` degrees of freedom (`df` ≥ 1).
fn t95(df: usize) -> f64 {
    const TABLE: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::INFINITY,
        1..=30 => TABLE[df - 1],
        // Within 0.002 of the exact value for every df above 30.
        _ => 1.96 + 2.5 / df as f64,
    }
}

fn sorted_finite(values: &[f64]) -> Option<Vec<f64>> {
    if values.is_empty() || values.iter().any(|v| !v.is_finite()) {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    Some(sorted)
}

fn median_of_sorted(sorted: &[f64]) -> f64 {
    let mid = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_count_is_the_middle_value() {
        assert_eq!(median(&[5.0, 1.0, 3.0]), Some(3.0));
        assert_eq!(median(&[7.0]), Some(7.0));
    }

    #[test]
    fn median_of_even_count_averages_the_middle_pair() {
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[1.0, 2.0]), Some(1.5));
    }

    #[test]
    fn empty_or_non_finite_input_has_no_statistics() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[1.0, f64::NAN]), None);
        assert_eq!(Summary::of(&[f64::INFINITY]), None);
        assert_eq!(mean_ci95(&[1.0, f64::NAN, 2.0]), None);
    }

    #[test]
    fn summary_reports_extremes_and_count() {
        let s = Summary::of(&[3.0, 9.0, 1.0, 5.0]).unwrap();
        assert_eq!((s.n, s.median, s.min, s.max), (4, 4.0, 1.0, 9.0));
        assert!(s.ci95.is_some());
        assert_eq!(Summary::of(&[2.0]).unwrap().ci95, None);
    }

    #[test]
    fn ci95_matches_a_hand_computed_interval() {
        // mean 3, sample sd sqrt(2.5), n 5, t(4) 2.776: half-width 2.776 * sqrt(0.5).
        let [low, high] = mean_ci95(&[1.0, 2.0, 3.0, 4.0, 5.0]).unwrap();
        let half = 2.776 * 0.5f64.sqrt();
        assert!((low - (3.0 - half)).abs() < 1e-12);
        assert!((high - (3.0 + half)).abs() < 1e-12);
    }

    #[test]
    fn ci95_of_constant_values_is_a_point_and_large_samples_use_the_approximation() {
        assert_eq!(mean_ci95(&[2.0, 2.0, 2.0]), Some([2.0, 2.0]));
        assert!(mean_ci95(&[1.0]).is_none());
        assert!((t95(120) - 1.980).abs() < 0.002);
        assert!((t95(31) - 2.040).abs() < 0.002);
    }
}
