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

mod support;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
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

// ------------------------------------------------------------------------------------------------
// Generated inputs
// ------------------------------------------------------------------------------------------------

/// Characters that stress one step each; `generate` also draws from all of Unicode.
const POOLS: &[&[char]] = &[
    // Combining marks (Mn), including ones NFD reorders (ccc 220 vs 230) and non-Latin ones;
    // spacing marks with a combining class (Mc), which stripping keeps.
    &[
        '\u{300}',
        '\u{301}',
        '\u{302}',
        '\u{303}',
        '\u{308}',
        '\u{30A}',
        '\u{323}',
        '\u{327}',
        '\u{328}',
        '\u{334}',
        '\u{345}',
        '\u{591}',
        '\u{5B0}',
        '\u{64B}',
        '\u{93C}',
        '\u{94D}',
        '\u{E31}',
        '\u{E48}',
        '\u{1DC0}',
        '\u{20D0}',
        '\u{20E3}',
        '\u{302A}',
        '\u{3099}',
        '\u{FE20}',
        '\u{FE0F}',
        '\u{E0100}',
        '\u{1D165}',
        '\u{1D16D}',
        '\u{302E}',
        '\u{93E}',
        '\u{488}',
    ],
    // Precomposed letters (NFC), letters whose lowercase is special, ligatures, Hangul.
    &[
        'é', 'É', 'ñ', 'Ñ', 'ü', 'Å', 'ø', 'ß', 'ẞ', 'İ', 'ı', 'Σ', 'ς', 'ά', 'Ά', 'ǅ', 'ǈ', 'ﬁ', 'Ω', 'K', 'Å', 'Ⅻ',
        'Ⓐ', 'Ꭰ', 'ꭰ', 'Ა', 'ა', '한', '글', 'ᄀ', 'ᅡ', 'ǖ', 'ậ', 'ḯ', 'Ǻ', 'ő', 'ų', 'Ł', 'Đ', 'ŉ', 'ǰ',
    ],
    // CJK ideographs (each block and extension), compatibility ideographs, kana, fullwidth.
    &[
        '一',
        '中',
        '文',
        '野',
        '\u{3400}',
        '\u{4DBF}',
        '\u{9FFF}',
        '\u{9FEF}',
        '\u{20000}',
        '\u{2A6DF}',
        '\u{2A700}',
        '\u{2B740}',
        '\u{2B820}',
        '\u{2B920}',
        '\u{2CEAF}',
        '\u{F900}',
        '\u{FA6E}',
        '\u{FAFF}',
        '\u{2F800}',
        '\u{2FA1D}',
        '\u{30000}',
        'ひ',
        'が',
        'カ',
        'ガ',
        'ｶ',
        'ﾞ',
        'Ａ',
        'ａ',
        '１',
        '〇',
        '々',
    ],
    // Punctuation of every category, ASCII symbols (split) and other symbols (not split).
    &[
        '_',
        '\u{203F}',
        '-',
        '\u{2010}',
        '\u{2014}',
        '\u{301C}',
        '(',
        ')',
        '[',
        ']',
        '{',
        '}',
        '\u{300C}',
        '\u{300D}',
        '«',
        '»',
        '\u{2018}',
        '\u{2019}',
        '\u{201C}',
        '\u{201D}',
        '!',
        '?',
        '.',
        ',',
        '\'',
        '"',
        '#',
        '%',
        '&',
        '*',
        '/',
        ':',
        ';',
        '@',
        '\\',
        '¡',
        '¿',
        '、',
        '。',
        '・',
        '\u{55D}',
        '\u{60C}',
        '\u{1F64}',
        '$',
        '+',
        '<',
        '=',
        '>',
        '^',
        '`',
        '|',
        '~',
        '€',
        '©',
        '±',
        '¬',
        '°',
        '\u{2122}',
        '\u{2211}',
        '\u{1F4A9}',
        '\u{2E52}',
        '\u{2E5D}',
        '\u{11FFF}',
        '\u{16FE2}',
    ],
    // Control (Cc), format (Cf), zero-width and replacement characters.
    &[
        '\u{0}',
        '\u{1}',
        '\u{7}',
        '\u{1B}',
        '\u{1C}',
        '\u{1F}',
        '\u{7F}',
        '\u{80}',
        '\u{9F}',
        '\u{AD}',
        '\u{600}',
        '\u{61C}',
        '\u{180E}',
        '\u{200B}',
        '\u{200C}',
        '\u{200D}',
        '\u{200E}',
        '\u{202A}',
        '\u{2060}',
        '\u{2066}',
        '\u{FEFF}',
        '\u{FFF9}',
        '\u{FFFD}',
        '\u{110BD}',
        '\u{1D173}',
        '\u{E0001}',
        '\u{E0020}',
        '\u{E007F}',
        '\u{13430}',
        '\u{1BCA0}',
    ],
    // Whitespace of every kind.
    &[
        ' ', '\t', '\n', '\u{B}', '\u{C}', '\r', '\u{85}', '\u{A0}', '\u{1680}', '\u{2000}', '\u{2007}', '\u{200A}',
        '\u{2028}', '\u{2029}', '\u{202F}', '\u{205F}', '\u{3000}',
    ],
    // Emoji, modifiers, flags; private use; unassigned and noncharacters.
    &[
        '😀',
        '👍',
        '\u{1F3FB}',
        '\u{1F3FF}',
        '\u{1F1EB}',
        '\u{1F1F7}',
        '❤',
        '\u{2764}',
        '\u{1F9D1}',
        '\u{1FAE8}',
        '\u{1FAF8}',
        '\u{E000}',
        '\u{F8FF}',
        '\u{F0000}',
        '\u{10FFFD}',
        '\u{378}',
        '\u{FFFE}',
        '\u{FFFF}',
        '\u{2FFFF}',
        '\u{E0080}',
        '\u{1FFFE}',
        '\u{10FFFF}',
        '\u{0870}',
        '\u{1E030}',
        '\u{31350}',
    ],
];

