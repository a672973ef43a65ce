//! `launchgate test`: the shipped example suites pass, a wrong expectation fails with a
//! readable diff, the JUnit output is JUnit XML, bad input exits 2.

mod common;

use common::{launchgate, root, text};
use quick_xml::events::Event;
use serde_json::Value;
use std::path::Path;

/// A suite in a temp dir with the built-in examples' 8-GPU job as its resource.
fn suite_dir(suite: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("resources")).unwrap();
    std::fs::copy(
        root().join("examples/policy-tests/builtin/resources/train-8-gpus.yaml"),
        dir.path().join("resources/eight.yaml"),
    )
    .unwrap();
    std::fs::copy(
        root().join("examples/policy-tests/builtin/resources/train-2-gpus.yaml"),
        dir.path().join("resources/two.yaml"),
    )
    .unwrap();
    std::fs::write(dir.path().join("launchgate-test.yaml"), suite).unwrap();
    dir
}

/// `launchgate test <suites> -o json`'s report, which must exit 0 with no test failed.
fn passing_report(suites: &str) -> Value {
    let out = launchgate(&["test", suites, "-o", "json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["failed"], 0, "{report}");
    report
}

fn path(dir: &Path) -> &str {
    dir.to_str().unwrap()
}

#[test]
fn the_example_suites_pass() {
    let report = passing_report("examples/policy-tests");
    let suites = report["suites"].as_array().unwrap();
    let names: Vec<&str> = suites.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["built-in policy", "strict queue template"]);
    // Every test of every suite judged at least one document.
    for s in suites {
        let suite: Value = serde_yaml::from_str(
            &std::fs::read_to_string(root().join(s["file"].as_str().unwrap())).unwrap(),
        )
        .unwrap();
        for t in suite["tests"].as_array().unwrap() {
            assert!(
                s["cases"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|c| c["test"] == t["name"] && c["passed"] == true),
                "{}",
                t["name"]
            );
        }
    }
    // The default table ends with the counts.
    let out = launchgate(&["test", "examples/policy-tests"]);
    assert!(out.status.success());
    let table = text(&out.stdout);
    assert!(table.starts_with("SUITE"), "{table}");
    assert!(table.contains("0 failed"), "{table}");
}

#[test]
fn a_wrong_expectation_fails_with_a_readable_diff() {
    let dir = suite_dir(
        r#"
name: wrong
tests:
  - name: eight GPUs
    resources: [resources/eight.yaml]
    expect:
      result: allowed
  - name: two GPUs
    resources: [resources/two.yaml]
    expect:
      result: allowed
      mutated: {spec: {backoffLimit: 3}}
      warnings: [deprecated]
"#,
    );
    let out = launchgate(&["test", path(dir.path())]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains(
            "FAIL wrong / eight GPUs / resources/eight.yaml (Job launch-acme-mnist-8gpu)"
        ),
        "{stdout}"
    );
    // Expected vs got, with the denial that made the difference.
    let expected_got = "  result:\n    - expected: allowed\n    + got:      denied (by the validate webhook): queue \"gpu-queue\": spec.template.spec.containers[0].resources.limits[\"nvidia.com/gpu\"]=8 exceeds maximum 4";
    assert!(stdout.contains(expected_got), "{stdout}");
    assert!(
        stdout.contains("  mutated spec.backoffLimit:\n    - expected: 3\n    + got:      0\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("  warnings:\n    - expected: a warning containing \"deprecated\"\n    + got:      no warnings\n"),
        "{stdout}"
    );
    assert!(stdout.contains("0 passed, 2 failed"), "{stdout}");
}

/// Attribute `name` of an element.
fn attr(e: &quick_xml::events::BytesStart<'_>, name: &str) -> Option<String> {
    e.attributes()
        .map(Result::unwrap)
        .find(|a| a.key.as_ref() == name)
        .map(|a| {
            a.normalized_value(quick_xml::XmlVersion::Implicit1_0)
                .unwrap()
                .into_owned()
        })
}

#[derive(Debug, Default)]
struct JUnit {
    suites: Vec<(String, usize, usize)>,
    cases: usize,
    failures: Vec<String>,
}

fn element_name(e: &quick_xml::events::BytesStart<'_>) -> String {
    e.name().as_ref().to_string()
}

/// Checks one opening element against its parent and records it.
fn visit(e: &quick_xml::events::BytesStart<'_>, parent: Option<&str>, junit: &mut JUnit) {
    match (element_name(e).as_str(), parent) {
        ("testsuites", None) => {}
        ("testsuite", Some("testsuites")) => junit.suites.push((
            attr(e, "name").unwrap(),
            attr(e, "tests").unwrap().parse().unwrap(),
            attr(e, "failures").unwrap().parse().unwrap(),
        )),
        ("testcase", Some("testsuite")) => {
            assert!(attr(e, "name").is_some() && attr(e, "classname").is_some());
            junit.cases += 1;
        }
        ("failure", Some("testcase")) => {
            assert!(attr(e, "message").is_some());
            junit.failures.push(String::new());
        }
        other => panic!("unexpected element {other:?}"),
    }
}

/// Parses JUnit XML strictly: `<testsuites>` root, `<testsuite tests failures>` holding
/// `<testcase name classname>`, failures as `<failure message>` inside a testcase.
fn parse_junit(xml: &str) -> JUnit {
    let mut reader = quick_xml::Reader::from_str(xml);
    let mut stack: Vec<String> = Vec::new();
    let mut junit = JUnit::default();
    loop {
        let in_failure = stack.last().is_some_and(|s| s == "failure");
        match reader.read_event().expect("well-formed XML") {
            Event::Start(e) => {
                visit(&e, stack.last().map(String::as_str), &mut junit);
                stack.push(element_name(&e));
            }
            Event::Empty(e) => visit(&e, stack.last().map(String::as_str), &mut junit),
            Event::Text(t) if in_failure => {
                let t = t.xml10_content().into_owned();
                junit.failures.last_mut().unwrap().push_str(&t);
            }
            Event::GeneralRef(r) if in_failure => {
                let s = match r.into_inner().as_ref() {
                    "lt" => "<",
                    "gt" => ">",
                    "amp" => "&",
                    "quot" => "\"",
                    "apos" => "'",
                    other => panic!("unknown entity {other}"),
                };
                junit.failures.last_mut().unwrap().push_str(s);
            }
            Event::End(e) => {
                let name = e.name().as_ref().to_string();
                assert_eq!(stack.pop().as_deref(), Some(name.as_str()));
            }
            Event::Eof => break,
            _ => {}
        }
    }
    assert!(stack.is_empty());
    junit
}

#[test]
fn junit_output_is_junit_xml() {
    let out = launchgate(&["test", "examples/policy-tests", "-o", "junit"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let junit = parse_junit(&text(&out.stdout));
    assert_eq!(junit.suites.len(), 2, "{junit:?}");
    assert_eq!(junit.cases, junit.suites.iter().map(|s| s.1).sum::<usize>());
    assert!(junit.failures.is_empty());

    let dir = suite_dir(
        "name: <wrong & loud>\ntests:\n  - name: eight GPUs\n    resources: [resources/eight.yaml]\n    expect: {result: allowed}\n  - name: two GPUs\n    resources: [resources/two.yaml]\n    expect: {result: allowed}\n",
    );
    let out = launchgate(&["test", path(dir.path()), "-o", "junit"]);
    assert_eq!(out.status.code(), Some(1));
    let junit = parse_junit(&text(&out.stdout));
    assert_eq!(junit.suites, [("<wrong & loud>".to_string(), 2, 1)]);
    assert_eq!(junit.cases, 2);
    assert_eq!(junit.failures.len(), 1);
    assert!(
        junit.failures[0].contains("- expected: allowed")
            && junit.failures[0].contains("exceeds maximum 4"),
        "{:?}",
        junit.failures
    );
}

#[test]
fn bad_input_exits_2_with_the_reason() {
    for (suite, reason) in [
        (
            "tests:\n  - name: t\n    resources: [resources/missing.yaml]\n    expect: {result: allowed}\n",
            "missing.yaml",
        ),
        (
            "tests:\n  - name: t\n    resources: [\"nothing/*.yaml\"]\n    expect: {result: allowed}\n",
            "matches no file",
        ),
        (
            "tests:\n  - name: t\n    resources: [resources/two.yaml]\n    expect: {result: alowed}\n",
            "alowed",
        ),
        (
            "tests:\n  - name: t\n    resource: [resources/two.yaml]\n    expect: {result: allowed}\n",
            "resource",
        ),
        (
            "config: nope.yaml\ntests:\n  - name: t\n    resources: [resources/two.yaml]\n    expect: {result: allowed}\n",
            "nope.yaml",
        ),
    ] {
        let dir = suite_dir(suite);
        let out = launchgate(&["test", path(dir.path())]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{suite}: {stderr}");
        assert!(stderr.contains(reason), "{suite}: {stderr}");
    }
    let empty = tempfile::tempdir().unwrap();
    let out = launchgate(&["test", path(empty.path())]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("launchgate-test.yaml"));
}

#[test]
fn a_suites_runtimes_size_the_trainjobs_of_every_test() {
    let dir = tempfile::tempdir().unwrap();
    let fixtures = root().join("tests/fixtures/manifests");
    std::fs::create_dir_all(dir.path().join("runtimes")).unwrap();
    std::fs::copy(
        fixtures.join("trainjob-torch.yaml"),
        dir.path().join("trainjob.yaml"),
    )
    .unwrap();
    std::fs::copy(
        fixtures.join("runtimes/torch-64x8.yaml"),
        dir.path().join("runtimes/torch-64x8.yaml"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("config.yaml"),
        "queues:\n  q:\n    limits:\n      totals: {nvidia.com/gpu: {maximum: 16}}\n",
    )
    .unwrap();
    // A small TrainJob: the same one naming a small runtime written in the suite.
    let small = std::fs::read_to_string(dir.path().join("trainjob.yaml"))
        .unwrap()
        .replace("name: torch-distributed", "name: torch-small");
    std::fs::write(dir.path().join("small.yaml"), small).unwrap();
    let suite = r#"name: trainjobs
config: config.yaml
runtimes:
  - "runtimes/*.yaml"
  - apiVersion: trainer.kubeflow.org/v1alpha1
    kind: ClusterTrainingRuntime
    metadata: {name: torch-small}
    spec:
      mlPolicy: {numNodes: 2}
      template:
        spec:
          replicatedJobs:
            - name: node
              replicas: 1
              template:
                metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
                spec:
                  template:
                    spec:
                      containers:
                        - name: node
                          image: pytorch/pytorch:2.7.1
                          resources: {limits: {nvidia.com/gpu: 4}}
tests:
  - name: the runtime's 64 nodes of 8 GPUs are over the queue's totals
    resources: [trainjob.yaml]
    expect:
      result: denied
      message: ['total nvidia.com/gpu over all pods=512 exceeds maximum 16', 'ClusterTrainingRuntime "torch-distributed"']
  - name: 2 nodes of 4 GPUs fit
    resources: [small.yaml]
    expect:
      result: allowed
"#;
    std::fs::write(dir.path().join("launchgate-test.yaml"), suite).unwrap();
    let out = launchgate(&["test", path(dir.path()), "-o", "json"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        (&report["passed"], &report["failed"]),
        (&2.into(), &0.into()),
        "{report}"
    );

    // A runtime entry that is not a runtime is bad input, named.
    let not_a_runtime = suite.replace("\"runtimes/*.yaml\"", "trainjob.yaml");
    std::fs::write(dir.path().join("launchgate-test.yaml"), not_a_runtime).unwrap();
    let out = launchgate(&["test", path(dir.path())]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr)
            .contains("trainjob.yaml: invalid runtime: not a trainer.kubeflow.org/v1alpha1"),
        "{}",
        text(&out.stderr)
    );
}

/// The gallery's queue configs (examples/gallery/*/), each with its suite: every suite passes,
/// every test of it judged a document, and docs/gallery.md shows each setup's config, suite
/// and verdicts (its blocks are held to the files and to `launchgate test`'s output by
/// tests/docs_commands.rs).
#[test]
fn the_gallery_suites_pass_and_each_is_on_its_page() {
    let report = passing_report("examples/gallery");
    let page = std::fs::read_to_string(root().join("docs/gallery.md")).unwrap();
    let mut setups: Vec<String> = std::fs::read_dir(root().join("examples/gallery"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    setups.sort();
    assert!(setups.len() >= 5, "{setups:?}");
    let suites = report["suites"].as_array().unwrap();
    assert_eq!(
        suites.len(),
        setups.len(),
        "one suite per setup: {setups:?}"
    );
    for setup in &setups {
        let dir = format!("examples/gallery/{setup}");
        for shown in [
            format!("<!-- docs-test: file {dir}/config.yaml -->"),
            format!("<!-- docs-test: file {dir}/launchgate-test.yaml -->"),
            format!("$ launchgate test {dir}\n"),
        ] {
            assert!(
                page.contains(&shown),
                "docs/gallery.md does not show {shown:?}"
            );
        }
    }
    for s in suites {
        for case in s["cases"].as_array().unwrap() {
            assert_eq!(case["passed"], true, "{case}");
        }
    }
}
