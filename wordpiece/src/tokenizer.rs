//! The encoder: added tokens, then for each text piece normalizer, pre-tokenizer and WordPiece,
//! then truncation and the template's special tokens, written straight into the caller's vectors.

use std::cell::RefCell;
use std::path::Path;

use crate::Error;
use crate::added::{AddedTokens, Piece};
use crate::config::{Config, Truncation};
use crate::model::WordPiece;
use crate::normalizer::Normalizer;
use crate::pretokenizer::for_each_word;

/// Per-thread buffers, kept between queries so that encoding allocates nothing.
#[derive(Default)]
struct Scratch {
    normalized: String,
    ids: Vec<i64>,
    type_ids: Vec<i64>,
}

/// Text is normalized this much at a time (then to the next space) when truncation keeps the
/// start, so a long input costs about what its first `max_length` tokens cost.
const CHUNK_BYTES: usize = 256;

/// Scratch grown past this by a long input is given back after it.
const KEEP_SCRATCH_BYTES: usize = 64 * 1024;

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::default();
}

fn with_scratch<R>(f: impl FnOnce(&mut Scratch) -> R) -> R {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut scratch) => {
            let r = f(&mut scratch);
            if scratch.normalized.capacity() > KEEP_SCRATCH_BYTES
                || scratch.ids.capacity() * size_of::<i64>() > KEEP_SCRATCH_BYTES
            {
                *scratch = Scratch::default();
            }
            r
        }
        // Only if called from inside itself, which it never is; stay correct anyway.
        Err(_) => f(&mut Scratch::default()),
    })
}

/// A BERT WordPiece tokenizer that gives exactly the `input_ids` and `token_type_ids` of
/// `tokenizers::Tokenizer::encode(text, true)` on the same configuration.
///
/// Built only from configurations it implements exactly (see [`Tokenizer::from_tokenizers`]);
/// `Send + Sync`, no locks: per-thread scratch space, nothing shared is written.
#[derive(Debug)]
pub struct Tokenizer {
    added: AddedTokens,
    normalizer: Normalizer,
    model: WordPiece,
    prefix: Vec<(i64, i64)>,
    suffix: Vec<(i64, i64)>,
    sequence_type_id: i64,
    truncation: Option<Truncation>,
    max_length: Option<usize>,
}

impl Tokenizer {
    /// Loads `tokenizer.json` with `tokenizers` and converts it: see [`Tokenizer::from_tokenizers`].
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, Error> {
        let tokenizer = tokenizers::Tokenizer::from_file(path).map_err(|e| Error::Load(e.to_string()))?;
        Self::from_tokenizers(&tokenizer)
    }

    /// Takes the configuration of a loaded `tokenizers` tokenizer (as it serializes it, so
    /// truncation or padding changed after loading count). Refused with [`Error::Unsupported`]
    /// unless it is: `BertNormalizer` (any options), `BertPreTokenizer`, `WordPiece` whose
    /// unknown token is in its vocabulary, added tokens with `normalized`, `single_word`,
    /// `lstrip` and `rstrip` all false, `TemplateProcessing` (a single-sequence template naming
    /// `$A` once), `BertProcessing` or no post-processor, truncation off or with stride 0 and
    /// strategy `LongestFirst` or `OnlyFirst`, padding off, special tokens not encoded as text.
    pub fn from_tokenizers(tokenizer: &tokenizers::Tokenizer) -> Result<Self, Error> {
        if tokenizer.get_encode_special_tokens() {
            return Err(Error::Unsupported("encode_special_tokens is set".into()));
        }
        let json = tokenizer.to_string(false).map_err(|e| Error::Load(e.to_string()))?;
        Self::from_config(Config::from_json(&json)?)
    }

    fn from_config(config: Config) -> Result<Self, Error> {
        let unk = config.model.vocab[&config.model.unk_token];
        let pair = |&(id, type_id): &(u32, u32)| (i64::from(id), i64::from(type_id));
        Ok(Self {
            added: AddedTokens::new(&config.added_tokens),
            normalizer: Normalizer::new(config.normalizer),
            model: WordPiece::new(&config.model, unk),
            prefix: config.prefix.iter().map(pair).collect(),
            suffix: config.suffix.iter().map(pair).collect(),
            sequence_type_id: i64::from(config.sequence_type_id),
            truncation: config.truncation,
            max_length: config.max_length,
        })
    }

    /// Most tokens of an encoding, special tokens included: the truncation `max_length`.
    pub fn max_length(&self) -> Option<usize> {
        self.max_length
    }

    /// Encodes `text` with special tokens, truncated, into `ids` and `type_ids` (both cleared
    /// first). Allocates nothing once the vectors and this thread's scratch have grown to fit.
    pub fn encode_into(&self, text: &str, ids: &mut Vec<i64>, type_ids: &mut Vec<i64>) {
        with_scratch(|scratch| self.encode_with(text, &mut scratch.normalized, ids, type_ids));
    }

    /// [`Tokenizer::encode_into`] into new vectors of the exact length, `(input_ids,
    /// token_type_ids)`: two allocations.
    pub fn encode(&self, text: &str) -> (Vec<i64>, Vec<i64>) {
        with_scratch(|s| {
            self.encode_with(text, &mut s.normalized, &mut s.ids, &mut s.type_ids);
            (s.ids.to_vec(), s.type_ids.to_vec())
        })
    }

    fn encode_with(&self, text: &str, normalized: &mut String, ids: &mut Vec<i64>, type_ids: &mut Vec<i64>) {
        ids.clear();
        type_ids.clear();
        ids.extend(self.prefix.iter().map(|p| p.0));
        let start = ids.len();
        self.encode_sequence(text, normalized, ids, start);
        match self.truncation {
            Some(Truncation { max_tokens, keep_start }) if ids.len() - start > max_tokens => {
                if keep_start {
                    ids.truncate(start + max_tokens);
                } else {
                    ids.drain(start..ids.len() - max_tokens);
                }
            }
            _ => {}
        }
        type_ids.extend(self.prefix.iter().map(|p| p.1));
        type_ids.resize(ids.len(), self.sequence_type_id);
        ids.extend(self.suffix.iter().map(|p| p.0));
        type_ids.extend(self.suffix.iter().map(|p| p.1));
    }

    /// Appends the sequence's ids to `ids` (whose first `start` entries are special tokens). When
    /// truncation keeps the start, stops once there are enough: the rest would be cut anyway.
    fn encode_sequence(&self, text: &str, normalized: &mut String, ids: &mut Vec<i64>, start: usize) {
        let enough = match self.truncation {
            Some(Truncation { max_tokens, keep_start: true }) => max_tokens,
            _ => usize::MAX,
        };
        self.added.split(text, |piece| {
            match piece {
                Piece::Token(id) => ids.push(i64::from(id)),
                Piece::Text(text) => {
                    // Text that will be cut is not normalized whole: chunks end at a space.
                    let chunk = if enough == usize::MAX { usize::MAX } else { CHUNK_BYTES };
                    for t in self.normalizer.chunks(text, chunk) {
                        self.normalizer.normalize(t, normalized);
                        for_each_word(normalized, |word| {
                            self.model.tokenize(word, ids);
                            ids.len() - start < enough
                        });
                        if ids.len() - start >= enough {
                            break;
                        }
                    }
                }
            }
            ids.len() - start < enough
        });
    }
}
