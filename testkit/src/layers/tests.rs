//! The layering check's own tests: what counts as a dependency, and cycles at every depth.

use super::*;

/// A crate's `src/` under the temporary directory, named `name` (tests run side by side).
fn tree(name: &str, files: &[(&str, &str)]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("layers-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for (path, text) in files {
        let p = dir.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    dir
}

/// The top-level modules that `text`, in module `here`, names.
fn named(here: &[&str], text: &str) -> BTreeSet<String> {
    let here: Vec<String> = here.iter().map(|s| (*s).to_owned()).collect();
    references(&strip_tests(&blank_comments_and_literals(text)))
        .into_iter()
        .filter_map(|(inline, path)| resolve(&[here.as_slice(), &inline].concat(), &path))
        .map(|p| p.join("::"))
        .collect()
}

fn pairs(edges: &[Edge]) -> Vec<(&str, &str)> {
    edges.iter().map(|e| (e.from.as_str(), e.to.as_str())).collect()
}

#[test]
fn names_are_read_from_use_lines_groups_and_paths() {
    let got = named(
        &[],
        "use crate::a::X;\nuse crate::{b, c::{D, E}, d::F};\nfn f() -> crate::e::G { G::default() }\nlet x = \
         $crate::f;",
    );
    let want = ["a::X", "b", "c::D", "c::E", "d::F", "e::G", "f"];
    assert_eq!(got, want.map(String::from).into());
}

#[test]
fn super_and_self_are_resolved_from_the_module_they_are_written_in() {
    let text = "use super::{proxy::{self, Sent}, retry as r};\nuse super::super::pool::Endpoint;\nuse \
                self::inner::X;\nlet y = super::balance::acquire::<u8>();\nmod nested {\n    use super::Y;\n}";
    let got = named(&["routing", "coalesce"], text);
    let want = [
        "routing::proxy",
        "routing::proxy::Sent",
        "routing::retry",
        "pool::Endpoint",
        "routing::coalesce::inner::X",
        "routing::balance::acquire",
        "routing::coalesce::Y",
    ];
    assert_eq!(got, want.map(String::from).into());
    assert!(named(&[], "use super::x;").is_empty(), "above the root");
}

#[test]
fn test_code_comments_and_literals_are_not_dependencies() {
    let text = "use crate::a::X;\n// see crate::b\n#[cfg(test)]\nmod tests {\n    use crate::c::Y;\n    fn f() \
                {}\n}\nuse crate::d::Z; /* crate::e */ let s = \"crate::f\"; let r = r#\"super::g\"#;\nlet c = \
                '{';\n#[cfg(test)]\nfn g() { let _ = crate::h; }\nfn k<'a>(x: &'a str) -> crate::i::I { \
                x.into() }";
    assert_eq!(named(&[], text), ["a::X", "d::Z", "i::I"].map(String::from).into());
}

#[test]
fn a_cycle_is_reported_with_its_files_and_layers_are_not() {
    let src = tree(
        "top",
        &[
            ("lib.rs", "mod a; mod b; mod c;"),
            ("a.rs", "use crate::b::B;"),
            ("b/mod.rs", "mod inner;\n#[cfg(test)]\nmod tests;"),
            ("b/inner.rs", "use crate::c::C;"),
            ("b/tests.rs", "use crate::a::A;"),
            ("c.rs", ""),
        ],
    );
    assert!(cycles(&src).is_empty(), "{:?}", edges(&src));
    std::fs::write(src.join("c.rs"), "pub fn f() -> crate::a::A { A::default() }").unwrap();
    let bad = cycles(&src);
    assert_eq!(pairs(&bad), [("a", "b"), ("b", "c"), ("c", "a")]);
    assert!(bad[1].file.ends_with("b/inner.rs"));
}

#[test]
fn a_nested_cycle_through_super_is_reported() {
    let src = tree(
        "super",
        &[
            ("lib.rs", "mod routing;"),
            ("routing/mod.rs", "mod coalesce; mod proxy;\npub use proxy::forward;"),
            ("routing/coalesce.rs", "mod tests;\nuse super::proxy::{self, Attempt};"),
            ("routing/coalesce/tests.rs", ""),
            ("routing/proxy.rs", "use super::coalesce::{self, Single};\nuse super::super::routing::Ok;"),
        ],
    );
    let bad = cycles(&src);
    assert_eq!(pairs(&bad), [("routing::coalesce", "routing::proxy"), ("routing::proxy", "routing::coalesce")]);
    assert!(bad[0].file.ends_with("routing/coalesce.rs"));
    assert!(bad[1].file.ends_with("routing/proxy.rs"));
}

#[test]
fn a_nested_cycle_through_crate_paths_is_reported_where_the_modules_part() {
    let src = tree(
        "crate",
        &[
            ("main.rs", "mod pool; mod http;"),
            ("http.rs", "use crate::pool::Pool;"),
            ("pool/mod.rs", "mod endpoint; mod stats; mod outcome;"),
            ("pool/endpoint.rs", "mod conn;"),
            ("pool/endpoint/conn.rs", "fn f(s: crate::pool::stats::Stats) {}"),
            ("pool/stats.rs", "use crate::{pool::{outcome::Outcome, endpoint::Endpoint as E}, http};"),
            ("pool/outcome.rs", ""),
        ],
    );
    let bad = cycles(&src);
    let want =
        [("http", "pool"), ("pool", "http"), ("pool::endpoint", "pool::stats"), ("pool::stats", "pool::endpoint")];
    assert_eq!(pairs(&bad), want);
    assert!(bad[2].file.ends_with("pool/endpoint/conn.rs"));
    assert!(bad[3].file.ends_with("pool/stats.rs"));
}

#[test]
fn a_name_the_parent_imports_stands_for_the_sibling_it_comes_from() {
    let src = tree(
        "imports",
        &[
            ("lib.rs", "mod routing;"),
            ("routing/mod.rs", "mod coalesce; mod proxy;\npub(crate) use proxy::{forward, Cost as Price};"),
            ("routing/coalesce.rs", "use super::Price;"),
            ("routing/proxy.rs", "fn f() { super::coalesce::g() }\nuse super::forward;"),
        ],
    );
    assert_eq!(
        pairs(&cycles(&src)),
        [("routing::coalesce", "routing::proxy"), ("routing::proxy", "routing::coalesce")]
    );
}

#[test]
fn a_nested_layered_tree_is_not_reported() {
    let src = tree(
        "layered",
        &[
            ("lib.rs", "mod routing; mod pool;"),
            ("pool.rs", "mod endpoint; mod outcome;"),
            ("pool/endpoint.rs", "use super::outcome::Outcome;\nuse crate::pool::outcome;"),
            ("pool/outcome.rs", "#[cfg(test)]\nmod tests {\n    use super::super::endpoint::Endpoint;\n}"),
            ("routing/mod.rs", "mod attempt; mod coalesce; mod proxy;\nuse self::proxy::forward;"),
            ("routing/attempt.rs", "use crate::pool::{endpoint::Endpoint, outcome};"),
            ("routing/coalesce.rs", "use super::attempt::{self, Attempt};\n#[cfg(test)]\nmod tests;"),
            ("routing/coalesce/tests.rs", "use super::super::proxy::forward;"),
            ("routing/proxy.rs", "use super::{attempt::Attempt, coalesce};\nuse crate::routing::coalesce::f;"),
        ],
    );
    assert!(cycles(&src).is_empty(), "{:?}", edges(&src));
    let all = edges(&src);
    assert_eq!(
        pairs(&all),
        [
            ("pool::endpoint", "pool::outcome"),
            ("routing", "pool"),
            ("routing::coalesce", "routing::attempt"),
            ("routing::proxy", "routing::attempt"),
            ("routing::proxy", "routing::coalesce"),
        ]
    );
}
