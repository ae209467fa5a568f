//! Power supplies and thermal zones from Linux sysfs (`/sys/class/power_supply`,
//! `/sys/class/thermal`), for the benchmark's environment stamp: a laptop on battery or
//! a hot chip throttles, and results must say so. Parsing is pure functions over the
//! files' text; a missing directory or file is an empty list or `None`, never an error.

use std::path::Path;

use serde::Serialize;

/// One entry of `/sys/class/power_supply`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PowerSupply {
    /// Directory name (`AC`, `BAT0`, `ucsi-source-psy-USBC000:001`).
    pub name: String,
    /// `type`: `Mains`, `Battery`, `USB`, ...
    pub kind: Option<String>,
    /// `status` of a battery: `Charging`, `Discharging`, `Full`, ...
    pub status: Option<String>,
    /// `capacity`: battery charge in percent.
    pub capacity_percent: Option<u8>,
    /// `online`: whether an external supply is connected.
    pub online: Option<bool>,
}

/// Where the machine's power came from when the stamp was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PowerSource {
    /// An external supply (mains or USB) is online.
    Mains,
    /// A battery is present and no external supply is online.
    Battery,
    /// Nothing readable says (desktops and VMs often list no supply at all).
    Unknown,
}

impl std::fmt::Display for PowerSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PowerSource::Mains => "mains",
            PowerSource::Battery => "battery",
            PowerSource::Unknown => "unknown",
        })
    }
}

/// One entry of `/sys/class/thermal`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ThermalZone {
    /// Directory name (`thermal_zone0`).
    pub name: String,
    /// `type`: `x86_pkg_temp`, `acpitz`, `cpu-thermal`, ...
    pub kind: Option<String>,
    /// `temp` in degrees Celsius.
    pub celsius: Option<f64>,
}

/// A power supply from the text of its sysfs files (`None` where a file was unreadable).
pub fn parse_power_supply(
    name: &str,
    kind: Option<&str>,
    status: Option<&str>,
    capacity: Option<&str>,
    online: Option<&str>,
) -> PowerSupply {
    PowerSupply {
        name: name.to_string(),
        kind: kind.and_then(non_empty),
        status: status.and_then(non_empty),
        capacity_percent: capacity.and_then(|c| c.trim().parse().ok()),
        online: online.and_then(|o| match o.trim() {
            "1" => Some(true),
            "0" => Some(false),
            _ => None,
        }),
    }
}

/// The power source the supplies imply: mains when an external one (`Mains`, `USB*`) is
/// online, battery when a battery exists and none is, unknown otherwise.
pub fn power_source(supplies: &[PowerSupply]) -> PowerSource {
    let is_external = |s: &PowerSupply| {
        s.kind
            .as_deref()
            .is_some_and(|k| k == "Mains" || k.starts_with("USB"))
    };
    let is_battery = |s: &PowerSupply| s.kind.as_deref() == Some("Battery");
    if supplies
        .iter()
        .any(|s| is_external(s) && s.online == Some(true))
    {
        PowerSource::Mains
    } else if supplies.iter().any(is_battery) {
        PowerSource::Battery
    } else {
        PowerSource::Unknown
    }
}

/// A thermal zone from the text of its `type` and `temp` (millidegrees Celsius) files.
pub fn parse_thermal_zone(name: &str, kind: Option<&str>, temp: Option<&str>) -> ThermalZone {
    ThermalZone {
        name: name.to_string(),
        kind: kind.and_then(non_empty),
        celsius: temp
            .and_then(|t| t.trim().parse::<i64>().ok())
            .map(|milli| milli as f64 / 1000.0),
    }
}

/// The power supplies this machine lists, sorted by name; empty where there are none.
pub fn read_power_supplies() -> Vec<PowerSupply> {
    entries(Path::new("/sys/class/power_supply"), |_| true)
        .into_iter()
        .map(|(name, dir)| {
            let file = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
            parse_power_supply(
                &name,
                file("type").as_deref(),
                file("status").as_deref(),
                file("capacity").as_deref(),
                file("online").as_deref(),
            )
        })
        .collect()
}

