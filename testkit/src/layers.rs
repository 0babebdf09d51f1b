//! The layering check: no import cycle between the top-level modules of a crate's `src/`.
//!
//! A top-level module is `src/NAME.rs` or `src/NAME/` (`lib` and `main` are the root, not
//! modules). Module A depends on B when A's code names `crate::B` (in a `use` line, a
//! `use crate::{B, ...}` group or a path in the code). Comments are skipped, and so is test
//! code (`#[cfg(test)]` blocks and files declared under `#[cfg(test)]`): a test may reach across
//! layers, production code may not. [`cycles`] reports every dependency that closes a cycle,
//! with the file that makes it, so that the failure says what to move.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One dependency between top-level modules, and the file that makes it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Edge {
    pub from: String,
    pub to: String,
    pub file: PathBuf,
}

/// The dependencies between the top-level modules of the crate whose sources are in `src`.
pub fn edges(src: &Path) -> Vec<Edge> {
    let modules = top_level_modules(src);
    let mut out = BTreeSet::new();
    for (name, path) in &modules {
        for file in production_files(path) {
            let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            for to in referenced_modules(&strip_tests(&strip_comments(&text))) {
                if &to != name && modules.contains_key(&to) {
                    out.insert(Edge { from: name.clone(), to, file: file.clone() });
                }
            }
        }
    }
    out.into_iter().collect()
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

/// Panic, naming every edge on a cycle, unless the top-level modules of `src` form layers.
pub fn assert_layered(src: &Path) {
    let bad = cycles(src);
    assert!(
        bad.is_empty(),
        "import cycles between top-level modules of {} (move the type both sides need to a leaf \
         module or to `wire`):\n{}",
        src.display(),
        bad.iter().map(|e| format!("  {} -> {} ({})", e.from, e.to, e.file.display())).collect::<Vec<_>>().join("\n")
    );
}

fn top_level_modules(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(src).unwrap_or_else(|e| panic!("{}: {e}", src.display())) {
        let path = entry.unwrap().path();
        let name = if path.is_dir() {
            path.file_name().and_then(|n| n.to_str()).map(str::to_owned)
        } else if path.extension().is_some_and(|e| e == "rs") {
            path.file_stem().and_then(|n| n.to_str()).map(str::to_owned)
        } else {
            None
        };
        match name {
            Some(n) if n != "lib" && n != "main" => {
                out.insert(n, path);
            }
            _ => {}
        }
    }
    out
}

/// The files of a module (a file, or a folder's `.rs` files), without those declared under
/// `#[cfg(test)]` (`#[cfg(test)] mod NAME;` makes `NAME.rs` or `NAME/` test code).
fn production_files(path: &Path) -> Vec<PathBuf> {
    if path.is_file() {
        return vec![path.to_owned()];
    }
    let mut files = Vec::new();
    let mut dirs = vec![path.to_owned()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let p = entry.unwrap().path();
            if p.is_dir() {
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

fn strip_comments(text: &str) -> String {
    text.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
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
        let mut depth = 0usize;
        let mut end = after.len();
        for (i, c) in after[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// The top-level modules that `text` names through `crate::`.
fn referenced_modules(text: &str) -> BTreeSet<String> {
    let ident = |s: &str| s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect::<String>();
    let mut out = BTreeSet::new();
    for (at, _) in text.match_indices("crate::") {
        let rest = &text[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // `crate::{a, b::c, d::{e, f}}`: the names at depth 0 of the group.
            let mut depth = 0usize;
            let mut start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => start = true,
                    c if start && (c.is_ascii_alphabetic() || c == '_') => {
                        out.insert(ident(&group[i..]));
                        start = false;
                    }
                    _ => {}
                }
            }
        } else {
            out.insert(ident(rest));
        }
    }
    out.remove("");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[(&str, &str)]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("layers-{}-{}", std::process::id(), files.len()));
        let _ = std::fs::remove_dir_all(&dir);
        for (path, text) in files {
            let p = dir.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        dir
    }

    #[test]
    fn names_are_read_from_use_lines_groups_and_paths() {
        let got = referenced_modules(
            "use crate::a::X;\nuse crate::{b, c::{D, E}, d::F};\nfn f() -> crate::e::G { G::default() }\nlet x = \
             $crate::f;",
        );
        assert_eq!(got, ["a", "b", "c", "d", "e", "f"].map(String::from).into());
    }

    #[test]
    fn test_code_and_comments_are_not_dependencies() {
        let text = "use crate::a::X;\n// see crate::b\n#[cfg(test)]\nmod tests {\n    use crate::c::Y;\n    fn f() \
                    {}\n}\nuse crate::d::Z;";
        assert_eq!(referenced_modules(&strip_tests(&strip_comments(text))), ["a", "d"].map(String::from).into());
    }

    #[test]
    fn a_cycle_is_reported_with_its_files_and_layers_are_not() {
        let src = tree(&[
            ("lib.rs", "mod a; mod b; mod c;"),
            ("a.rs", "use crate::b::B;"),
            ("b/mod.rs", "mod inner;\n#[cfg(test)]\nmod tests;"),
            ("b/inner.rs", "use crate::c::C;"),
            ("b/tests.rs", "use crate::a::A;"),
            ("c.rs", ""),
        ]);
        assert!(cycles(&src).is_empty(), "{:?}", edges(&src));
        std::fs::write(src.join("c.rs"), "pub fn f() -> crate::a::A { A::default() }").unwrap();
        let bad = cycles(&src);
        let names: Vec<_> = bad.iter().map(|e| (e.from.as_str(), e.to.as_str())).collect();
        assert_eq!(names, [("a", "b"), ("b", "c"), ("c", "a")]);
        assert!(bad[1].file.ends_with("b/inner.rs"));
    }
}
