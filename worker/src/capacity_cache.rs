//! The capacity carried over from the last calibration of the same model on the same device with
//! the same settings (`--capacity-cache DIR`): read at start, so that a restarted worker reports
//! its capacity, and sizes its admission from it, as soon as it serves, while it recalibrates in
//! the background; written after every calibration.
//!
//! A [`Key`] names what the capacity depends on: a hash of the model file's bytes, the device's
//! name (the CPU's model and how many CPUs the worker may use, or the GPU's name) and every flag
//! that changes the capacity ([`Config::capacity_settings`](crate::Config::capacity_settings)).
//! Each key has a file of its own in the directory, named by a hash of the key and holding the
//! key itself, so a file of other settings is never taken for this one's and workers of
//! different models sharing the directory never overwrite each other. A file is written whole to
//! a temporary name and renamed, so a reader never sees half of one. A file that cannot be read
//! or makes no sense is ignored (the caller logs why) and replaced after the next calibration.
//!
//! The hashes are the standard library's `DefaultHasher` with its fixed keys: stable within a
//! build, and a new toolchain at worst misses the cache once.

use std::hash::{DefaultHasher, Hasher};
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::capacity::Calibrated;

/// The file's format; another is ignored.
const FORMAT: u32 = 1;

/// What a carried-over capacity must match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key(String);

impl Key {
    /// The key of a model file whose bytes hash to `model_hash`, on `device` (its name), with
    /// `settings` (the flags that change the capacity).
    pub fn new(model_hash: u64, device: &str, settings: &str) -> Self {
        Self(format!("model {model_hash:016x}; device {device}; {settings}"))
    }

    fn file_name(&self) -> String {
        let mut h = DefaultHasher::new();
        h.write(self.0.as_bytes());
        format!("capacity-{:016x}.json", h.finish())
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A hash of the bytes of the file at `path`.
pub fn file_hash(path: &Path) -> std::io::Result<u64> {
    let mut file = std::fs::File::open(path)?;
    let mut h = DefaultHasher::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match file.read(&mut buf) {
            Ok(0) => return Ok(h.finish()),
            Ok(n) => h.write(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// The CPU's name as the kernel gives it (`/proc/cpuinfo`'s first `model name`) and how many
/// CPUs this process may run on: what a CPU worker's capacity depends on besides its flags.
pub fn cpu_name() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines().find_map(|l| {
                l.strip_prefix("model name").and_then(|r| r.split_once(':')).map(|(_, m)| m.trim().to_owned())
            })
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_owned());
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    format!("cpu {model} x{cpus}")
}

/// One file: the key it was written for and the capacity calibrated then.
#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    format: u32,
    key: String,
    per_s: f64,
    tokens_per_query: Option<f64>,
    /// When the calibration ended, milliseconds since the Unix epoch.
    calibrated_at_unix_ms: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("reading {0}: {1}")]
    Read(PathBuf, std::io::Error),
    #[error("{0} is not a capacity of this worker's: {1}")]
    Corrupt(PathBuf, String),
    #[error("writing {0}: {1}")]
    Write(PathBuf, std::io::Error),
}

/// The directory of carried-over capacities.
#[derive(Debug, Clone)]
pub struct Cache {
    dir: PathBuf,
}

impl Cache {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    fn path(&self, key: &Key) -> PathBuf {
        self.dir.join(key.file_name())
    }

    /// The capacity last calibrated under `key` (`None`: none was).
    pub fn load(&self, key: &Key) -> Result<Option<Calibrated>, CacheError> {
        let path = self.path(key);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(CacheError::Read(path, e)),
        };
        let corrupt = |why: String| CacheError::Corrupt(path.clone(), why);
        let entry: Entry = serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
        if entry.format != FORMAT {
            return Err(corrupt(format!("format {}, not {FORMAT}", entry.format)));
        }
        if entry.key != key.0 {
            return Err(corrupt(format!("written for `{}`", entry.key)));
        }
        let usable = |x: f64| x.is_finite() && x > 0.0;
        if !usable(entry.per_s) || entry.tokens_per_query.is_some_and(|t| !usable(t)) {
            return Err(corrupt(format!("capacity {} at {:?} tokens per query", entry.per_s, entry.tokens_per_query)));
        }
        Ok(Some(Calibrated {
            per_s: entry.per_s,
            tokens_per_query: entry.tokens_per_query,
            configured: false,
            carried_over: true,
        }))
    }

