//! `launchgate playground`: the real binary on an ephemeral loopback port, its JSON API asked
//! with configs and manifests (verdict, patch, warnings, decision trail, and a clear 4xx for
//! bad input), and its page driven in a real headless Chromium through chromedriver.
//!
//! The browser test needs Debian's `chromium` and `chromium-driver`. Without them it returns
//! at once and says so on one `SKIPPED` line of stderr, unless `LAUNCHGATE_BROWSER_REQUIRED=1`
//! (CI), which makes them missing a failure. Every child (the playground, chromedriver and the
//! browser it starts) is killed when its guard drops, whether the test passed or failed, and
//! gets `PR_SET_PDEATHSIG` so a test binary killed outright leaves none behind.

mod common;

use common::browser::{Guard, browser, in_headless_chromium, line_with, spawn};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;

const EIGHT_GPUS: &str =
    include_str!("../examples/policy-tests/builtin/resources/train-8-gpus.yaml");
const TWO_GPUS: &str = include_str!("../examples/policy-tests/builtin/resources/train-2-gpus.yaml");

/// A running `launchgate playground` and its base URL (`http://127.0.0.1:PORT`).
struct Playground {
    _guard: Guard,
    base: String,
}

fn playground() -> Playground {
    playground_with(&[])
}

/// [`playground`] with extra flags.
fn playground_with(flags: &[&str]) -> Playground {
    let mut guard = spawn(
        Command::new(env!("CARGO_BIN_EXE_launchgate"))
            .args(["playground", "--listen", "127.0.0.1:0"])
            .args(flags),
        false,
    );
    let line = line_with(&mut guard, "launchgate playground: ");
    let base = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .trim_end_matches('/')
        .to_string();
    Playground {
        _guard: guard,
        base,
    }
}

