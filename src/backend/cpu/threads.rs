//! How many threads the CPU backend uses by default: one per physical core, since
//! SMT siblings share the execution units these kernels saturate.

use std::collections::HashSet;

/// Physical cores of this machine, or the logical count where the OS does not say.
pub fn default_threads() -> usize {
    let logical = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| parse_physical_cores(&text))
        .map_or(logical, |physical| physical.clamp(1, logical))
}

/// Physical cores in `/proc/cpuinfo` text: distinct (`physical id`, `core id`) pairs,
/// or `None` when the file does not say (some VMs and ARM kernels).
pub fn parse_physical_cores(cpuinfo: &str) -> Option<usize> {
    let mut cores = HashSet::new();
    for block in cpuinfo.split("\n\n") {
        let get = |key: &str| {
            block.lines().find_map(|line| {
                let (name, value) = line.split_once(':')?;
                (name.trim() == key).then_some(value.trim())
            })
        };
        if let Some(core) = get("core id") {
            cores.insert((get("physical id").unwrap_or("0"), core));
        }
    }
    (!cores.is_empty()).then_some(cores.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_distinct_cores_not_siblings() {
        let smt = "processor\t: 0\nphysical id\t: 0\ncore id\t: 0\n\n\
                   processor\t: 1\nphysical id\t: 0\ncore id\t: 0\n\n\
                   processor\t: 2\nphysical id\t: 0\ncore id\t: 1\n";
        assert_eq!(parse_physical_cores(smt), Some(2));
        assert_eq!(
            parse_physical_cores("processor\t: 0\nBogoMIPS\t: 50\n"),
            None
        );
        assert!(default_threads() >= 1);
    }
}
