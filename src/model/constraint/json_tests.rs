//! Tests of the JSON validator: against serde_json, and schema by schema.

use serde_json::json;

use super::*;

/// Feeds `text` against `schema`; `Some(complete)` when every character is accepted.
fn read_as(schema: &Schema, text: &str) -> Option<bool> {
    let mut json = JsonPrefix::new(schema);
    text.chars()
        .all(|c| json.push(schema, c))
        .then(|| json.complete())
}

/// [`read_as`] any object (`json_object` mode).
fn read(text: &str) -> Option<bool> {
    read_as(&Schema::any_object(), text)
}

/// Whether serde_json (an independent parser) takes `text` as one JSON object.
fn serde_object(text: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(text).is_ok_and(|v| v.is_object())
}

const VALID: [&str; 8] = [
    r#"{}"#,
    r#"{"a": 1}"#,
    " {\"a\":[1,-2.5e+3,0,0.25,1E9,true,false,null,\"x\"]}\n",
    r#"{"nested": {"deep": [[], {}, [{"k": "v"}]]}, "n": -0}"#,
    r#"{"esc": "q\"b\\s\/\b\f\n\r\tu\u00e9\uD83D\uDE00", "é": "ünïcødé ✓"}"#,
    "{\n  \"pretty\": [\n    1,\n    2\n  ]\n}",
    r#"{"": ""}"#,
    r#"{"num": 12345678901234567890.5e-7}"#,
];

#[test]
fn valid_objects_and_all_their_prefixes_are_accepted() {
    for text in VALID {
        assert!(serde_object(text), "the reference rejects {text}");
        assert_eq!(read(text), Some(true), "{text}");
        let chars: Vec<(usize, char)> = text.char_indices().collect();
        for &(at, _) in &chars[..chars.len() - 1] {
            let prefix = &text[..at];
            assert!(read(prefix).is_some(), "prefix {prefix:?} of {text}");
        }
    }
}

#[test]
fn what_is_not_an_object_prefix_is_refused() {
    for text in [
        "[1]",
        "\"s\"",
        "1",
        "x",
        "{a",
        "{\"a\" 1",
        "{\"a\":}",
        "{\"a\":1,}",
        "{,",
        "{\"a\":01",
        "{\"a\":1.}",
        "{\"a\":1.e5}",
        "{\"a\":-}",
        "{\"a\":+1",
        "{\"a\":tru }",
        "{\"a\":nul1",
        "{\"a\":[1,]",
        "{\"a\":[1}",
        "{\"a\":{]",
        "{\"a\":\"\u{1}\"}",
        "{\"a\":\"\\x\"}",
        "{\"a\":\"\\u12G4\"}",
        "{\"a\":\"\\uD800\"}",
        "{\"a\":\"\\uDC00\"}",
        "{\"a\":\"\\uD800x\"}",
        "{\"a\":\"\\uD800\\n\"}",
        "{\"a\":\"\\uD800\\uD800\"}",
        "{\"a\":\"\\uD83D\\u0041\"}",
        "{}}",
        "{} x",
        "{\"a\":1}{",
        "{\"a\": .5}",
        "{\"a\":NaN}",
        "{\"a\":'s'}",
    ] {
        assert_eq!(read(text).filter(|&done| done), None, "{text:?}");
        assert!(!serde_object(text), "the reference takes {text:?}");
    }
    // Open texts are prefixes, not complete objects.
    assert_eq!(read("{\"a\":1"), Some(false));
    assert_eq!(read("{\"a\":\"unterminated"), Some(false));
}

#[test]
fn whitespace_runs_are_bounded() {
    let run = |n: usize| format!("{{{}\"a\": 1}}", " ".repeat(n));
    assert_eq!(read(&run(usize::from(MAX_WHITESPACE_RUN))), Some(true));
    assert_eq!(read(&run(usize::from(MAX_WHITESPACE_RUN) + 1)), None);
    // Inside strings spaces are text, not padding.
    let long = format!("{{\"a\": \"{}\"}}", " ".repeat(100));
    assert_eq!(read(&long), Some(true));
}

