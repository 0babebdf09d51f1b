//! Kubernetes label selectors in their string form (`labelSelector=` of a list request), parsed
//! as `k8s.io/apimachinery/pkg/labels.Parse` does and matched with kube-core's [`Selector`].
//!
//! ```text
//! selector    = [requirement {"," requirement}]
//! requirement = ["!"] KEY | KEY ("=" | "==" | "!=") [VALUE] | KEY ("in" | "notin") "(" [VALUE {"," [VALUE]}] ")"
//! ```
//!
//! Keys are qualified names (`[dns-subdomain/]name`, the name at most 63 characters), values
//! label values (at most 63 characters, may be empty), both checked as the API server checks
//! them. Whitespace separates tokens and is otherwise ignored. `in ()` is the set holding the empty
//! value, as upstream. The numeric operators `>` and `<` (meant for node affinity) are refused:
//! no pool label is a number.

use kube::core::{Expression, Selector, SelectorExt};
use std::collections::{BTreeMap, BTreeSet};

/// A parsed selector; matches a pool's labels.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LabelSelector(Selector);

impl LabelSelector {
    /// Parse the `labelSelector` query value; an empty string selects everything.
    pub fn parse(s: &str) -> Result<Self, String> {
        Ok(Self(parse(s)?.into_iter().collect()))
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.matches(labels)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Ident(String),
    Not,
    Eq,
    DoubleEq,
    NotEq,
    In,
    NotIn,
    Open,
    Close,
    Comma,
    Numeric(char),
}

fn special(c: char) -> bool {
    matches!(c, '=' | '!' | '(' | ')' | ',' | '>' | '<')
}

/// Split into tokens as upstream's lexer does: runs of special symbols are cut at the longest
/// known operator, anything else up to whitespace or a special symbol is an identifier (or the
/// keywords `in`, `notin`).
fn lex(s: &str) -> Result<Vec<Token>, String> {
    let mut out = Vec::new();
    let b: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if matches!(c, ' ' | '\t' | '\r' | '\n') {
            i += 1;
            continue;
        }
        if special(c) {
            let two: String = b[i..b.len().min(i + 2)].iter().collect();
            let (tok, len) = match two.as_str() {
                "==" => (Token::DoubleEq, 2),
                "!=" => (Token::NotEq, 2),
                _ => match c {
                    '=' => (Token::Eq, 1),
                    '!' => (Token::Not, 1),
                    '(' => (Token::Open, 1),
                    ')' => (Token::Close, 1),
                    ',' => (Token::Comma, 1),
                    other => (Token::Numeric(other), 1),
                },
            };
            out.push(tok);
            i += len;
            continue;
        }
        let start = i;
        while i < b.len() && !special(b[i]) && !matches!(b[i], ' ' | '\t' | '\r' | '\n') {
            i += 1;
        }
        let word: String = b[start..i].iter().collect();
        out.push(match word.as_str() {
            "in" => Token::In,
            "notin" => Token::NotIn,
            _ => Token::Ident(word),
        });
    }
    Ok(out)
}

fn show(t: Option<&Token>) -> String {
    match t {
        None => "end of string".to_owned(),
        Some(Token::Ident(s)) => format!("'{s}'"),
        Some(Token::Not) => "'!'".to_owned(),
        Some(Token::Eq) => "'='".to_owned(),
        Some(Token::DoubleEq) => "'=='".to_owned(),
        Some(Token::NotEq) => "'!='".to_owned(),
        Some(Token::In) => "'in'".to_owned(),
        Some(Token::NotIn) => "'notin'".to_owned(),
        Some(Token::Open) => "'('".to_owned(),
        Some(Token::Close) => "')'".to_owned(),
        Some(Token::Comma) => "','".to_owned(),
        Some(Token::Numeric(c)) => format!("'{c}'"),
    }
}