async fn post(base: &str, body: &Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{base}/api/review"))
        .json(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

fn rules(result: &Value) -> Vec<String> {
    result["trail"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["rule"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn the_api_judges_a_manifest_under_the_built_in_policy() {
    let p = playground();
    let (status, answer) = post(&p.base, &json!({"manifest": EIGHT_GPUS})).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["config"]["source"], "built-in example policy");
    let r = &answer["results"][0];
    assert_eq!(r["verdict"], "denied", "{r}");
    assert_eq!(r["deniedBy"], "validate");
    assert_eq!(r["queue"], "gpu-queue");
    assert_eq!(
        r["message"],
        r#"queue "gpu-queue": spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"]=8 exceeds maximum 4 (variable "gpus")"#
    );
    let trail = rules(r);
    assert!(trail.contains(&"limits.variables".to_string()), "{trail:?}");
    assert!(
        trail.contains(&"mutation security-context".to_string()),
        "{trail:?}"
    );

    let (status, answer) = post(&p.base, &json!({"manifest": TWO_GPUS})).await;
    assert_eq!(status, 200, "{answer}");
    let r = &answer["results"][0];
    assert_eq!(r["verdict"], "allowed", "{r}");
    let paths: Vec<&str> = r["patch"]
        .as_array()
        .unwrap()
        .iter()
        .map(|op| op["path"].as_str().unwrap())
        .collect();
    assert!(
        paths.contains(&"/spec/template/spec/containers/0/securityContext"),
        "{paths:?}"
    );
    assert!(
        r["diff"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["tag"] == "+" && l["text"].as_str().unwrap().trim() == "securityContext:"),
        "{r}"
    );
    assert!(
        r["after"]
            .as_str()
            .unwrap()
            .contains("allowPrivilegeEscalation: false")
    );
    assert!(!r["before"].as_str().unwrap().contains("securityContext"));

    // An UPDATE is judged on what it changes: raising the GPUs is denied, keeping an
    // over-limit value that was already there is allowed with a warning naming the rule.
    let renamed = TWO_GPUS.replace("launch-acme-mnist-2gpu", "launch-acme-mnist-8gpu");
    let update =
        |old: &str| json!({"manifest": EIGHT_GPUS, "operation": "UPDATE", "oldManifest": old});
    let (status, answer) = post(&p.base, &update(&renamed)).await;
    assert_eq!(status, 200, "{answer}");
    let r = &answer["results"][0];
    assert_eq!(
        (&r["operation"], &r["verdict"]),
        (&json!("UPDATE"), &json!("denied")),
        "{r}"
    );
    let (_, answer) = post(&p.base, &update(EIGHT_GPUS)).await;
    let r = &answer["results"][0];
    assert_eq!(r["verdict"], "allowed", "{r}");
    assert!(
        r["warnings"][0]["message"]
            .as_str()
            .unwrap()
            .contains("already so before this update"),
        "{r}"
    );
    assert!(rules(r).contains(&"limits.variables".to_string()), "{r}");
    assert_eq!(r["warnings"][0]["rule"], "limits.variables", "{r}");
}

#[tokio::test]
async fn the_api_imports_a_wandb_queue_and_reports_warnings_and_exemptions() {
    let p = playground();
    let export = "name: gpu-queue\nconfig:\n  resource_args:\n    kubernetes:\n      spec:\n        template:\n          spec:\n            containers:\n              - resources: {limits: {nvidia.com/gpu: '{{gpus}}'}}\ntemplate_variables:\n  gpus: {schema: {type: integer, minimum: 0, maximum: 4}}\n";
    let (status, answer) = post(
        &p.base,
        &json!({"config": export, "manifest": format!("{EIGHT_GPUS}---\n{TWO_GPUS}")}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["config"]["queues"], json!(["gpu-queue"]));
    assert!(
        answer["config"]["snippet"]
            .as_str()
            .unwrap()
            .contains("gpu-queue")
    );
    let results = answer["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["source"], "manifest#1");
    assert_eq!(results[0]["verdict"], "denied");
    assert_eq!(results[1]["verdict"], "allowed");

    // A workload naming an unconfigured queue: judged by the imported one, with the warning.
    let elsewhere = TWO_GPUS.replace("queue: gpu-queue", "queue: other-queue");
    let (_, answer) = post(&p.base, &json!({"config": export, "manifest": elsewhere})).await;
    let r = &answer["results"][0];
    let warnings = r["warnings"].as_array().unwrap();
    assert!(
        warnings
            .iter()
            .any(|w| w["message"].as_str().unwrap().contains("other-queue")
                && w["rule"] == "queue.unknown"),
        "{r}"
    );
    // The trail names the warning by its id.
    assert!(rules(r).contains(&"queue.unknown".to_string()), "{r}");

    // Exemptions go by who asks and what it is: the agent's kaniko build is left alone; the
    // agent's training run labelled like one, and anyone else's build, are not.
    let disguised =
        include_str!("../examples/policy-tests/builtin/resources/labelled-image-build.yaml");
    let build = "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: build\n  namespace: wandb\n  labels: {wandb: launch, wandb.ai/monitor: \"true\"}\nspec:\n  template:\n    metadata:\n      labels: {wandb: launch}\n    spec:\n      restartPolicy: Never\n      containers:\n        - name: wandb-container-build\n          image: gcr.io/kaniko-project/executor:v1.8.0\n          args: [--context=s3://b/ctx.tgz, --destination=registry/img:tag]\n          resources: {limits: {nvidia.com/gpu: \"8\"}}\n";
    let as_user = |manifest: &str, username: &str| json!({"manifest": manifest, "userInfo": {"username": username, "groups": ["system:authenticated"]}});
    let by = |username: &str| as_user(build, username);
    let (_, run) = post(
        &p.base,
        &as_user(
            disguised,
            "system:serviceaccount:wandb:wandb-launch-serviceaccount-agent",
        ),
    )
    .await;
    assert_eq!(run["results"][0]["verdict"], "denied", "{run}");
    let (_, agent) = post(
        &p.base,
        &by("system:serviceaccount:wandb:wandb-launch-serviceaccount-agent"),
    )
    .await;
    let r = &agent["results"][0];
    assert_eq!(r["verdict"], "skipped", "{agent}");
    assert_eq!(
        r["user"],
        "system:serviceaccount:wandb:wandb-launch-serviceaccount-agent"
    );
    assert_eq!(r["trail"][0]["rule"], "exemption \"wandb-image-builds\"");
    let (_, alice) = post(&p.base, &by("alice")).await;
    let r = &alice["results"][0];
    assert_eq!(r["verdict"], "denied", "{alice}");
    assert!(
        r["message"]
            .as_str()
            .unwrap()
            .contains("exemption \"wandb-image-builds\" does not apply"),
        "{alice}"
    );
}

/// A Pod of 40,000 tiny containers, the densest that fits the request body: refused unjudged
/// with the reason, under `serve`'s memory budget and, with memory to spare, its deadline;
/// the playground keeps judging afterwards.
#[tokio::test]
async fn a_manifest_too_large_to_judge_within_budget_and_deadline_is_refused() {
    let containers: String = (0..40_000)
        .map(|i| format!("{{name: c{i},image: x}},"))
        .collect();
    let manifest = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: dense, namespace: ml, labels: {{wandb.ai/monitor: 'true'}}}}\nspec: {{containers: [{}]}}\n",
        containers.trim_end_matches(',')
    );
    for (flags, says) in [
        (
            ["--memory-budget-mib=512", "--request-deadline-ms=4000"],
            "more than launchgate's memory budget of 512 MiB",
        ),
        (
            ["--memory-budget-mib=65536", "--request-deadline-ms=4000"],
            "more than the 2000 ms launchgate allows a review (half its request deadline)",
        ),
    ] {
        let p = playground_with(&flags);
        let (status, answer) = post(&p.base, &json!({"manifest": manifest})).await;
        assert_eq!(status, 413, "{flags:?}: {answer}");
        assert_eq!(answer["input"], "manifest", "{answer}");
        let error = answer["error"].as_str().unwrap();
        assert!(
            error.contains("40000 containers") && error.contains(says),
            "{flags:?}: {error}"
        );
        let (status, answer) = post(&p.base, &json!({"manifest": TWO_GPUS})).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["results"][0]["verdict"], "allowed", "{answer}");
    }
}

#[tokio::test]
async fn bad_input_gets_a_4xx_that_says_what_is_wrong() {
    let p = playground();
    let client = reqwest::Client::new();
    let url = format!("{}/api/review", p.base);
    let send = |body: &'static str, content_type: &'static str| {
        let client = client.clone();
        let url = url.clone();
        async move {
            let r = client
                .post(url)
                .header("content-type", content_type)
                .body(body)
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.unwrap())
        }
    };
    let (status, answer) = send("{not json", "application/json").await;
    assert_eq!(status, 400);
    assert!(
        answer["error"].as_str().unwrap().starts_with("request: "),
        "{answer}"
    );
    let (status, answer) = send(r#"{"manifest": "x", "manfest": 1}"#, "application/json").await;
    assert_eq!(status, 400);
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("unknown field `manfest`"),
        "{answer}"
    );
    let (status, answer) = send(r#"{"config": "queues: {}"}"#, "application/json").await;
    assert_eq!(status, 400);
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("missing field `manifest`"),
        "{answer}"
    );
    let (status, answer) = send(r#"{"manifest": "a"}"#, "text/plain").await;
    assert_eq!(status, 415, "{answer}");

    // A config error, with its key path, as `check-config` says it.
    let (status, answer) = post(
        &p.base,
        &json!({"config": "queues:\n  q:\n    limits: {enforcment: deny}\n", "manifest": TWO_GPUS}),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(answer["input"], "config");
    assert_eq!(answer["error"], "config: invalid config");
    let details = answer["details"].as_array().unwrap();
    assert!(
        details[0].as_str().unwrap().contains("queues.q.limits"),
        "{answer}"
    );
    // A manifest that is no Kubernetes object.
    let (status, answer) = post(&p.base, &json!({"manifest": "metadata: {name: x}\n"})).await;
    assert_eq!(status, 400);
    assert_eq!(answer["input"], "manifest");
    assert!(
        answer["error"].as_str().unwrap().contains("apiVersion"),
        "{answer}"
    );
    // An UPDATE without the old object.
    let (status, answer) = post(
        &p.base,
        &json!({"manifest": TWO_GPUS, "operation": "UPDATE"}),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(answer["input"], "oldManifest");
    // Too large: read to its limit, answered 413.
    let big = json!({"manifest": "#".repeat(2 * 1024 * 1024)});
    let (status, answer) = post(&p.base, &big).await;
    assert_eq!(status, 413, "{answer}");
    assert!(
        answer["error"].as_str().unwrap().contains("too large"),
        "{answer}"
    );
    // Wrong method, unknown path.
    let r = client.get(&url).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 405);
    let r = client
        .get(format!("{}/nothing-here", p.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);
    // Still serving after all of it.
    let (status, _) = post(&p.base, &json!({"manifest": TWO_GPUS})).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn the_page_and_its_assets_come_from_the_binary() {
    let p = playground();
    let client = reqwest::Client::new();
    let page = client.get(format!("{}/", p.base)).send().await.unwrap();
    assert_eq!(page.status().as_u16(), 200);
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(csp.contains("default-src 'none'"), "{csp}");
    let html = page.text().await.unwrap();
    assert!(html.contains(r#"<script src="/app.js" defer></script>"#));
    for asset in ["/app.js", "/style.css", "/api/examples"] {
        let r = client
            .get(format!("{}{asset}", p.base))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200, "{asset}");
    }
    let examples: Value = client
        .get(format!("{}/api/examples", p.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let kinds: Vec<&str> = examples["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["title"].as_str().unwrap().split(':').next().unwrap())
        .collect();
    for kind in ["Job", "Volcano Job", "PyTorchJob", "Pod"] {
        assert!(kinds.contains(&kind), "{kinds:?}");
    }
    assert_eq!(examples["configs"][0]["id"], "builtin");
}

/// A page of another origin whose host name resolves to 127.0.0.1 (DNS rebinding) reaches the
/// playground's socket with its own name in `Host`: refused, for the API and the page alike.
#[tokio::test]
async fn a_request_for_another_host_name_is_refused() {
    let p = playground();
    let client = reqwest::Client::new();
    let port = p.base.rsplit(':').next().unwrap().to_string();
    let response = client
        .post(format!("{}/api/review", p.base))
        .header("host", format!("evil.example:{port}"))
        .json(&json!({"manifest": EIGHT_GPUS}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 403);
    let body: Value = response.json().await.unwrap();
    let said = body["error"].as_str().unwrap();
    assert!(
        said.contains(&format!(
            r#"Host "evil.example:{port}" is not this playground's"#
        )),
        "{said}"
    );
    let page = client
        .get(format!("{}/", p.base))
        .header("host", "evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(page.status().as_u16(), 403);
    // The same request by a loopback name is answered.
    let ok = client
        .post(format!("{}/api/review", p.base))
        .header("host", format!("localhost:{port}"))
        .json(&json!({"manifest": EIGHT_GPUS}))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status().as_u16(), 200);
}

#[test]
fn a_non_loopback_address_is_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_launchgate"))
        .args(["playground", "--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("loopback address only"), "{stderr}");
}

// --- the page in a real browser ---

/// `launchgate playground` as docs/playground.md runs it (here on an ephemeral port): it prints
/// its address and serves the page, which is then used as the page describes.
#[tokio::test]
async fn the_page_shows_a_denial_and_then_the_diff_of_an_allowed_run_in_a_real_browser() {
    let Some(browser) = browser("playground browser test") else {
        return;
    };
    let p = playground();
    in_headless_chromium!(browser, &[], |driver| {
        review_in_the_page(driver, &p.base).await
    });
}

/// Picks the W&B queue example, reviews an over-limit run (denied, naming queue, field and
/// limit), then one within the limit (allowed, `securityContext` added in the diff).
async fn review_in_the_page(driver: &thirtyfour::WebDriver, base: &str) {
    use thirtyfour::prelude::*;

    driver.goto(format!("{base}/")).await.unwrap();
    // The examples are loaded and the built-in policy is preselected.
    driver
        .query(By::Css("body[data-ready='true']"))
        .first()
        .await
        .unwrap();
    let config = driver.find(By::Id("config")).await.unwrap();
    assert!(
        config
            .prop("value")
            .await
            .unwrap()
            .unwrap_or_default()
            .contains("launchgate built-in example policy")
    );
    assert_eq!(
        driver.title().await.unwrap(),
        "launchgate playground",
        "the page"
    );

    // Pick the W&B queue export, paste an over-limit manifest, review.
    let select = thirtyfour::components::SelectElement::new(
        &driver.find(By::Id("config-example")).await.unwrap(),
    )
    .await
    .unwrap();
    select.select_by_value("wandb-minikube-gpu").await.unwrap();
    assert!(
        config
            .prop("value")
            .await
            .unwrap()
            .unwrap_or_default()
            .contains("template_variables"),
        "picking the example fills the config"
    );
    let manifest = driver.find(By::Id("manifest")).await.unwrap();
    manifest.clear().await.unwrap();
    manifest.send_keys(EIGHT_GPUS).await.unwrap();
    driver
        .find(By::Id("review"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let verdict = driver
        .query(By::Css("#verdict-0.denied"))
        .first()
        .await
        .unwrap();
    assert!(verdict.text().await.unwrap().starts_with("Denied"));
    let message = driver
        .find(By::Id("message-0"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for part in [
        r#"queue "gpu-queue""#,
        r#"resources.limits["nvidia.com/gpu"]=8"#,
        "exceeds maximum 4",
    ] {
        assert!(message.contains(part), "{part} in {message}");
    }
    let trail = driver
        .find(By::Id("trail-0"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(trail.contains("limits.variables"), "{trail}");

    // A run within the limit: allowed, and the diff shows the securityContext added.
    manifest.clear().await.unwrap();
    manifest.send_keys(TWO_GPUS).await.unwrap();
    driver
        .find(By::Id("review"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let verdict = driver
        .query(By::Css("#verdict-0.allowed"))
        .first()
        .await
        .unwrap();
    assert!(verdict.text().await.unwrap().starts_with("Allowed"));
    let added: Vec<String> = {
        let mut lines = Vec::new();
        for span in driver.find_all(By::Css("#diff-0 .add")).await.unwrap() {
            lines.push(span.text().await.unwrap());
        }
        lines
    };
    assert!(
        added
            .iter()
            .any(|l| l.starts_with('+') && l.trim_start_matches('+').trim() == "securityContext:"),
        "{added:?}"
    );
    assert!(
        driver
            .find_all(By::Id("message-0"))
            .await
            .unwrap()
            .is_empty(),
        "no denial message"
    );
}

#[tokio::test]
async fn the_api_sizes_a_trainjob_by_a_runtime_pasted_beside_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/manifests");
    let read = |name: &str| std::fs::read_to_string(root.join(name)).unwrap();
    let config = "queues:\n  q:\n    limits:\n      totals: {nvidia.com/gpu: {maximum: 16}}\n";
    let p = playground();
    for (runtime, verdict) in [
        ("runtimes/torch-64x8.yaml", "denied"),
        ("runtimes/torch-2x4.yaml", "allowed"),
    ] {
        let manifest = format!("{}---\n{}", read(runtime), read("trainjob-torch.yaml"));
        let (status, answer) =
            post(&p.base, &json!({"config": config, "manifest": manifest})).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(
            answer["runtimes"],
            json!(["ClusterTrainingRuntime torch-distributed"]),
            "{answer}"
        );
        let results = answer["results"].as_array().unwrap();
        assert_eq!(results.len(), 1, "the runtime is not judged: {answer}");
        let r = &results[0];
        assert_eq!(
            (&r["source"], &r["kind"]),
            (&json!("manifest#2"), &json!("TrainJob"))
        );
        assert_eq!(r["verdict"], verdict, "{runtime}: {r}");
        if verdict == "denied" {
            let message = r["message"].as_str().unwrap();
            assert!(
                message.contains("total nvidia.com/gpu over all pods=512 exceeds maximum 16")
                    && message.contains(r#"ClusterTrainingRuntime "torch-distributed""#),
                "{message}"
            );
        }
    }
    // Without it: the size cannot be verified.
    let (_, answer) = post(
        &p.base,
        &json!({"config": config, "manifest": read("trainjob-torch.yaml")}),
    )
    .await;
    let message = answer["results"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("cannot verify the runtime's size"),
        "{message}"
    );
    // A malformed runtime is bad input, named.
    let nameless =
        "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: ClusterTrainingRuntime\nmetadata: {}\n";
    let (status, answer) = post(
        &p.base,
        &json!({"manifest": format!("{nameless}---\n{}", read("trainjob-torch.yaml"))}),
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["input"], "manifest");
    assert_eq!(
        answer["error"],
        "manifest#1: invalid runtime: ClusterTrainingRuntime without metadata.name"
    );
}
