//! Alerts on a bad config work from the first failure: `launchgate_config_last_reload_successful`
//! drops to 0 when the config file on disk is rejected, and `launchgate_config_info{hash}`
//! names the sha256 of the config in force.

mod common;

use common::{options, start_with_config};
use launchgate::policy::{DEFAULT_CONFIG_YAML, config_hash};

fn has_line(text: &str, line: &str) -> bool {
    text.lines().any(|l| l == line)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_success_gauge_and_config_hash_follow_the_file() {
    let (srv, config_path) = start_with_config(DEFAULT_CONFIG_YAML).await;
    let first = format!(
        r#"launchgate_config_info{{hash="{}"}} 1"#,
        config_hash(DEFAULT_CONFIG_YAML.as_bytes())
    );
    let text = srv.metrics().await;
    assert!(
        has_line(&text, "launchgate_config_last_reload_successful 1"),
        "{text}"
    );
    assert!(has_line(&text, &first), "{text}");

    // A misspelled key: rejected; the gauge drops, the hash still names the policy in force.
    let bad = DEFAULT_CONFIG_YAML.replacen("defaultQueue:", "defaultQueeu:", 1);
    std::fs::write(&config_path, &bad).unwrap();
    srv.wait_for_metrics("the rejected config never set the gauge to 0", |t| {
        has_line(t, "launchgate_config_last_reload_successful 0")
    })
    .await;
    assert!(has_line(&srv.metrics().await, &first));

    // A template whose kind cannot be told is rejected the same way (fail closed).
    std::fs::write(&config_path, DEFAULT_CONFIG_YAML).unwrap();
    srv.wait_for_metrics("the good config never set the gauge back to 1", |t| {
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
    srv.wait_for_metrics("the unknown-kind template was accepted", |t| {
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
    srv.wait_for_metrics("the new config's hash never appeared", |t| {
        has_line(t, &second)
    })
    .await;
    let text = srv.metrics().await;
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
