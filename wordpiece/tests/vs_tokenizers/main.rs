//! `wordpiece::Tokenizer` checked against `tokenizers` itself, the library it stands in for:
//! for every input both must give the same `input_ids` and `token_type_ids`.
//!
//! Inputs: every SNIPS utterance (train and test) and the load generator's queries; every Unicode
//! scalar value, each as a word of its own; generated text (SNIPS utterances mutated, random
//! Unicode from pools that stress each step: combining marks in NFD and NFC, CJK, punctuation of
//! every category, control, format and zero-width characters, whitespace of every kind, emoji
//! sequences, private-use and unassigned code points, special tokens written into the text,
//! words past `max_input_chars_per_word`, inputs past the truncation length, empty and
//! whitespace-only text); and the same generated text on variants of the configuration (each
//! normalizer option off or on, left truncation, short `max_length`, `BertProcessing`, no
//! post-processor, other type ids, more added tokens, a short word limit).
//!
//! Deterministic: case `i` is generated from seed `i`; a failure prints the case.
//! `WORDPIECE_CASE=N` runs case N alone; `WORDPIECE_CASES=N` runs N cases (default 3,000; each
//! configuration variant runs a tenth of them).

mod generate;
#[path = "../support/mod.rs"]
mod support;

use generate::generate;
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde_json::{Value, json};

const CASES: u64 = 3_000;

fn case_range(default: u64) -> std::ops::Range<u64> {
    if let Ok(n) = std::env::var("WORDPIECE_CASE") {
        let n: u64 = n.parse().expect("WORDPIECE_CASE is a number");
        return n..n + 1;
    }
    let n = std::env::var("WORDPIECE_CASES").map_or(default, |n| n.parse().expect("WORDPIECE_CASES is a number"));
    0..n
}

/// `tokenizers`' answer, in the worker's types.
fn expected(hf: &tokenizers::Tokenizer, text: &str) -> (Vec<i64>, Vec<i64>) {
    let e = hf.encode(text, true).expect("tokenizers encodes");
    (e.get_ids().iter().map(|&i| i64::from(i)).collect(), e.get_type_ids().iter().map(|&i| i64::from(i)).collect())
}

struct Pair {
    hf: tokenizers::Tokenizer,
    fast: wordpiece::Tokenizer,
    name: String,
}

impl Pair {
    fn new(name: &str, hf: tokenizers::Tokenizer) -> Self {
        let fast = wordpiece::Tokenizer::from_tokenizers(&hf).unwrap_or_else(|e| panic!("configuration {name}: {e}"));
        Self { hf, fast, name: name.into() }
    }

    /// Panics with the input and both answers when they differ.
    fn check(&self, what: &str, text: &str) {
        let want = expected(&self.hf, text);
        let (mut ids, mut type_ids) = (vec![7; 3], vec![7; 2]); // not empty: encode_into clears
        self.fast.encode_into(text, &mut ids, &mut type_ids);
        if (&ids, &type_ids) != (&want.0, &want.1) {
            panic!(
                "configuration {}, {what}: input {text:?} ({} bytes)\n  tokenizers ids {:?}\n  wordpiece  ids {:?}\n  \
                 tokenizers type ids {:?}\n  wordpiece  type ids {:?}",
                self.name,
                text.len(),
                want.0,
                ids,
                want.1,
                type_ids
            );
        }
    }
}

fn bundled() -> Pair {
    Pair::new("bundled", support::hf_as_worker())
}

#[test]
fn every_snips_utterance_and_loadtest_query_gets_the_same_ids() {
    let pair = bundled();
    let mut n = 0;
    for (i, q) in
        support::snips(true).iter().chain(&support::snips(false)).chain(&support::loadtest_queries()).enumerate()
    {
        pair.check(&format!("utterance {i}"), q);
        n += 1;
    }
    assert!(n > 14_000);
}

#[test]
fn every_unicode_scalar_value_as_a_word_gets_the_same_ids() {
    // Without truncation, so that one text can hold many words; each character stands between
    // spaces, and once after an ASCII letter (where it may join the word, combine or split it).
    let mut hf = support::hf_as_worker();
    hf.with_truncation(None).expect("truncation off");
    let pair = Pair::new("bundled, no truncation", hf);
    // Planes 0 and 1 whole; past them (CJK extensions, tags and variation selectors, private
    // use, unassigned) every 7th, or all with `WORDPIECE_ALL_CHARS=1` (ran clean).
    let all = std::env::var("WORDPIECE_ALL_CHARS").is_ok_and(|v| v == "1");
    let chars: Vec<char> =
        (0..=0x10FFFF).filter(|&u| all || u < 0x20000 || u % 7 == 0).filter_map(char::from_u32).collect();
    let mut text = String::new();
    for chunk in chars.chunks(96) {
        text.clear();
        for &c in chunk {
            text.push(c);
            text.push_str(" a");
            text.push(c);
            text.push(' ');
        }
        pair.check(&format!("characters {:04X}..", u32::from(chunk[0])), &text);
    }
}

