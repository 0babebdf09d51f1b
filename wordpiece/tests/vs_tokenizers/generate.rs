//! The generated inputs of the comparison: SNIPS utterances mutated, and random text from pools
//! of characters that stress one step of the tokenizer each, with phrases (special tokens, long
//! words) mixed in. Case `i` is drawn from seed `i`.

use rand::Rng;
use rand::rngs::StdRng;

/// Characters that stress one step each; `generate` also draws from all of Unicode.
const POOLS: &[&[char]] = &[
    // Combining marks (Mn), including ones NFD reorders (ccc 220 vs 230) and non-Latin ones;
    // spacing marks with a combining class (Mc), which stripping keeps.
    &[
        '\u{300}',
        '\u{301}',
        '\u{302}',
        '\u{303}',
        '\u{308}',
        '\u{30A}',
        '\u{323}',
        '\u{327}',
        '\u{328}',
        '\u{334}',
        '\u{345}',
        '\u{591}',
        '\u{5B0}',
        '\u{64B}',
        '\u{93C}',
        '\u{94D}',
        '\u{E31}',
        '\u{E48}',
        '\u{1DC0}',
        '\u{20D0}',
        '\u{20E3}',
        '\u{302A}',
        '\u{3099}',
        '\u{FE20}',
        '\u{FE0F}',
        '\u{E0100}',
        '\u{1D165}',
        '\u{1D16D}',
        '\u{302E}',
        '\u{93E}',
        '\u{488}',
    ],
    // Precomposed letters (NFC), letters whose lowercase is special, ligatures, Hangul.
    &[
        'é', 'É', 'ñ', 'Ñ', 'ü', 'Å', 'ø', 'ß', 'ẞ', 'İ', 'ı', 'Σ', 'ς', 'ά', 'Ά', 'ǅ', 'ǈ', 'ﬁ', 'Ω', 'K', 'Å', 'Ⅻ',
        'Ⓐ', 'Ꭰ', 'ꭰ', 'Ა', 'ა', '한', '글', 'ᄀ', 'ᅡ', 'ǖ', 'ậ', 'ḯ', 'Ǻ', 'ő', 'ų', 'Ł', 'Đ', 'ŉ', 'ǰ',
    ],
    // CJK ideographs (each block and extension), compatibility ideographs, kana, fullwidth.
    &[
        '一',
        '中',
        '文',
        '野',
        '\u{3400}',
        '\u{4DBF}',
        '\u{9FFF}',
        '\u{9FEF}',
        '\u{20000}',
        '\u{2A6DF}',
        '\u{2A700}',
        '\u{2B740}',
        '\u{2B820}',
        '\u{2B920}',
        '\u{2CEAF}',
        '\u{F900}',
        '\u{FA6E}',
        '\u{FAFF}',
        '\u{2F800}',
        '\u{2FA1D}',
        '\u{30000}',
        'ひ',
        'が',
        'カ',
        'ガ',
        'ｶ',
        'ﾞ',
        'Ａ',
        'ａ',
        '１',
        '〇',
        '々',
    ],
    // Punctuation of every category, ASCII symbols (split) and other symbols (not split).
    &[
        '_',
        '\u{203F}',
        '-',
        '\u{2010}',
        '\u{2014}',
        '\u{301C}',
        '(',
        ')',
        '[',
        ']',
        '{',
        '}',
        '\u{300C}',
        '\u{300D}',
        '«',
        '»',
        '\u{2018}',
        '\u{2019}',
        '\u{201C}',
        '\u{201D}',
        '!',
        '?',
        '.',
        ',',
        '\'',
        '"',
        '#',
        '%',
        '&',
        '*',
        '/',
        ':',
        ';',
        '@',
        '\\',
        '¡',
        '¿',
        '、',
        '。',
        '・',
        '\u{55D}',
        '\u{60C}',
        '\u{1F64}',
        '$',
        '+',
        '<',
        '=',
        '>',
        '^',
        '`',
        '|',
        '~',
        '€',
        '©',
        '±',
        '¬',
        '°',
        '\u{2122}',
        '\u{2211}',
        '\u{1F4A9}',
        '\u{2E52}',
        '\u{2E5D}',
        '\u{11FFF}',
        '\u{16FE2}',
    ],
    // Control (Cc), format (Cf), zero-width and replacement characters.
    &[
        '\u{0}',
        '\u{1}',
        '\u{7}',
        '\u{1B}',
        '\u{1C}',
        '\u{1F}',
        '\u{7F}',
        '\u{80}',
        '\u{9F}',
        '\u{AD}',
        '\u{600}',
        '\u{61C}',
        '\u{180E}',
        '\u{200B}',
        '\u{200C}',
        '\u{200D}',
        '\u{200E}',
        '\u{202A}',
        '\u{2060}',
        '\u{2066}',
        '\u{FEFF}',
        '\u{FFF9}',
        '\u{FFFD}',
        '\u{110BD}',
        '\u{1D173}',
        '\u{E0001}',
        '\u{E0020}',
        '\u{E007F}',
        '\u{13430}',
        '\u{1BCA0}',
    ],
    // Whitespace of every kind.
    &[
        ' ', '\t', '\n', '\u{B}', '\u{C}', '\r', '\u{85}', '\u{A0}', '\u{1680}', '\u{2000}', '\u{2007}', '\u{200A}',
        '\u{2028}', '\u{2029}', '\u{202F}', '\u{205F}', '\u{3000}',
    ],
    // Emoji, modifiers, flags; private use; unassigned and noncharacters.
    &[
        '😀',
        '👍',
        '\u{1F3FB}',
        '\u{1F3FF}',
        '\u{1F1EB}',
        '\u{1F1F7}',
        '❤',
        '\u{2764}',
        '\u{1F9D1}',
        '\u{1FAE8}',
        '\u{1FAF8}',
        '\u{E000}',
        '\u{F8FF}',
        '\u{F0000}',
        '\u{10FFFD}',
        '\u{378}',
        '\u{FFFE}',
        '\u{FFFF}',
        '\u{2FFFF}',
        '\u{E0080}',
        '\u{1FFFE}',
        '\u{10FFFF}',
        '\u{0870}',
        '\u{1E030}',
        '\u{31350}',
    ],
];

