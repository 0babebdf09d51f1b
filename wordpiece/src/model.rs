//! WordPiece, as `tokenizers` 0.23 (`models/wordpiece/mod.rs`) runs it on one word: a word of more
//! than `max_input_chars_per_word` characters is the unknown token; otherwise the longest
//! vocabulary entry at the start, then the longest `##`-prefixed entry at each following
//! position; a word with any position where nothing matches is the unknown token, whole.
//!
//! `tokenizers` builds `"##" + piece` in a new `String` for every candidate and tries every
//! length from the whole rest of the word down. Here the prefixed entries live in their own map
//! with the prefix cut off, so a candidate is a slice of the word, and no candidate is tried
//! that is longer than the longest entry of the map it is looked up in. Same first match, same
//! ids, no allocation.

use std::collections::HashMap;

use foldhash::fast::RandomState;

use crate::config::WordPieceConfig;

type Map = HashMap<Box<str>, u32, RandomState>;

#[derive(Debug)]
pub(crate) struct WordPiece {
    /// Every vocabulary entry: candidates at the start of a word.
    first: Map,
    /// Entries that start with the continuing-subword prefix, the prefix cut off: candidates
    /// after the start of a word.
    next: Map,
    /// Longest key of `first` and of `next`, in bytes.
    first_max: usize,
    next_max: usize,
    unk: u32,
    max_chars: usize,
}

impl WordPiece {
    pub fn new(config: &WordPieceConfig, unk: u32) -> Self {
        let prefix = config.continuing_subword_prefix.as_str();
        let first: Map = config.vocab.iter().map(|(k, &v)| (k.as_str().into(), v)).collect();
        let next: Map =
            config.vocab.iter().filter_map(|(k, &v)| k.strip_prefix(prefix).map(|rest| (rest.into(), v))).collect();
        let longest = |m: &Map| m.keys().map(|k| k.len()).max().unwrap_or(0);
        Self {
            first_max: longest(&first),
            next_max: longest(&next),
            first,
            next,
            unk,
            max_chars: config.max_input_chars_per_word,
        }
    }

    /// Appends the ids of one word (non-empty, as the pre-tokenizer cuts it).
    pub fn tokenize(&self, word: &str, ids: &mut Vec<i64>) {
        // A character is at least one byte, so only a long word needs counting.
        if word.len() > self.max_chars && word.chars().count() > self.max_chars {
            ids.push(i64::from(self.unk));
            return;
        }
        let rollback = ids.len();
        let mut start = 0;
        while start < word.len() {
            let (map, max) = if start == 0 { (&self.first, self.first_max) } else { (&self.next, self.next_max) };
            let mut end = floor_char_boundary(word, word.len().min(start + max));
            let mut found = None;
            while end > start {
                if let Some(&id) = map.get(&word[start..end]) {
                    found = Some(id);
                    break;
                }
                end = floor_char_boundary(word, end - 1);
            }
            let Some(id) = found else {
                ids.truncate(rollback);
                ids.push(i64::from(self.unk));
                return;
            };
            ids.push(i64::from(id));
            start = end;
        }
    }
}

/// The largest character boundary of `s` at or below `i` (`i <= s.len()`).
fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(entries: &[&str], max_chars: usize) -> WordPiece {
        let vocab = entries.iter().enumerate().map(|(i, t)| (t.to_string(), i as u32)).collect();
        let config = WordPieceConfig {
            unk_token: "[UNK]".into(),
            continuing_subword_prefix: "##".into(),
            max_input_chars_per_word: max_chars,
            vocab,
        };
        WordPiece::new(&config, 0)
    }

    fn ids(m: &WordPiece, word: &str) -> Vec<i64> {
        let mut out = vec![];
        m.tokenize(word, &mut out);
        out
    }

    #[test]
    fn longest_match_first_then_continuations() {
        let m = model(&["[UNK]", "play", "##ing", "##in", "##g", "p", "##lay"], 100);
        assert_eq!(ids(&m, "playing"), [1, 2]);
        assert_eq!(ids(&m, "playin"), [1, 3]);
        assert_eq!(ids(&m, "playg"), [1, 4]);
        assert_eq!(ids(&m, "pplay"), [0]); // "p", then no "##play", "##pla", ...
    }

    #[test]
    fn a_word_with_an_unmatched_piece_is_one_unknown_token() {
        let m = model(&["[UNK]", "play", "##ing"], 100);
        assert_eq!(ids(&m, "playingx"), [0]);
        assert_eq!(ids(&m, "xplay"), [0]);
    }

    #[test]
    fn words_longer_than_the_limit_in_characters_are_unknown() {
        let m = model(&["[UNK]", "é", "##é"], 3);
        assert_eq!(ids(&m, "ééé"), [1, 2, 2]); // 6 bytes, 3 characters: within the limit
        assert_eq!(ids(&m, "éééé"), [0]);
    }

    #[test]
    fn candidates_end_on_character_boundaries() {
        let m = model(&["[UNK]", "a", "##日", "##本"], 100);
        assert_eq!(ids(&m, "a日本"), [1, 2, 3]);
    }
}
