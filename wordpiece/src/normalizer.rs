//! `BertNormalizer`, step for step as `tokenizers` 0.23 (`normalizers/bert.rs`) runs it:
//! clean the text (drop NUL, U+FFFD and control characters, turn whitespace into a space), put
//! spaces around CJK ideographs, strip accents (NFD, then drop nonspacing marks), lowercase.
//!
//! The character classes come from the crates `tokenizers` itself uses (`unicode_categories`
//! for control, punctuation and nonspacing marks, `unicode-normalization-alignments` for NFD,
//! the standard library for whitespace and lowercase), so the tables cannot disagree.
//!
//! All-ASCII text, almost every query, takes a table built from that same pipeline at load time:
//! ASCII characters are their own NFD and are never nonspacing marks or CJK, so each one maps on
//! its own to nothing or to one ASCII character.

use unicode_categories::UnicodeCategories;
use unicode_normalization_alignments::UnicodeNormalization;

use crate::config::NormalizerConfig;

#[derive(Debug)]
pub(crate) struct Normalizer {
    clean_text: bool,
    handle_chinese_chars: bool,
    strip_accents: bool,
    lowercase: bool,
    /// What each ASCII character becomes (`None`: removed), or no table when the pipeline makes
    /// some ASCII character into something else than at most one ASCII character.
    ascii: Option<[Option<u8>; 128]>,
}

/// `tokenizers`' `is_whitespace`: tab, newline and carriage return count, though control.
fn is_whitespace(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r') || c.is_whitespace()
}

/// `tokenizers`' `is_control`: Cc, Cf and Co, except tab, newline and carriage return.
fn is_control(c: char) -> bool {
    !matches!(c, '\t' | '\n' | '\r') && c.is_other()
}

/// `tokenizers`' `is_chinese_char`: the CJK Unified Ideographs blocks and their extensions.
fn is_chinese_char(c: char) -> bool {
    matches!(
        c as u32,
        0x4E00..=0x9FFF
            | 0x3400..=0x4DBF
            | 0x20000..=0x2A6DF
            | 0x2A700..=0x2B73F
            | 0x2B740..=0x2B81F
            | 0x2B920..=0x2CEAF
            | 0xF900..=0xFAFF
            | 0x2F800..=0x2FA1F
    )
}

impl Normalizer {
    pub fn new(config: NormalizerConfig) -> Self {
        let mut n = Self {
            clean_text: config.clean_text,
            handle_chinese_chars: config.handle_chinese_chars,
            strip_accents: config.strip_accents.unwrap_or(config.lowercase),
            lowercase: config.lowercase,
            ascii: None,
        };
        n.ascii = n.ascii_table();
        n
    }

    fn ascii_table(&self) -> Option<[Option<u8>; 128]> {
        let mut table = [None; 128];
        let mut out = String::new();
        for b in 0..128u8 {
            out.clear();
            self.normalize_general(char::from(b).encode_utf8(&mut [0; 4]), &mut out);
            table[usize::from(b)] = match out.as_bytes() {
                [] => None,
                [c] if c.is_ascii() => Some(*c),
                _ => return None,
            };
        }
        Some(table)
    }