/// Strings that matter as a whole: the special tokens, near misses, the subword prefix.
const PHRASES: &[&str] = &[
    "[CLS]",
    "[SEP]",
    "[PAD]",
    "[MASK]",
    "[UNK]",
    "[cls]",
    "[Sep]",
    "[MASK",
    "MASK]",
    "[[SEP]]",
    "##",
    "##ing",
    "#",
    "play music",
    "un",
    "##aff",
    "able",
    "'s",
    "n't",
    "e\u{301}",
    "a\u{323}\u{301}",
    "a\u{301}\u{323}",
    "\u{1F468}\u{200D}\u{1F469}\u{200D}\u{1F467}",
    "\u{1F44D}\u{1F3FD}",
    "\u{1F1EB}\u{1F1F7}",
    "1\u{FE0F}\u{20E3}",
];

fn random_char(rng: &mut StdRng) -> char {
    if rng.random_bool(0.15) {
        // Anything at all (mostly unassigned or rare: the tables are what is tested).
        loop {
            if let Some(c) = char::from_u32(rng.random_range(0..=0x10FFFF)) {
                return c;
            }
        }
    }
    if rng.random_bool(0.3) {
        return char::from(rng.random_range(0x20u8..0x7F));
    }
    let pool = POOLS[rng.random_range(0..POOLS.len())];
    pool[rng.random_range(0..pool.len())]
}

fn random_text(rng: &mut StdRng, atoms: usize) -> String {
    let mut s = String::new();
    for _ in 0..atoms {
        match rng.random_range(0..10) {
            0 => s.push_str(PHRASES[rng.random_range(0..PHRASES.len())]),
            1 => s.push(' '),
            _ => s.push(random_char(rng)),
        }
    }
    s
}

/// A SNIPS utterance with random edits: characters inserted, letters decomposed (NFD) or
/// cased, special tokens spliced in.
fn mutate(rng: &mut StdRng, utterance: &str) -> String {
    let mut out = String::new();
    for c in utterance.chars() {
        match rng.random_range(0..40) {
            0 => out.push(random_char(rng)),
            1 => out.push_str(PHRASES[rng.random_range(0..PHRASES.len())]),
            2 => {
                out.push(c);
                out.push(POOLS[0][rng.random_range(0..POOLS[0].len())]);
                continue;
            }
            3 => {
                out.extend(c.to_uppercase());
                continue;
            }
            _ => {}
        }
        out.push(c);
    }
    out
}

pub fn generate(rng: &mut StdRng, snips: &[String]) -> String {
    let utterance = &snips[rng.random_range(0..snips.len())];
    match rng.random_range(0..100) {
        // The real queries, lightly edited.
        0..30 => mutate(rng, utterance),
        // Random text of a query's length.
        30..65 => {
            let n = rng.random_range(0..60);
            random_text(rng, n)
        }
        // Long words: around `max_input_chars_per_word` (100), in ASCII and multi-byte letters,
        // with marks that accent stripping removes (so the count before and after differs).
        65..80 => {
            let mut s = String::new();
            for _ in 0..rng.random_range(1..4) {
                let n = rng.random_range(90..=110);
                let unit = ["a", "é", "e\u{301}", "ab", "中", "ﬁ", "\u{10348}", "x\u{200B}"][rng.random_range(0..8)];
                for _ in 0..n {
                    s.push_str(unit);
                }
                s.push(' ');
            }
            s
        }
        // Past the truncation length: many utterances, or much random text.
        80..90 => {
            let mut s = String::new();
            for _ in 0..rng.random_range(4..40) {
                s.push_str(&snips[rng.random_range(0..snips.len())]);
                s.push(if rng.random_bool(0.5) { ' ' } else { '.' });
            }
            if rng.random_bool(0.5) { mutate(rng, &s) } else { s }
        }
        90..95 => {
            let n = rng.random_range(100..600);
            random_text(rng, n)
        }
        // Nothing to tokenize: empty, whitespace, control and format characters only.
        _ => {
            let n = rng.random_range(0..12);
            (0..n)
                .map(|_| {
                    let pool = POOLS[if rng.random_bool(0.5) { 4 } else { 5 }];
                    pool[rng.random_range(0..pool.len())]
                })
                .collect()
        }
    }
}