/// The thermal zones this machine lists, sorted by name; empty where there are none.
pub fn read_thermal_zones() -> Vec<ThermalZone> {
    entries(Path::new("/sys/class/thermal"), |name| {
        name.starts_with("thermal_zone")
    })
    .into_iter()
    .map(|(name, dir)| {
        let file = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
        parse_thermal_zone(&name, file("type").as_deref(), file("temp").as_deref())
    })
    .collect()
}

/// `(name, path)` of the entries of `dir` whose names `keep` accepts, sorted by name.
fn entries(dir: &Path, keep: impl Fn(&str) -> bool) -> Vec<(String, std::path::PathBuf)> {
    let Ok(listing) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<_> = listing
        .filter_map(Result::ok)
        .filter_map(|e| Some((e.file_name().into_string().ok()?, e.path())))
        .filter(|(name, _)| keep(name))
        .collect();
    found.sort();
    found
}

fn non_empty(text: &str) -> Option<String> {
    let trimmed = text.trim();
    (!trimmed.is_empty()).then(|| trimmed.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn supply(name: &str, kind: &str, status: &str, capacity: &str, online: &str) -> PowerSupply {
        fn opt(text: &str) -> Option<&str> {
            (!text.is_empty()).then_some(text)
        }
        parse_power_supply(name, opt(kind), opt(status), opt(capacity), opt(online))
    }

    #[test]
    fn power_supply_files_parse() {
        let bat = parse_power_supply(
            "BAT0",
            Some("Battery\n"),
            Some("Discharging\n"),
            Some("87\n"),
            None,
        );
        assert_eq!(bat.kind.as_deref(), Some("Battery"));
        assert_eq!(bat.status.as_deref(), Some("Discharging"));
        assert_eq!(bat.capacity_percent, Some(87));
        assert_eq!(bat.online, None);
        let ac = parse_power_supply("AC", Some("Mains\n"), None, Some("lots"), Some("1\n"));
        assert_eq!((ac.online, ac.capacity_percent), (Some(true), None));
        assert_eq!(
            parse_power_supply("x", Some(" \n"), None, None, Some("2")).kind,
            None
        );
    }

    #[test]
    fn power_source_prefers_an_online_external_supply() {
        let on_ac = [
            supply("AC", "Mains", "", "", "1"),
            supply("BAT0", "Battery", "Charging", "50", ""),
        ];
        assert_eq!(power_source(&on_ac), PowerSource::Mains);
        let unplugged = [
            supply("AC", "Mains", "", "", "0"),
            supply("BAT0", "Battery", "Discharging", "50", ""),
        ];
        assert_eq!(power_source(&unplugged), PowerSource::Battery);
        assert_eq!(PowerSource::Battery.to_string(), "battery");
        let usb_c = [
            supply("ucsi", "USB", "", "", "1"),
            supply("BAT1", "Battery", "Charging", "20", ""),
        ];
        assert_eq!(power_source(&usb_c), PowerSource::Mains);
        assert_eq!(power_source(&[]), PowerSource::Unknown);
        assert_eq!(
            power_source(&[supply("AC", "Mains", "", "", "0")]),
            PowerSource::Unknown
        );
    }

    #[test]
    fn thermal_zone_temperature_is_celsius() {
        let zone = parse_thermal_zone("thermal_zone0", Some("x86_pkg_temp\n"), Some("45500\n"));
        assert_eq!(zone.kind.as_deref(), Some("x86_pkg_temp"));
        assert_eq!(zone.celsius, Some(45.5));
        assert_eq!(parse_thermal_zone("z", None, Some("n/a")).celsius, None);
        assert_eq!(
            parse_thermal_zone("z", None, Some("-5000")).celsius,
            Some(-5.0)
        );
    }

    #[test]
    fn reading_sysfs_never_fails() {
        // Whatever this machine has (often nothing in containers), the readers return.
        for zone in read_thermal_zones() {
            assert!(zone.name.starts_with("thermal_zone"));
        }
        let names: Vec<String> = read_power_supplies().into_iter().map(|s| s.name).collect();
        assert!(names.windows(2).all(|pair| pair[0] <= pair[1]), "{names:?}");
    }
}
