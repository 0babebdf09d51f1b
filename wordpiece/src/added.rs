//! Added tokens (`[CLS]`, `[SEP]`, `[MASK]`, ...) found in the raw text before anything else, as
//! `tokenizers`' `AddedVocabulary` does for tokens with `normalized: false`: leftmost-longest,
//! non-overlapping matches on the original text; a match becomes that token's id and the text
//! between matches is normalized and tokenized on its own.
//!
//! A model has a handful of them, so a scan for their first bytes beats building an automaton.

#[derive(Debug)]
pub(crate) struct AddedTokens {
    /// `(content, id)`, longest first, so the first that matches at a position is the longest.
    tokens: Vec<(Box<[u8]>, u32)>,
    /// Whether some token starts with this byte.
    first_byte: [bool; 256],
}

/// A piece of the input: text to tokenize, or an added token's id.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Piece<'a> {
    Text(&'a str),
    Token(u32),
}

impl AddedTokens {
    pub fn new(tokens: &[(String, u32)]) -> Self {
        let mut tokens: Vec<(Box<[u8]>, u32)> =
            tokens.iter().filter(|(c, _)| !c.is_empty()).map(|(c, id)| (c.as_bytes().into(), *id)).collect();
        tokens.sort_by_key(|(c, _)| std::cmp::Reverse(c.len()));
        let mut first_byte = [false; 256];
        for (c, _) in &tokens {
            first_byte[usize::from(c[0])] = true;
        }
        Self { tokens, first_byte }
    }

    /// Calls `f` on each piece in order, until it returns `false`. Empty text pieces are skipped.
    pub fn split<'a>(&self, text: &'a str, mut f: impl FnMut(Piece<'a>) -> bool) {
        let bytes = text.as_bytes();
        let mut done = 0; // start of the text not yet handed out
        let mut i = 0;
        while i < bytes.len() {
            if !self.first_byte[usize::from(bytes[i])] {
                i += 1;
                continue;
            }
            let Some((len, id)) =
                self.tokens.iter().find(|(c, _)| bytes[i..].starts_with(c)).map(|(c, id)| (c.len(), *id))
            else {
                i += 1;
                continue;
            };
            // A token is valid UTF-8, so a match starts and ends on character boundaries.
            if done < i && !f(Piece::Text(&text[done..i])) {
                return;
            }
            if !f(Piece::Token(id)) {
                return;
            }
            i += len;
            done = i;
        }
        if done < bytes.len() {
            f(Piece::Text(&text[done..]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(tokens: &[(&str, u32)], text: &str) -> Vec<String> {
        let owned: Vec<(String, u32)> = tokens.iter().map(|(c, i)| (c.to_string(), *i)).collect();
        let mut out = vec![];
        AddedTokens::new(&owned).split(text, |p| {
            out.push(match p {
                Piece::Text(t) => format!("{t:?}"),
                Piece::Token(id) => format!("#{id}"),
            });
            true
        });
        out
    }

    #[test]
    fn tokens_are_cut_out_of_the_raw_text() {
        let t = [("[CLS]", 101), ("[SEP]", 102)];
        assert_eq!(pieces(&t, "a [SEP]b[CLS][CLS]"), ["\"a \"", "#102", "\"b\"", "#101", "#101"]);
        assert_eq!(pieces(&t, "[sep] [SEP"), ["\"[sep] [SEP\""]);
        assert!(pieces(&t, "").is_empty());
    }

    #[test]
    fn the_longest_token_at_the_leftmost_position_wins() {
        let t = [("ab", 1), ("abc", 2), ("bcd", 3)];
        assert_eq!(pieces(&t, "xabcd"), ["\"x\"", "#2", "\"d\""]);
        assert_eq!(pieces(&t, "abd"), ["#1", "\"d\""]);
    }
}