#[test]
fn random_texts_agree_with_serde_json() {
    // Texts built from pieces of JSON: whatever the validator completes,
    // serde_json parses as an object, and every object serde_json parses from them
    // the validator completes.
    let alphabet = [
        "{",
        "}",
        "[",
        "]",
        ":",
        ",",
        " ",
        "\"",
        "\"k\"",
        "\"\\n\"",
        "\"\\u00e9\"",
        "\"\\uD83D",
        "\\uDE00",
        "\\uD800\"",
        "\\",
        "\"é",
        "1",
        "0",
        "-",
        "+",
        ".",
        "e",
        "-0.5e3",
        "10",
        "01",
        "1.",
        "true",
        "nul",
        "l",
        "false",
        "tru",
        "e ",
        "\n",
    ];
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut completed = 0;
    for _ in 0..200_000 {
        let len = 1 + next() as usize % 8;
        let mut text = String::from("{");
        for _ in 0..len {
            text.push_str(alphabet[next() as usize % alphabet.len()]);
        }
        let ours = read(&text) == Some(true);
        assert_eq!(ours, serde_object(&text), "{text:?}");
        completed += usize::from(ours);
    }
    assert!(completed > 500, "only {completed} random objects");
}

/// A person: a name, an integer age, up to three tags from a list, and nothing else.
fn person() -> Schema {
    Schema::compile(&json!({
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "age": {"type": "integer"},
            "tags": {"type": "array", "items": {"enum": ["cat", "dog", 7, null]},
                     "maxItems": 3, "minItems": 1},
            "address": {"type": "object", "properties": {"city": {"const": "Oslo"}},
                        "required": ["city"], "additionalProperties": false},
            "extra": true,
        },
        "required": ["name", "age"],
        "additionalProperties": false,
    }))
    .unwrap()
}

#[test]
fn a_schema_takes_what_matches_it_and_every_prefix() {
    let schema = person();
    for text in [
        r#"{"name": "Ann", "age": 31}"#,
        r#"{"age": -4, "name": "B\u00e9a", "tags": ["dog", 7, null]}"#,
        "{\n  \"name\": \"C\",\n  \"age\": 0,\n  \"address\": {\"city\": \"Oslo\"}\n}",
        r#"{"name":"D","age":1,"tags":["cat"],"extra":{"any":[1,{"x":true}]}}"#,
    ] {
        assert!(serde_object(text), "the reference rejects {text}");
        assert_eq!(read_as(&schema, text), Some(true), "{text}");
        let chars: Vec<(usize, char)> = text.char_indices().collect();
        for &(at, _) in &chars[..chars.len() - 1] {
            assert!(
                read_as(&schema, &text[..at]).is_some(),
                "prefix {:?}",
                &text[..at]
            );
        }
    }
}

#[test]
fn a_schema_refuses_what_does_not_match_it() {
    let schema = person();
    for text in [
        r#"{"name": "Ann"}"#,
        r#"{"name": "Ann", "age": 3.5}"#,
        r#"{"name": "Ann", "age": 1e3}"#,
        r#"{"name": 5, "age": 3}"#,
        r#"{"nick": "A", "name": "Ann", "age": 3}"#,
        r#"{"name": "A", "name": "B", "age": 3}"#,
        r#"{"name": "A", "age": 3, "tags": []}"#,
        r#"{"name": "A", "age": 3, "tags": ["cow"]}"#,
        r#"{"name": "A", "age": 3, "tags": ["cat", "dog", 7, null]}"#,
        r#"{"name": "A", "age": 3, "tags": [70]}"#,
        r#"{"name": "A", "age": 3, "address": {"city": "Bergen"}}"#,
        r#"{"name": "A", "age": 3, "address": {}}"#,
        r#"{"name": "A", "age": 3,}"#,
    ] {
        assert_eq!(read_as(&schema, text).filter(|&done| done), None, "{text}");
    }
    // Once every declared property is given, a closed object takes no comma.
    let every = r#"{"name":"A","age":1,"tags":["cat"],"address":{"city":"Oslo"},"extra":1"#;
    assert_eq!(read_as(&schema, every), Some(false));
    assert_eq!(read_as(&schema, &format!("{every},")), None);
}

