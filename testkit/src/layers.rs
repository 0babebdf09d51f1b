//! The layering check: no import cycle between sibling modules, at any depth of a crate's `src/`.
//!
//! The modules of a directory are its `NAME.rs` files and `NAME/` folders (`mod.rs`, and `lib`
//! and `main` in `src/`, are the directory's own module, not one of them); the top-level modules
//! are those of `src/`. `src/bin/` holds crate roots of their own and is not read. Module `a::x`
//! depends on its sibling `a::y` when code in `a::x` (its file or any file under it) names a
//! path into `a::y`: `crate::a::y`, `super::y` from `a::x`'s own file, `super::super::y` one
//! level further down, `self::...` resolved the same way; in a `use` line, a `use` group
//! (`use super::{y::T, z}`) or a path in the code. A name that the common parent imports
//! (`super::T` where `a`'s file has `use y::T;`) counts as a path to where it comes from.
//!
//! It is a text scan: comments, string and character literals are skipped, and so is test code
//! (`#[cfg(test)]` items and files declared under `#[cfg(test)]`): a test may reach across
//! layers, production code may not. [`cycles`] reports every dependency that closes a cycle,
//! with the file that makes it, so that the failure says what to move.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One dependency between sibling modules (paths from the crate root, `a::x` -> `a::y`), and
/// the file that makes it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Edge {
    pub from: String,
    pub to: String,
    pub file: PathBuf,
}

/// The dependencies between sibling modules of the crate whose sources are in `src`.
pub fn edges(src: &Path) -> Vec<Edge> {
    let files: Vec<(PathBuf, Vec<String>, String)> = production_files(src)
        .into_iter()
        .map(|file| {
            let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            let module = module_of(src, &file);
            (file, module, strip_tests(&blank_comments_and_literals(&text)))
        })
        .collect();
    // Every module that has production code, and the modules above it.
    let modules: BTreeSet<Vec<String>> =
        files.iter().flat_map(|(_, m, _)| (0..=m.len()).map(move |i| m[..i].to_vec())).collect();
    let imports = imports(&files, &modules);
    let mut out = BTreeSet::new();
    for (file, here, text) in &files {
        for (inline, path) in references(text) {
            let Some(mut to) = resolve(&[here.as_slice(), &inline].concat(), &path) else { continue };
            // A name the common parent imports (`super::forward` for `mod.rs`'s `use proxy::forward`)
            // stands for where it comes from; a few steps at most, in case of a loop.
            for _ in 0..8 {
                // The two sides part at `i`: `here[i]` and `to[i]` are siblings under `here[..i]`.
                let i = here.iter().zip(&to).take_while(|(a, b)| a == b).count();
                if i == here.len() || i == to.len() {
                    break;
                }
                if modules.contains(&to[..=i]) {
                    out.insert(Edge { from: here[..=i].join("::"), to: to[..=i].join("::"), file: file.clone() });
                    break;
                }
                match imports.get(&to[..i]).and_then(|names| names.get(&to[i])) {
                    Some(from) => to = [from.as_slice(), &to[i + 1..]].concat(),
                    None => break,
                }
            }
        }
    }
    out.into_iter().collect()
}

/// The names each module's file brings in with `use` (renames and globs aside), with the paths
/// they stand for: `use proxy::forward;` in `routing/mod.rs` makes `routing::forward` stand for
/// `routing::proxy::forward`.
fn imports(
    files: &[(PathBuf, Vec<String>, String)],
    modules: &BTreeSet<Vec<String>>,
) -> BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>> {
    let mut out: BTreeMap<_, BTreeMap<_, _>> = BTreeMap::new();
    for (_, here, text) in files {
        let inline = inline_modules(text);
        for (at, _) in text.match_indices("use ") {
            if text[..at].ends_with(is_ident) || inline.iter().any(|(_, r)| r.contains(&at)) {
                continue;
            }
            for path in use_tree(&mut Cursor { text, at: at + "use ".len() }) {
                let resolved = match path.first().map(String::as_str) {
                    Some("crate" | "self" | "super") => resolve(here, &path),
                    // A path from a module of its own (`use proxy::forward;`).
                    Some(child) if modules.contains(&[here.as_slice(), &[child.to_owned()]].concat()) => {
                        resolve(here, &[&["self".to_owned()], path.as_slice()].concat())
                    }
                    _ => None,
                };
                let Some(mut resolved) = resolved else { continue };
                resolved.retain(|s| s != "self");
                let name = match path.last().map(String::as_str) {
                    Some("*") => continue,
                    Some(last) => last.strip_prefix("as ").or(resolved.last().map(String::as_str)),
                    None => None,
                };
                if let Some(name) = name.map(str::to_owned) {
                    out.entry(here.clone()).or_default().insert(name, resolved);
                }
            }
        }
    }
    out
}

