//! Tests of the constraint engine: JSON against serde_json, schema by schema (Pydantic's
//! among them), regexes, choices and Lark grammars, and a vocabulary's token trie.

use serde_json::json;

use super::*;
use crate::model::Model;

/// Feeds `text` to `checker`; `Some(complete)` when every byte is taken.
fn read_as(checker: &Checker, text: &str) -> Option<bool> {
    let check = checker.check(text.as_bytes()).unwrap();
    check.prefix().then(|| check.accepted())
}

/// A checker of `schema`.
fn schema(schema: serde_json::Value) -> Checker {
    Grammar::json_schema(&schema).unwrap().checker().unwrap()
}

/// A checker of any object (`json_object` mode).
fn object() -> Checker {
    Grammar::any_object().checker().unwrap()
}

/// Whether serde_json (an independent parser) takes `text` as one JSON object.
fn serde_object(text: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(text).is_ok_and(|v| v.is_object())
}

/// Whether valid JSON `text` is written the way the engine writes JSON: no whitespace
/// between tokens, and no escape a string does not need (`\/`, or `\u` for a character
/// that is not a control character).
fn compact(text: &str) -> bool {
    let mut chars = text.chars();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        match (in_string, c) {
            (false, '"') | (true, '"') => in_string = !in_string,
            (false, c) if c.is_whitespace() => return false,
            (true, '\\') => match chars.next() {
                Some('/') => return false,
                Some('u') => {
                    let hex: String = chars.by_ref().take(4).collect();
                    if u32::from_str_radix(&hex, 16).map_or(true, |code| code >= 0x20) {
                        return false;
                    }
                }
                _ => {}
            },
            _ => {}
        }
    }
    true
}

const VALID: [&str; 7] = [
    r#"{}"#,
    r#"{"a":1}"#,
    r#"{"a":[1,-2.5e+3,0,0.25,1E9,true,false,null,"x"]}"#,
    r#"{"nested":{"deep":[[],{},[{"k":"v"}]]},"n":-0}"#,
    r#"{"esc":"q\"b\\s\b\f\n\r\tu\u001f","é":"ünïcødé ✓"}"#,
    r#"{"":""}"#,
    r#"{"num":12345678901234567890.5e-7}"#,
];

/// Every byte prefix of every text is taken (a prefix that ends inside a UTF-8
/// character included), and the texts whole.
#[test]
fn valid_objects_and_all_their_byte_prefixes_are_accepted() {
    let object = object();
    for text in VALID {
        assert!(serde_object(text), "the reference rejects {text}");
        assert_eq!(read_as(&object, text), Some(true), "{text}");
        for end in 0..text.len() {
            let check = object.check(&text.as_bytes()[..end]).unwrap();
            assert!(
                check.prefix() && !check.accepted(),
                "prefix {end} of {text}"
            );
        }
    }
}

#[test]
fn what_is_not_an_object_prefix_is_refused() {
    let object = object();
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
        "{}}",
        "{} x",
        "{\"a\":1}{",
        "{\"a\":.5}",
        "{\"a\":NaN}",
        "{\"a\":'s'}",
    ] {
        assert_eq!(
            read_as(&object, text).filter(|&done| done),
            None,
            "{text:?}"
        );
        assert!(!serde_object(text), "the reference takes {text:?}");
    }
    // Open texts are prefixes, not complete objects.
    assert_eq!(read_as(&object, "{\"a\":1"), Some(false));
    assert_eq!(read_as(&object, "{\"a\":\"unterminated"), Some(false));
}

/// Output is compact: no whitespace between tokens, before or after the value; inside
/// strings spaces are text.
#[test]
fn whitespace_between_tokens_is_refused() {
    let object = object();
    for text in [
        "{ \"a\":1}",
        "{\"a\": 1}",
        "{\"a\":1 }",
        " {}",
        "{}\n",
        "{\n}",
    ] {
        assert_eq!(read_as(&object, text), None, "{text:?}");
    }
    let long = format!("{{\"a\":\"{}\"}}", " ".repeat(100));
    assert_eq!(read_as(&object, &long), Some(true));
}