/// What Pydantic writes for a model with optional fields and nested models: `$defs`
/// and `$ref`s, `anyOf` with null, a list of types.
fn pydantic_person() -> Schema {
    Schema::compile(&json!({
        "$defs": {"Pet": {
            "properties": {
                "name": {"title": "Name", "type": "string"},
                "kind": {"enum": ["cat", "dog"], "title": "Kind", "type": "string"},
            },
            "required": ["name", "kind"], "title": "Pet", "type": "object",
            "additionalProperties": false,
        }},
        "properties": {
            "name": {"title": "Name", "type": "string"},
            "nickname": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": null},
            "age": {"type": ["integer", "null"]},
            "pets": {"items": {"$ref": "#/$defs/Pet"}, "type": "array"},
            "best": {"anyOf": [{"$ref": "#/$defs/Pet"}, {"type": "null"}]},
        },
        "required": ["name", "nickname", "age", "pets", "best"],
        "title": "Person", "type": "object", "additionalProperties": false,
    }))
    .unwrap()
}

/// A recursive schema: a tree of integers.
fn tree() -> Schema {
    Schema::compile(&json!({
        "$defs": {"Node": {
            "type": "object",
            "properties": {
                "value": {"type": "integer"},
                "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
            },
            "required": ["value"], "additionalProperties": false,
        }},
        "$ref": "#/$defs/Node",
    }))
    .unwrap()
}