/// Every dependency that lies on a cycle (empty: the modules form layers).
pub fn cycles(src: &Path) -> Vec<Edge> {
    let all = edges(src);
    let mut graph: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for e in &all {
        graph.entry(&e.from).or_default().insert(&e.to);
    }
    let reaches = |from: &str, to: &str| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from];
        while let Some(m) = stack.pop() {
            if m == to {
                return true;
            }
            if seen.insert(m) {
                stack.extend(graph.get(m).into_iter().flatten().copied());
            }
        }
        false
    };
    all.iter().filter(|e| reaches(&e.to, &e.from)).cloned().collect()
}

/// Panic, naming every edge on a cycle, unless the sibling modules of every directory of `src`
/// form layers.
pub fn assert_layered(src: &Path) {
    if let Err(why) = check(src) {
        panic!("{why}");
    }
}

/// `Err` naming every edge on a cycle, unless the sibling modules of every directory of `src`
/// form layers.
pub fn check(src: &Path) -> Result<(), String> {
    let bad = cycles(src);
    if bad.is_empty() {
        return Ok(());
    }
    let lines = bad.iter().map(|e| format!("  {} -> {} ({})", e.from, e.to, e.file.display()));
    Err(format!(
        "import cycles between sibling modules of {} (move what both sides need to a leaf module, or to \
         `wire`):\n{}",
        src.display(),
        lines.collect::<Vec<_>>().join("\n")
    ))
}

/// The module that `file` (under `src`) is: `src/a/b.rs` and `src/a/b/mod.rs` are `a::b`,
/// `src/lib.rs` and `src/main.rs` the root.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap_or_else(|_| panic!("{} not under {}", file.display(), src.display()));
    let mut names: Vec<String> = rel.with_extension("").iter().map(|c| c.to_string_lossy().into_owned()).collect();
    let own = match names.last().map(String::as_str) {
        Some("mod") => true,
        Some("lib" | "main") => names.len() == 1,
        _ => false,
    };
    if own {
        names.pop();
    }
    names
}

/// The `.rs` files under `src` (`src/bin/` left out), without those declared under
/// `#[cfg(test)]` (`#[cfg(test)] mod NAME;` makes `NAME.rs` or `NAME/` test code).
fn production_files(src: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![src.to_owned()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let p = entry.unwrap().path();
            if p.is_dir() && p != src.join("bin") {
                dirs.push(p);
            } else if p.extension().is_some_and(|e| e == "rs") {
                files.push(p);
            }
        }
    }
    let mut test_only = BTreeSet::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let dir = f.parent().unwrap();
        let dir = match f.file_stem().and_then(|s| s.to_str()) {
            Some("mod" | "lib" | "main") => dir.to_owned(),
            Some(stem) => dir.join(stem),
            None => continue,
        };
        let mut cfg_test = false;
        for line in text.lines().map(str::trim) {
            let declared = line.strip_prefix("mod ").or_else(|| line.strip_prefix("pub mod "));
            if let (true, Some(name)) = (cfg_test, declared.and_then(|d| d.strip_suffix(';'))) {
                test_only.insert(dir.join(format!("{name}.rs")));
                test_only.insert(dir.join(name));
            }
            if !line.starts_with("#[") {
                cfg_test = false;
            }
            if line == "#[cfg(test)]" {
                cfg_test = true;
            }
        }
    }
    files.retain(|f| !test_only.iter().any(|t| f.starts_with(t)));
    files.sort();
    files
}

