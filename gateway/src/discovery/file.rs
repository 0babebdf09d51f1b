//! A worker file: one worker per line, `URL` (default pool) or `POOL URL`; `#` starts a comment.
//! Checked every `--worker-file-interval`; applied when its content changes. A file that cannot
//! be read keeps the last good set (a half-written file must not empty a pool).

use std::path::PathBuf;
use std::sync::Weak;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::pool::{Pools, Targets};

pub const SOURCE: &str = "file";

pub fn parse(default_pool: &str, text: &str) -> Targets {
    let mut t = Targets::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        let mut words = line.split_whitespace();
        match (words.next(), words.next()) {
            (None, _) => {}
            (Some(url), None) => {
                t.entry(default_pool.to_owned()).or_default().insert(url.to_owned());
            }
            (Some(pool), Some(url)) => {
                t.entry(pool.to_owned()).or_default().insert(url.to_owned());
            }
        }
    }
    t
}

/// Watch `path` and feed `pools`; ends when the pools are gone.
pub fn spawn(path: PathBuf, interval: Duration, default_pool: String, pools: Weak<Pools>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut last: Option<String> = None;
        loop {
            let Some(p) = pools.upgrade() else { return };
            match tokio::fs::read_to_string(&path).await {
                Ok(text) if last.as_deref() != Some(text.as_str()) => {
                    let targets = parse(&default_pool, &text);
                    tracing::info!(path = %path.display(), pools = targets.len(), "worker file loaded");
                    p.update(SOURCE, targets);
                    last = Some(text);
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "cannot read worker file; keeping the last set")
                }
            }
            drop(p);
            tokio::time::sleep(interval).await;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls_pools_and_comments() {
        let t = parse("d", "# workers\nhttp://a:1\n\nbig http://b:2  # gpu\n  http://c:3\n");
        assert_eq!(t["d"].iter().collect::<Vec<_>>(), ["http://a:1", "http://c:3"]);
        assert_eq!(t["big"].iter().collect::<Vec<_>>(), ["http://b:2"]);
    }
}
