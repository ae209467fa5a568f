//! Summary statistics of repeated measurements: median, min, max, a 95% confidence
//! interval of the mean, a distribution-free confidence interval of the median (order
//! statistics) and the ratio of two medians with an interval that holds at 95%.

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

/// Median, extremes and a confidence interval of the median that assumes nothing about
/// the distribution (timings are skewed: a few slow runs must not move the interval).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct MedianSummary {
    /// Number of measurements.
    pub n: usize,
    /// Middle value (mean of the two middle values for an even count).
    pub median: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// Order-statistics interval holding the true median with at least 95% probability;
    /// `None` below six values, where even `[min, max]` covers less than 95%.
    pub ci95: Option<[f64; 2]>,
    /// Arithmetic mean: what a user pays on average, rare slow runs included.
    pub mean: f64,
    /// 99th percentile (nearest rank): the slow tail.
    pub p99: f64,
}

impl MedianSummary {
    /// Summarizes `values`; `None` when there are none or any is not finite.
    pub fn of(values: &[f64]) -> Option<MedianSummary> {
        let sorted = sorted_finite(values)?;
        Some(MedianSummary {
            n: sorted.len(),
            median: median_of_sorted(&sorted),
            min: sorted[0],
            max: sorted[sorted.len() - 1],
            ci95: median_ci_of_sorted(&sorted, 0.95),
            mean: sorted.iter().sum::<f64>() / sorted.len() as f64,
            p99: percentile_of_sorted(&sorted, 0.99),
        })
    }
}

/// The nearest-rank `q` quantile of ascending, non-empty `sorted`.
fn percentile_of_sorted(sorted: &[f64], q: f64) -> f64 {
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// 1-based ranks `(low, high)` of the order statistics that bound the median with at
/// least `confidence` probability in `n` values: the largest `low` with
/// `P(Binomial(n, ½) < low) ≤ (1 − confidence) / 2`, and `high = n + 1 − low`.
/// `None` when `n` values are too few for that confidence or it is not in (0, 1).
pub fn median_ci_ranks(n: usize, confidence: f64) -> Option<(usize, usize)> {
    if n == 0 || !(confidence > 0.0 && confidence < 1.0) {
        return None;
    }
    let tail = (1.0 - confidence) / 2.0;
    // ln P(B = i) built up incrementally, so large n neither overflows nor underflows.
    let ln_half_pow_n = -(n as f64) * std::f64::consts::LN_2;
    let mut ln_choose = 0.0;
    let mut below = 0.0; // P(B < low) for the candidate `low`.
    let mut low = 0;
    for i in 0..n / 2 {
        let p = (ln_choose + ln_half_pow_n).exp();
        if below + p > tail {
            break;
        }
        below += p;
        low = i + 1;
        ln_choose += ((n - i) as f64).ln() - ((i + 1) as f64).ln();
    }
    (low >= 1).then_some((low, n + 1 - low))
}

/// The ratio of two medians, `median(numerator) / median(denominator)`, with an interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Ratio {
    /// The ratio of the medians.
    pub value: f64,
    /// Holds the true ratio with at least 95% probability: the extreme ratios of two
    /// 97.5% median intervals (Bonferroni, so no independence is assumed); `None` when
    /// either side has too few values.
    pub ci95: Option<[f64; 2]>,
}

/// [`Ratio`] of the median of `numerator` to that of `denominator`; `None` when either
/// is empty, holds a value that is not finite, or the denominator's median is not positive.
pub fn ratio_of_medians(numerator: &[f64], denominator: &[f64]) -> Option<Ratio> {
    let top = sorted_finite(numerator)?;
    let bottom = sorted_finite(denominator)?;
    let bottom_median = median_of_sorted(&bottom);
    if bottom_median <= 0.0 {
        return None;
    }
    let ci95 = match (
        median_ci_of_sorted(&top, 0.975),
        median_ci_of_sorted(&bottom, 0.975),
    ) {
        (Some([top_low, top_high]), Some([bottom_low, bottom_high])) if bottom_low > 0.0 => {
            Some([top_low / bottom_high, top_high / bottom_low])
        }
        _ => None,
    };
    Some(Ratio {
        value: median_of_sorted(&top) / bottom_median,
        ci95,
    })
}

