//! The project's tokenizer and queries, shared by the tests and the bench.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub fn tokenizer_json() -> PathBuf {
    repo().join("models/snips-minilm-l6/tokenizer.json")
}

/// `tokenizers` as the worker sets it up (`worker/src/model.rs`): the file's truncation (128),
/// padding off.
pub fn hf_as_worker() -> tokenizers::Tokenizer {
    let mut t = tokenizers::Tokenizer::from_file(tokenizer_json()).expect("tokenizer.json loads");
    t.with_padding(None);
    assert!(t.get_truncation().is_some(), "the bundled tokenizer.json truncates");
    t
}

/// The SNIPS utterances of `train_*` (`test == false`) or `validate_*` (`test == true`) files.
pub fn snips(test: bool) -> Vec<String> {
    let dir = repo().join("models/data/snips");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("models/data/snips")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name.ends_with(".json") && name.starts_with(if test { "validate_" } else { "train_" })
        })
        .collect();
    files.sort();
    let mut out = vec![];
    for f in files {
        let text = decode_cesu8(&std::fs::read(&f).expect("snips file"));
        let doc: serde_json::Value = serde_json::from_str(&text).expect("snips JSON");
        for (_, items) in doc.as_object().expect("one intent") {
            for item in items.as_array().expect("utterances") {
                let pieces = item["data"].as_array().expect("data");
                out.push(pieces.iter().map(|p| p["text"].as_str().expect("text")).collect());
            }
        }
    }
    assert!(out.len() >= if test { 700 } else { 13_000 }, "{} utterances", out.len());
    out
}

/// `loadtest/queries.txt`, one query a line.
pub fn loadtest_queries() -> Vec<String> {
    let text = std::fs::read_to_string(repo().join("loadtest/queries.txt")).expect("loadtest/queries.txt");
    text.lines().filter(|l| !l.is_empty()).map(str::to_owned).collect()
}

/// UTF-8, except that a few SNIPS emoji are stored as two UTF-8-encoded UTF-16 surrogates
/// (CESU-8; see `models/data/snips/README.md`): join each pair into its code point.
fn decode_cesu8(bytes: &[u8]) -> String {
    let surrogate = |b: &[u8]| -> Option<u32> {
        (b.len() >= 3 && b[0] == 0xED && (0xA0..=0xBF).contains(&b[1]))
            .then(|| 0xD000 | (u32::from(b[1] & 0x3F) << 6) | u32::from(b[2] & 0x3F))
    };
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if let (Some(hi @ 0xD800..=0xDBFF), Some(lo @ 0xDC00..=0xDFFF)) =
            (surrogate(&bytes[i..]), bytes.get(i + 3..).and_then(surrogate))
        {
            let c = char::from_u32(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)).expect("a code point");
            out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
            i += 6;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).expect("UTF-8 once surrogate pairs are joined")
}
