//! The layering stays true: in every crate of the workspace, no import cycle between the
//! top-level modules of `src/` (`testkit::layers`; the layers are drawn in
//! `docs/ARCHITECTURE.md`).

#[test]
fn every_crates_top_level_modules_form_layers() {
    let root = testkit::repo_root();
    let mut checked = Vec::new();
    for entry in std::fs::read_dir(&root).unwrap() {
        let dir = entry.unwrap().path();
        if dir.join("Cargo.toml").is_file() && dir.join("src").is_dir() {
            testkit::layers::assert_layered(&dir.join("src"));
            checked.push(dir.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    for must in ["gateway", "worker", "metrics-api", "loadtest", "scaler", "listener"] {
        assert!(checked.iter().any(|c| c == must), "{must} not found among {checked:?}");
    }
}