#[test]
fn unions_references_and_recursion_take_what_matches() {
    let (person, tree) = (pydantic_person(), tree());
    let takes = [
        (
            &person,
            r#"{"name": "Ann", "nickname": null, "age": 3, "pets": [{"name": "Rex", "kind": "dog"}], "best": null}"#,
        ),
        (
            &person,
            r#"{"name":"B","nickname":"Bee","age":null,"pets":[],"best":{"name":"Tom","kind":"cat"}}"#,
        ),
        (
            &tree,
            r#"{"value": 1, "children": [{"value": 2, "children": []}, {"value": -3}]}"#,
        ),
    ];
    for (schema, text) in takes {
        assert!(serde_object(text), "the reference rejects {text}");
        assert_eq!(read_as(schema, text), Some(true), "{text}");
        let chars: Vec<(usize, char)> = text.char_indices().collect();
        for &(at, _) in &chars[..chars.len() - 1] {
            assert!(
                read_as(schema, &text[..at]).is_some(),
                "prefix {:?}",
                &text[..at]
            );
        }
    }
    let refuses = [
        (
            &person,
            r#"{"name": "A", "nickname": 5, "age": 3, "pets": [], "best": null}"#,
        ),
        (
            &person,
            r#"{"name": "A", "nickname": null, "age": "3", "pets": [], "best": null}"#,
        ),
        (
            &person,
            r#"{"name": "A", "nickname": null, "age": 1.5, "pets": [], "best": null}"#,
        ),
        (
            &person,
            r#"{"name": "A", "nickname": null, "age": 3, "pets": [{"name": "R", "kind": "cow"}], "best": null}"#,
        ),
        (
            &person,
            r#"{"name": "A", "nickname": null, "age": 3, "pets": [], "best": []}"#,
        ),
        (
            &person,
            r#"{"name": "A", "nickname": null, "age": 3, "pets": [], "best": {"name": "T"}}"#,
        ),
        (&tree, r#"{"value": 1, "children": [{"children": []}]}"#),
        (
            &tree,
            r#"{"value": 1, "children": [{"value": 2, "leaf": true}]}"#,
        ),
    ];
    for (schema, text) in refuses {
        assert_eq!(read_as(schema, text).filter(|&done| done), None, "{text}");
    }
}

/// An object whose `n` is an integer of the given JSON Schema bounds.
fn bounded(bounds: serde_json::Value) -> Schema {
    let mut n = json!({"type": "integer"});
    n.as_object_mut()
        .unwrap()
        .extend(bounds.as_object().unwrap().clone());
    Schema::compile(&json!({"type": "object", "properties": {"n": n}})).unwrap()
}

#[test]
fn integer_bounds_take_exactly_the_integers_within_them_and_their_prefixes() {
    for (bounds, lo, hi) in [
        (json!({"minimum": -150, "maximum": 1200}), -150, 1200),
        (
            json!({"exclusiveMinimum": 9.5, "exclusiveMaximum": 40}),
            10,
            39,
        ),
        (json!({"minimum": -30.5, "maximum": -7}), -30, -7),
        (json!({"minimum": 0}), 0, 99_999),
    ] {
        let schema = bounded(bounds.clone());
        let members: Vec<String> = (lo..=hi).map(|n: i64| n.to_string()).collect();
        let mut prefixes = std::collections::HashSet::new();
        for m in &members {
            for end in 1..=m.len() {
                prefixes.insert(m[..end].to_string());
            }
        }
        // `-0` is zero too.
        if lo <= 0 && 0 <= hi {
            prefixes.insert("-".into());
            prefixes.insert("-0".into());
        }
        // Every text of up to four signs and digits: a prefix exactly when some
        // member (or, past the search, some larger one) starts with it.
        let symbols: Vec<char> = "-0123456789".chars().collect();
        let mut texts = vec![String::new()];
        for _ in 0..4 {
            let longer: Vec<String> = texts
                .iter()
                .flat_map(|t| symbols.iter().map(move |c| format!("{t}{c}")))
                .collect();
            for text in &longer {
                let open = read_as(&schema, &format!("{{\"n\":{text}")).is_some();
                let done = read_as(&schema, &format!("{{\"n\":{text}}}")) == Some(true);
                // Past the search a bound of 99 999 stands for none: any digits
                // that start without a zero grow past it.
                let grows = hi == 99_999
                    && text.starts_with(|c: char| ('1'..='9').contains(&c))
                    && text.chars().all(|c| c.is_ascii_digit());
                let want_open = prefixes.contains(text) || grows;
                assert_eq!(open, want_open, "{bounds} prefix {text:?}");
                let value = text.parse::<i64>().ok().filter(|_| want_open);
                let want_done = value.is_some_and(|v| lo <= v && v <= hi);
                assert_eq!(done, want_done, "{bounds} whole {text:?}");
            }
            texts = longer;
        }
    }
}

#[test]
fn string_lengths_count_characters_and_escapes_once() {
    let schema = Schema::compile(&json!({"type": "object", "properties": {
        "s": {"type": "string", "minLength": 2, "maxLength": 4}}}))
    .unwrap();
    let whole = |inner: &str| read_as(&schema, &format!("{{\"s\":\"{inner}\"}}"));
    for inner in ["ab", "abcd", "é✓", r"\n\t", r"a\u00e9\uD83D\uDE00b"] {
        assert_eq!(whole(inner), Some(true), "{inner}");
    }
    for inner in ["", "a", r"\n", "abcde", r"abcd\n", r"\uD83D\uDE00"] {
        assert_eq!(whole(inner), None, "{inner}");
    }
    // The fifth character is refused as it comes, not at the quote.
    assert_eq!(read_as(&schema, "{\"s\":\"abcd"), Some(false));
    assert_eq!(read_as(&schema, "{\"s\":\"abcde"), None);
    assert_eq!(read_as(&schema, "{\"s\":\"abcd\\"), None);
}

/// An object whose `s` is a string of the given schema keywords.
fn shaped_string(keywords: serde_json::Value) -> Schema {
    let mut string = json!({"type": "string"});
    string
        .as_object_mut()
        .unwrap()
        .extend(keywords.as_object().unwrap().clone());
    Schema::compile(&json!({"type": "object", "properties": {"s": string}})).unwrap()
}

#[test]
fn patterns_take_exactly_their_strings_and_prefixes() {
    // Anchored: two or three of a and b, then maybe a c.
    let anchored = shaped_string(json!({"pattern": "^[ab]{2,3}c?$"}));
    let member = |t: &str| {
        let body = t.strip_suffix('c').unwrap_or(t);
        (2..=3).contains(&body.len()) && body.chars().all(|c| c == 'a' || c == 'b')
    };
    // Unanchored: contains "ab" somewhere.
    let unanchored = shaped_string(json!({"pattern": "ab"}));
    let mut texts = vec![String::new()];
    for _ in 0..5 {
        texts = texts
            .iter()
            .flat_map(|t| "abcx".chars().map(move |c| format!("{t}{c}")))
            .collect();
        for text in &texts {
            let open = |schema: &Schema| read_as(schema, &format!("{{\"s\":\"{text}")).is_some();
            let whole =
                |schema: &Schema| read_as(schema, &format!("{{\"s\":\"{text}\"}}")) == Some(true);
            // A prefix of a member: some member starts with it (members are at most 4 long).
            let mut growable = vec![text.clone()];
            for _ in 0..4 {
                growable = growable
                    .iter()
                    .flat_map(|t| ["", "a", "b", "c"].map(|c| format!("{t}{c}")))
                    .collect();
            }
            assert_eq!(
                open(&anchored),
                growable.iter().any(|t| member(t)),
                "{text}"
            );
            assert_eq!(whole(&anchored), member(text), "{text}");
            assert!(open(&unanchored), "{text}");
            assert_eq!(whole(&unanchored), text.contains("ab"), "{text}");
        }
    }
    // The value is matched, not its JSON spelling; `\d` is ASCII as in ECMA-262.
    let accented = shaped_string(json!({"pattern": "^é\n[0-9]$"}));
    assert_eq!(read_as(&accented, r#"{"s":"\u00e9\n7"}"#), Some(true));
    assert_eq!(read_as(&accented, r#"{"s":"é\n7"}"#), Some(true));
    assert_eq!(read_as(&accented, r#"{"s":"e"#), None);
    let digits = shaped_string(json!({"pattern": "^\\d+$"}));
    assert_eq!(read_as(&digits, r#"{"s":"123"}"#), Some(true));
    assert_eq!(read_as(&digits, "{\"s\":\"1\u{663}"), None);
}

#[test]
fn formats_take_what_their_rfcs_write() {
    for (format, good, bad) in [
        (
            "date",
            &["2024-02-29", "1999-12-31"][..],
            &["2024-13-01", "2024-1-01", "2024-01-32", "24-01-01"][..],
        ),
        (
            "time",
            &["07:08:09Z", "23:59:60.5+02:00"],
            &["24:00:00Z", "07:08:09", "7:08:09Z"],
        ),
        (
            "date-time",
            &["2024-05-06T07:08:09Z", "2024-05-06t07:08:09.123-11:30"],
            &["2024-05-06 07:08:09Z", "2024-05-06T07:08Z"],
        ),
        (
            "uuid",
            &["123e4567-e89b-12d3-a456-426614174000"],
            &[
                "123e4567e89b12d3a456426614174000",
                "123e4567-e89b-12d3-a456-42661417400g",
            ],
        ),
        (
            "email",
            &["ann.lee+x@mail.example.org"],
            &["ann@localhost", "ann lee@example.org", "@example.org"],
        ),
        (
            "ipv4",
            &["192.168.0.1", "0.0.0.0", "255.255.255.255"],
            &["256.1.1.1", "1.2.3", "01.2.3.4"],
        ),
    ] {
        let schema = shaped_string(json!({"format": format}));
        for text in good {
            let json = format!("{{\"s\":\"{text}\"}}");
            assert_eq!(read_as(&schema, &json), Some(true), "{format} {text}");
        }
        for text in bad {
            let json = format!("{{\"s\":\"{text}\"}}");
            assert_eq!(
                read_as(&schema, &json).filter(|&d| d),
                None,
                "{format} {text}"
            );
        }
    }
}