/// Strings that matter as a whole: the special tokens, near misses, the subword prefix.
const PHRASES: &[&str] = &[
    "[CLS]",
    "[SEP]",
    "[PAD]",
    "[MASK]",
    "[UNK]",
    "[cls]",
    "[Sep]",
    "[MASK",
    "MASK]",
    "[[SEP]]",
    "##",
    "##ing",
    "#",
    "play music",
    "un",
    "##aff",
    "able",
    "'s",
    "n't",
    "e\u{301}",
    "a\u{323}\u{301}",
    "a\u{301}\u{323}",
    "\u{1F468}\u{200D}\u{1F469}\u{200D}\u{1F467}",
    "\u{1F44D}\u{1F3FD}",
    "\u{1F1EB}\u{1F1F7}",
    "1\u{FE0F}\u{20E3}",
];

fn random_char(rng: &mut StdRng) -> char {
    if rng.random_bool(0.15) {
        // Anything at all (mostly unassigned or rare: the tables are what is tested).
        loop {
            if let Some(c) = char::from_u32(rng.random_range(0..=0x10FFFF)) {
                return c;
            }
        }
    }
    if rng.random_bool(0.3) {
        return char::from(rng.random_range(0x20u8..0x7F));
    }
    let pool = POOLS[rng.random_range(0..POOLS.len())];
    pool[rng.random_range(0..pool.len())]
}

fn random_text(rng: &mut StdRng, atoms: usize) -> String {
    let mut s = String::new();
    for _ in 0..atoms {
        match rng.random_range(0..10) {
            0 => s.push_str(PHRASES[rng.random_range(0..PHRASES.len())]),
            1 => s.push(' '),
            _ => s.push(random_char(rng)),
        }
    }
    s
}

/// A SNIPS utterance with random edits: characters inserted, letters decomposed (NFD) or
/// cased, special tokens spliced in.
fn mutate(rng: &mut StdRng, utterance: &str) -> String {
    let mut out = String::new();
    for c in utterance.chars() {
        match rng.random_range(0..40) {
            0 => out.push(random_char(rng)),
            1 => out.push_str(PHRASES[rng.random_range(0..PHRASES.len())]),
            2 => {
                out.push(c);
                out.push(POOLS[0][rng.random_range(0..POOLS[0].len())]);
                continue;
            }
            3 => {
                out.extend(c.to_uppercase());
                continue;
            }
            _ => {}
        }
        out.push(c);
    }
    out
}

fn generate(rng: &mut StdRng, snips: &[String]) -> String {
    let utterance = &snips[rng.random_range(0..snips.len())];
    match rng.random_range(0..100) {
        // The real queries, lightly edited.
        0..30 => mutate(rng, utterance),
        // Random text of a query's length.
        30..65 => {
            let n = rng.random_range(0..60);
            random_text(rng, n)
        }
        // Long words: around `max_input_chars_per_word` (100), in ASCII and multi-byte letters,
        // with marks that accent stripping removes (so the count before and after differs).
        65..80 => {
            let mut s = String::new();
            for _ in 0..rng.random_range(1..4) {
                let n = rng.random_range(90..=110);
                let unit = ["a", "é", "e\u{301}", "ab", "中", "ﬁ", "\u{10348}", "x\u{200B}"][rng.random_range(0..8)];
                for _ in 0..n {
                    s.push_str(unit);
                }
                s.push(' ');
            }
            s
        }
        // Past the truncation length: many utterances, or much random text.
        80..90 => {
            let mut s = String::new();
            for _ in 0..rng.random_range(4..40) {
                s.push_str(&snips[rng.random_range(0..snips.len())]);
                s.push(if rng.random_bool(0.5) { ' ' } else { '.' });
            }
            if rng.random_bool(0.5) { mutate(rng, &s) } else { s }
        }
        90..95 => {
            let n = rng.random_range(100..600);
            random_text(rng, n)
        }
        // Nothing to tokenize: empty, whitespace, control and format characters only.
        _ => {
            let n = rng.random_range(0..12);
            (0..n)
                .map(|_| {
                    let pool = POOLS[if rng.random_bool(0.5) { 4 } else { 5 }];
                    pool[rng.random_range(0..pool.len())]
                })
                .collect()
        }
    }
}
