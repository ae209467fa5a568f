//! The fairness bench's speedups as a hand-written SVG: per arm, a horizontal bar for the
//! prefill (TTFT) speedup and one for the decode speedup over the baseline, each with its
//! 95% interval as a whisker, and a line at 1.0. Every piece of text is XML-escaped.

use std::fmt::Write;

use super::report::FairnessReport;
use super::stats::Ratio;

const WIDTH: f64 = 720.0;
const PLOT_LEFT: f64 = 180.0;
const PLOT_RIGHT: f64 = 660.0;
const TOP: f64 = 64.0;
const BAR_HEIGHT: f64 = 14.0;
const ARM_HEIGHT: f64 = 44.0;
const PREFILL_COLOUR: &str = "#4c78a8";
const DECODE_COLOUR: &str = "#f58518";

/// The report's prefill and decode speedups as an SVG document.
pub fn speedup_svg(report: &FairnessReport) -> String {
    let axis_max = axis_max(report);
    let x = |ratio: f64| PLOT_LEFT + (ratio / axis_max).clamp(0.0, 1.0) * (PLOT_RIGHT - PLOT_LEFT);
    let plot_bottom = TOP + ARM_HEIGHT * report.arms.len() as f64;
    let height = plot_bottom + 48.0;
    let mut svg = String::new();
    // Writing to a String cannot fail, so the results of `write!` are ignored below.
    let _ = write!(
        svg,
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" \
         viewBox=\"0 0 {WIDTH} {height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect x=\"0\" y=\"0\" width=\"{WIDTH}\" height=\"{height}\" fill=\"white\"/>\n"
    );
    let forced = if report.forced { " (FORCED)" } else { "" };
    let _ = writeln!(
        svg,
        "<text x=\"10\" y=\"20\" font-size=\"14\">Speedup over {}{forced}: median, 95% CI; \
         {} timed rounds, seed {}</text>",
        escape(&report.baseline),
        report.timed_rounds,
        report.seed
    );
    for (i, (label, colour)) in [
        ("prefill (TTFT)", PREFILL_COLOUR),
        ("decode", DECODE_COLOUR),
    ]
    .into_iter()
    .enumerate()
    {
        let left = PLOT_LEFT + 140.0 * i as f64;
        let _ = writeln!(
            svg,
            "<rect x=\"{left:.1}\" y=\"32\" width=\"12\" height=\"12\" fill=\"{colour}\"/>\
             <text x=\"{:.1}\" y=\"42\">{label}</text>",
            left + 16.0
        );
    }
    for tick in ticks(axis_max) {
        let tx = x(tick);
        let _ = writeln!(
            svg,
            "<line x1=\"{tx:.1}\" y1=\"{TOP}\" x2=\"{tx:.1}\" y2=\"{plot_bottom:.1}\" \
             stroke=\"#dddddd\"/><text x=\"{tx:.1}\" y=\"{:.1}\" \
             text-anchor=\"middle\">{tick:.2}×</text>",
            plot_bottom + 16.0
        );
    }
    for (arm_idx, arm) in report.arms.iter().enumerate() {
        let top = TOP + ARM_HEIGHT * arm_idx as f64 + 6.0;
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            PLOT_LEFT - 8.0,
            top + BAR_HEIGHT + 4.0,
            escape(&arm.name)
        );
        for (bar_idx, (ratio, colour)) in [
            (&arm.prefill_speedup, PREFILL_COLOUR),
            (&arm.decode_speedup, DECODE_COLOUR),
        ]
        .into_iter()
        .enumerate()
        {
            bar(
                &mut svg,
                &x,
                top + BAR_HEIGHT * bar_idx as f64,
                ratio,
                colour,
            );
        }
    }
    let one = x(1.0);
    let _ = write!(
        svg,
        "<line x1=\"{one:.1}\" y1=\"{:.1}\" x2=\"{one:.1}\" y2=\"{plot_bottom:.1}\" \
         stroke=\"black\" stroke-width=\"1.5\" stroke-dasharray=\"4 3\"/>\n\
         <line x1=\"{PLOT_LEFT}\" y1=\"{plot_bottom:.1}\" x2=\"{PLOT_RIGHT}\" \
         y2=\"{plot_bottom:.1}\" stroke=\"black\"/>\n\
         <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"11\">times as fast \
         as {} (prefill: baseline TTFT / arm TTFT; decode: arm tok/s / baseline tok/s)</text>\n\
         </svg>\n",
        TOP - 4.0,
        (PLOT_LEFT + PLOT_RIGHT) / 2.0,
        plot_bottom + 36.0,
        escape(&report.baseline)
    );
    svg
}

/// One bar from 0 to the ratio, its interval as a whisker, and its value as text.
fn bar(svg: &mut String, x: &impl Fn(f64) -> f64, top: f64, ratio: &Ratio, colour: &str) {
    let end = x(ratio.value);
    let mid = top + BAR_HEIGHT / 2.0;
    let _ = writeln!(
        svg,
        "<rect x=\"{PLOT_LEFT}\" y=\"{top:.1}\" width=\"{:.1}\" height=\"{:.1}\" \
         fill=\"{colour}\"/>",
        end - PLOT_LEFT,
        BAR_HEIGHT - 2.0
    );
    let mut label_x = end;
    if let Some([low, high]) = ratio.ci95 {
        let (x_low, x_high) = (x(low), x(high));
        label_x = label_x.max(x_high);
        let _ = writeln!(
            svg,
            "<path d=\"M{x_low:.1} {mid:.1}H{x_high:.1}M{x_low:.1} {:.1}V{:.1}\
             M{x_high:.1} {:.1}V{:.1}\" stroke=\"black\" fill=\"none\"/>",
            mid - 4.0,
            mid + 3.0,
            mid - 4.0,
            mid + 3.0
        );
    }
    let _ = writeln!(
        svg,
        "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\">{:.3}×</text>",
        label_x + 4.0,
        mid + 3.5,
        ratio.value
    );
}

/// The axis end: past every value and interval and past 1.0, rounded up to a quarter.
fn axis_max(report: &FairnessReport) -> f64 {
    let largest = report
        .arms
        .iter()
        .flat_map(|arm| [&arm.prefill_speedup, &arm.decode_speedup])
        .flat_map(|r| [Some(r.value), r.ci95.map(|[_, high]| high)])
        .flatten()
        .filter(|v| v.is_finite())
        .fold(1.2_f64, f64::max);
    (largest * 1.05 * 4.0).ceil() / 4.0
}

/// Grid values: quarters on short axes, coarser steps on long ones (about 4 to 8 ticks).
fn ticks(axis_max: f64) -> Vec<f64> {
    let step = [0.25, 0.5, 1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .find(|step| axis_max / step <= 8.0)
        .unwrap_or(axis_max / 4.0);
    (0..)
        .map(|i| f64::from(i) * step)
        .take_while(|&t| t <= axis_max + 1e-9)
        .collect()
}

/// `text` with the five XML special characters replaced by entities.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_replaces_every_special_character() {
        assert_eq!(
            escape(r#"<a href="x">'b' & c</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&apos;b&apos; &amp; c&lt;/a&gt;"
        );
        assert_eq!(escape("plain"), "plain");
    }

    #[test]
    fn ticks_span_the_axis_in_round_steps() {
        assert_eq!(ticks(1.5), vec![0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5]);
        assert_eq!(ticks(3.0), vec![0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0]);
        assert_eq!(ticks(20.0).len(), 5);
        assert_eq!(ticks(1000.0).len(), 5);
    }
}
