//! The library the integration tests run against: $FOXHUNT_DQN_LIBRARY (file or directory),
//! else the newest <repo>/build*/libfoxhunt_dqn.so. No library found is a failure, not a skip.
use foxhunt_dqn::Library;
use std::path::PathBuf;
use std::sync::Arc;

/// The path of that library.
pub fn library_path() -> PathBuf {
    if let Some(v) = std::env::var_os("FOXHUNT_DQN_LIBRARY") {
        let p = PathBuf::from(v);
        return if p.is_dir() { p.join("libfoxhunt_dqn.so") } else { p };
    }
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&repo).unwrap()
        .filter_map(|e| e.ok().map(|e| e.path().join("libfoxhunt_dqn.so")))
        .filter(|p| p.is_file() && p.parent().unwrap().file_name().unwrap()
                .to_string_lossy().starts_with("build"))
        .collect();
    found.sort_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok());
    found.pop().expect("no libfoxhunt_dqn.so: build it or set FOXHUNT_DQN_LIBRARY")
}

#[allow(dead_code)] // each test file uses its part
pub fn library() -> Arc<Library> {
    Library::open(Some(&library_path())).expect("libfoxhunt_dqn.so")
}
