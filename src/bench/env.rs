//! The environment a benchmark ran in — CPU, cores, SIMD, GPU, OS, memory, load, power,
//! temperatures, build, model — stamped at its start so that results from different
//! machines and days compare. `/proc` text is parsed by pure functions; anything
//! unreadable becomes `None`. What only the caller knows (the GPU adapter, the model's
//! hash) comes in as [`CallerFacts`], so this module never opens a device or a model.

use serde::Serialize;

use super::sensors::{self, PowerSource, PowerSupply, ThermalZone};
use crate::backend::cpu::isa::{self, Dispatch};
use crate::backend::cpu::threads::parse_physical_cores;

/// Where and with what a benchmark ran.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EnvStamp {
    /// Seconds since the Unix epoch when the stamp was taken.
    pub unix_time: u64,
    /// CPU model name (`model name` in `/proc/cpuinfo`).
    pub cpu_model: Option<String>,
    /// Physical cores (distinct physical id / core id pairs).
    pub cores_physical: Option<usize>,
    /// Logical CPUs available to this process.
    pub cores_logical: usize,
    /// SIMD features detected at run time (e.g. `avx2`, `fma`, `neon`).
    pub simd: Vec<&'static str>,
    /// The CPU backend's kernel set: the one dispatched to, the host's widest, and
    /// what capped it (`SWITCHYARD_ISA` or `--isa`); `None` for a bad cap.
    pub cpu_kernels: Option<Dispatch>,
    /// GPU adapter name, as the caller's backend reported it.
    pub gpu_adapter: Option<String>,
    /// GPU driver name and version, as the caller's backend reported it.
    pub gpu_driver: Option<String>,
    /// Operating system (`linux`, `macos`, ...).
    pub os: &'static str,
    /// Kernel name (`/proc/sys/kernel/ostype`, e.g. `Linux`).
    pub os_type: Option<String>,
    /// CPU architecture (`x86_64`, `aarch64`, ...).
    pub arch: &'static str,
    /// Kernel release (`/proc/sys/kernel/osrelease`, else from `/proc/version`).
    pub kernel: Option<String>,
    /// Installed memory, in bytes (`MemTotal`).
    pub mem_total_bytes: Option<u64>,
    /// Memory available for new work, in bytes (`MemAvailable`).
    pub mem_available_bytes: Option<u64>,
    /// Load average over 1, 5 and 15 minutes.
    pub loadavg: Option<[f64; 3]>,
    /// Mains or battery, from the power supplies.
    pub power_source: PowerSource,
    /// Every power supply listed, with battery status and charge.
    pub power_supplies: Vec<PowerSupply>,
    /// Every thermal zone listed, with its temperature.
    pub thermal_zones: Vec<ThermalZone>,
    /// Switchyard's version.
    pub version: &'static str,
    /// Git commit the library was built from.
    pub git_commit: &'static str,
    /// SHA-256 of the model file, as the caller computed it.
    pub model_sha256: Option<String>,
}

/// Facts for the stamp that only the caller can know: this module does not open GPU
/// devices or hash model files itself.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CallerFacts {
    /// GPU adapter name (e.g. from the wgpu adapter info).
    pub gpu_adapter: Option<String>,
    /// GPU driver name and version.
    pub gpu_driver: Option<String>,
    /// SHA-256 of the model file, hex.
    pub model_sha256: Option<String>,
}

impl EnvStamp {
    /// Takes the stamp now, without GPU or model facts.
    pub fn capture() -> EnvStamp {
        EnvStamp::capture_with(CallerFacts::default())
    }

