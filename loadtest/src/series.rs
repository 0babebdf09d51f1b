//! Time series written by the caller while the run goes (`--series FILE`), e.g. the replicas a
//! scaler wants: JSON lines `{"t": 12.5, "series": "replicas_desired", "value": 3}`.
//!
//! `t` is in seconds: Unix time when above 1e9 (what a separate process can write without
//! knowing when the load started), otherwise seconds since the load generator started. The file
//! is followed while the run goes (it may appear late, grow, or be rewritten from the start);
//! lines that are not complete or not valid are skipped and counted.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;

use serde::Deserialize;

/// Above this, `t` is Unix time.
const UNIX_THRESHOLD: f64 = 1e9;

#[derive(Deserialize)]
struct Line {
    t: f64,
    series: String,
    value: f64,
}

/// One followed file.
#[derive(Debug)]
pub struct Follower {
    path: PathBuf,
    offset: u64,
    partial: Vec<u8>,
    pub skipped: u64,
}

impl Follower {
    pub fn new(path: PathBuf) -> Self {
        Self { path, offset: 0, partial: Vec::new(), skipped: 0 }
    }

    /// Read what was appended since the last call into `into` (name -> points); `start_unix` is
    /// the run's start in Unix seconds.
    pub fn poll(&mut self, start_unix: f64, into: &mut BTreeMap<String, Vec<(f64, f64)>>) {
        let Ok(mut file) = std::fs::File::open(&self.path) else { return };
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        if len < self.offset {
            // Rewritten: start over.
            self.offset = 0;
            self.partial.clear();
        }
        if file.seek(SeekFrom::Start(self.offset)).is_err() {
            return;
        }
        let mut buf = Vec::new();
        let Ok(n) = file.take(len - self.offset).read_to_end(&mut buf) else { return };
        self.offset += n as u64;
        self.partial.extend_from_slice(&buf);
        let Some(end) = self.partial.iter().rposition(|b| *b == b'\n') else { return };
        let complete: Vec<u8> = self.partial.drain(..=end).collect();
        for line in complete.split(|b| *b == b'\n') {
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match serde_json::from_slice::<Line>(line) {
                Ok(l) if l.t.is_finite() && l.value.is_finite() => {
                    let t = if l.t > UNIX_THRESHOLD { l.t - start_unix } else { l.t };
                    let points = into.entry(l.series).or_default();
                    points.push((t, l.value));
                    // Keep time order should a writer's clock step back a little.
                    let mut i = points.len() - 1;
                    while i > 0 && points[i - 1].0 > points[i].0 {
                        points.swap(i - 1, i);
                        i -= 1;
                    }
                }
                _ => self.skipped += 1,
            }
        }
    }
}

/// Series as the report shows them over `[0, end]`: the last value before 0 carried to 0 (a
/// replica count set before the run still holds at its start), nothing after `end`.
pub fn clip(series: &BTreeMap<String, Vec<(f64, f64)>>, end: f64) -> BTreeMap<String, Vec<(f64, f64)>> {
    series
        .iter()
        .map(|(name, pts)| {
            let before = pts.iter().rev().find(|p| p.0 < 0.0).map(|p| (0.0, p.1));
            let inside = pts.iter().copied().filter(|p| p.0 >= 0.0 && p.0 <= end);
            (name.clone(), before.into_iter().chain(inside).collect())
        })
        .filter(|(_, pts): &(String, Vec<_>)| !pts.is_empty())
        .collect()
}

/// The latest value of each series at or before `t`.
pub fn latest(series: &BTreeMap<String, Vec<(f64, f64)>>, t: f64) -> Vec<(String, f64)> {
    series.iter().filter_map(|(n, pts)| pts.iter().rev().find(|p| p.0 <= t).map(|p| (n.clone(), p.1))).collect()
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    #[test]
    fn appended_lines_are_followed_in_unix_or_relative_time_and_bad_ones_skipped() {
        let dir = std::env::temp_dir().join(format!("loadtest-series-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("scaler.jsonl");
        let _ = std::fs::remove_file(&path);
        let mut f = Follower::new(path.clone());
        let mut got = BTreeMap::new();
        let start = 1_800_000_000.0;
        f.poll(start, &mut got);
        assert!(got.is_empty(), "a file that is not there yet is no error");

        let mut w = std::fs::File::create(&path).unwrap();
        writeln!(w, r#"{{"t": 1799999990.0, "series": "replicas_desired", "value": 2}}"#).unwrap();
        writeln!(w, r#"{{"t": 3.5, "series": "replicas_desired", "value": 3}}"#).unwrap();
        writeln!(w, "not json").unwrap();
        write!(w, r#"{{"t": 4, "series": "replicas_desired", "val"#).unwrap();
        w.flush().unwrap();
        f.poll(start, &mut got);
        assert_eq!(got["replicas_desired"], [(-10.0, 2.0), (3.5, 3.0)]);
        assert_eq!(f.skipped, 1);
        writeln!(w, r#"ue": 4}}"#).unwrap();
        w.flush().unwrap();
        f.poll(start, &mut got);
        assert_eq!(got["replicas_desired"].last(), Some(&(4.0, 4.0)), "the partial line completed");

        let clipped = clip(&got, 3.9);
        assert_eq!(clipped["replicas_desired"], [(0.0, 2.0), (3.5, 3.0)]);
        assert_eq!(latest(&got, 3.6), [("replicas_desired".to_owned(), 3.0)]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
