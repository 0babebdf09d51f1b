//! The check behind each binary's `flags` test: its `clap::Command` against the conventions of
//! this crate (see the crate's documentation), as a list of what breaks them.

use std::any::TypeId;
use std::time::Duration;

use clap::{Arg, Command};

use crate::Renamed;

/// What a binary is checked against.
#[derive(Debug, Clone, Copy)]
pub struct Rules<'a> {
    /// The variables' prefix, without the underscore: `GATEWAY`.
    pub prefix: &'a str,
    /// Flags that have no variable on purpose (each with its reason where it is listed).
    pub no_env: &'a [&'a str],
    /// Duration flags that still read a bare number as seconds (they took one before).
    pub bare_seconds: &'a [&'a str],
    /// The binary's variables read below its flags' own ([`crate::args_with_renamed_env`]).
    pub renamed: &'a [Renamed],
}

/// Words at the end of a flag's name that give a duration's unit: the mark of a flag that takes
/// a bare number where it should take a duration.
const UNIT_SUFFIXES: &[&str] = &["-s", "-ms", "-us", "-secs", "-seconds", "-millis"];

/// Everything in `cmd` (its subcommands included) that breaks the conventions; empty when none.
pub fn violations(mut cmd: Command, rules: &Rules<'_>) -> Vec<String> {
    cmd.build();
    let mut out = Vec::new();
    for long in ["log", "log-json"] {
        if !cmd.get_arguments().any(|a| a.get_long() == Some(long)) {
            out.push(format!("{}: no --{long}", cmd.get_name()));
        }
    }
    for r in rules.renamed {
        check_renamed(&cmd, r, &mut out);
    }
    walk(&cmd, cmd.get_name(), rules, &mut out);
    out
}

fn walk(cmd: &Command, path: &str, rules: &Rules<'_>, out: &mut Vec<String>) {
    for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
        if let Some(long) = arg.get_long().filter(|l| !matches!(*l, "help" | "version")) {
            check_arg(arg, &format!("{path} --{long}"), long, rules, out);
        }
    }
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        walk(sub, &format!("{path} {}", sub.get_name()), rules, out);
    }
}

fn check_arg(arg: &Arg, name: &str, long: &str, rules: &Rules<'_>, out: &mut Vec<String>) {
    if arg.get_help_heading().is_none() {
        out.push(format!("{name}: no help heading"));
    }
    let expected = format!("{}_{}", rules.prefix, long.to_uppercase().replace('-', "_"));
    match arg.get_env().map(|e| e.to_string_lossy().into_owned()) {
        Some(env) if env != expected => out.push(format!("{name}: variable {env}, not {expected}")),
        Some(_) => {}
        None if rules.no_env.contains(&long) => {}
        None => out.push(format!("{name}: no variable (expected {expected})")),
    }
    if UNIT_SUFFIXES.iter().any(|u| long.ends_with(u)) {
        out.push(format!("{name}: a unit in the name; take a duration (`250ms`, `10s`) under a name without one"));
    }
    if arg.get_value_parser().type_id() == TypeId::of::<Duration>() {
        for good in ["250ms", "1m 30s"] {
            if !accepts(arg, good) {
                out.push(format!("{name}: refuses the duration {good:?}"));
            }
        }
        if accepts(arg, "10") != rules.bare_seconds.contains(&long) {
            out.push(if accepts(arg, "10") {
                format!("{name}: takes a bare number; a duration needs its unit")
            } else {
                format!("{name}: listed as reading a bare number as seconds, but refuses one")
            });
        }
    }
}

/// Whether the flag's value parser takes `value` (in a command of its own, so that the flag's
/// relations to others and its variable do not count).
fn accepts(arg: &Arg, value: &str) -> bool {
    let probe = Arg::new("value").long("value").value_parser(arg.get_value_parser().clone());
    Command::new("probe").arg(probe).try_get_matches_from(["probe", "--value", value]).is_ok()
}