    /// Takes the stamp now, adding the caller's GPU and model facts.
    pub fn capture_with(facts: CallerFacts) -> EnvStamp {
        let cpuinfo = read("/proc/cpuinfo");
        let meminfo = read("/proc/meminfo");
        let power_supplies = sensors::read_power_supplies();
        EnvStamp {
            unix_time: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            cpu_model: cpuinfo.as_deref().and_then(parse_cpu_model),
            cores_physical: cpuinfo.as_deref().and_then(parse_physical_cores),
            cores_logical: std::thread::available_parallelism().map_or(1, |n| n.get()),
            simd: simd_features(),
            cpu_kernels: isa::dispatch().ok(),
            gpu_adapter: facts.gpu_adapter,
            gpu_driver: facts.gpu_driver,
            os: std::env::consts::OS,
            arch: std::env::consts::ARCH,
            os_type: read("/proc/sys/kernel/ostype").map(|s| s.trim().to_string()),
            kernel: read("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .or_else(|| {
                    read("/proc/version")
                        .as_deref()
                        .and_then(parse_proc_version)
                }),
            mem_total_bytes: meminfo
                .as_deref()
                .and_then(|t| parse_kib_field(t, "MemTotal")),
            mem_available_bytes: meminfo
                .as_deref()
                .and_then(|t| parse_kib_field(t, "MemAvailable")),
            loadavg: read("/proc/loadavg").as_deref().and_then(parse_loadavg),
            power_source: sensors::power_source(&power_supplies),
            power_supplies,
            thermal_zones: sensors::read_thermal_zones(),
            version: env!("CARGO_PKG_VERSION"),
            git_commit: env!("SWITCHYARD_GIT_COMMIT"),
            model_sha256: facts.model_sha256,
        }
    }
}

/// Peak resident set size of this process in bytes (`VmHWM`); `None` where the OS does
/// not report it.
pub fn peak_rss_bytes() -> Option<u64> {
    read("/proc/self/status")
        .as_deref()
        .and_then(|t| parse_kib_field(t, "VmHWM"))
}

/// Resident set size of this process now in bytes (`VmRSS`); `None` where the OS does
/// not report it.
pub fn rss_bytes() -> Option<u64> {
    read("/proc/self/status")
        .as_deref()
        .and_then(|t| parse_kib_field(t, "VmRSS"))
}

/// SIMD features this CPU offers, detected at run time.
pub fn simd_features() -> Vec<&'static str> {
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    {
        let detected = [
            ("avx2", std::arch::is_x86_feature_detected!("avx2")),
            ("fma", std::arch::is_x86_feature_detected!("fma")),
            ("f16c", std::arch::is_x86_feature_detected!("f16c")),
            ("avx512f", std::arch::is_x86_feature_detected!("avx512f")),
            (
                "avx512vnni",
                std::arch::is_x86_feature_detected!("avx512vnni"),
            ),
        ];
        detected
            .into_iter()
            .filter_map(|(name, on)| on.then_some(name))
            .collect()
    }
    #[cfg(target_arch = "aarch64")]
    {
        let neon = std::arch::is_aarch64_feature_detected!("neon");
        neon.then_some("neon").into_iter().collect()
    }
    #[cfg(not(any(target_arch = "x86", target_arch = "x86_64", target_arch = "aarch64")))]
    {
        Vec::new()
    }
}

/// The first `model name` in `/proc/cpuinfo` text.
pub fn parse_cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo
        .lines()
        .find_map(|line| field(line, "model name"))
        .map(str::to_string)
}

/// A `Key:   N kB` field of `/proc/meminfo` or `/proc/self/status`, in bytes.
pub fn parse_kib_field(text: &str, key: &str) -> Option<u64> {
    let value = text.lines().find_map(|l| field(l, key))?;
    let kib: u64 = value.strip_suffix("kB")?.trim().parse().ok()?;
    kib.checked_mul(1024)
}

/// The three load averages of `/proc/loadavg` text.
pub fn parse_loadavg(text: &str) -> Option<[f64; 3]> {
    let mut it = text.split_whitespace().map(|s| s.parse::<f64>().ok());
    Some([it.next()??, it.next()??, it.next()??])
}

/// The kernel release in `/proc/version` text (`Linux version 6.8.0-45-generic (...) ...`).
pub fn parse_proc_version(text: &str) -> Option<String> {
    let mut words = text.split_whitespace().skip(1);
    if words.next()? != "version" {
        return None;
    }
    words.next().map(str::to_string)
}

