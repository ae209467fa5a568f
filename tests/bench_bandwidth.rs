//! The read-bandwidth probe that `switchyard bench` runs between decode repetitions
//! leaves the peak RSS it reports untouched (in a process of its own: other tests'
//! allocations would blur the peak).

use switchyard::bench::bandwidth::BandwidthProbe;
use switchyard::bench::env::{peak_rss_bytes, rss_bytes};

#[test]
fn probes_read_and_do_not_count_in_the_peak_rss() {
    let bytes = 96 << 20;
    let Some(mut probe) = BandwidthProbe::new(2, bytes) else {
        println!("skipped: this OS cannot reset the peak RSS");
        return;
    };
    let now = rss_bytes().expect("an OS that resets the peak RSS reports the RSS");
    probe.probe();
    probe.probe();
    assert_eq!(probe.results().len(), 2);
    assert!(probe
        .median_gb_s()
        .is_some_and(|g| g.is_finite() && g > 0.0));
    let kernel_peak = peak_rss_bytes().expect("peak RSS");
    assert!(
        kernel_peak < now + bytes as u64 / 2,
        "the kernel's peak {kernel_peak} counts a probe's {bytes} bytes over {now}"
    );
    assert!(probe.peak_rss_bytes() >= kernel_peak);
}
