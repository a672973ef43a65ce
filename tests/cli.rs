//! The offline CLI goes through the same core as the webhook.

mod common;

use common::{
    check_config, fixture_bytes, fixture_path, launchgate, launchgate_command, manifest_json,
    manifest_path, root, run_with_stdin, start_default, synthetic, text,
};
use serde_json::Value;

#[tokio::test]
async fn cli_patch_equals_webhook_patch_for_the_same_object() {
    let srv = start_default().await;
    for name in [
        "job-demo.yaml",
        "wandb-job.yaml",
        "vcjob.yaml",
        "ptjob.yaml",
        "pod-worker-0.yaml",
        "lws.yaml",
    ] {
        let out = launchgate(&["mutate", "-f", &manifest_path(name), "--patch"]);
        assert!(out.status.success(), "{name}: {}", text(&out.stderr));
        let cli_patch: Value = serde_json::from_str(&text(&out.stdout)).unwrap();

        // The same object as an AdmissionReview, through the real server.
        let request = synthetic(manifest_json(name));
        let body = serde_json::to_vec(&request.to_review_json()).unwrap();
        let review: Value = srv.post_json("/mutate", body).await;
        let server_patch: Value = match common::decode_patch(&review["response"]) {
            Some(patch) => serde_json::to_value(patch).unwrap(),
            None => Value::Array(vec![]),
        };
        assert_eq!(cli_patch, server_patch, "{name}");
    }
}

#[tokio::test]
async fn cli_review_output_equals_server_answer_for_a_recorded_review() {
    let srv = start_default().await;
    for name in [
        "create-job-demo.json",
        "create-pod-wandb-job-run42-worker-0.json",
        "create-pod-kaniko-build-abc.json",
    ] {
        let out = launchgate(&["mutate", "-f", &fixture_path(name), "--review"]);
        assert!(out.status.success(), "{name}: {}", text(&out.stderr));
        let cli: Value = serde_json::from_str(&text(&out.stdout)).unwrap();
        let server: Value = srv.post_json("/mutate", fixture_bytes(name)).await;
        assert_eq!(cli, server, "{name}");
    }
}