/// `text` with its comments and the insides of its string and character literals blanked
/// (newlines kept), so that neither a path in prose nor a brace in a literal is read as code.
fn blank_comments_and_literals(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let mut out = String::with_capacity(text.len());
    let blank = |out: &mut String, from: &[char]| {
        out.extend(from.iter().map(|&ch| if ch == '\n' { '\n' } else { ' ' }));
    };
    let mut i = 0;
    while i < c.len() {
        let end = match c[i] {
            '/' if at(i + 1) == '/' => (i..c.len()).find(|&j| c[j] == '\n').unwrap_or(c.len()),
            '/' if at(i + 1) == '*' => {
                let (mut depth, mut j) = (0usize, i);
                while j < c.len() {
                    if c[j] == '/' && at(j + 1) == '*' {
                        depth += 1;
                        j += 2;
                    } else if c[j] == '*' && at(j + 1) == '/' {
                        depth -= 1;
                        j += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        j += 1;
                    }
                }
                j
            }
            '"' => {
                let mut j = i + 1;
                while j < c.len() && c[j] != '"' {
                    j += if c[j] == '\\' { 2 } else { 1 };
                }
                j + 1
            }
            // `r"..."`, `r#"..."#`, `br"..."`.
            'r' if !ident(if i == 0 { ' ' } else { c[i - 1] })
                || (i >= 1 && c[i - 1] == 'b' && !ident(if i == 1 { ' ' } else { c[i - 2] })) =>
            {
                let hashes = c[i + 1..].iter().take_while(|&&ch| ch == '#').count();
                if at(i + 1 + hashes) != '"' {
                    out.push('r');
                    i += 1;
                    continue;
                }
                let close: Vec<char> = std::iter::once('"').chain(std::iter::repeat_n('#', hashes)).collect();
                let body = i + 2 + hashes;
                (body..c.len()).find(|&j| c[j..].starts_with(&close)).map_or(c.len(), |j| j + close.len())
            }
            // A character literal (`'x'`, `'\n'`, `'\u{7f}'`), not a lifetime.
            '\'' if at(i + 1) == '\\' => (i + 3..c.len()).find(|&j| c[j] == '\'').map_or(c.len(), |j| j + 1),
            '\'' if at(i + 2) == '\'' => i + 3,
            ch => {
                out.push(ch);
                i += 1;
                continue;
            }
        };
        let end = end.min(c.len());
        blank(&mut out, &c[i..end]);
        i = end;
    }
    out
}

/// `text` without its `#[cfg(test)]` items (the braces of the item after the attribute matched).
fn strip_tests(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        let Some(open) = after.find(['{', ';']) else { return out };
        if after.as_bytes()[open] == b';' {
            rest = &after[open + 1..];
            continue;
        }
        rest = &after[block_end(after, open)..];
    }
    out.push_str(rest);
    out
}

