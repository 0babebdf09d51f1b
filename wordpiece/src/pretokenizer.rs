//! `BertPreTokenizer` (`pre_tokenizers/bert.rs`): split on whitespace (dropped), then every
//! punctuation character is a word of its own. Punctuation is ASCII punctuation (which includes
//! the ASCII symbols `$+<=>^`|~`) or a Unicode punctuation category (`unicode_categories`, as
//! `tokenizers` uses); whitespace is the standard library's `char::is_whitespace`.

use unicode_categories::UnicodeCategories;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Word,
    Space,
    Punct,
}

fn class(c: char) -> Class {
    if c.is_whitespace() {
        Class::Space
    } else if c.is_ascii_punctuation() || c.is_punctuation() {
        Class::Punct
    } else {
        Class::Word
    }
}

const ASCII: [Class; 128] = {
    let mut t = [Class::Word; 128];
    let mut b = 0;
    while b < 128 {
        let c = b as u8 as char;
        t[b] = if c.is_ascii_whitespace() || b == 0x0b {
            Class::Space
        } else if c.is_ascii_punctuation() {
            Class::Punct
        } else {
            Class::Word
        };
        b += 1;
    }
    t
};

/// Calls `f` on each word of `text` in order, until it returns `false`.
pub(crate) fn for_each_word<'a>(text: &'a str, mut f: impl FnMut(&'a str) -> bool) {
    let mut word_start = None;
    for (i, c) in text.char_indices() {
        let class = if c.is_ascii() { ASCII[c as usize] } else { class(c) };
        match class {
            Class::Word => {
                word_start.get_or_insert(i);
            }
            Class::Space | Class::Punct => {
                if let Some(s) = word_start.take()
                    && !f(&text[s..i])
                {
                    return;
                }
                if class == Class::Punct && !f(&text[i..i + c.len_utf8()]) {
                    return;
                }
            }
        }
    }
    if let Some(s) = word_start {
        f(&text[s..]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<&str> {
        let mut out = vec![];
        for_each_word(text, |w| {
            out.push(w);
            true
        });
        out
    }

    #[test]
    fn whitespace_splits_and_punctuation_stands_alone() {
        assert_eq!(words("Hey friend!     How are you?!?"), ["Hey", "friend", "!", "How", "are", "you", "?", "!", "?"]);
        assert_eq!(words("  "), Vec::<&str>::new());
        assert_eq!(words("a$b€c «d»"), ["a", "$", "b€c", "«", "d", "»"]);
    }

    #[test]
    fn the_ascii_table_agrees_with_the_general_classes() {
        for b in 0..128u8 {
            let c = char::from(b);
            assert!(ASCII[usize::from(b)] == class(c), "byte {b}");
        }
    }
}
