//! The fairness bench's outputs from fake arms: the markdown table and the SVG plot name
//! every arm with its text escaped, the SVG is well-formed, and the JSON written by
//! `write_outputs` carries the report's key fields.

mod bench_support;

use bench_support::{config, constant_arms, run, stamp, CallLog, GIB};
use switchyard::bench::fairness::FairnessConfig;
use switchyard::bench::plot::speedup_svg;
use switchyard::bench::report::{markdown, write_outputs};

/// Checks that `svg` is well-formed XML as far as this plot uses it: tags nest and
/// close, attribute quotes pair up, and every `&` starts one of the five entities.
fn check_well_formed(svg: &str) -> Result<(), String> {
    let body = svg
        .strip_prefix("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n")
        .ok_or("no XML declaration")?;
    let mut open: Vec<&str> = Vec::new();
    let mut rest = body;
    let mut n_elements = 0;
    while let Some(start) = rest.find('<') {
        check_text(&rest[..start])?;
        let end = rest[start..].find('>').ok_or("unclosed tag")? + start;
        let tag = &rest[start + 1..end];
        if tag.contains('<') || tag.matches('"').count() % 2 != 0 {
            return Err(format!("malformed tag <{tag}>"));
        }
        check_text(tag)?;
        if let Some(name) = tag.strip_prefix('/') {
            match open.pop() {
                Some(top) if top == name => {}
                other => return Err(format!("</{name}> closes {other:?}")),
            }
        } else {
            let name = tag.split_whitespace().next().ok_or("empty tag")?;
            n_elements += 1;
            if !tag.ends_with('/') {
                open.push(name);
            }
        }
        if open.is_empty() && !rest[end + 1..].trim().is_empty() {
            return Err("content after the root element".into());
        }
        rest = &rest[end + 1..];
    }
    if !open.is_empty() || n_elements == 0 {
        return Err(format!("unclosed elements {open:?}"));
    }
    Ok(())
}

fn check_text(text: &str) -> Result<(), String> {
    for (i, _) in text.match_indices('&') {
        let entity = &text[i..];
        if !["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"]
            .iter()
            .any(|e| entity.starts_with(e))
        {
            return Err(format!("bare & in {text:?}"));
        }
    }
    Ok(())
}

#[test]
fn the_well_formedness_check_catches_broken_svg() {
    let declaration = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
    let good = format!("{declaration}<svg><g><text>a &amp; b</text></g><rect/></svg>\n");
    assert_eq!(check_well_formed(&good), Ok(()));
    for bad in [
        "<svg><g></svg>",
        "<svg><text>a & b</text></svg>",
        "<svg><rect x=\"1/></svg>",
        "<svg></svg><svg></svg>",
        "<svg>",
    ] {
        assert!(
            check_well_formed(&format!("{declaration}{bad}")).is_err(),
            "{bad}"
        );
    }
}

#[test]
fn outputs_name_every_arm_escape_text_and_round_trip() {
    let speeds = [
        ("cpu", 100, 20),
        ("<gate & \"co\">", 90, 21),
        ("a|b", 120, 19),
    ];
    let mut arms = constant_arms(&speeds, &CallLog::default());
    let config = FairnessConfig {
        warmup_rounds: 2,
        timed_rounds: 8,
        ..config(77)
    };
    let report = run(&mut arms, stamp(Some(64 * GIB)), &config).unwrap();

    let table = markdown(&report);
    assert!(table.contains("| cpu (baseline) |"));
    assert!(table.contains("| <gate & \"co\"> |"));
    assert!(table.contains("| a\\|b |"), "pipes are escaped: {table}");
    assert!(table.contains("1.111×"), "{table}");

    let svg = speedup_svg(&report);
    assert_eq!(check_well_formed(&svg), Ok(()));
    assert!(svg.contains(">cpu<") && svg.contains(">a|b<"));
    assert!(svg.contains("&lt;gate &amp; &quot;co&quot;&gt;"));

    let dir = tempfile::tempdir().unwrap();
    let paths = write_outputs(&report, &dir.path().join("runs/v0.1")).unwrap();
    assert_eq!(paths.json, dir.path().join("runs/v0.1.json"));
    assert_eq!(std::fs::read_to_string(&paths.markdown).unwrap(), table);
    assert_eq!(std::fs::read_to_string(&paths.svg).unwrap(), svg);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&paths.json).unwrap()).unwrap();
    assert_eq!(json["seed"], 77);
    assert_eq!(json["baseline"], "cpu");
    assert_eq!(json["forced"], false);
    assert_eq!(json["timed_rounds"], 8);
    assert_eq!(json["rounds"].as_array().unwrap().len(), 8);
    assert_eq!(
        json["rounds"][0]["order"],
        serde_json::json!(report.rounds[0].order)
    );
    assert_eq!(
        json["rounds"][3]["runs"][1]["arm"],
        report.rounds[3].runs[1].arm
    );
    assert_eq!(json["arms"][1]["name"], "<gate & \"co\">");
    assert_eq!(json["arms"][1]["ttft_ms"]["median"], 90.0);
    assert_eq!(
        json["arms"][2]["decode_speedup"]["value"],
        report.arms[2].decode_speedup.value
    );
    assert_eq!(json["stamp"]["git_commit"], report.stamp.git_commit);
    assert!(json["stamp"]["power_source"].is_string());
    assert!(json["stamp"]["thermal_zones"].is_array());
}