/// Where the block that opens with the `{` at `open` in `text` ends (just past its `}`; the
/// text's end when it is not closed).
fn block_end(text: &str, open: usize) -> usize {
    let mut depth = 0usize;
    for (i, c) in text[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return open + i + 1;
                }
            }
            _ => {}
        }
    }
    text.len()
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Every path that `text` names from `crate::`, `super::` or `self::`, as its segments (the
/// first one of those three; a `use` group expanded: `super::{a::B, c}` is `super::a::B` and
/// `super::c`), with the inline modules (`mod NAME { ... }`) it is written in, outermost first.
fn references(text: &str) -> Vec<(Vec<String>, Vec<String>)> {
    let inline = inline_modules(text);
    let mut out = Vec::new();
    for start in ["crate::", "super::", "self::"] {
        for (at, _) in text.match_indices(start) {
            let before = text[..at].trim_end();
            // `super::super::x` is read once, from its first `super`; `Self::`, `myself::` never.
            if before.ends_with("::") || text[..at].ends_with(is_ident) {
                continue;
            }
            let within = inline.iter().filter(|(_, r)| r.contains(&at)).map(|(n, _)| n.clone()).collect::<Vec<_>>();
            for path in use_tree(&mut Cursor { text, at }) {
                out.push((within.clone(), path));
            }
        }
    }
    out
}

/// The inline modules of `text` (`mod NAME {`), each with the span of its braces, in order.
fn inline_modules(text: &str) -> Vec<(String, std::ops::Range<usize>)> {
    let mut out = Vec::new();
    for (at, _) in text.match_indices("mod ") {
        if text[..at].ends_with(is_ident) {
            continue;
        }
        let rest = &text[at + "mod ".len()..];
        let name: String = rest.trim_start().chars().take_while(|&c| is_ident(c)).collect();
        let after = rest.trim_start()[name.len()..].trim_start();
        if name.is_empty() || !after.starts_with('{') {
            continue;
        }
        let open = text.len() - after.len();
        out.push((name, open..block_end(text, open)));
    }
    out
}

/// A position in the text being read.
struct Cursor<'a> {
    text: &'a str,
    at: usize,
}

impl Cursor<'_> {
    fn rest(&self) -> &str {
        &self.text[self.at..]
    }

    fn skip_space(&mut self) {
        self.at = self.text.len() - self.rest().trim_start().len();
    }

    /// Takes `token` (after any space) if it comes next.
    fn eat(&mut self, token: &str) -> bool {
        self.skip_space();
        let found = self.rest().starts_with(token);
        if found {
            self.at += token.len();
        }
        found
    }

    fn ident(&mut self) -> String {
        self.skip_space();
        let name: String = self.rest().chars().take_while(|&c| is_ident(c)).collect();
        self.at += name.len();
        name
    }
}

/// The paths of the use tree (or plain path) at `cur`: `a::b::{c, d::{e, self as f}}` is
/// `a::b::c`, `a::b::d::e` and `a::b::d::self::as f` (a rename is a last segment `as NAME`).
fn use_tree(cur: &mut Cursor<'_>) -> Vec<Vec<String>> {
    let mut prefix = Vec::new();
    loop {
        if cur.eat("{") {
            let mut out = Vec::new();
            loop {
                for tail in use_tree(cur) {
                    out.push([prefix.clone(), tail].concat());
                }
                // Past a rename (`as x`) or anything else the tree does not name, to `,` or `}`.
                let mut depth = 0usize;
                while let Some(c) = cur.rest().chars().next() {
                    cur.at += c.len_utf8();
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => return out,
                        '}' => depth -= 1,
                        ',' if depth == 0 => break,
                        _ => {}
                    }
                }
                if cur.rest().is_empty() {
                    return out;
                }
            }
        }
        if cur.eat("*") {
            prefix.push("*".to_owned());
            return vec![prefix];
        }
        let name = cur.ident();
        if name.is_empty() {
            return if prefix.is_empty() { Vec::new() } else { vec![prefix] };
        }
        prefix.push(name);
        let mark = cur.at;
        if !cur.eat("::") || cur.rest().trim_start().starts_with('<') {
            cur.at = mark;
            if cur.eat("as ") {
                let alias = cur.ident();
                prefix.push(format!("as {alias}"));
            }
            return vec![prefix];
        }
    }
}

/// The module path (from the crate root) that `path`, written in module `here`, names; `None`
/// where it climbs above the root.
fn resolve(here: &[String], path: &[String]) -> Option<Vec<String>> {
    let (first, rest) = path.split_first()?;
    let mut out = match first.as_str() {
        "crate" => Vec::new(),
        "self" => here.to_vec(),
        "super" => here.split_last()?.1.to_vec(),
        _ => return None,
    };
    for seg in rest {
        match seg.as_str() {
            "super" => {
                out.pop()?;
            }
            "self" => {}
            "*" => break,
            rename if rename.starts_with("as ") => break,
            name => out.push(name.to_owned()),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests;