struct Parser {
    toks: Vec<Token>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.toks.get(self.pos)
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.toks.get(self.pos).cloned();
        self.pos += 1;
        t
    }

    /// In value position the keywords are plain identifiers (`env in (in)` is valid).
    fn next_value(&mut self) -> Option<Token> {
        match self.next() {
            Some(Token::In) => Some(Token::Ident("in".to_owned())),
            Some(Token::NotIn) => Some(Token::Ident("notin".to_owned())),
            t => t,
        }
    }

    fn peek_value(&self) -> Option<Token> {
        match self.peek() {
            Some(Token::In) => Some(Token::Ident("in".to_owned())),
            Some(Token::NotIn) => Some(Token::Ident("notin".to_owned())),
            t => t.cloned(),
        }
    }

    fn requirement(&mut self) -> Result<Expression, String> {
        let mut negated = false;
        let mut tok = self.next_value();
        if tok == Some(Token::Not) {
            negated = true;
            tok = self.next_value();
        }
        let key = match tok {
            Some(Token::Ident(k)) => k,
            t => return Err(format!("found {}, expected: identifier", show(t.as_ref()))),
        };
        validate_key(&key)?;
        if matches!(self.peek(), None | Some(Token::Comma)) {
            return Ok(if negated { Expression::DoesNotExist(key) } else { Expression::Exists(key) });
        }
        if negated {
            return Err(format!("found {}, expected: ',' or end of string after '!{key}'", show(self.peek())));
        }
        match self.next() {
            Some(Token::Eq | Token::DoubleEq) => Ok(Expression::Equal(key.clone(), self.exact_value(&key)?)),
            Some(Token::NotEq) => Ok(Expression::NotEqual(key.clone(), self.exact_value(&key)?)),
            Some(Token::In) => Ok(Expression::In(key.clone(), self.values(&key)?)),
            Some(Token::NotIn) => Ok(Expression::NotIn(key.clone(), self.values(&key)?)),
            Some(Token::Numeric(c)) => Err(format!("operator '{c}' is not supported here (no pool label is a number)")),
            t => Err(format!("found {}, expected: =, !=, ==, in, notin", show(t.as_ref()))),
        }
    }

    fn exact_value(&mut self, key: &str) -> Result<String, String> {
        if matches!(self.peek(), None | Some(Token::Comma)) {
            return Ok(String::new());
        }
        match self.next_value() {
            Some(Token::Ident(v)) => {
                validate_value(key, &v)?;
                Ok(v)
            }
            t => Err(format!("found {}, expected: identifier", show(t.as_ref()))),
        }
    }

    fn values(&mut self, key: &str) -> Result<BTreeSet<String>, String> {
        match self.next() {
            Some(Token::Open) => {}
            t => return Err(format!("found {}, expected: '('", show(t.as_ref()))),
        }
        let mut set = BTreeSet::new();
        // Upstream: `()` and every empty slot between commas (`(,a)`, `(a,)`) is the empty value.
        let mut expect_value = true;
        loop {
            match self.next_value() {
                Some(Token::Ident(v)) if expect_value => {
                    validate_value(key, &v)?;
                    set.insert(v);
                    expect_value = false;
                }
                Some(Token::Comma) => {
                    if expect_value {
                        set.insert(String::new());
                    }
                    expect_value = true;
                }
                Some(Token::Close) => {
                    if expect_value {
                        set.insert(String::new());
                    }
                    return Ok(set);
                }
                t => return Err(format!("found {}, expected: ',', ')' or identifier", show(t.as_ref()))),
            }
        }
    }
}