fn check_renamed(cmd: &Command, r: &Renamed, out: &mut Vec<String>) {
    let Some(long) = r.flags.first().and_then(|f| f.strip_prefix("--")) else {
        out.push(format!("{}: no flag", r.old));
        return;
    };
    let Some(arg) = cmd.get_arguments().find(|a| a.get_long() == Some(long)) else {
        out.push(format!("{}: --{long} is not a flag of {}", r.old, cmd.get_name()));
        return;
    };
    if arg.get_env().is_none_or(|e| e != r.new) {
        out.push(format!("{}: --{long}'s variable is {:?}, not {}", r.old, arg.get_env(), r.new));
    }
    let names: Vec<&str> = arg.get_long().into_iter().chain(arg.get_all_aliases().unwrap_or_default()).collect();
    for f in &r.flags[1..] {
        let named = match f.strip_prefix("--") {
            Some(f) => names.contains(&f),
            None => f.strip_prefix('-').and_then(|c| c.chars().next()).is_some_and(|c| arg.get_short() == Some(c)),
        };
        if !named {
            out.push(format!("{}: {f} is not a name of --{long}", r.old));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn secs(s: &str) -> Result<Duration, String> {
        s.parse::<u64>().map(Duration::from_secs).map_err(|e| e.to_string())
    }

    #[derive(Parser)]
    #[command(name = "good")]
    #[allow(dead_code)] // only its command is inspected
    struct Good {
        /// Address.
        #[arg(long, env = "GOOD_LISTEN", help_heading = "Listening")]
        listen: String,
        /// A deadline.
        #[arg(long, alias = "timeout", env = "GOOD_REQUEST_TIMEOUT", help_heading = "Limits", value_parser = crate::parse_duration)]
        request_timeout: Option<Duration>,
        /// Old form.
        #[arg(long, hide = true, value_parser = secs)]
        timeout_s: Option<Duration>,
        #[arg(long, env = "GOOD_LOG", help_heading = "Logging", default_value = "info")]
        log: String,
        #[arg(long, env = "GOOD_LOG_JSON", help_heading = "Logging")]
        log_json: bool,
    }

    #[derive(Parser)]
    #[command(name = "bad")]
    #[allow(dead_code)] // only its command is inspected
    struct Bad {
        #[arg(long, env = "BAD_ADDR")]
        listen: String,
        #[arg(long, env = "BAD_WAIT_MS", help_heading = "Limits")]
        wait_ms: u64,
        #[arg(long, env = "BAD_DELAY", help_heading = "Limits", value_parser = secs)]
        delay: Duration,
    }

    const RULES: Rules<'static> = Rules {
        prefix: "GOOD",
        no_env: &[],
        bare_seconds: &[],
        renamed: &[Renamed::deprecated("GOOD_TIMEOUT", "GOOD_REQUEST_TIMEOUT", &["--request-timeout", "--timeout"])],
    };

    #[test]
    fn a_command_that_keeps_the_conventions_passes() {
        use clap::CommandFactory;
        assert_eq!(violations(Good::command(), &RULES), Vec::<String>::new());
    }

    #[test]
    fn each_broken_convention_is_named() {
        use clap::CommandFactory;
        let rules = Rules {
            prefix: "BAD",
            renamed: &[Renamed::deprecated("BAD_X", "BAD_LISTEN", &["--listen", "--addr"])],
            ..RULES
        };
        let v = violations(Bad::command(), &rules).join("\n");
        for expected in [
            "bad: no --log",
            "bad: no --log-json",
            "BAD_X: --listen's variable",
            "BAD_X: --addr is not a name of --listen",
            "bad --listen: no help heading",
            "bad --listen: variable BAD_ADDR, not BAD_LISTEN",
            "bad --wait-ms: a unit in the name",
            "bad --delay: refuses the duration \"250ms\"",
            "bad --delay: takes a bare number",
        ] {
            assert!(v.contains(expected), "{expected:?} not in:\n{v}");
        }
    }
}