#[test]
fn mutate_prints_the_mutated_object_as_yaml() {
    let out = launchgate(&["mutate", "-f", &manifest_path("job-demo.yaml")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let obj: Value = serde_yaml::from_str(&text(&out.stdout)).unwrap();
    assert_eq!(obj["spec"]["backoffLimit"], 0);
    assert_eq!(obj["spec"]["ttlSecondsAfterFinished"], 60);
    assert_eq!(
        obj["spec"]["template"]["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"],
        false
    );
}

/// A LeaderWorkerSet's leader and worker templates are both hardened, and it is given no
/// deadline: it runs until it is deleted.
#[test]
fn mutate_hardens_both_templates_of_a_leaderworkerset_and_writes_no_deadline() {
    let out = launchgate(&["mutate", "-f", &manifest_path("lws.yaml")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let obj: Value = serde_yaml::from_str(&text(&out.stdout)).unwrap();
    for template in ["leaderTemplate", "workerTemplate"] {
        let spec = &obj["spec"]["leaderWorkerTemplate"][template]["spec"];
        assert_eq!(
            spec["containers"][0]["securityContext"]["allowPrivilegeEscalation"], false,
            "{template}: {spec}"
        );
        assert!(spec.get("activeDeadlineSeconds").is_none(), "{spec}");
    }
    assert!(!text(&out.stdout).contains("activeDeadlineSeconds"));
}

#[test]
fn output_into_a_closed_pipe_ends_the_run_quietly() {
    // `launchgate mutate -f job.yaml | head -0`: the reader is gone before anything is written.
    let mut child = launchgate_command()
        .args(["mutate", "-f", &manifest_path("job-demo.yaml")])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("launchgate starts");
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn mutate_reads_stdin_and_multi_document_yaml() {
    let a = std::fs::read_to_string(manifest_path("job-demo.yaml")).unwrap();
    let b = std::fs::read_to_string(manifest_path("kaniko-pod.yaml")).unwrap();
    let out = run_with_stdin(
        launchgate_command().args(["mutate", "-f", "-", "--patch"]),
        format!("{a}\n---\n{b}").as_bytes(),
    );
    assert!(out.status.success());
    let text = text(&out.stdout);
    let patches: Vec<Value> = serde_json::Deserializer::from_str(&text)
        .into_iter::<Value>()
        .map(Result::unwrap)
        .collect();
    assert_eq!(patches.len(), 2);
    assert!(!patches[0].as_array().unwrap().is_empty());
    assert_eq!(
        patches[1],
        Value::Array(vec![]),
        "the kaniko build pod is never touched"
    );
}

#[test]
fn check_config_names_a_misspelled_key() {
    let out = check_config(
        "defaultQueue: q\nqueues:\n  q:\n    jobDefaults:\n      ttlSecondsAfterFinish: 30\n",
    );
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("ttlSecondsAfterFinish") && err.contains("queues.q.jobDefaults"),
        "{err}"
    );
}

#[test]
fn check_config_reads_stdin_like_every_other_command() {
    let default = launchgate(&["print-default-config"]);
    let out = run_with_stdin(
        launchgate_command().args(["check-config", "-"]),
        &default.stdout,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("<stdin>: ok"),
        "{}",
        text(&out.stdout)
    );
    let out = run_with_stdin(
        launchgate_command().args(["check-config", "-"]),
        b"queues: {q: {jobDefaults: {ttl: 1}}}\n",
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).starts_with("<stdin>: invalid config"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn check_config_says_which_controllers_it_trusts_and_why() {
    let config = b"match:\n  podCreators:\n    RayJob: [system:serviceaccount:ray-system:kuberay-operator]\n    RayCluster: [system:serviceaccount:default:kuberay-operator]\nqueues: {q: {}}\n";
    let out = run_with_stdin(launchgate_command().args(["check-config", "-"]), config);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "<stdin>: ok (1 queue(s))", "{stdout}");
    for line in [
        "  RayJob: system:serviceaccount:ray-system:kuberay-operator (match.podCreators.RayJob)",
        "  RayCluster: system:serviceaccount:default:kuberay-operator (match.podCreators.RayCluster)",
        "  JobSet: system:serviceaccount:jobset-system:jobset-controller-manager (built in: the upstream controller's identity; match.podCreators.JobSet replaces it)",
    ] {
        assert!(lines.contains(&line), "{line:?} in {stdout}");
    }
    // The identity in `default` is trusted as configured, with a warning that says why not to.
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("<stdin>: warning: match.podCreators.RayCluster[0]: system:serviceaccount:default:kuberay-operator is a service account of namespace \"default\", which tenants commonly hold"),
        "{stderr}"
    );
    // Left out, KubeRay's kinds trust no one: there is no built-in identity to fall back on.
    let out = run_with_stdin(
        launchgate_command().args(["check-config", "-"]),
        b"queues: {q: {}}\n",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("\n  RayJob: no one (no built-in identity: name the controller's in match.podCreators.RayJob; "),
        "{stdout}"
    );
    assert!(text(&out.stderr).is_empty(), "{}", text(&out.stderr));
}

#[test]
fn completions_are_generated_for_each_shell() {
    for (shell, marker) in [
        ("bash", "_launchgate()"),
        ("zsh", "#compdef launchgate"),
        ("fish", "complete -c launchgate"),
    ] {
        let out = launchgate(&["completion", shell]);
        assert!(out.status.success(), "{shell}: {}", text(&out.stderr));
        let script = text(&out.stdout);
        assert!(script.contains(marker), "{shell}: {script}");
        assert!(
            script.contains("check-config") && script.contains("import-queue"),
            "{shell}"
        );
    }
    assert!(!launchgate(&["completion", "tcsh"]).status.success());
}

#[test]
fn validate_says_skipped_and_why_for_what_it_does_not_judge() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("objects.yaml");
    std::fs::write(
        &path,
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: default}\nspec: {}\n---\napiVersion: batch/v1\nkind: Job\nmetadata: {name: plain, namespace: default}\nspec: {template: {spec: {containers: [{name: c, image: busybox}]}}}\n",
    )
    .unwrap();
    let out = launchgate(&["validate", "-f", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("SKIPPED Deployment web (not a kind launchgate judges)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("SKIPPED Job plain (not a launch workload"),
        "{stdout}"
    );
    assert!(!stdout.contains("ALLOWED"), "{stdout}");
}

#[test]
fn default_config_round_trips_through_check_config() {
    let out = launchgate(&["print-default-config"]);
    assert!(out.status.success());
    let out = check_config(&text(&out.stdout));
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn certs_writes_a_ca_and_a_serving_pair() {
    let dir = tempfile::tempdir().unwrap();
    let out = launchgate(&[
        "certs",
        "--dns",
        "launchgate.launchgate.svc",
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for f in ["ca.crt", "tls.crt", "tls.key"] {
        assert!(dir.path().join(f).exists(), "{f}");
    }
}

#[test]
fn unreadable_input_is_a_clear_error() {
    let out = launchgate(&["mutate", "-f", "does-not-exist.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("does-not-exist.yaml"));
}

/// The strict example queue: the template's fixed values (backoffLimit 0, restartPolicy Never)
/// must hold for every workload.
const STRICT_CONFIG: &str = "examples/policy-tests/strict-queue/config.yaml";
const API_DEFAULT_JOB: &str =
    "examples/policy-tests/strict-queue/resources/api-default-backoff.yaml";

#[test]
fn validate_judges_the_object_after_launchgates_mutation_like_the_cluster() {
    // The Job arrives with the API server's default backoffLimit 6 and no restartPolicy; the
    // validating webhook alone would reject both under `strict: true`, but in the cluster it
    // sees the object after launchgate's mutation (backoffLimit 0, restartPolicy Never).
    let out = launchgate(&["validate", "-f", API_DEFAULT_JOB, "--config", STRICT_CONFIG]);
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(
        text(&out.stdout).starts_with("ALLOWED Job run-api-default"),
        "{}",
        text(&out.stdout)
    );

    // Validation alone, on the object as submitted, would deny it.
    let object: Value =
        serde_yaml::from_str(&std::fs::read_to_string(root().join(API_DEFAULT_JOB)).unwrap())
            .unwrap();
    let policy = launchgate::Policy::from_yaml(
        &std::fs::read_to_string(root().join(STRICT_CONFIG)).unwrap(),
    )
    .unwrap();
    let request = synthetic(object);
    let raw = launchgate::review::decide(
        &policy,
        launchgate::Endpoint::Validate,
        &request,
        &launchgate::cluster::NoCluster,
    );
    assert!(
        !raw.response.allowed,
        "validation alone denies the unmutated object"
    );
}

#[test]
fn validate_reads_several_files_directories_and_stdin() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("sub")).unwrap();
    std::fs::copy(
        manifest_path("job-demo.yaml"),
        dir.path().join("sub/a.yaml"),
    )
    .unwrap();
    std::fs::copy(manifest_path("kaniko-pod.yaml"), dir.path().join("b.yml")).unwrap();
    std::fs::write(dir.path().join("notes.txt"), "not a manifest").unwrap();
    let mut cmd = launchgate_command();
    cmd.args([
        "validate",
        "-f",
        dir.path().to_str().unwrap(),
        "-f",
        "-",
        "-f",
    ])
    .arg(manifest_path("wandb-job.yaml"))
    .args(["-o", "json"]);
    let vcjob = std::fs::read_to_string(manifest_path("vcjob.yaml")).unwrap();
    let out = run_with_stdin(&mut cmd, vcjob.as_bytes());
    assert_eq!(out.status.code(), Some(1), "the 8-GPU job is denied");
    let verdicts: Value = serde_json::from_str(&text(&out.stdout)).unwrap();
    let got: Vec<(String, bool, bool)> = verdicts
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            let source = v["source"].as_str().unwrap();
            let short = source.rsplit('/').next().unwrap().to_string();
            (
                short,
                v["allowed"].as_bool().unwrap(),
                v["skipped"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("b.yml".to_string(), true, true),
            ("a.yaml".to_string(), true, false),
            ("-".to_string(), true, false),
            ("wandb-job.yaml".to_string(), false, false),
        ]
    );
    let denied = &verdicts[3];
    assert_eq!(denied["deniedBy"], "validate");
    assert!(
        denied["message"]
            .as_str()
            .unwrap()
            .contains("exceeds maximum 4")
    );
    assert_eq!(denied["queue"], "gpu-queue");
    // The rules that deny, and each violation with its rule id and where it is.
    assert_eq!(denied["rules"], serde_json::json!(["limits.variables"]));
    assert_eq!(denied["violations"][0]["rule"], "limits.variables");
    assert_eq!(denied["violations"][0]["effect"], "deny");

    // YAML, same content.
    let out = launchgate(&[
        "validate",
        "-f",
        &manifest_path("job-demo.yaml"),
        "-o",
        "yaml",
    ]);
    assert!(out.status.success());
    let verdicts: Value = serde_yaml::from_str(&text(&out.stdout)).unwrap();
    assert_eq!(verdicts[0]["allowed"], true);
    // Each warning with the id of its rule or notice.
    assert!(
        verdicts[0]["warnings"][0]["message"]
            .as_str()
            .unwrap()
            .contains("k8s-test")
    );
    assert_eq!(verdicts[0]["warnings"][0]["rule"], "queue.unknown");
}

#[test]
fn mutate_prints_json_and_a_list_for_several_objects() {
    let (job_demo, vcjob) = (manifest_path("job-demo.yaml"), manifest_path("vcjob.yaml"));
    let out = launchgate(&["mutate", "-f", &job_demo, "-o", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let obj: Value = serde_json::from_str(&text(&out.stdout)).unwrap();
    assert_eq!(obj["kind"], "Job");
    assert_eq!(obj["spec"]["backoffLimit"], 0);

    let out = launchgate(&["mutate", "-f", &job_demo, "-f", &vcjob, "-o", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let list: Value = serde_json::from_str(&text(&out.stdout)).unwrap();
    assert_eq!(list["kind"], "List");
    let kinds: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["demo", "wandb-job-run42"]);

    // A directory: every manifest in it, as multi-document YAML.
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(&job_demo, dir.path().join("1.yaml")).unwrap();
    std::fs::copy(manifest_path("ptjob.yaml"), dir.path().join("2.yaml")).unwrap();
    let out = launchgate(&["mutate", "-f", dir.path().to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let docs: Vec<Value> = serde_yaml::Deserializer::from_str(&text(&out.stdout))
        .map(|d| <Value as serde::Deserialize>::deserialize(d).unwrap())
        .collect();
    assert_eq!(docs.len(), 2);
    assert_eq!(docs[1]["kind"], "PyTorchJob");

    // --patch as YAML.
    let out = launchgate(&["mutate", "-f", &job_demo, "--patch", "-o", "yaml"]);
    assert!(out.status.success());
    let patch: Value = serde_yaml::from_str(&text(&out.stdout)).unwrap();
    assert!(
        patch
            .as_array()
            .unwrap()
            .iter()
            .any(|op| op["path"] == "/spec/backoffLimit")
    );
}

/// `serve` with its logs going to a pipe (as in a container): plain text, no ANSI colour
/// codes, and the admin port announced.
#[test]
fn serve_logs_to_a_pipe_without_colour_codes() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let mut child = launchgate_command()
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ])
        .arg("--dev-cert-dir")
        .arg(dir.path())
        .env("LAUNCHGATE_LOG_FORMAT", "text")
        .env_remove("NO_COLOR")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("launchgate runs");
    let stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut seen = Vec::new();
        for line in BufReader::new(stderr).lines() {
            let line = line.unwrap();
            let done = line.contains("launchgate serving HTTPS");
            seen.push(line);
            if done {
                break;
            }
        }
        seen
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !reader.is_finished() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    let lines = reader.join().unwrap();
    let text = lines.join("\n");
    assert!(text.contains("launchgate serving HTTPS"), "{text}");
    assert!(text.contains("admin_addr=Some(127.0.0.1:"), "{text}");
    assert!(
        !text.contains('\u{1b}'),
        "ANSI escape codes in piped logs:\n{text:?}"
    );
}

/// docs/native-policies.md carries the report of the built-in example policy exactly as
/// `compile-native --report` prints it.
#[test]
fn the_native_policies_page_shows_the_current_report() {
    let out = launchgate(&["compile-native", "--report"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report = text(&out.stdout);
    let page = std::fs::read_to_string(root().join("docs/native-policies.md")).unwrap();
    let (_, rest) = page
        .split_once("<!-- report:begin -->\n")
        .expect("report:begin");
    let (block, _) = rest.split_once("<!-- report:end -->").expect("report:end");
    let shown = block
        .trim()
        .strip_prefix("```markdown\n")
        .and_then(|b| b.strip_suffix("```"))
        .expect("the report in a ```markdown block");
    assert_eq!(
        shown.trim(),
        report.trim(),
        "docs/native-policies.md: paste the output of `launchgate compile-native --report`"
    );
}

/// `test --native` judges with the policy the native admission policies implement: the
/// example suites' cases that need the webhook (the shared cache, a `strict` template) fail
/// there and say what differs; the others pass.
#[test]
fn test_native_judges_as_the_native_policies() {
    let suites = root().join("examples/policy-tests");
    let suites = suites.to_str().unwrap();
    let out = launchgate(&["test", suites, "-o", "json"]);
    assert!(out.status.success(), "{}", text(&out.stdout));
    let out = launchgate(&["test", suites, "--native", "-o", "json"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    let failed: Vec<(String, String)> = json["suites"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["cases"].as_array().unwrap())
        .filter(|c| c["passed"] == false)
        .map(|c| {
            (
                c["test"].as_str().unwrap().to_string(),
                c["mismatches"].to_string(),
            )
        })
        .collect();
    let names: Vec<&str> = failed.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "a W&B Launch job within the queue limits gets safe defaults",
            "every replica of a PyTorchJob gets the cache and the hardening",
            "a backoffLimit the author chose to keep breaks the strict contract",
        ],
        "{failed:#?}"
    );
    assert!(failed[0].1.contains("volumeMounts") && failed[0].1.contains("launchgate-cache"));
    assert!(failed[2].1.contains("(strict)"), "{failed:?}");
}

#[test]
fn serve_refuses_a_webhook_url_with_credentials_without_printing_them() {
    let out = launchgate(&[
        "serve",
        "--listen=127.0.0.1:0",
        "--webhook-url",
        "https://u:p@127.0.0.1:1/?token=s",
    ]);
    assert!(!out.status.success(), "serve must not start");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        stderr.contains("--webhook-url") && stderr.contains("user information"),
        "{stderr}"
    );
    for secret in ["p@", "token=s"] {
        assert!(
            !stderr.contains(secret) && !stdout.contains(secret),
            "{secret} printed:\n{stdout}\n{stderr}"
        );
    }
}

/// A queue whose totals bound a TrainJob's size: 16 GPUs.
const TRAINJOB_QUEUE: &str =
    "queues:\n  q:\n    limits:\n      totals: {nvidia.com/gpu: {maximum: 16}}\n";

/// What the webhook with cluster lookups says of `object` when `runtime` is in the cluster:
/// the mutating webhook's patch, then the validating webhook on the mutated object.
fn webhook_with_runtime(
    policy: &launchgate::policy::Policy,
    object: Value,
    runtime: Value,
) -> (Value, launchgate::admission::AdmissionResponse) {
    use launchgate::review::{Endpoint, decide};
    let cluster = launchgate::cluster::StaticCluster::default().with_training_runtime(runtime);
    let request = common::synthetic(object);
    let (object, mutation) = common::mutated(policy, &request, &cluster);
    let validated = decide(
        policy,
        Endpoint::Validate,
        &common::synthetic(object),
        &cluster,
    );
    (
        serde_json::to_value(&mutation.patch).unwrap(),
        validated.response,
    )
}

#[test]
fn a_trainjob_is_sized_by_the_runtime_given_beside_it_as_the_webhook_sizes_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, TRAINJOB_QUEUE).unwrap();
    let config = config.to_str().unwrap();
    let policy = launchgate::policy::Policy::from_yaml(TRAINJOB_QUEUE).unwrap();
    let trainjob = manifest_path("trainjob-torch.yaml");
    for (runtime, allowed) in [
        ("runtimes/torch-64x8.yaml", false),
        ("runtimes/torch-2x4.yaml", true),
    ] {
        let (patch, webhook) = webhook_with_runtime(
            &policy,
            manifest_json("trainjob-torch.yaml"),
            manifest_json(runtime),
        );
        assert_eq!(webhook.allowed, allowed, "{runtime}: {:?}", webhook.status);
        let given = [
            "--config",
            config,
            "-f",
            &trainjob,
            "-f",
            &manifest_path(runtime),
        ];

        let out = launchgate(&[&["validate", "-o", "json"][..], &given[..]].concat());
        assert_eq!(
            out.status.code(),
            Some(if allowed { 0 } else { 1 }),
            "{runtime}"
        );
        let verdicts: Value = serde_json::from_str(&text(&out.stdout)).unwrap();
        let verdicts = verdicts.as_array().unwrap();
        assert_eq!(verdicts.len(), 1, "the runtime is not judged: {verdicts:?}");
        assert_eq!(verdicts[0]["kind"], "TrainJob");
        assert_eq!(verdicts[0]["allowed"], allowed, "{runtime}: {verdicts:?}");
        let message = webhook.status.as_ref().map_or("", |s| s.message.as_str());
        assert_eq!(verdicts[0]["message"], message, "{runtime}");
        if !allowed {
            assert!(
                message.contains("total nvidia.com/gpu over all pods=512 exceeds maximum 16")
                    && message.contains(r#"ClusterTrainingRuntime "torch-distributed""#),
                "{message}"
            );
        }

        let out = launchgate(&[&["mutate", "--patch"][..], &given[..]].concat());
        assert!(out.status.success(), "{runtime}: {}", text(&out.stderr));
        let cli_patch: Value = serde_json::from_str(&text(&out.stdout)).unwrap();
        assert_eq!(cli_patch, patch, "{runtime}");
    }

    // Without the runtime, offline cannot size it: the queue's unverifiableRuntime decides.
    let out = launchgate(&["validate", "--config", config, "-f", &trainjob]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stdout).contains("cannot verify the runtime's size"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn runtimes_in_one_multi_document_input_take_the_clis_namespace() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, TRAINJOB_QUEUE).unwrap();
    // A namespaced TrainingRuntime without a namespace, beside a TrainJob that names it.
    let runtime = std::fs::read_to_string(manifest_path("runtimes/torch-64x8.yaml"))
        .unwrap()
        .replace("kind: ClusterTrainingRuntime", "kind: TrainingRuntime");
    let trainjob = std::fs::read_to_string(manifest_path("trainjob-torch.yaml"))
        .unwrap()
        .replace(
            "name: torch-distributed",
            "name: torch-distributed\n    kind: TrainingRuntime",
        )
        .replace("  namespace: wandb\n", "");
    let both = format!("{runtime}---\n{trainjob}");
    let validate = |namespace: &[&str]| {
        let args = [
            &["validate", "--config", config.to_str().unwrap(), "-f", "-"][..],
            namespace,
        ]
        .concat();
        run_with_stdin(launchgate_command().args(args), both.as_bytes())
    };
    // Both in `default`, or both in the namespace -n gives: the runtime sizes the TrainJob.
    for namespace in [&[][..], &["-n", "wandb"][..]] {
        let out = validate(namespace);
        let stdout = text(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
        assert!(stdout.starts_with("DENIED TrainJob run:"), "{stdout}");
        assert!(
            stdout.contains(
                r#"TrainingRuntime "torch-distributed" replicatedJobs[0] (node): 64 × 8"#
            ),
            "{stdout}"
        );
    }
}

#[test]
fn a_malformed_runtime_is_an_error_naming_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("runtime.yaml");
    std::fs::write(
        &bad,
        "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: ClusterTrainingRuntime\nmetadata: {}\nspec: {}\n",
    )
    .unwrap();
    let bad = bad.to_str().unwrap();
    let out = launchgate(&[
        "validate",
        "-f",
        &manifest_path("trainjob-torch.yaml"),
        "-f",
        bad,
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr).trim(),
        format!("launchgate: {bad}: invalid runtime: ClusterTrainingRuntime without metadata.name")
    );
    // Runtimes alone: nothing to judge.
    let out = launchgate(&["validate", "-f", &manifest_path("runtimes/torch-2x4.yaml")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("no workload to judge"),
        "{}",
        text(&out.stderr)
    );
}

/// The DRA claim templates given among the `-f` documents count a Job's GPUs offline as the
/// server's cluster lookups count them; without them the claims cannot be counted.
#[test]
fn a_jobs_dra_claims_are_counted_from_the_templates_given_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("job.yaml");
    std::fs::write(
        &job,
        r#"apiVersion: batch/v1
kind: Job
metadata: {name: dra, labels: {wandb.ai/monitor: "true"}}
spec:
  parallelism: 2
  completions: 2
  template:
    spec:
      restartPolicy: Never
      resourceClaims: [{name: gpus, resourceClaimTemplateName: eight-gpus}]
      containers:
        - {name: main, image: busybox, resources: {claims: [{name: gpus}]}}
"#,
    )
    .unwrap();
    let template = dir.path().join("template.yaml");
    std::fs::write(
        &template,
        r#"apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: eight-gpus}
spec:
  spec:
    devices:
      requests:
        - {name: gpu, exactly: {deviceClassName: gpu.nvidia.com, count: 8}}
"#,
    )
    .unwrap();
    let (job, template) = (job.to_str().unwrap(), template.to_str().unwrap());
    let out = launchgate(&["validate", "-f", job, "-f", template]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let shown = text(&out.stdout);
    assert!(
        shown.contains(r#"asks for 8 GPUs (claim "gpus" (ResourceClaimTemplate eight-gpus): 8 × gpu.nvidia.com (8 GPUs)), exceeds maximum 4 (variable "gpus""#),
        "{shown}"
    );
    // The template is no workload to judge.
    assert!(
        !shown.contains("ResourceClaimTemplate eight-gpus:"),
        "{shown}"
    );
    let out = launchgate(&["validate", "-f", job]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stdout)
            .contains(r#"claim "gpus" (ResourceClaimTemplate eight-gpus) cannot be read"#),
        "{}",
        text(&out.stdout)
    );
}

/// `check-config --native-policy-slots=N` refuses a config with more queues than N, as `serve
/// --native-policies` refuses it (read from `LAUNCHGATE_NATIVE_POLICY_SLOTS` too, as in a
/// native or hybrid pod); without it, a config over the default 16 slots is valid for the
/// webhook and only warned about.
#[test]
fn check_config_refuses_more_queues_than_the_native_policy_slots() {
    let queues = |n: usize| {
        let mut config = String::from("queues:\n");
        for i in 0..n {
            config.push_str(&format!("  q{i}: {{}}\n"));
        }
        config
    };
    let three = queues(3);
    let out = run_with_stdin(
        launchgate_command().args(["check-config", "-", "--native-policy-slots=2"]),
        three.as_bytes(),
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("3 queues") && stderr.contains("2 native policy slots"),
        "{stderr}"
    );
    let out = run_with_stdin(
        launchgate_command()
            .args(["check-config", "-"])
            .env("LAUNCHGATE_NATIVE_POLICY_SLOTS", "2"),
        three.as_bytes(),
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let out = run_with_stdin(
        launchgate_command().args(["check-config", "-", "--native-policy-slots=3"]),
        three.as_bytes(),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("native admission policies: 3 of 3 slots"),
        "{}",
        text(&out.stdout)
    );
    let many = queues(17);
    let out = run_with_stdin(
        launchgate_command().args(["check-config", "-"]),
        many.as_bytes(),
    );
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning") && stderr.contains("17 queues, more than the 16"),
        "{stderr}"
    );
}

/// `compile-native --dormant-slots=N --policy-set=SET` prints the set's objects dormant — what
/// the chart creates, for an admin to create once where `serve --native-policies` runs without
/// the chart.
#[test]
fn compile_native_prints_a_dormant_set_for_an_admin_to_create() {
    let out = launchgate(&["compile-native", "--dormant-slots=2", "--policy-set=lg"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let docs: Vec<Value> = serde_yaml::Deserializer::from_str(&text(&out.stdout))
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    assert_eq!(docs, launchgate::native::dormant_set("lg", 2));
    assert_eq!(docs.len(), 8);
    let out = launchgate(&[
        "compile-native",
        "--dormant-slots=2",
        "--policy-set=lg",
        "-o",
        "json",
    ]);
    let list: Value = serde_json::from_str(&text(&out.stdout)).unwrap();
    assert_eq!(
        list["items"],
        Value::Array(launchgate::native::dormant_set("lg", 2))
    );
    // The set must be named.
    let out = launchgate(&["compile-native", "--dormant-slots=2"]);
    assert!(!out.status.success());
}

/// A LaunchQueue given beside the workloads is a queue of the config, as the server serves it:
/// the same verdict offline as in the cluster; one that does not hold is named with its key
/// path, and a LaunchQueue alone is nothing to judge.
#[test]
fn validate_reads_launchqueues_beside_the_workloads() {
    let example = |name: &str| root().join("examples/launchqueues").join(name);
    let lq = example("lq-small.yaml");
    let lq = lq.to_str().unwrap();
    for (job, verdict, code) in [
        ("job-1gpu.yaml", "ALLOWED Job train-1gpu", 0),
        ("job-2gpu.yaml", "DENIED Job train-2gpu", 1),
    ] {
        let out = launchgate(&["validate", "-f", lq, "-f", example(job).to_str().unwrap()]);
        let stdout = text(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{stdout}{}",
            text(&out.stderr)
        );
        assert!(stdout.contains(verdict), "{stdout}");
        if code == 1 {
            assert!(
                stdout.contains("queue \"lq-small\"") && stdout.contains("exceeds maximum 1"),
                "{stdout}"
            );
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        std::fs::read_to_string(example("lq-small.yaml"))
            .unwrap()
            .replace("maximum: 1", "maximum: lots"),
    )
    .unwrap();
    let out = launchgate(&[
        "validate",
        "-f",
        bad.to_str().unwrap(),
        "-f",
        example("job-1gpu.yaml").to_str().unwrap(),
    ]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("the LaunchQueue does not hold as a queue")
            && stderr.contains("spec.limits.fields"),
        "{stderr}"
    );
    let out = launchgate(&["validate", "-f", lq]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("no workload to judge"),
        "{}",
        text(&out.stderr)
    );
}
