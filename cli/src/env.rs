//! Environment variables read below a flag's own: a renamed variable's old name (for a release,
//! with a warning), or a library's conventional variable (`RUST_LOG`, `ORT_DYLIB_PATH`). Without
//! `unsafe` (no `set_var`): the variable's value becomes the flag on the command line, added
//! only when neither the flag (under any of its names) nor its own variable is given, so the
//! order is flag, then the flag's variable, then this one.

use std::ffi::OsString;

/// A variable read for a flag whose own variable is `new`.
#[derive(Debug, Clone, Copy)]
pub struct Renamed {
    /// The variable read.
    pub old: &'static str,
    /// The flag's own variable, which wins.
    pub new: &'static str,
    /// The flag (first, as written to the command line) and its aliases.
    pub flags: &'static [&'static str],
    /// Whether reading `old` warns: a renamed variable does, a library's convention does not.
    pub deprecated: bool,
}

impl Renamed {
    /// A variable renamed to match its flag: `old` is read until the next release, and warned of.
    pub const fn deprecated(old: &'static str, new: &'static str, flags: &'static [&'static str]) -> Self {
        Self { old, new, flags, deprecated: true }
    }

    /// A library's conventional variable, read below the flag's own for good (`RUST_LOG` under
    /// `--log`).
    pub const fn conventional(var: &'static str, new: &'static str, flags: &'static [&'static str]) -> Self {
        Self { old: var, new, flags, deprecated: false }
    }

    fn given(&self, args: &[OsString]) -> bool {
        args.iter().skip(1).any(|a| {
            let a = a.to_string_lossy();
            self.flags.iter().any(|f| a == *f || a.strip_prefix(f).is_some_and(|rest| rest.starts_with('=')))
        })
    }
}

/// The process's arguments with `--FLAG=VALUE` added for each of `renamed` whose variable is set
/// while neither the flag nor its own variable is; a warning on stderr for each deprecated
/// variable set (there is no log subscriber yet: the flags choose it).
pub fn args_with_renamed_env(renamed: &[Renamed]) -> Vec<OsString> {
    let (args, warnings) = with_renamed_env(std::env::args_os(), renamed, |name| std::env::var_os(name));
    for w in warnings {
        eprintln!("warning: {w}");
    }
    args
}

/// [`args_with_renamed_env`] over any arguments and environment: the arguments, and the warnings.
pub fn with_renamed_env(
    args: impl IntoIterator<Item = OsString>,
    renamed: &[Renamed],
    env: impl Fn(&str) -> Option<OsString>,
) -> (Vec<OsString>, Vec<String>) {
    let mut args: Vec<OsString> = args.into_iter().collect();
    let mut warnings = Vec::new();
    for r in renamed {
        let Some(value) = env(r.old) else { continue };
        let flag = r.flags[0];
        if env(r.new).is_some() || r.given(&args) {
            if r.deprecated {
                warnings.push(format!(
                    "{} is ignored: {} or {flag} is set (its old name, read until the next release)",
                    r.old, r.new
                ));
            }
            continue;
        }
        if r.deprecated {
            warnings
                .push(format!("{} is deprecated: set {} ({flag}) instead; read until the next release", r.old, r.new));
        }
        let mut arg = OsString::from(format!("{flag}="));
        arg.push(value);
        args.push(arg);
    }
    (args, warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    const THREADS: Renamed =
        Renamed::deprecated("WORKER_THREADS", "WORKER_INTRA_OP_THREADS", &["--intra-op-threads", "--threads"]);
    const LOG: Renamed = Renamed::conventional("RUST_LOG", "WORKER_LOG", &["--log"]);

    fn run(args: &[&str], env: &[(&str, &str)]) -> (Vec<String>, usize) {
        let env = |name: &str| env.iter().find(|(k, _)| *k == name).map(|(_, v)| OsString::from(v));
        let (args, warnings) = with_renamed_env(args.iter().map(OsString::from), &[THREADS, LOG], env);
        (args.into_iter().map(|a| a.into_string().unwrap()).collect(), warnings.len())
    }

    #[test]
    fn the_old_name_is_read_below_the_new_name_and_the_flag_with_a_warning() {
        assert_eq!(
            run(&["worker"], &[("WORKER_THREADS", "4")]),
            (vec!["worker".into(), "--intra-op-threads=4".into()], 1)
        );
        assert_eq!(run(&["worker"], &[]), (vec!["worker".into()], 0));
        // The new variable, or the flag under any of its names, wins; the old one is still warned of.
        assert_eq!(
            run(&["worker"], &[("WORKER_THREADS", "4"), ("WORKER_INTRA_OP_THREADS", "2")]),
            (vec!["worker".into()], 1)
        );
        assert_eq!(run(&["worker", "--threads", "2"], &[("WORKER_THREADS", "4")]).0, ["worker", "--threads", "2"]);
        assert_eq!(
            run(&["worker", "--intra-op-threads=2"], &[("WORKER_THREADS", "4")]).0,
            ["worker", "--intra-op-threads=2"]
        );
        // A flag that only starts like it is another flag.
        assert_eq!(
            run(&["worker", "--threadsx=1"], &[("WORKER_THREADS", "4")]).0,
            ["worker", "--threadsx=1", "--intra-op-threads=4"]
        );
    }

    #[test]
    fn a_conventional_variable_is_read_without_a_warning() {
        assert_eq!(run(&["worker"], &[("RUST_LOG", "debug")]), (vec!["worker".into(), "--log=debug".into()], 0));
        assert_eq!(run(&["worker"], &[("RUST_LOG", "debug"), ("WORKER_LOG", "warn")]), (vec!["worker".into()], 0));
        assert_eq!(run(&["worker", "--log", "warn"], &[("RUST_LOG", "debug")]).0, ["worker", "--log", "warn"]);
    }
}
