//! Renamed environment variables: the binaries that share this crate's flags renamed some of
//! theirs so that each variable is its flag's name; the old name is still read, below the new one
//! and the flag. Without `unsafe` (no `set_var`): the old variable's value becomes a flag on the
//! command line, added only when neither the flag nor the new variable is given.

use std::ffi::OsString;

/// One renamed variable: its old name, its new name, and its flag (first) with the flag's aliases.
#[derive(Debug, Clone, Copy)]
pub struct Renamed {
    pub old: &'static str,
    pub new: &'static str,
    pub flags: &'static [&'static str],
}

/// The process's arguments with `--FLAG=VALUE` added for each of `renamed` whose old variable is
/// set while neither its new variable nor any of its flags is.
pub fn args_with_renamed_env(renamed: &[Renamed]) -> Vec<OsString> {
    with_renamed_env(std::env::args_os(), renamed, |name| std::env::var_os(name))
}

/// [`args_with_renamed_env`] over any arguments and environment.
pub fn with_renamed_env(
    args: impl IntoIterator<Item = OsString>,
    renamed: &[Renamed],
    env: impl Fn(&str) -> Option<OsString>,
) -> Vec<OsString> {
    let mut args: Vec<OsString> = args.into_iter().collect();
    for r in renamed {
        let Some(value) = env(r.old) else { continue };
        if env(r.new).is_some() {
            continue;
        }
        let given = args.iter().skip(1).any(|a| {
            let a = a.to_string_lossy();
            r.flags.iter().any(|f| a == *f || a.strip_prefix(f).is_some_and(|rest| rest.starts_with('=')))
        });
        if !given {
            let mut flag = OsString::from(format!("{}=", r.flags[0]));
            flag.push(value);
            args.push(flag);
        }
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    const THREADS: Renamed =
        Renamed { old: "WORKER_THREADS", new: "WORKER_INTRA_OP_THREADS", flags: &["--intra-op-threads", "--threads"] };

    fn run(args: &[&str], env: &[(&str, &str)]) -> Vec<String> {
        let env = |name: &str| env.iter().find(|(k, _)| *k == name).map(|(_, v)| OsString::from(v));
        with_renamed_env(args.iter().map(OsString::from), &[THREADS], env)
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect()
    }

    #[test]
    fn the_old_name_is_read_below_the_new_name_and_the_flag() {
        assert_eq!(run(&["worker"], &[("WORKER_THREADS", "4")]), ["worker", "--intra-op-threads=4"]);
        assert_eq!(run(&["worker"], &[]), ["worker"]);
        // The new variable, or the flag under any of its names, wins.
        assert_eq!(run(&["worker"], &[("WORKER_THREADS", "4"), ("WORKER_INTRA_OP_THREADS", "2")]), ["worker"]);
        assert_eq!(run(&["worker", "--threads", "2"], &[("WORKER_THREADS", "4")]), ["worker", "--threads", "2"]);
        assert_eq!(
            run(&["worker", "--intra-op-threads=2"], &[("WORKER_THREADS", "4")]),
            ["worker", "--intra-op-threads=2"]
        );
        // A flag that only starts like it is another flag.
        assert_eq!(
            run(&["worker", "--threadsx=1"], &[("WORKER_THREADS", "4")]),
            ["worker", "--threadsx=1", "--intra-op-threads=4"]
        );
    }
}
