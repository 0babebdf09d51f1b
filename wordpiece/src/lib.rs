//! BERT WordPiece tokenization that gives exactly the ids `tokenizers` 0.23 gives, in a few
//! hundred nanoseconds a query and without allocating: `BertNormalizer`, `BertPreTokenizer`,
//! `WordPiece` and the `[CLS] $A [SEP]` template, read from the same `tokenizer.json`.
//!
//! Any other configuration is refused with [`Error::Unsupported`], so a caller can keep
//! `tokenizers` for it; [`Encoder`] does exactly that:
//!
//! ```no_run
//! let mut hf = tokenizers::Tokenizer::from_file("models/snips-minilm-l6/tokenizer.json").unwrap();
//! hf.with_padding(None);
//! let encoder = wordpiece::Encoder::new(hf);
//! if let Some(reason) = encoder.fallback_reason() {
//!     eprintln!("tokenizing with `tokenizers`: {reason}");
//! }
//! let (input_ids, token_type_ids) = encoder.encode("Play some jazz").unwrap();
//! ```
//!
//! Exactness is checked against `tokenizers` itself by `tests/vs_tokenizers.rs`; speed by
//! `benches/encode.rs`. See the README for the figures.
#![forbid(unsafe_code)]

mod added;
mod config;
mod encoder;
mod model;
mod normalizer;
mod pretokenizer;
mod tokenizer;

pub use encoder::Encoder;
pub use tokenizer::Tokenizer;

/// Why a tokenizer could not be built.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `tokenizers` could not load or serialize the configuration.
    #[error("could not load the tokenizer: {0}")]
    Load(String),
    /// The configuration is one this crate does not implement exactly: use `tokenizers`.
    #[error("not a configuration this tokenizer implements exactly: {0}")]
    Unsupported(String),
}