#[test]
fn random_texts_agree_with_serde_json() {
    // Texts built from pieces of JSON: whatever the engine completes, serde_json parses
    // as an object, and every compact object serde_json parses from them the engine
    // completes.
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
        "\"\\u001b\"",
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
    let object = object();
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
        let ours = read_as(&object, &text) == Some(true);
        assert_eq!(ours, serde_object(&text) && compact(&text), "{text:?}");
        completed += usize::from(ours);
    }
    assert!(completed > 500, "only {completed} random objects");
}

/// A person: a name, an integer age, up to three tags from a list, and nothing else.
fn person() -> Checker {
    schema(json!({
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
}

/// Properties come in the schema's order (the engine writes them so).
#[test]
fn a_schema_takes_what_matches_it_and_every_prefix() {
    let person = person();
    for text in [
        r#"{"name":"Ann","age":31}"#,
        r#"{"name":"Béa","age":-4,"tags":["dog",7,null]}"#,
        r#"{"name":"C","age":0,"address":{"city":"Oslo"}}"#,
        r#"{"name":"D","age":1,"tags":["cat"],"extra":{"any":[1,{"x":true}]}}"#,
    ] {
        assert!(serde_object(text), "the reference rejects {text}");
        assert_eq!(read_as(&person, text), Some(true), "{text}");
        for end in 0..text.len() {
            let check = person.check(&text.as_bytes()[..end]).unwrap();
            assert!(check.prefix(), "prefix {end} of {text}");
        }
    }
}

#[test]
fn a_schema_refuses_what_does_not_match_it() {
    let person = person();
    for text in [
        r#"{"name":"Ann"}"#,
        r#"{"name":"Ann","age":3.5}"#,
        r#"{"name":"Ann","age":1e3}"#,
        r#"{"name":5,"age":3}"#,
        r#"{"nick":"A","name":"Ann","age":3}"#,
        r#"{"name":"A","name":"B","age":3}"#,
        r#"{"name":"A","age":3,"tags":[]}"#,
        r#"{"name":"A","age":3,"tags":["cow"]}"#,
        r#"{"name":"A","age":3,"tags":["cat","dog",7,null]}"#,
        r#"{"name":"A","age":3,"tags":[70]}"#,
        r#"{"name":"A","age":3,"address":{"city":"Bergen"}}"#,
        r#"{"name":"A","age":3,"address":{}}"#,
        r#"{"name":"A","age":3,}"#,
    ] {
        assert_eq!(read_as(&person, text).filter(|&done| done), None, "{text}");
    }
    // Once every declared property is given, a closed object takes no comma.
    let every = r#"{"name":"A","age":1,"tags":["cat"],"address":{"city":"Oslo"},"extra":1"#;
    assert_eq!(read_as(&person, every), Some(false));
    assert_eq!(read_as(&person, &format!("{every},")), None);
}

/// What Pydantic writes for a model with optional fields and nested models: `$defs`
/// and `$ref`s, `anyOf` with null, a list of types.
fn pydantic_person() -> Checker {
    schema(json!({
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
}

/// A recursive schema: a tree of integers.
fn tree() -> Checker {
    schema(json!({
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
}

#[test]
fn unions_references_and_recursion_take_what_matches() {
    let (person, tree) = (pydantic_person(), tree());
    let takes = [
        (
            &person,
            r#"{"name":"Ann","nickname":null,"age":3,"pets":[{"name":"Rex","kind":"dog"}],"best":null}"#,
        ),
        (
            &person,
            r#"{"name":"B","nickname":"Bee","age":null,"pets":[],"best":{"name":"Tom","kind":"cat"}}"#,
        ),
        (
            &tree,
            r#"{"value":1,"children":[{"value":2,"children":[]},{"value":-3}]}"#,
        ),
    ];
    for (checker, text) in takes {
        assert!(serde_object(text), "the reference rejects {text}");
        assert_eq!(read_as(checker, text), Some(true), "{text}");
    }
    let refuses = [
        (
            &person,
            r#"{"name":"A","nickname":5,"age":3,"pets":[],"best":null}"#,
        ),
        (
            &person,
            r#"{"name":"A","nickname":null,"age":"3","pets":[],"best":null}"#,
        ),
        (
            &person,
            r#"{"name":"A","nickname":null,"age":1.5,"pets":[],"best":null}"#,
        ),
        (
            &person,
            r#"{"name":"A","nickname":null,"age":3,"pets":[{"name":"R","kind":"cow"}],"best":null}"#,
        ),
        (
            &person,
            r#"{"name":"A","nickname":null,"age":3,"pets":[],"best":[]}"#,
        ),
        (
            &person,
            r#"{"name":"A","nickname":null,"age":3,"pets":[],"best":{"name":"T"}}"#,
        ),
        (&tree, r#"{"value":1,"children":[{"children":[]}]}"#),
        (&tree, r#"{"value":1,"children":[{"value":2,"leaf":true}]}"#),
    ];
    for (checker, text) in refuses {
        assert_eq!(read_as(checker, text).filter(|&done| done), None, "{text}");
    }
}

/// An object whose `n` is a `kind` of the given JSON Schema bounds.
fn bounded(kind: &str, bounds: serde_json::Value) -> Checker {
    let mut n = json!({"type": kind});
    n.as_object_mut()
        .unwrap()
        .extend(bounds.as_object().unwrap().clone());
    schema(json!({"type": "object", "properties": {"n": n}, "required": ["n"]}))
}

#[test]
fn integer_bounds_take_exactly_the_integers_within_them() {
    for (bounds, lo, hi) in [
        (json!({"minimum": -150, "maximum": 1200}), -150, 1200),
        (
            json!({"exclusiveMinimum": 9.5, "exclusiveMaximum": 40}),
            10,
            39,
        ),
        (json!({"minimum": -30.5, "maximum": -7}), -30, -7),
    ] {
        let checker = bounded("integer", bounds.clone());
        for n in -2000i64..2000 {
            let whole = read_as(&checker, &format!("{{\"n\":{n}}}")) == Some(true);
            assert_eq!(whole, (lo..=hi).contains(&n), "{bounds} {n}");
        }
    }
}

/// Number bounds hold for fractions too (the old engine refused `minimum` on numbers).
#[test]
fn number_bounds_hold_for_fractions() {
    let checker = bounded("number", json!({"minimum": -1.5, "exclusiveMaximum": 2.25}));
    for (n, inside) in [
        ("-1.5", true),
        ("-1.51", false),
        ("0", true),
        ("2.2499", true),
        ("2.25", false),
        ("2.3e0", false),
        ("-2", false),
        // Within bounds the engine writes a number without an exponent.
        ("1e0", false),
    ] {
        let whole = read_as(&checker, &format!("{{\"n\":{n}}}")) == Some(true);
        assert_eq!(whole, inside, "{n}");
    }
}

/// An object whose `s` is a string of the given schema keywords.
fn shaped_string(keywords: serde_json::Value) -> Checker {
    let mut string = json!({"type": "string"});
    string
        .as_object_mut()
        .unwrap()
        .extend(keywords.as_object().unwrap().clone());
    schema(json!({"type": "object", "properties": {"s": string}, "required": ["s"]}))
}

#[test]
fn string_lengths_count_characters() {
    let checker = shaped_string(json!({"minLength": 2, "maxLength": 4}));
    let whole = |inner: &str| read_as(&checker, &format!("{{\"s\":\"{inner}\"}}"));
    for inner in ["ab", "abcd", "é✓", r"\n\t"] {
        assert_eq!(whole(inner), Some(true), "{inner}");
    }
    for inner in ["", "a", r"\n", "abcde", r"abcd\n"] {
        assert_eq!(whole(inner), None, "{inner}");
    }
    // The fifth character is refused as it comes, not at the quote.
    assert_eq!(read_as(&checker, "{\"s\":\"abcd"), Some(false));
    assert_eq!(read_as(&checker, "{\"s\":\"abcde"), None);
}

#[test]
fn patterns_take_exactly_their_strings() {
    // Anchored: two or three of a and b, then maybe a c.
    let anchored = shaped_string(json!({"pattern": "^[ab]{2,3}c?$"}));
    let member = |t: &str| {
        let body = t.strip_suffix('c').unwrap_or(t);
        (2..=3).contains(&body.len()) && body.chars().all(|c| c == 'a' || c == 'b')
    };
    // Unanchored: contains "ab" somewhere.
    let unanchored = shaped_string(json!({"pattern": "ab"}));
    let mut texts = vec![String::new()];
    for _ in 0..4 {
        texts = texts
            .iter()
            .flat_map(|t| "abcx".chars().map(move |c| format!("{t}{c}")))
            .collect();
        for text in &texts {
            let whole = |c: &Checker| read_as(c, &format!("{{\"s\":\"{text}\"}}")) == Some(true);
            assert_eq!(whole(&anchored), member(text), "{text}");
            assert_eq!(whole(&unanchored), text.contains("ab"), "{text}");
        }
    }
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
            "date-time",
            &["2024-05-06T07:08:09Z", "2024-05-06T07:08:09.123-11:30"],
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
            &["ann lee@example.org", "@example.org"],
        ),
        (
            "ipv4",
            &["192.168.0.1", "0.0.0.0", "255.255.255.255"],
            &["256.1.1.1", "1.2.3", "01.2.3.4"],
        ),
        (
            "uri",
            &["https://example.org/a?b=c#d", "urn:isbn:0451450523"],
            &["no scheme", "http://exa mple.org"],
        ),
    ] {
        let checker = shaped_string(json!({"format": format}));
        for text in good {
            let json = format!("{{\"s\":\"{text}\"}}");
            assert_eq!(read_as(&checker, &json), Some(true), "{format} {text}");
        }
        for text in bad {
            let json = format!("{{\"s\":\"{text}\"}}");
            assert_eq!(
                read_as(&checker, &json).filter(|&d| d),
                None,
                "{format} {text}"
            );
        }
    }
}

/// Keywords JSON Schema does not define are annotations (vendor keywords included);
/// a keyword that constrains but is not implemented, or an unknown format, is refused
/// by name; the engine's own options key is refused.
#[test]
fn unknown_keywords_are_ignored_and_unimplemented_ones_refused_by_name() {
    let annotated = schema(json!({
        "type": "object", "x-kubernetes-preserve-unknown-fields": true, "example": {"a": 1},
        "readonly": true, "$comment": "c", "id": "http://example.org/s",
        "properties": {"a": {"type": "integer", "x-order": 1}},
    }));
    assert_eq!(read_as(&annotated, r#"{"a":1}"#), Some(true));
    for (keyword, schema) in [
        ("uniqueItems", json!({"type": "array", "uniqueItems": true})),
        (
            "contains",
            json!({"type": "array", "contains": {"type": "integer"}}),
        ),
        ("not", json!({"not": {"type": "string"}})),
        (
            "dependentRequired",
            json!({"type": "object", "dependentRequired": {"a": ["b"]}}),
        ),
        (
            "uri-template-x",
            json!({"type": "string", "format": "uri-template-x"}),
        ),
        ("x-guidance", json!({"type": "object", "x-guidance": {}})),
    ] {
        let error = Grammar::json_schema(&schema).unwrap_err().to_string();
        assert!(error.contains(keyword), "{keyword}: {error}");
    }
    assert!(Grammar::json_schema(&json!(false)).is_err());
    assert!(Grammar::json_schema(&json!(3)).is_err());
}

/// The kinds of schema the old engine refused compile and hold: schema-valued
/// `additionalProperties`, `patternProperties`, `allOf` of several, unions whose
/// branches start alike, a top level that is not an object.
#[test]
fn schemas_beyond_the_old_engine_compile_and_hold() {
    let map = schema(json!({"type": "object", "additionalProperties": {"type": "integer"}}));
    assert_eq!(read_as(&map, r#"{"a":1,"b":2}"#), Some(true));
    assert_eq!(read_as(&map, r#"{"a":"x"}"#), None);
    let patterned = schema(
        json!({"type": "object", "patternProperties": {"^n_": {"type": "number"}},
        "additionalProperties": false}),
    );
    assert_eq!(read_as(&patterned, r#"{"n_a":1.5}"#), Some(true));
    assert_eq!(read_as(&patterned, r#"{"m":1}"#), None);
    let all = schema(json!({"allOf": [
        {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
        {"properties": {"a": {"minimum": 5}}}]}));
    assert_eq!(read_as(&all, r#"{"a":7}"#), Some(true));
    assert_eq!(read_as(&all, r#"{"a":3}"#).filter(|&d| d), None);
    let alike = schema(json!({"anyOf": [
        {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": false},
        {"type": "object", "properties": {"b": {"type": "string"}}, "required": ["b"], "additionalProperties": false}]}));
    assert_eq!(read_as(&alike, r#"{"a":1}"#), Some(true));
    assert_eq!(read_as(&alike, r#"{"b":"x"}"#), Some(true));
    assert_eq!(read_as(&alike, r#"{"c":1}"#), None);
    let list = schema(json!({"type": "array", "items": {"type": "integer"}, "maxItems": 2}));
    assert_eq!(read_as(&list, "[1,2]"), Some(true));
    assert_eq!(read_as(&list, "[1,2,3]"), None);
    let any = Grammar::json_schema(&json!(true))
        .unwrap()
        .checker()
        .unwrap();
    assert_eq!(read_as(&any, "\"s\""), Some(true));
}

#[test]
fn regexes_choices_and_lark_grammars_take_their_texts() {
    let regex = Grammar::regex(r"[a-c]{2}\d+").unwrap().checker().unwrap();
    assert_eq!(read_as(&regex, "ab12"), Some(true));
    assert_eq!(read_as(&regex, "ab"), Some(false));
    assert_eq!(read_as(&regex, "ad1"), None);
    let choice = Grammar::choice(&["yes", "no", "ye\"s"])
        .unwrap()
        .checker()
        .unwrap();
    for (text, want) in [
        ("yes", Some(true)),
        ("no", Some(true)),
        ("ye\"s", Some(true)),
        ("y", Some(false)),
        ("nope", None),
    ] {
        assert_eq!(read_as(&choice, text), want, "{text}");
    }
    assert!(Grammar::choice::<&str>(&[]).is_err());
    assert!(Grammar::choice(&["a", ""]).is_err());
    let lark = "start: pair (\",\" pair)*\npair: /[a-z]+/ \"=\" /[0-9]+/";
    let lark = Grammar::lark(lark).unwrap().checker().unwrap();
    assert_eq!(read_as(&lark, "a=1,bc=22"), Some(true));
    assert_eq!(read_as(&lark, "a=1,"), Some(false));
    assert_eq!(read_as(&lark, "a=x"), None);
    assert!(Grammar::lark("start: undefined_rule").is_err());
    assert!(Grammar::regex("(").is_err());
}

/// A refused text reports the byte where it stops and what could come there.
#[test]
fn a_check_says_where_and_what() {
    let checker = schema(
        json!({"type": "object", "properties": {"n": {"type": "integer"}},
        "required": ["n"], "additionalProperties": false}),
    );
    let check = checker.check(br#"{"n":x}"#).unwrap();
    assert!(!check.accepted());
    assert_eq!(check.offset(), 5);
    assert!(check.expected().contains("'0'-'9'"), "{}", check.expected());
    let open = checker.check(br#"{"n":1"#).unwrap();
    assert!(open.prefix() && !open.accepted());
    assert_eq!(open.offset(), 6);
    assert!(open.expected().contains("'}'"), "{}", open.expected());
    assert!(checker.check(br#"{"n":12}"#).unwrap().accepted());
}

/// The seed vocabularies' tokens as bytes: a SentencePiece space kept mid-text, byte
/// tokens one byte each, control tokens apart; and a trie over them constrains.
#[test]
fn a_vocabulary_becomes_bytes_and_a_trie() {
    let dir = tempfile::tempdir().unwrap();
    let seeds = crate::harness::write_seed_ggufs(dir.path()).unwrap();
    for path in &seeds {
        let model = Model::open(path).unwrap();
        let tokenizer = &model.tokenizer;
        let bytes = tokenizer.token_bytes().unwrap();
        assert_eq!(bytes.len(), tokenizer.vocab_size());
        // Every token of whole characters reads as its decoding after an anchor token.
        let anchor = tokenizer.encode_chat("a").unwrap()[0];
        let head = tokenizer.decode(&[anchor], true).unwrap();
        for (id, token) in bytes.iter().enumerate() {
            if let TokenBytes::Text(b) = token {
                if let Ok(text) = std::str::from_utf8(b) {
                    let both = tokenizer.decode(&[anchor, id as u32], true).unwrap();
                    assert_eq!(both.strip_prefix(&head), Some(text), "{path:?} token {id}");
                }
            }
        }
        let logits = model.config.vocab_size;
        let env = TokenEnv::new(tokenizer, logits, &model.stop_ids).unwrap();
        // Texts both seed vocabularies can spell (their letters and spaces).
        let shape = Shape::new(&env, &Grammar::regex("[ Haelot]+").unwrap()).unwrap();
        let mut constraint = Constraint::new(&shape);
        let allowed = |constraint: &mut Constraint| {
            let mut row = Vec::new();
            constraint
                .mask_into(&vec![0.0f32; logits], &mut row)
                .unwrap();
            (0..logits as u32)
                .filter(|&id| row[id as usize] > f32::NEG_INFINITY)
                .collect::<Vec<u32>>()
        };
        let first = allowed(&mut constraint);
        assert!(!first.is_empty(), "{path:?}");
        for &id in &first {
            let TokenBytes::Text(b) = &bytes[id as usize] else {
                panic!("{path:?}: control token {id} allowed first");
            };
            assert!(
                b.iter().all(|c| b" Haelot".contains(c)),
                "{path:?}: token {id} {b:?}"
            );
        }
        // After one letter the grammar may end: the model's end tokens are allowed.
        constraint.advance(first[0]).unwrap();
        let next = allowed(&mut constraint);
        assert!(
            model.stop_ids.iter().all(|id| next.contains(id)),
            "{path:?}"
        );
        assert!(!constraint.complete());
        // A token the grammar refuses is an error, not taken.
        let refused = (0..logits as u32).find(|id| !next.contains(id)).unwrap();
        assert!(constraint.advance(refused).is_err());
    }
}

/// `mask_into` keeps exactly the allowed tokens' logits, word by word, whether a mask
/// word refuses all, allows all or some of its 32 tokens, and refuses a row whose
/// allowed logits are all -inf.
#[test]
fn masking_a_row_keeps_exactly_the_allowed_logits() {
    let env = TokenEnv::bytes();
    let vocab = env.factory.tok_env().tok_trie().vocab_size();
    let logits: Vec<f32> = (0..vocab)
        .map(|i| match i % 7 {
            0 => f32::NEG_INFINITY,
            _ => i as f32 * 0.5 - 40.0,
        })
        .collect();
    for regex in ["[a-f]+", "(?s:.+)", "x"] {
        let shape = Shape::new(env, &Grammar::regex(regex).unwrap()).unwrap();
        let mut constraint = Constraint::new(&shape);
        let mut out = vec![1.0; 3];
        constraint.mask_into(&logits, &mut out).unwrap();
        let mask = constraint.mask.as_ref().unwrap();
        let expected: Vec<f32> = (0..vocab)
            .map(|id| match mask.is_allowed(id as u32) {
                true => logits[id],
                false => f32::NEG_INFINITY,
            })
            .collect();
        assert_eq!(out, expected, "{regex}");
    }
    // Every token that may come has a -inf logit: nothing can be drawn.
    let shape = Shape::new(env, &Grammar::regex("x").unwrap()).unwrap();
    let mut constraint = Constraint::new(&shape);
    constraint.prepare().unwrap();
    let mask = constraint.mask.as_ref().unwrap();
    let row: Vec<f32> = (0..vocab)
        .map(|id| match mask.is_allowed(id as u32) {
            true => f32::NEG_INFINITY,
            false => 1.0,
        })
        .collect();
    let mut out = Vec::new();
    assert!(constraint.mask_into(&row, &mut out).is_err());
}