fn median_ci_of_sorted(sorted: &[f64], confidence: f64) -> Option<[f64; 2]> {
    let (low, high) = median_ci_ranks(sorted.len(), confidence)?;
    Some([sorted[low - 1], sorted[high - 1]])
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
    fn median_ci_ranks_match_the_binomial_table() {
        // Published ranks for a 95% interval of the median (e.g. Conover, Table A3).
        assert_eq!(median_ci_ranks(6, 0.95), Some((1, 6)));
        assert_eq!(median_ci_ranks(10, 0.95), Some((2, 9)));
        assert_eq!(median_ci_ranks(20, 0.95), Some((6, 15)));
        assert_eq!(median_ci_ranks(50, 0.95), Some((18, 33)));
        assert_eq!(median_ci_ranks(100, 0.95), Some((40, 61)));
        // Five values cannot reach 95%: [min, max] covers 1 - 2/32 = 93.75%.
        assert_eq!(median_ci_ranks(5, 0.95), None);
        assert_eq!(median_ci_ranks(0, 0.95), None);
        assert_eq!(median_ci_ranks(10, 1.0), None);
        // Stays finite and sensible far beyond f64's 2^-1074.
        let (low, high) = median_ci_ranks(5000, 0.95).unwrap();
        assert_eq!(low + high, 5001);
        assert!((2428..=2432).contains(&low), "{low}");
    }

    #[test]
    fn median_summary_uses_order_statistics() {
        let values: Vec<f64> = (1..=50).rev().map(f64::from).collect();
        let s = MedianSummary::of(&values).unwrap();
        assert_eq!((s.n, s.median, s.min, s.max), (50, 25.5, 1.0, 50.0));
        assert_eq!(s.ci95, Some([18.0, 33.0]));
        // One wild outlier moves neither the median nor its interval.
        let mut outlier = values.clone();
        outlier[0] = 1e9;
        assert_eq!(
            MedianSummary::of(&outlier).unwrap().ci95,
            Some([18.0, 33.0])
        );
        assert_eq!(MedianSummary::of(&[1.0, 2.0, 3.0]).unwrap().ci95, None);
        assert_eq!(MedianSummary::of(&[1.0, f64::NAN]), None);
    }

    #[test]
    fn ratio_of_medians_brackets_its_value() {
        let slow: Vec<f64> = (1..=50).map(|v| f64::from(v) * 2.0).collect();
        let fast: Vec<f64> = (1..=50).map(f64::from).collect();
        let r = ratio_of_medians(&slow, &fast).unwrap();
        assert_eq!(r.value, 2.0);
        let [low, high] = r.ci95.unwrap();
        // 97.5% ranks for 50 values are (17, 34).
        assert_eq!(median_ci_ranks(50, 0.975), Some((17, 34)));
        assert_eq!([low, high], [34.0 / 34.0, 68.0 / 17.0]);
        assert!(ratio_of_medians(&slow[..3], &fast[..3])
            .unwrap()
            .ci95
            .is_none());
        assert_eq!(ratio_of_medians(&slow, &[0.0]), None);
        assert_eq!(ratio_of_medians(&[], &fast), None);
    }

    #[test]
    fn ci95_of_constant_values_is_a_point_and_large_samples_use_the_approximation() {
        assert_eq!(mean_ci95(&[2.0, 2.0, 2.0]), Some([2.0, 2.0]));
        assert!(mean_ci95(&[1.0]).is_none());
        assert!((t95(120) - 1.980).abs() < 0.002);
        assert!((t95(31) - 2.040).abs() < 0.002);
    }
}
