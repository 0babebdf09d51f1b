//! The Helm chart's worker arguments are the worker's: `deploy/helm/inference-gateway` is
//! rendered with the helm that `scripts/fetch-k8s-tools.sh` fetches, for every values file of
//! its `ci/` folder, and each pool's worker arguments are parsed by `worker::Config`, the `clap`
//! parser behind `worker --help`.
//!
//! Skips, saying why, only when helm has not been fetched (`scripts/test.sh` fetches it first).

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use testkit::chart::{Args, arg_lists, argv, ci_values, helm, render};
use worker::config::Device;

const WORKERS: &str = "templates/workers.yaml";

#[test]
fn the_charts_worker_arguments_parse_with_the_workers_parser() {
    let Some(helm) = helm() else { return };
    let (mut gpu, mut cpu) = (0, 0);
    for values in ci_values() {
        let name = values.file_name().unwrap().to_string_lossy().into_owned();
        let lists = arg_lists(&render(&helm, &values, WORKERS, &[]));
        assert!(!lists.is_empty(), "{name}: worker Deployments");
        for Args { args, grace_s: grace } in lists {
            let config = worker::Config::try_parse_from(argv("worker", &args))
                .unwrap_or_else(|e| panic!("{name}: the worker refuses the chart's arguments {args:?}:\n{e}"));
            assert_eq!(config.listen.to_string(), "0.0.0.0:8000", "{name}");
            // The chart passes flags by their names, not by the aliases kept for old scripts.
            for alias in ["--threads", "--queue-capacity"] {
                assert!(!args.iter().any(|a| a.starts_with(alias)), "{name}: {alias} is an alias: {args:?}");
            }
            assert_eq!(config.model, PathBuf::from("/opt/model"), "{name}");
            // The pod outlives the worker's whole drain: requests, then as long for answers.
            assert!(
                Duration::from_secs(grace) > 2 * config.drain_timeout,
                "{name}: grace {grace}s, drain {:?}",
                config.drain_timeout
            );
            // Batching: the worker's defaults for the pool's device (docs/worker.md: the H100's
            // settings on a GPU).
            let batching =
                (config.max_batch_rows(), config.max_batch_tokens(), config.max_queue_delay(), config.queue_capacity());
            match config.device {
                Device::Cuda(0) => {
                    gpu += 1;
                    assert_eq!(batching, (256, 16384, Duration::from_millis(1), 8192), "{name}");
                }
                Device::Cpu if name.starts_with("cpu-only") => {
                    cpu += 1;
                    assert_eq!(batching, (32, 4096, Duration::ZERO, 1024), "{name}");
                }
                other => panic!("{name}: device {other:?}"),
            }
        }
    }
    assert!(gpu > 0 && cpu > 0, "GPU pools {gpu}, CPU pools {cpu}");
}

#[test]
fn a_flag_the_worker_lacks_is_caught() {
    let Some(helm) = helm() else { return };
    let values = testkit::repo_root().join("deploy/helm/inference-gateway/ci/default-values.yaml");
    let args = &arg_lists(&render(&helm, &values, WORKERS, &["workerDefaults.extraArgs={--max-queries=16}"]))[0].args;
    let config = worker::Config::try_parse_from(argv("worker", args)).expect("parses");
    assert_eq!(config.max_queries, 16);
    let set =
        ["workerDefaults.maxBatchRows=64", "workerDefaults.maxQueueDelay=2ms", "workerDefaults.queueCapacity=100"];
    let args = &arg_lists(&render(&helm, &values, WORKERS, &set))[0].args;
    let config = worker::Config::try_parse_from(argv("worker", args)).expect("parses");
    assert_eq!(
        (config.max_batch_rows(), config.max_batch_tokens(), config.max_queue_delay(), config.queue_capacity()),
        (64, 16384, Duration::from_millis(2), 100),
        "a value set replaces the device's, the rest stay"
    );
    let args = &arg_lists(&render(&helm, &values, WORKERS, &["workerDefaults.extraArgs={--no-such-flag}"]))[0].args;
    assert!(worker::Config::try_parse_from(argv("worker", args)).is_err());
}
