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

    /// Whether this crate's tokenizer is used (`false`: the `tokenizers` fallback).
    pub fn is_fast(&self) -> bool {
        matches!(self.inner, Inner::Fast(_))
    }

    /// Most tokens of an encoding, special tokens included (the truncation's `max_length`).
    pub fn max_length(&self) -> Option<usize> {
        match &self.inner {
            Inner::Fast(t) => t.max_length(),
            Inner::Fallback { tokenizer, .. } => tokenizer.get_truncation().map(|t| t.max_length),
        }
    }

    /// [`Encoder::encode`] into `ids` and `type_ids` (both cleared first): on the fast path no
    /// allocation once they have grown to fit. Only the `tokenizers` fallback can fail.
    pub fn encode_into(
        &self,
        text: &str,
        ids: &mut Vec<i64>,
        type_ids: &mut Vec<i64>,
    ) -> Result<(), tokenizers::Error> {
        match &self.inner {
            Inner::Fast(t) => t.encode_into(text, ids, type_ids),
            Inner::Fallback { tokenizer, .. } => {
                let e = tokenizer.encode(text, true)?;
                ids.clear();
                type_ids.clear();
                ids.extend(e.get_ids().iter().map(|&i| i64::from(i)));
                type_ids.extend(e.get_type_ids().iter().map(|&i| i64::from(i)));
            }
        }
        Ok(())
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