#[test]
fn generated_inputs_get_the_same_ids() {
    let pair = bundled();
    let snips = support::snips(true);
    for case in case_range(CASES) {
        let text = generate(&mut StdRng::seed_from_u64(case), &snips);
        pair.check(&format!("case {case} (WORDPIECE_CASE={case})"), &text);
    }
}

#[test]
fn edge_inputs_get_the_same_ids() {
    let pair = bundled();
    let long_word = "a".repeat(100);
    let inputs = [
        String::new(),
        " ".into(),
        " \t\n\r\u{3000}\u{a0}\u{2028} ".into(),
        "\u{0}\u{fffd}\u{200b}\u{feff}".into(),
        "[CLS]".into(),
        "[CLS][SEP][PAD][MASK][UNK]".into(),
        "[cls] [Sep] [MASK [MASK]] [[UNK]]".into(),
        long_word.clone(),
        format!("{long_word}a"),
        format!("{long_word}[SEP]{long_word}b"),
        "é".repeat(100),
        "é".repeat(101),
        "e\u{301}".repeat(60), // 120 characters before accents are stripped, 60 after
        "word ".repeat(126),
        "word ".repeat(127),
        "word ".repeat(5000),
        "[SEP]".repeat(200),
        "unaffable".repeat(40),
    ];
    for (i, text) in inputs.iter().enumerate() {
        pair.check(&format!("edge input {i}"), text);
    }
}

#[test]
fn configuration_variants_get_the_same_ids() {
    let snips = support::snips(true);
    let cases = case_range(CASES / 10);
    for (name, edit) in variants() {
        let mut config: Value =
            serde_json::from_slice(&std::fs::read(support::tokenizer_json()).expect("read")).expect("JSON");
        edit(&mut config);
        let hf: tokenizers::Tokenizer = config.to_string().parse().unwrap_or_else(|e| panic!("{name}: {e}"));
        let pair = Pair::new(name, hf);
        for case in cases.clone() {
            let text = generate(&mut StdRng::seed_from_u64(case), &snips);
            pair.check(&format!("case {case} (WORDPIECE_CASE={case})"), &text);
        }
    }
}

type Edit = fn(&mut Value);

fn variants() -> Vec<(&'static str, Edit)> {
    vec![
        ("lowercase off", |c| c["normalizer"]["lowercase"] = json!(false)),
        ("lowercase, accents kept", |c| c["normalizer"]["strip_accents"] = json!(false)),
        ("no lowercase, accents stripped", |c| {
            c["normalizer"]["lowercase"] = json!(false);
            c["normalizer"]["strip_accents"] = json!(true);
        }),
        ("chinese characters not split", |c| c["normalizer"]["handle_chinese_chars"] = json!(false)),
        ("text not cleaned", |c| c["normalizer"]["clean_text"] = json!(false)),
        ("left truncation at 16", |c| {
            c["truncation"]["direction"] = json!("Left");
            c["truncation"]["max_length"] = json!(16);
        }),
        ("right truncation at 3, OnlyFirst", |c| {
            c["truncation"]["max_length"] = json!(3);
            c["truncation"]["strategy"] = json!("OnlyFirst");
        }),
        ("truncation at 2: special tokens only", |c| c["truncation"]["max_length"] = json!(2)),
        ("no truncation", |c| c["truncation"] = Value::Null),
        ("BertProcessing", |c| {
            c["post_processor"] = json!({"type": "BertProcessing", "sep": ["[SEP]", 102], "cls": ["[CLS]", 101]});
        }),
        ("no post-processor, truncation at 7", |c| {
            c["post_processor"] = Value::Null;
            c["truncation"]["max_length"] = json!(7);
        }),
        ("template with other type ids and two tokens before", |c| {
            c["post_processor"]["single"] = json!([
                {"SpecialToken": {"id": "[CLS]", "type_id": 3}},
                {"SpecialToken": {"id": "[SEP]", "type_id": 4}},
                {"Sequence": {"id": "A", "type_id": 1}},
                {"SpecialToken": {"id": "[SEP]", "type_id": 2}}
            ]);
        }),
        ("more added tokens, overlapping and multi-word", |c| {
            let more = [("play", 2_000), ("play music", 30_522), ("[MASK]]", 30_523), ("é", 30_524), ("##", 30_525)];
            let list = c["added_tokens"].as_array_mut().expect("added_tokens");
            for (content, id) in more {
                list.push(json!({"id": id, "content": content, "single_word": false, "lstrip": false,
                    "rstrip": false, "normalized": false, "special": false}));
            }
        }),
        ("words of at most 5 characters", |c| c["model"]["max_input_chars_per_word"] = json!(5)),
        ("continuing prefix @@", |c| c["model"]["continuing_subword_prefix"] = json!("@@")),
    ]
}
