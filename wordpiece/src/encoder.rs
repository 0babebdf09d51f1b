//! One way in for a caller: this crate's tokenizer where the configuration allows it, `tokenizers`
//! otherwise, with the same output either way.

use crate::{Error, Tokenizer};

/// Encodes with [`Tokenizer`] when it implements the configuration exactly, and with
/// `tokenizers` (`encode(text, true)`) when it does not.
#[derive(Debug)]
pub struct Encoder {
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    Fast(Box<Tokenizer>),
    Fallback { tokenizer: Box<tokenizers::Tokenizer>, reason: Error },
}

impl Encoder {
    /// Takes a `tokenizers` tokenizer as the caller has set it up (truncation, padding off).
    pub fn new(tokenizer: tokenizers::Tokenizer) -> Self {
        let inner = match Tokenizer::from_tokenizers(&tokenizer) {
            Ok(fast) => Inner::Fast(Box::new(fast)),
            Err(reason) => Inner::Fallback { tokenizer: Box::new(tokenizer), reason },
        };
        Self { inner }
    }

    /// Why `tokenizers` is used, or `None` when this crate's tokenizer is.
    pub fn fallback_reason(&self) -> Option<&Error> {
        match &self.inner {
            Inner::Fast(_) => None,
            Inner::Fallback { reason, .. } => Some(reason),
        }
    }

    /// `(input_ids, token_type_ids)` of `text` with special tokens, truncated as configured.
    /// Only the `tokenizers` fallback can fail.
    pub fn encode(&self, text: &str) -> Result<(Vec<i64>, Vec<i64>), tokenizers::Error> {
        match &self.inner {
            Inner::Fast(t) => Ok(t.encode(text)),
            Inner::Fallback { tokenizer, .. } => {
                let e = tokenizer.encode(text, true)?;
                let widen = |v: &[u32]| v.iter().map(|&i| i64::from(i)).collect();
                Ok((widen(e.get_ids()), widen(e.get_type_ids())))
            }
        }
    }
}