    /// Writes the normalized `text` into `out` (cleared first).
    ///
    /// ASCII characters that the pipeline keeps go through the table; the runs between them
    /// through the whole pipeline. Cutting there changes nothing: such a character comes out of
    /// cleaning as an ASCII starter (canonical combining class 0, its own decomposition), and NFD
    /// only reorders marks between two starters, so NFD of the whole is NFD of each side with it
    /// in between; every other step is one character at a time. ASCII characters that cleaning
    /// removes stay inside the runs, where they are removed before NFD sees the marks around them.
    pub fn normalize(&self, text: &str, out: &mut String) {
        out.clear();
        let Some(table) = &self.ascii else {
            return self.normalize_general(text, out);
        };
        let kept = |b: u8| b.is_ascii() && table[usize::from(b)].is_some();
        let bytes = text.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            if b.is_ascii() {
                if let Some(c) = table[usize::from(b)] {
                    out.push(char::from(c));
                }
                i += 1;
            } else {
                // `i` and the next kept ASCII byte (or the end) are character boundaries.
                let end = bytes[i..].iter().position(|&b| kept(b)).map_or(bytes.len(), |n| i + n);
                self.normalize_general(&text[i..end], out);
                i = end;
            }
        }
    }

    /// Cuts `text` into pieces of at least `min_bytes` (but the last) that normalize and
    /// pre-tokenize as the whole does: each piece after the first starts at a space that the
    /// pipeline keeps as whitespace (see [`Normalizer::normalize`] for why a kept ASCII character
    /// is a safe place; whitespace ends a word). One piece if there is no such space.
    pub fn chunks<'a>(&self, text: &'a str, min_bytes: usize) -> impl Iterator<Item = &'a str> {
        let space_kept = self.ascii.is_some_and(|t| t[usize::from(b' ')].is_some_and(|c| c.is_ascii_whitespace()));
        let mut rest = text;
        std::iter::from_fn(move || {
            if rest.is_empty() {
                return None;
            }
            let cut = match rest.as_bytes().get(min_bytes..) {
                Some(tail) if space_kept => tail.iter().position(|&b| b == b' ').map_or(rest.len(), |n| min_bytes + n),
                _ => rest.len(),
            };
            let (piece, tail) = rest.split_at(cut);
            rest = tail;
            Some(piece)
        })
    }

    /// The whole pipeline, for any text; appends to `out`.
    fn normalize_general(&self, text: &str, out: &mut String) {
        let clean = self.clean_text;
        let chinese = self.handle_chinese_chars;
        let cleaned = text
            .chars()
            .filter(move |&c| !(clean && (c == '\0' || c == '\u{fffd}' || is_control(c))))
            .map(move |c| if clean && is_whitespace(c) { ' ' } else { c })
            .flat_map(move |c| {
                let n = if chinese && is_chinese_char(c) { 3 } else { 1 };
                let chars = if n == 3 { [' ', c, ' '] } else { [c; 3] };
                chars.into_iter().take(n)
            });
        if self.strip_accents {
            self.lowercase_into(cleaned.nfd().map(|(c, _)| c).filter(|c| !c.is_mark_nonspacing()), out);
        } else {
            self.lowercase_into(cleaned, out);
        }
    }

    fn lowercase_into(&self, chars: impl Iterator<Item = char>, out: &mut String) {
        if self.lowercase {
            for c in chars {
                out.extend(c.to_lowercase());
            }
        } else {
            out.extend(chars);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bert(strip_accents: Option<bool>, lowercase: bool) -> Normalizer {
        Normalizer::new(NormalizerConfig { clean_text: true, handle_chinese_chars: true, strip_accents, lowercase })
    }

    fn norm(n: &Normalizer, text: &str) -> String {
        let mut out = String::new();
        n.normalize(text, &mut out);
        out
    }

    #[test]
    fn ascii_controls_are_dropped_and_tab_newline_become_spaces() {
        let n = bert(None, true);
        assert_eq!(norm(&n, "A\tB\nC\rD\u{b}E\u{c}F\u{0}G\u{7f}H\u{1f}I"), "a b c defghi");
    }

    #[test]
    fn ascii_table_agrees_with_the_general_pipeline() {
        for n in [bert(None, true), bert(Some(false), false), bert(Some(true), false)] {
            for b in 0..128u8 {
                let s = char::from(b).to_string();
                let mut general = String::new();
                n.normalize_general(&s, &mut general);
                assert_eq!(norm(&n, &s), general, "byte {b}");
            }
        }
    }

    #[test]
    fn cutting_at_kept_ascii_agrees_with_the_whole_pipeline() {
        // Spacing marks with combining classes 226 and 216 (NFD puts 216 first), with a control
        // character between them that cleaning removes: the cut must not fall there.
        let inputs = ["x\u{1d16d}\u{1}\u{1d165}y", "\u{1d16d} \u{1d165}", "é\u{7f}\u{301}A\u{323}", "ab\u{0}中c"];
        for n in [bert(None, true), bert(Some(true), false)] {
            for text in inputs {
                let mut whole = String::new();
                n.normalize_general(text, &mut whole);
                assert_eq!(norm(&n, text), whole, "{text:?}");
            }
        }
        assert_eq!(norm(&bert(None, true), "x\u{1d16d}\u{1}\u{1d165}"), "x\u{1d165}\u{1d16d}");
    }

    #[test]
    fn chunks_end_before_a_space_and_cover_the_text() {
        let n = bert(None, true);
        let text = "aaaa bbbb cccc\u{301}dddd eeee";
        let pieces: Vec<&str> = n.chunks(text, 6).collect();
        assert_eq!(pieces, ["aaaa bbbb", " cccc\u{301}dddd", " eeee"]);
        assert_eq!(n.chunks("abc", 1).collect::<Vec<_>>(), ["abc"]);
        assert_eq!(n.chunks(text, usize::MAX).collect::<Vec<_>>(), [text]);
        assert_eq!(n.chunks("", 4).count(), 0);
    }

    #[test]
    fn accents_are_stripped_when_lowercasing_unless_told_otherwise() {
        assert_eq!(norm(&bert(None, true), "Español CAFÉ"), "espanol cafe");
        assert_eq!(norm(&bert(Some(false), true), "Español"), "español");
        assert_eq!(norm(&bert(None, false), "Español"), "Español");
    }

    #[test]
    fn cjk_ideographs_get_spaces_and_other_scripts_do_not() {
        // NFD splits the voiced mark off が, and stripping accents drops it.
        assert_eq!(norm(&bert(None, true), "野口 ひらがな"), " 野  口  ひらかな");
    }

    #[test]
    fn unicode_whitespace_becomes_a_space_and_format_characters_go() {
        assert_eq!(norm(&bert(None, true), "a\u{3000}b\u{200b}c\u{200d}d\u{fffd}e\u{85}f"), "a bcdef");
    }
}