    /// Records `c` as the capacity calibrated under `key`, replacing the last.
    pub fn store(&self, key: &Key, c: &Calibrated) -> Result<(), CacheError> {
        let path = self.path(key);
        let entry = Entry {
            format: FORMAT,
            key: key.0.clone(),
            per_s: c.per_s,
            tokens_per_query: c.tokens_per_query,
            calibrated_at_unix_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
        };
        let body = serde_json::to_vec_pretty(&entry).expect("an entry serializes");
        let write = || {
            std::fs::create_dir_all(&self.dir)?;
            // A name of this process's own: workers writing at once each rename a whole file.
            let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
            std::fs::write(&tmp, &body)?;
            std::fs::rename(&tmp, &path)
        };
        write().map_err(|e| CacheError::Write(path.clone(), e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAL: Calibrated =
        Calibrated { per_s: 688.0, tokens_per_query: Some(12.5), configured: false, carried_over: false };

    /// A path of its own under the temporary directory, for each call.
    fn dir() -> PathBuf {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        std::env::temp_dir().join(format!("worker-capacity-cache-{}-{n}", std::process::id()))
    }

    fn key(settings: &str) -> Key {
        Key::new(0xabc, "cpu Test CPU x2", settings)
    }

    #[test]
    fn a_stored_capacity_is_carried_over_under_the_same_key_only() {
        let cache = Cache::new(dir());
        assert!(cache.load(&key("rows 32")).unwrap().is_none(), "nothing stored yet");
        cache.store(&key("rows 32"), &CAL).unwrap();
        let carried = cache.load(&key("rows 32")).unwrap().expect("carried over");
        assert_eq!(carried, Calibrated { carried_over: true, ..CAL });
        // Another flag, model or device: nothing to carry over.
        assert!(cache.load(&key("rows 64")).unwrap().is_none());
        assert!(cache.load(&Key::new(0xabd, "cpu Test CPU x2", "rows 32")).unwrap().is_none());
        assert!(cache.load(&Key::new(0xabc, "cuda:0 NVIDIA H200", "rows 32")).unwrap().is_none());
        // A later calibration replaces the figure; the other key's file is left alone.
        cache.store(&key("rows 64"), &Calibrated { per_s: 900.0, ..CAL }).unwrap();
        cache.store(&key("rows 32"), &Calibrated { per_s: 700.0, tokens_per_query: None, ..CAL }).unwrap();
        assert_eq!(cache.load(&key("rows 32")).unwrap().map(|c| (c.per_s, c.tokens_per_query)), Some((700.0, None)));
        assert_eq!(cache.load(&key("rows 64")).unwrap().map(|c| c.per_s), Some(900.0));
        let files = std::fs::read_dir(&cache.dir).unwrap().count();
        assert_eq!(files, 2, "one file per key, no temporary left");
        std::fs::remove_dir_all(&cache.dir).unwrap();
    }

    #[test]
    fn a_corrupt_or_foreign_file_is_refused_with_a_reason() {
        let cache = Cache::new(dir());
        let k = key("rows 32");
        std::fs::create_dir_all(&cache.dir).unwrap();
        let path = cache.path(&k);
        let refused = |body: &str| {
            std::fs::write(&path, body).unwrap();
            match cache.load(&k) {
                Err(CacheError::Corrupt(p, why)) => {
                    assert_eq!(p, path);
                    why
                }
                other => panic!("{body:?}: {other:?}"),
            }
        };
        refused("{\"format\": 1, \"key\": \"mod");
        refused("not json at all");
        let entry = |format: u32, key: &str, per_s: &str| {
            format!(
                r#"{{"format":{format},"key":"{key}","per_s":{per_s},"tokens_per_query":12.5,"calibrated_at_unix_ms":1}}"#
            )
        };
        assert!(refused(&entry(2, &k.0, "688.0")).contains("format 2"));
        // The key is checked too, not only the file's name.
        assert!(refused(&entry(1, "model 0; device cpu; rows 64", "688.0")).contains("written for"));
        refused(&entry(1, &k.0, "0.0"));
        refused(&entry(1, &k.0, "-3.0"));
        // Once a calibration is stored again, it is read.
        cache.store(&k, &CAL).unwrap();
        assert_eq!(cache.load(&k).unwrap().map(|c| c.per_s), Some(688.0));
        std::fs::remove_dir_all(&cache.dir).unwrap();
    }

    #[test]
    fn an_unwritable_directory_is_an_error_not_a_panic() {
        let file = dir();
        std::fs::write(&file, "a file where the directory should be").unwrap();
        let cache = Cache::new(file.join("sub"));
        assert!(matches!(cache.store(&key("x"), &CAL), Err(CacheError::Write(..))));
        std::fs::remove_file(&file).unwrap();
    }

    #[test]
    fn a_files_hash_follows_its_bytes() {
        let d = dir();
        std::fs::create_dir_all(&d).unwrap();
        let (a, b) = (d.join("a"), d.join("b"));
        std::fs::write(&a, vec![7u8; 3 << 20]).unwrap();
        std::fs::write(&b, vec![7u8; 3 << 20]).unwrap();
        assert_eq!(file_hash(&a).unwrap(), file_hash(&b).unwrap(), "same bytes, same hash");
        let mut changed = vec![7u8; 3 << 20];
        changed[2 << 20] = 8;
        std::fs::write(&b, changed).unwrap();
        assert_ne!(file_hash(&a).unwrap(), file_hash(&b).unwrap());
        assert!(file_hash(&d.join("missing")).is_err());
        std::fs::remove_dir_all(&d).unwrap();
        assert!(cpu_name().starts_with("cpu "));
    }
}