fn parse(s: &str) -> Result<Vec<Expression>, String> {
    let mut p = Parser { toks: lex(s)?, pos: 0 };
    let mut out = Vec::new();
    if p.peek().is_none() {
        return Ok(out);
    }
    loop {
        match p.peek_value() {
            Some(Token::Ident(_) | Token::Not) => {}
            t => return Err(format!("found {}, expected: !, identifier, or end of string", show(t.as_ref()))),
        }
        out.push(p.requirement().map_err(|e| format!("unable to parse requirement: {e}"))?);
        match p.next() {
            None => return Ok(out),
            Some(Token::Comma) => match p.peek_value() {
                Some(Token::Ident(_) | Token::Not) => {}
                t => return Err(format!("found {}, expected: identifier after ','", show(t.as_ref()))),
            },
            t => return Err(format!("found {}, expected: ',' or end of string", show(t.as_ref()))),
        }
    }
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`
fn is_label_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// A DNS-1123 subdomain: lower-case labels of `[a-z0-9-]` (not starting or ending with `-`)
/// joined by dots, at most 253 characters.
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|l| {
            let b = l.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

fn validate_key(k: &str) -> Result<(), String> {
    let (prefix, name) = match k.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    if let Some(p) = prefix
        && (p.is_empty() || !is_dns_subdomain(p))
    {
        return Err(format!("invalid label key {k:?}: the prefix must be a DNS-1123 subdomain"));
    }
    if name.len() > 63 || !is_label_name(name) {
        return Err(format!(
            "invalid label key {k:?}: a name of at most 63 alphanumeric characters, '-', '_' or '.', \
             starting and ending with an alphanumeric character, with an optional DNS subdomain prefix and '/'"
        ));
    }
    Ok(())
}

fn validate_value(k: &str, v: &str) -> Result<(), String> {
    if v.is_empty() || (v.len() <= 63 && is_label_name(v)) {
        return Ok(());
    }
    Err(format!(
        "invalid label value {v:?} for key {k:?}: at most 63 alphanumeric characters, '-', '_' or '.', \
         starting and ending with an alphanumeric character"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    fn sel(s: &str) -> LabelSelector {
        LabelSelector::parse(s).unwrap_or_else(|e| panic!("{s:?}: {e}"))
    }

    #[test]
    fn every_operator_matches_as_upstream() {
        let l = labels(&[("pool", "default"), ("service", "workers"), ("tier", "")]);
        let cases = [
            ("", true),
            ("pool=default", true),
            ("pool==default", true),
            ("pool = default", true),
            ("pool=other", false),
            ("pool!=other", true),
            ("pool!=default", false),
            ("missing!=x", true),
            ("pool in (a,default)", true),
            ("pool in (a, b)", false),
            ("pool notin (a,b)", true),
            ("pool notin (default)", false),
            ("missing notin (a)", true),
            ("missing in (a)", false),
            ("pool", true),
            ("missing", false),
            ("!missing", true),
            ("!pool", false),
            ("pool=default,service=workers", true),
            ("pool=default,service=other", false),
            ("tier=", true),
            ("tier in ()", true),
            ("tier in (,x)", true),
            ("pool in (default,)", true),
            ("example.com/team", false),
            ("!example.com/team,pool", true),
        ];
        for (s, want) in cases {
            assert_eq!(sel(s).matches(&l), want, "{s:?}");
        }
    }

    #[test]
    fn bad_selectors_say_what_is_wrong() {
        for (s, needle) in [
            ("pool=", ""),
            ("pool in default", "expected: '('"),
            ("pool in (a", "expected: ',', ')' or identifier"),
            ("pool=a b", "expected: ',' or end of string"),
            ("pool=a,", "expected: identifier after ','"),
            (",pool", "expected: !, identifier"),
            ("=a", "expected: !, identifier"),
            ("!pool=a", "expected: ',' or end of string after '!pool'"),
            ("pool>1", "not supported"),
            ("Pool_/x=1", "prefix"),
            ("-pool=1", "invalid label key"),
            ("pool=-x", "invalid label value"),
            (&format!("pool={}", "a".repeat(64)), "invalid label value"),
            (&format!("{}=a", "a".repeat(64)), "invalid label key"),
            ("a/b/c", "invalid label key"),
        ] {
            let r = LabelSelector::parse(s);
            if needle.is_empty() {
                assert!(r.is_ok(), "{s:?} is valid upstream: {r:?}");
            } else {
                let e = r.expect_err(s);
                assert!(e.contains(needle), "{s:?}: {e}");
            }
        }
    }

    fn word(rng: &mut StdRng, max: usize) -> String {
        const EDGE: &[u8] = b"abcXYZ019";
        const MID: &[u8] = b"abcXYZ019-_.";
        let n = rng.random_range(1..=max);
        (0..n)
            .map(|i| {
                let set = if i == 0 || i == n - 1 { EDGE } else { MID };
                set[rng.random_range(0..set.len())] as char
            })
            .collect()
    }

    fn key(rng: &mut StdRng) -> String {
        let name = word(rng, 12);
        // "in" and "notin" are keywords where a key is expected.
        let name = if name == "in" || name == "notin" { format!("{name}x") } else { name };
        if rng.random_bool(0.2) { format!("example-{}.io/{name}", rng.random_range(0..9)) } else { name }
    }

    fn value(rng: &mut StdRng) -> String {
        if rng.random_bool(0.1) { String::new() } else { word(rng, 10) }
    }

    fn expression(rng: &mut StdRng) -> Expression {
        let k = key(rng);
        let set = |rng: &mut StdRng| (0..rng.random_range(1..4)).map(|_| value(rng)).collect::<BTreeSet<_>>();
        match rng.random_range(0..6) {
            0 => Expression::Equal(k, value(rng)),
            1 => Expression::NotEqual(k, value(rng)),
            2 => Expression::In(k, set(rng)),
            3 => Expression::NotIn(k, set(rng)),
            4 => Expression::Exists(k),
            _ => Expression::DoesNotExist(k),
        }
    }

    /// Generated selectors (replayable by seed): kube-core's rendering (upstream's `String()`
    /// form) parses back to the same requirements, with or without extra whitespace.
    #[test]
    fn generated_selectors_round_trip() {
        let mut rng = StdRng::seed_from_u64(0x5e1ec7);
        for case in 0..3000 {
            let exprs: Vec<Expression> = (0..rng.random_range(1..5)).map(|_| expression(&mut rng)).collect();
            let text = exprs.iter().map(ToString::to_string).collect::<Vec<_>>().join(",");
            let parsed = parse(&text).unwrap_or_else(|e| panic!("case {case}: {text:?}: {e}"));
            assert_eq!(parsed, exprs, "case {case}: {text:?}");
            let spaced = text.replace(',', " , ").replace('(', " ( ").replace("!=", " != ");
            assert_eq!(parse(&spaced).unwrap(), exprs, "case {case}: {spaced:?}");
        }
    }

    /// Random strings over the selector alphabet never panic the parser.
    #[test]
    fn arbitrary_input_is_an_error_not_a_panic() {
        let mut rng = StdRng::seed_from_u64(7);
        const ALPHABET: &[u8] = b"ab=!(),<> in/.-_\t";
        for _ in 0..20_000 {
            let n = rng.random_range(0..24);
            let s: String = (0..n).map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char).collect();
            let _ = LabelSelector::parse(&s);
        }
        let _ = LabelSelector::parse("pool=\u{e9}t\u{e9}");
    }
}
