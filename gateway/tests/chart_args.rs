//! The Helm chart's gateway arguments are the gateway's: `deploy/helm/inference-gateway` is
//! rendered with the helm that `scripts/fetch-k8s-tools.sh` fetches, for every values file of
//! its `ci/` folder, and the gateway container's arguments are parsed by `gateway::Config`, the
//! `clap` parser behind `gateway --help`. A flag the chart renders and the binary lacks (or a
//! value it refuses) fails here, not in a cluster.
//!
//! Skips, saying why, only when helm has not been fetched (`scripts/test.sh` fetches it first).

use std::net::SocketAddr;

use clap::Parser;
use testkit::chart::{arg_lists, argv, ci_values, helm, render};

fn parse(args: &[String]) -> Result<gateway::Config, clap::Error> {
    gateway::Config::try_parse_from(argv("gateway", args))
}

#[test]
fn the_charts_gateway_arguments_parse_with_the_gateways_parser() {
    let Some(helm) = helm() else { return };
    for values in ci_values() {
        let name = values.file_name().unwrap().to_string_lossy().into_owned();
        let manifest = render(&helm, &values, "templates/gateway-deployment.yaml", &[]);
        let lists = arg_lists(&manifest);
        assert_eq!(lists.len(), 1, "{name}: one gateway container");
        let args = &lists[0].args;
        let config =
            parse(args).unwrap_or_else(|e| panic!("{name}: the gateway refuses the chart's arguments {args:?}:\n{e}"));
        assert_eq!(config.listen, "0.0.0.0:8080".parse::<SocketAddr>().unwrap(), "{name}");
        assert_eq!(config.admin_listen, "0.0.0.0:9090".parse::<SocketAddr>().unwrap(), "{name}");
        assert_eq!(config.grpc_listen, Some("0.0.0.0:9000".parse::<SocketAddr>().unwrap()), "{name}");
        assert_eq!(config.target_gpu, 70.0, "{name}: --target-gpu is in percent");
        assert_eq!(config.target_queue, 32.0, "{name}");
        assert_eq!(config.pool_namespace, "ml", "{name}");
        assert!(!config.k8s_services.is_empty(), "{name}: pools come from their Services");
        for s in &config.k8s_services {
            assert!(s.contains("=ml/ig-inference-gateway-worker-") && s.ends_with(":http"), "{name}: {s}");
        }
        let api = !name.starts_with("keda") && !name.starts_with("prometheus-adapter");
        assert_eq!(
            config.metrics_api.metrics_api_listen.is_some(),
            api,
            "{name}: the metrics API only when the chart owns the APIService"
        );
        if api {
            assert!(
                config.metrics_api.tls_cert_file.is_some() && config.metrics_api.tls_private_key_file.is_some(),
                "{name}"
            );
        }
    }
}

#[test]
fn extra_arguments_reach_the_gateway_and_a_wrong_flag_is_caught() {
    let Some(helm) = helm() else { return };
    let values = testkit::repo_root().join("deploy/helm/inference-gateway/ci/default-values.yaml");
    let manifest =
        render(&helm, &values, "templates/gateway-deployment.yaml", &["gateway.extraArgs={--eject-after=3}"]);
    let args = &arg_lists(&manifest)[0].args;
    assert_eq!(parse(args).expect("parses").eject_after, 3);
    // The parser is strict: the test would catch a flag the gateway does not have.
    let manifest =
        render(&helm, &values, "templates/gateway-deployment.yaml", &["gateway.extraArgs={--no-such-flag=1}"]);
    assert!(parse(&arg_lists(&manifest)[0].args).is_err());
}
