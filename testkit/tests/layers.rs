//! The layering stays true: in every crate of the workspace, no import cycle between sibling
//! modules of `src/`, at any depth (`testkit::layers`; the top-level layers are drawn in
//! `docs/ARCHITECTURE.md`).

#[test]
fn every_crates_modules_form_layers() {
    let root = testkit::repo_root();
    let mut checked = Vec::new();
    let mut bad = Vec::new();
    for entry in std::fs::read_dir(&root).unwrap() {
        let dir = entry.unwrap().path();
        if dir.join("Cargo.toml").is_file() && dir.join("src").is_dir() {
            // Every crate's cycles at once, not only the first crate's.
            bad.extend(testkit::layers::check(&dir.join("src")).err());
            checked.push(dir.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    for must in ["gateway", "worker", "metrics-api", "loadtest", "scaler", "listener"] {
        assert!(checked.iter().any(|c| c == must), "{must} not found among {checked:?}");
    }
}