/// The value of a `key : value` line when its key is `key`.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let (k, v) = line.split_once(':')?;
    (k.trim() == key).then(|| v.trim())
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const CPUINFO: &str = "processor\t: 0\nvendor_id\t: GenuineIntel\n\
        model name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\nphysical id\t: 0\ncore id\t\t: 0\n\n\
        processor\t: 1\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\nphysical id\t: 0\n\
        core id\t\t: 0\n\nprocessor\t: 2\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\n\
        physical id\t: 0\ncore id\t\t: 1\n\n";

    #[test]
    fn cpuinfo_gives_model_and_physical_cores() {
        assert_eq!(
            parse_cpu_model(CPUINFO).as_deref(),
            Some("Intel(R) Xeon(R) CPU @ 2.20GHz")
        );
        // Two hyper-threads on core 0 and one on core 1.
        assert_eq!(parse_physical_cores(CPUINFO), Some(2));
    }

    #[test]
    fn cpuinfo_without_core_ids_has_no_physical_count() {
        let arm = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd\n\n";
        assert_eq!(parse_physical_cores(arm), None);
        assert_eq!(parse_cpu_model(arm), None);
        assert_eq!(parse_physical_cores(""), None);
    }

    #[test]
    fn meminfo_and_status_fields_are_bytes() {
        let meminfo = "MemTotal:       16318412 kB\nMemFree:         1000 kB\n\
                       MemAvailable:   12000000 kB\n";
        assert_eq!(
            parse_kib_field(meminfo, "MemAvailable"),
            Some(12_000_000 * 1024)
        );
        let status = "Name:\tswitchyard\nVmPeak:\t  300000 kB\nVmHWM:\t   81234 kB\n";
        assert_eq!(parse_kib_field(status, "VmHWM"), Some(81234 * 1024));
        assert_eq!(parse_kib_field(status, "VmRSS"), None);
        assert_eq!(parse_kib_field("VmHWM: lots\n", "VmHWM"), None);
    }

    #[test]
    fn loadavg_parses_three_numbers_or_nothing() {
        assert_eq!(
            parse_loadavg("0.52 1.03 0.98 2/345 6789\n"),
            Some([0.52, 1.03, 0.98])
        );
        assert_eq!(parse_loadavg("0.52 x 0.98"), None);
        assert_eq!(parse_loadavg("0.52"), None);
    }

    #[test]
    fn proc_version_gives_the_release() {
        let text = "Linux version 6.8.0-45-generic (buildd@lcy02) (gcc 13.2.0) #45-Ubuntu SMP\n";
        assert_eq!(
            parse_proc_version(text).as_deref(),
            Some("6.8.0-45-generic")
        );
        assert_eq!(parse_proc_version("Linux 6.8.0"), None);
        assert_eq!(parse_proc_version(""), None);
    }

    #[test]
    fn caller_facts_reach_the_stamp() {
        let stamp = EnvStamp::capture_with(CallerFacts {
            gpu_adapter: Some("llvmpipe (LLVM 17.0.6, 256 bits)".into()),
            gpu_driver: Some("llvmpipe Mesa 24.0".into()),
            model_sha256: Some("ab".repeat(32)),
        });
        assert_eq!(
            stamp.gpu_adapter.as_deref(),
            Some("llvmpipe (LLVM 17.0.6, 256 bits)")
        );
        assert_eq!(stamp.gpu_driver.as_deref(), Some("llvmpipe Mesa 24.0"));
        assert_eq!(stamp.model_sha256, Some("ab".repeat(32)));
        assert_eq!(EnvStamp::capture().gpu_adapter, None);
    }

    #[test]
    fn capture_fills_what_every_os_knows() {
        let stamp = EnvStamp::capture();
        assert!(stamp.cores_logical >= 1);
        assert_eq!(stamp.version, env!("CARGO_PKG_VERSION"));
        assert!(!stamp.git_commit.is_empty());
        if cfg!(target_os = "linux") {
            assert!(stamp.kernel.is_some());
            assert_eq!(stamp.os_type.as_deref(), Some("Linux"));
            assert!(stamp.mem_total_bytes >= stamp.mem_available_bytes);
            assert!(peak_rss_bytes().is_some_and(|b| b > 0));
        }
    }
}
