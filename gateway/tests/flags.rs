//! The gateway's command line keeps the conventions every binary of the project follows (the
//! `cli` crate): each variable is its flag's name, every flag sits under a help heading, every
//! duration is humantime, `--log` is there, and the variables read below the flags' own name real
//! flags.

use clap::CommandFactory;

#[test]
fn the_gateways_flags_keep_the_conventions() {
    let rules = cli::check::Rules { prefix: "GATEWAY", no_env: &[], bare_seconds: &[], renamed: gateway::RENAMED_ENV };
    let violations = cli::check::violations(gateway::Config::command(), &rules);
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}
