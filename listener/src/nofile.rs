//! The open-file limit: raised from soft to hard at start (as Go's runtime and Envoy's
//! deployment guides do), and the connection cap kept under it.

use nix::sys::resource::{Resource, getrlimit, setrlimit};

/// Linux refuses a soft limit above `fs.nr_open` (1,048,576 by default), whatever the hard limit.
const MOST: u64 = 1 << 20;

/// Raises the soft `RLIMIT_NOFILE` to the hard limit; returns the soft limit now in force
/// (`None` if it cannot be read).
pub fn raise_nofile_limit() -> Option<u64> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    let target = hard.min(MOST.max(soft));
    if soft >= target {
        return Some(soft);
    }
    match setrlimit(Resource::RLIMIT_NOFILE, target, hard) {
        Ok(()) => {
            tracing::debug!(from = soft, to = target, "raised the open file limit");
            Some(target)
        }
        Err(e) => {
            tracing::warn!(error = %e, soft, hard, "could not raise the open file limit");
            Some(soft)
        }
    }
}

/// The connection cap in force: `wanted`, but at most half the open-file limit (the rest is
/// for the gateway's connections to its workers, the admin port and files).
pub(crate) fn effective_cap(wanted: usize, nofile: Option<u64>) -> usize {
    match nofile {
        Some(n) => wanted.min(usize::try_from(n / 2).unwrap_or(usize::MAX)).max(1),
        None => wanted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_stays_under_half_the_descriptors() {
        assert_eq!(effective_cap(10_000, Some(1024)), 512);
        assert_eq!(effective_cap(10_000, Some(1 << 20)), 10_000);
        assert_eq!(effective_cap(10_000, None), 10_000);
        assert_eq!(effective_cap(10, Some(1)), 1);
    }

    #[test]
    fn raising_leaves_the_soft_limit_at_the_hard_one() {
        let soft = raise_nofile_limit().unwrap();
        let (now, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        assert_eq!(soft, now);
        assert_eq!(now, hard.min(MOST.max(now)));
    }
}
