//! Alerts on a bad config work from the first failure: `launchgate_config_last_reload_successful`
//! drops to 0 when the config file on disk is rejected, and `launchgate_config_info{hash}`
//! names the sha256 of the config in force.

mod common;

use common::{metrics_text, options, start_with};
use launchgate::policy::{DEFAULT_CONFIG_YAML, config_hash};
use std::time::{Duration, Instant};

async fn metrics(srv: &common::TestServer) -> String {
    metrics_text(&srv.client, &srv.base).await
}

/// Polls `/metrics` until `check` holds, or fails with `what` after 10 s.
async fn wait_until(srv: &common::TestServer, what: &str, check: impl Fn(&str) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = metrics(srv).await;
        if check(&text) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}:\n{text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn has_line(text: &str, line: &str) -> bool {
    text.lines().any(|l| l == line)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_success_gauge_and_config_hash_follow_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let config_path = dir.path().join("config.yaml");
    std::fs::write(&config_path, DEFAULT_CONFIG_YAML).unwrap();
    let opts = launchgate::server::ServeOptions {
        config: Some(config_path.clone()),
        ..options(dir.path())
    };
    let srv = start_with(opts, dir).await;
    let first = format!(
        r#"launchgate_config_info{{hash="{}"}} 1"#,
        config_hash(DEFAULT_CONFIG_YAML.as_bytes())
    );
    let text = metrics(&srv).await;
    assert!(
        has_line(&text, "launchgate_config_last_reload_successful 1"),
        "{text}"
    );
    assert!(has_line(&text, &first), "{text}");

    // A misspelled key: rejected; the gauge drops, the hash still names the policy in force.
    let bad = DEFAULT_CONFIG_YAML.replacen("defaultQueue:", "defaultQueeu:", 1);
    std::fs::write(&config_path, &bad).unwrap();
    wait_until(&srv, "the rejected config never set the gauge to 0", |t| {
        has_line(t, "launchgate_config_last_reload_successful 0")
    })
    .await;
    assert!(has_line(&metrics(&srv).await, &first));

    // A template whose kind cannot be told is rejected the same way (fail closed).
    std::fs::write(&config_path, DEFAULT_CONFIG_YAML).unwrap();
    wait_until(&srv, "the good config never set the gauge back to 1", |t| {
        has_line(t, "launchgate_config_last_reload_successful 1")
    })
    .await;
    let tfjob = DEFAULT_CONFIG_YAML.replacen(
        "      template: |\n        spec:",
        "      template: |\n        kind: TFJob\n        spec:",
        1,
    );
    assert_ne!(tfjob, DEFAULT_CONFIG_YAML);
    std::fs::write(&config_path, &tfjob).unwrap();
    wait_until(&srv, "the unknown-kind template was accepted", |t| {
        has_line(t, "launchgate_config_last_reload_successful 0")
    })
    .await;

    // A good new config: gauge 1 and only the new hash.
    let raised = DEFAULT_CONFIG_YAML.replace("maximum: 4", "maximum: 8");
    std::fs::write(&config_path, &raised).unwrap();
    let second = format!(
        r#"launchgate_config_info{{hash="{}"}} 1"#,
        config_hash(raised.as_bytes())
    );
    wait_until(&srv, "the new config's hash never appeared", |t| {
        has_line(t, &second)
    })
    .await;
    let text = metrics(&srv).await;
    assert!(
        has_line(&text, "launchgate_config_last_reload_successful 1"),
        "{text}"
    );
    assert!(!text.contains(&first), "old hash still reported:\n{text}");
}

/// `serve` never starts on a queue whose limits would enforce nothing.
#[tokio::test]
async fn serve_refuses_a_template_of_unknown_kind() {
    let dir = tempfile::tempdir().unwrap();
    let config_path = dir.path().join("config.yaml");
    let tfjob = DEFAULT_CONFIG_YAML.replacen(
        "      template: |\n        spec:",
        "      template: |\n        kind: TFJob\n        spec:",
        1,
    );
    std::fs::write(&config_path, tfjob).unwrap();
    let opts = launchgate::server::ServeOptions {
        config: Some(config_path),
        ..options(dir.path())
    };
    let err = match launchgate::server::start(opts, None).await {
        Ok(_) => panic!("the server started with a template of unknown kind"),
        Err(e) => format!("{e:#}"),
    };
    assert!(
        err.contains(r#"queues.gpu-queue.limits.template: kind "TFJob""#)
            && err.contains(r#"variable "gpus" would never be checked"#),
        "{err}"
    );
}
