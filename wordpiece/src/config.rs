//! Reads a `tokenizers` configuration and accepts only what this crate implements exactly.
//!
//! The configuration is read from `tokenizers`' own serialization of a loaded tokenizer (so
//! defaults, and changes the caller made such as `with_truncation`, are as `tokenizers` sees
//! them). Each part is parsed with unknown fields refused: a field this crate does not know may
//! change behaviour, so it is a reason to refuse, never to guess.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::Value;

use crate::Error;

/// Everything the encoder needs, checked.
#[derive(Debug)]
pub(crate) struct Config {
    pub normalizer: NormalizerConfig,
    pub model: WordPieceConfig,
    pub added_tokens: Vec<(String, u32)>,
    /// Special tokens before and after the sequence, `(id, type_id)`, and the sequence's type id.
    pub prefix: Vec<(u32, u32)>,
    pub suffix: Vec<(u32, u32)>,
    pub sequence_type_id: u32,
    /// Most tokens of the sequence itself (special tokens excluded), and which end is kept.
    pub truncation: Option<Truncation>,
    /// `max_length` as configured (special tokens included).
    pub max_length: Option<usize>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NormalizerConfig {
    pub clean_text: bool,
    pub handle_chinese_chars: bool,
    pub strip_accents: Option<bool>,
    pub lowercase: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WordPieceConfig {
    pub unk_token: String,
    pub continuing_subword_prefix: String,
    pub max_input_chars_per_word: usize,
    pub vocab: HashMap<String, u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Truncation {
    pub max_tokens: usize,
    pub keep_start: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TruncationConfig {
    direction: String,
    max_length: usize,
    strategy: String,
    stride: usize,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AddedTokenConfig {
    id: u32,
    content: String,
    single_word: bool,
    lstrip: bool,
    rstrip: bool,
    normalized: bool,
    special: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TemplateConfig {
    single: Vec<Piece>,
    #[allow(dead_code)]
    pair: Value,
    special_tokens: HashMap<String, SpecialTokenConfig>,
}

#[derive(Deserialize)]
enum Piece {
    Sequence { id: String, type_id: u32 },
    SpecialToken { id: String, type_id: u32 },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SpecialTokenConfig {
    #[allow(dead_code)]
    id: String,
    ids: Vec<u32>,
    #[allow(dead_code)]
    tokens: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BertProcessingConfig {
    sep: (String, u32),
    cls: (String, u32),
}

fn unsupported(what: impl Into<String>) -> Error {
    Error::Unsupported(what.into())
}

/// Splits `{"type": T, ...}` into `T` and the rest.
fn tagged(part: &str, value: Value) -> Result<(String, Value), Error> {
    let Value::Object(mut map) = value else {
        return Err(unsupported(if value.is_null() {
            format!("no {part}")
        } else {
            format!("{part} is not an object")
        }));
    };
    match map.remove("type") {
        Some(Value::String(t)) => Ok((t, Value::Object(map))),
        _ => Err(unsupported(format!("{part} has no type"))),
    }
}

fn parse<T: serde::de::DeserializeOwned>(part: &str, value: Value) -> Result<T, Error> {
    serde_json::from_value(value).map_err(|e| unsupported(format!("{part}: {e}")))
}

impl Config {
    /// Parses `tokenizers`' serialization (`Tokenizer::to_string`).
    pub fn from_json(json: &str) -> Result<Self, Error> {
        let Value::Object(mut root) = serde_json::from_str(json).map_err(|e| unsupported(e.to_string()))? else {
            return Err(unsupported("the configuration is not a JSON object"));
        };
        let mut take = |key: &str| root.remove(key).unwrap_or(Value::Null);

        match take("version") {
            Value::String(v) if v == "1.0" => {}
            v => return Err(unsupported(format!("version {v}"))),
        }
        if !take("padding").is_null() {
            return Err(unsupported("padding is set (turn it off with `with_padding(None)`: the batcher pads)"));
        }

        let normalizer = match tagged("normalizer", take("normalizer"))? {
            (t, rest) if t == "BertNormalizer" => parse::<NormalizerConfig>("BertNormalizer", rest)?,
            (t, _) => return Err(unsupported(format!("normalizer {t} (only BertNormalizer)"))),
        };
        match tagged("pre_tokenizer", take("pre_tokenizer"))? {
            (t, Value::Object(rest)) if t == "BertPreTokenizer" && rest.is_empty() => {}
            (t, _) => return Err(unsupported(format!("pre_tokenizer {t} (only BertPreTokenizer)"))),
        }
        let model = match tagged("model", take("model"))? {
            (t, rest) if t == "WordPiece" => parse::<WordPieceConfig>("WordPiece", rest)?,
            (t, _) => return Err(unsupported(format!("model {t} (only WordPiece)"))),
        };
        if !model.vocab.contains_key(&model.unk_token) {
            // `tokenizers` fails on every word that needs it; refuse rather than copy that.
            return Err(unsupported(format!("the unknown token {:?} is not in the vocabulary", model.unk_token)));
        }

        let added_tokens = added_tokens(take("added_tokens"))?;
        let template = match take("post_processor") {
            Value::Null => Template { prefix: vec![], suffix: vec![], sequence_type_id: 0 },
            v => template(v)?,
        };
        let added = template.prefix.len() + template.suffix.len();

        let (truncation, max_length) = match take("truncation") {
            Value::Null => (None, None),
            v => {
                let t: TruncationConfig = parse("truncation", v)?;
                let keep_start = match t.direction.as_str() {
                    "Right" => true,
                    "Left" => false,
                    d => return Err(unsupported(format!("truncation direction {d}"))),
                };
                if t.strategy != "LongestFirst" && t.strategy != "OnlyFirst" {
                    // OnlySecond fails on a single sequence that needs truncating.
                    return Err(unsupported(format!("truncation strategy {}", t.strategy)));
                }
                if t.stride != 0 {
                    return Err(unsupported("truncation with a stride"));
                }
                if t.max_length < added {
                    return Err(unsupported(format!(
                        "truncation max_length {} is below the {added} special tokens",
                        t.max_length
                    )));
                }
                // `tokenizers` leaves room for the special tokens it adds.
                let max_tokens = if added > 0 { t.max_length - added } else { t.max_length };
                (Some(Truncation { max_tokens, keep_start }), Some(t.max_length))
            }
        };

        Ok(Self {
            normalizer,
            model,
            added_tokens,
            prefix: template.prefix,
            suffix: template.suffix,
            sequence_type_id: template.sequence_type_id,
            truncation,
            max_length,
        })
    }
}

fn added_tokens(value: Value) -> Result<Vec<(String, u32)>, Error> {
    let tokens: Vec<AddedTokenConfig> = match value {
        Value::Null => vec![],
        v => parse("added_tokens", v)?,
    };
    let mut out: Vec<(String, u32)> = Vec::with_capacity(tokens.len());
    for t in tokens {
        let _ = t.special; // special or not, `encode` extracts them the same way
        if t.content.is_empty() {
            continue; // `tokenizers` ignores empty added tokens
        }
        if t.single_word || t.lstrip || t.rstrip || t.normalized {
            return Err(unsupported(format!(
                "added token {:?} with single_word, lstrip, rstrip or normalized set",
                t.content
            )));
        }
        if out.iter().any(|(c, _)| *c == t.content) {
            return Err(unsupported(format!("added token {:?} appears twice", t.content)));
        }
        out.push((t.content, t.id));
    }
    Ok(out)
}

struct Template {
    prefix: Vec<(u32, u32)>,
    suffix: Vec<(u32, u32)>,
    sequence_type_id: u32,
}

fn template(value: Value) -> Result<Template, Error> {
    match tagged("post_processor", value)? {
        (t, rest) if t == "BertProcessing" => {
            let b: BertProcessingConfig = parse("BertProcessing", rest)?;
            Ok(Template { prefix: vec![(b.cls.1, 0)], suffix: vec![(b.sep.1, 0)], sequence_type_id: 0 })
        }
        (t, rest) if t == "TemplateProcessing" => {
            let tp: TemplateConfig = parse("TemplateProcessing", rest)?;
            let mut prefix = vec![];
            let mut suffix = vec![];
            let mut sequence_type_id = None;
            for piece in &tp.single {
                match piece {
                    Piece::Sequence { id, type_id } if id == "A" && sequence_type_id.is_none() => {
                        sequence_type_id = Some(*type_id);
                    }
                    Piece::Sequence { id, .. } => {
                        return Err(unsupported(format!(
                            "a single-sequence template with sequence {id} (only $A, once)"
                        )));
                    }
                    Piece::SpecialToken { id, type_id } => {
                        let token = tp
                            .special_tokens
                            .get(id)
                            .ok_or_else(|| unsupported(format!("template names unknown special token {id:?}")))?;
                        let side = if sequence_type_id.is_none() { &mut prefix } else { &mut suffix };
                        side.extend(token.ids.iter().map(|&i| (i, *type_id)));
                    }
                }
            }
            let sequence_type_id =
                sequence_type_id.ok_or_else(|| unsupported("a single-sequence template without the sequence"))?;
            Ok(Template { prefix, suffix, sequence_type_id })
        }
        (t, _) => Err(unsupported(format!("post_processor {t} (only TemplateProcessing and BertProcessing)"))),
    }
}
