//! The review's unit tests: the recorded patch of a large object, the observer and bounded
//! warnings, subresources, Kueue labels.

use super::answer::bounded_warnings;
use super::*;
use crate::admission::{AdmissionRequest, Operation};
use crate::policy::EXEMPTED_BY_ANNOTATION;

mod tests {
    #[test]
    fn a_large_objects_recorded_patch_is_its_diff() {
        use base64::Engine;
        let body = std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/admission/create-pod-launch-acme-mnist-mzxkz.json"),
        )
        .unwrap();
        let mut review: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let containers = &mut review["request"]["object"]["spec"]["containers"];
        let first = containers[0].clone();
        for i in 0..200 {
            let mut c = first.clone();
            c["name"] = serde_json::json!(format!("worker-{i}"));
            containers.as_array_mut().unwrap().push(c);
        }
        let body = serde_json::to_vec(&review).unwrap();
        assert!(body.len() >= 64 << 10, "{}", body.len());
        let policy = crate::Policy::embedded_default();
        let cluster = &crate::cluster::NoCluster;
        let answer = super::review(&policy, super::Endpoint::Mutate, &body, cluster).unwrap();
        let response: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
        let b64 = response["response"]["patch"].as_str().expect("patched");
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap();
        let recorded: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
        let request = super::parse_request(&body).unwrap();
        let mut mutated = request.object.clone().unwrap();
        json_patch::patch(&mut mutated, &recorded).unwrap();
        let original = request.object.as_ref().unwrap();
        assert_eq!(recorded, crate::patch::diff::diff_tree(original, &mutated));
        assert!(recorded.0.len() > 200, "every container was mutated");
    }
}

mod observer_tests {
    use super::*;

    #[test]
    fn warnings_are_bounded() {
        let long = Warning::new(rules::CACHE_MOUNT_TAKEN, "x".repeat(1000));
        let w = bounded_warnings(vec![long; 40]);
        assert!(
            w.iter()
                .all(|w| w.message.chars().count() <= crate::admission::MAX_WARNING_CHARS + 40)
        );
        assert!(
            w.iter().map(|w| w.message.chars().count()).sum::<usize>()
                <= crate::admission::MAX_WARNINGS_TOTAL_CHARS + 64
        );
        assert_eq!(w[0].rule, "cache.mountTaken");
        assert_eq!(w.last().unwrap().rule, "server.warningsOmitted");
    }
    use crate::cluster::NoCluster;

    #[derive(Default)]
    struct Heard {
        phases: Vec<Phase>,
        kind: Option<String>,
    }

    impl Observer for Heard {
        fn phase(&mut self, phase: Phase) {
            self.phases.push(phase);
        }
        fn request(&mut self, request: &AdmissionRequest) {
            self.kind = Some(request.kind.kind.clone());
        }
    }

    fn fixture(name: &str) -> Vec<u8> {
        std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/admission")
                .join(name),
        )
        .unwrap()
    }

    fn heard(endpoint: Endpoint, body: &[u8]) -> (Heard, Result<ReviewOutcome, RequestError>) {
        let policy = Policy::embedded_default();
        let mut heard = Heard::default();
        let outcome = review_observed(&policy, endpoint, body, &NoCluster, &mut heard);
        (heard, outcome)
    }

    #[test]
    fn a_launch_workload_goes_through_every_phase_of_its_endpoint() {
        use Phase::*;
        let body = fixture("create-job-launch-acme-mnist.json");
        let (mutate, outcome) = heard(Endpoint::Mutate, &body);
        assert_eq!(mutate.phases, [Parse, Policy, Mutate, Serialise]);
        assert_eq!(mutate.kind.as_deref(), Some("Job"));
        let outcome = outcome.unwrap();
        assert_eq!(outcome.summary.skipped, None);
        // The same answer as without an observer.
        let plain = review(
            &crate::policy::Policy::embedded_default(),
            Endpoint::Mutate,
            &body,
            &NoCluster,
        )
        .unwrap();
        assert_eq!(outcome.body, plain.body);
        let (validate, _) = heard(Endpoint::Validate, &body);
        assert_eq!(validate.phases, [Parse, Policy, Validate, Serialise]);
    }

    #[test]
    fn a_skipped_request_has_no_rules_phase_and_says_why() {
        use Phase::*;
        let (heard, outcome) = heard(Endpoint::Mutate, &fixture("create-pod-demo.json"));
        let summary = outcome.unwrap().summary;
        assert_eq!(summary.outcome, Outcome::Skipped);
        assert_eq!(summary.skipped, Some("not-launch"));
        assert_eq!(heard.phases, [Parse, Policy, Serialise]);
    }

    #[test]
    fn a_body_that_is_no_review_ends_in_the_parse_phase() {
        let (heard, outcome) = heard(Endpoint::Validate, b"{\"kind\": 1}");
        assert!(outcome.is_err());
        assert_eq!(heard.phases, [Phase::Parse]);
        assert_eq!(heard.kind, None);
    }
}

mod subresource_tests {
    use super::*;
    use crate::cluster::NoCluster;
    use serde_json::json;

    fn scale_review(old: i64, new: i64) -> Vec<u8> {
        serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u", "kind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
                "resource": {"group": "kubeflow.org", "version": "v1", "resource": "pytorchjobs"},
                "subResource": "scale", "name": "ddp", "namespace": "wandb", "operation": "UPDATE",
                "object": {"apiVersion": "autoscaling/v1", "kind": "Scale",
                    "metadata": {"name": "ddp", "namespace": "wandb"}, "spec": {"replicas": new}},
                "oldObject": {"apiVersion": "autoscaling/v1", "kind": "Scale",
                    "metadata": {"name": "ddp", "namespace": "wandb"}, "spec": {"replicas": old}},
                "userInfo": {"username": "alice"}}}))
        .unwrap()
    }

    #[test]
    fn a_jobsets_job_from_its_controller_is_a_child_and_from_anyone_else_a_workload() {
        use crate::cluster::NoCluster;
        let policy = Policy::from_yaml(
            "defaultQueue: q\nqueues:\n  q:\n    pytorch: {indexedJobs: true}\n    kueue: {localQueue: team-a}\n    limits: {totals: {nvidia.com/gpu: {maximum: 4}}}\n",
        )
        .unwrap();
        let job = json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "ddp-workers-0", "namespace": "wandb",
                "labels": {"jobset.sigs.k8s.io/jobset-uid": "js-1", "wandb.ai/monitor": "true"},
                "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                    "name": "ddp", "uid": "js-1", "controller": true}]},
            "spec": {"backoffLimit": 6, "completionMode": "Indexed", "completions": 4, "parallelism": 4,
                "template": {"spec": {"restartPolicy": "OnFailure", "subdomain": "ddp",
                    "containers": [{"name": "t", "resources": {"limits": {"nvidia.com/gpu": 2}}}]}}}});
        let ask = |endpoint: Endpoint, user: &str| {
            let mut request =
                AdmissionRequest::synthetic_create(job.clone(), Some("wandb")).unwrap();
            request.user_info = Some(json!({"username": user}));
            decide(&policy, endpoint, &request, &NoCluster)
        };
        let paths = |d: &Decision| -> Vec<String> {
            d.patch
                .0
                .iter()
                .map(|op| {
                    serde_json::to_value(op).unwrap()["path"]
                        .as_str()
                        .unwrap()
                        .to_string()
                })
                .collect()
        };
        let jobset = "system:serviceaccount:jobset-system:jobset-controller-manager";
        // From JobSet's controller: hardened like any pod template, no Job defaults, no wiring
        // (the JobSet's own), no Kueue label (Kueue admits the JobSet); per-pod rules only.
        let child = ask(Endpoint::Mutate, jobset);
        let touched = paths(&child);
        assert!(
            touched.iter().all(|p| !p.starts_with("/spec/backoffLimit")),
            "{touched:?}"
        );
        assert!(
            !serde_json::to_string(&child.patch)
                .unwrap()
                .contains("MASTER_ADDR")
        );
        assert!(
            !serde_json::to_string(&child.patch)
                .unwrap()
                .contains("kueue.x-k8s.io")
        );
        assert!(
            touched.iter().any(|p| p.contains("securityContext")),
            "{touched:?}"
        );
        assert!(
            ask(Endpoint::Validate, jobset).response.allowed,
            "totals are the JobSet's rule"
        );
        // The same Job from a user: a workload of its own, on every rule.
        let user = ask(Endpoint::Mutate, "alice");
        let text = serde_json::to_string(&user.patch).unwrap();
        assert!(
            text.contains("/spec/backoffLimit")
                && text.contains("MASTER_ADDR")
                && text.contains("team-a"),
            "{text}"
        );
        let denied = ask(Endpoint::Validate, "alice");
        assert!(!denied.response.allowed);
        let message = &denied.response.status.as_ref().unwrap().message;
        assert!(
            message.contains("total nvidia.com/gpu over all pods=8 exceeds maximum 4"),
            "{message}"
        );
        assert!(
            message.contains("names JobSet \"ddp\" as its controller but is sent by"),
            "{message}"
        );
    }

    fn pytorchjob(labels: Value) -> Value {
        let replica = |n: i64| {
            json!({"replicas": n, "template": {"metadata": {"labels": labels.clone()},
                "spec": {"containers": [{"name": "pytorch", "image": "acme/train:1",
                    "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}})
        };
        json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "ddp", "namespace": "wandb", "labels": labels.clone()},
            "spec": {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(2)}}})
    }

    #[test]
    fn a_scale_is_judged_against_the_pytorchjob_it_scales() {
        use crate::cluster::StaticCluster;
        let policy = Policy::from_yaml(
            "queues:\n  gpu-queue:\n    limits: {totals: {nvidia.com/gpu: {maximum: 16}}}\n",
        )
        .unwrap();
        let answer = |cluster: &dyn ClusterView, body: Vec<u8>| {
            let out = review(&policy, Endpoint::Validate, &body, cluster).unwrap();
            serde_json::from_slice::<Value>(&out.body).unwrap()["response"].clone()
        };
        // Another team's elastic job: not launchgate's, scales freely.
        let other = StaticCluster::default().with_workload(pytorchjob(json!({"team": "b"})));
        assert_eq!(answer(&other, scale_review(2, 64))["allowed"], true);
        // A launch workload: judged by its queue, as an update of Worker.replicas.
        let launch = StaticCluster::default().with_workload(pytorchjob(
            json!({"wandb.ai/monitor": "true", "launchgate.io/queue": "gpu-queue"}),
        ));
        let up = answer(&launch, scale_review(2, 64));
        assert_eq!(up["allowed"], false, "{up}");
        let message = up["status"]["message"].as_str().unwrap();
        assert!(
            message.contains("scaling PyTorchJob \"ddp\" from 2 to 64 Worker replicas")
                && message.contains(
                    "queue \"gpu-queue\": total nvidia.com/gpu over all pods=65 exceeds maximum 16 (totals)"
                ),
            "{message}"
        );
        assert_eq!(answer(&launch, scale_review(2, 15))["allowed"], true);
        // The cache lists every PyTorchJob of the namespace, and not this one: a scale-up
        // waits until it is seen.
        let unknown = answer(&StaticCluster::default(), scale_review(2, 64));
        assert_eq!(unknown["allowed"], false);
        assert!(
            unknown["status"]["message"]
                .as_str()
                .unwrap()
                .contains("not in launchgate's cache yet")
        );
        assert_eq!(
            answer(&StaticCluster::default(), scale_review(2, 1))["allowed"],
            true
        );
    }

    #[test]
    fn the_agents_training_run_labelled_like_an_image_build_is_judged() {
        let policy = Policy::embedded_default();
        let agent = "system:serviceaccount:wandb:wandb-launch-serviceaccount-prod";
        let job = |container: Value| {
            json!({"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": "run", "namespace": "wandb", "labels": {"wandb": "launch"}},
                "spec": {"backoffLimit": 0, "template": {
                    "metadata": {"labels": {"wandb": "launch", "wandb.ai/monitor": "true"}},
                    "spec": {"restartPolicy": "Never", "containers": [container]}}}})
        };
        let ask = |object: Value| {
            let mut request = AdmissionRequest::synthetic_create(object, Some("wandb")).unwrap();
            request.user_info = Some(json!({"username": agent}));
            decide(&policy, Endpoint::Validate, &request, &NoCluster)
        };
        let run = ask(job(
            json!({"name": "train", "image": "ghcr.io/acme/train:1",
            "resources": {"limits": {"nvidia.com/gpu": 8}}}),
        ));
        assert!(!run.response.allowed, "{:?}", run.response);
        let message = &run.response.status.as_ref().unwrap().message;
        assert!(message.contains("maximum 4"), "{message}");
        assert!(
            message.contains("exemption \"wandb-image-builds\" does not apply"),
            "{message}"
        );
        let build = ask(job(json!({"name": "wandb-container-build",
            "image": "gcr.io/kaniko-project/executor:v1.8.0",
            "args": ["--context=s3://b/ctx.tgz", "--destination=registry/img:tag"]})));
        assert!(build.response.allowed, "{:?}", build.response);
        assert_eq!(
            build.summary.exempted_by.as_deref(),
            Some("wandb-image-builds")
        );
    }

    #[test]
    fn a_job_with_its_jobsets_marks_from_an_unconfigured_controller_is_rewired_with_a_warning() {
        let policy =
            Policy::from_yaml("defaultQueue: q\nqueues:\n  q:\n    pytorch: {indexedJobs: true}\n")
                .unwrap();
        // The Job JobSet's controller makes, sent under another account than the configured
        // one (a JobSet install in its own namespace).
        let job = json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "ddp-workers-0", "namespace": "wandb",
                "labels": {"jobset.sigs.k8s.io/jobset-uid": "js-1",
                    "jobset.sigs.k8s.io/jobset-name": "ddp", "wandb.ai/monitor": "true"},
                "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                    "name": "ddp", "uid": "js-1", "controller": true}]},
            "spec": {"completionMode": "Indexed", "completions": 2, "parallelism": 2,
                "template": {"spec": {"restartPolicy": "Never", "subdomain": "ddp",
                    "containers": [{"name": "t", "image": "acme/train:1"}]}}}});
        let mut request = AdmissionRequest::synthetic_create(job, Some("wandb")).unwrap();
        request.user_info = Some(
            json!({"username": "system:serviceaccount:ml-platform:jobset-controller-manager"}),
        );
        let mutated = decide(&policy, Endpoint::Mutate, &request, &NoCluster);
        // Wired as a world of its own, and told so, with where to name the controller.
        assert!(
            serde_json::to_string(&mutated.patch)
                .unwrap()
                .contains("MASTER_ADDR")
        );
        let warnings = &mutated.response.warnings;
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("match.podCreators.JobSet")
                    && w.contains(r#"of JobSet "ddp""#)
                    && w.contains("standalone")
                    && w.contains("ml-platform/jobset-controller-manager")
                    && !w.ends_with('…')),
            "{warnings:?}"
        );
        let validated = decide(&policy, Endpoint::Validate, &request, &NoCluster);
        assert!(
            validated
                .response
                .warnings
                .iter()
                .any(|w| w.contains("match.podCreators.JobSet")),
            "{:?}",
            validated.response.warnings
        );
    }

    /// The docs' exemption example: the platform team's group is exempt in its namespaces.
    fn platform_policy() -> Policy {
        let mut config: Value = serde_yaml::from_str(crate::policy::DEFAULT_CONFIG_YAML).unwrap();
        config["queues"]["gpu-queue"]["exemptions"] = json!([{"name": "platform-smoke-tests",
            "groups": ["platform-admins"], "namespaces": ["platform-*"]}]);
        Policy::from_yaml(&serde_yaml::to_string(&config).unwrap()).unwrap()
    }

    /// An 8-GPU launch Job (the queue allows 4 per pod) in `namespace`.
    fn eight_gpu_job(namespace: &str) -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "smoke", "namespace": namespace, "uid": "job-uid-1",
                "labels": {"wandb.ai/monitor": "true"}},
            "spec": {"backoffLimit": 0, "template": {
                "metadata": {"labels": {"wandb.ai/monitor": "true"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "t",
                    "image": "acme/train:1", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}})
    }

    /// The pod the Job controller makes for `job`: its template, its owner, its mark.
    fn controller_pod(job: &Value) -> Value {
        let mut pod = job["spec"]["template"].clone();
        let uid = job["metadata"]["uid"].clone();
        pod["apiVersion"] = json!("v1");
        pod["kind"] = json!("Pod");
        pod["metadata"]["generateName"] = json!("smoke-");
        pod["metadata"]["namespace"] = job["metadata"]["namespace"].clone();
        pod["metadata"]["labels"]["batch.kubernetes.io/controller-uid"] = uid.clone();
        pod["metadata"]["labels"]["batch.kubernetes.io/job-name"] = json!("smoke");
        pod["metadata"]["ownerReferences"] = json!([{"apiVersion": "batch/v1", "kind": "Job",
            "name": "smoke", "uid": uid, "controller": true, "blockOwnerDeletion": true}]);
        pod
    }

    fn ask(
        policy: &Policy,
        endpoint: Endpoint,
        object: &Value,
        user: &str,
        groups: &[&str],
    ) -> Decision {
        let namespace = object["metadata"]["namespace"]
            .as_str()
            .unwrap()
            .to_string();
        let mut request =
            AdmissionRequest::synthetic_create(object.clone(), Some(&namespace)).unwrap();
        request.user_info = Some(json!({"username": user, "groups": groups}));
        decide(policy, endpoint, &request, &NoCluster)
    }

    /// What the API server stores: `object` with the mutating webhook's patch applied.
    fn admitted(policy: &Policy, object: &Value, user: &str, groups: &[&str]) -> Value {
        let d = ask(policy, Endpoint::Mutate, object, user, groups);
        assert!(d.response.allowed, "{:?}", d.response);
        let mut stored = object.clone();
        json_patch::patch(&mut stored, &d.patch).unwrap();
        let v = ask(policy, Endpoint::Validate, &stored, user, groups);
        assert!(v.response.allowed, "{:?}", v.response);
        stored
    }

    const JOB_CONTROLLER: &str = "system:serviceaccount:kube-system:job-controller";

    #[test]
    fn the_pods_of_an_exempt_job_are_exempt_and_a_tenant_cannot_claim_it() {
        let policy = platform_policy();
        let admins = ["system:authenticated", "platform-admins"];
        // The exempt group's 8-GPU Job, and the pods the Job controller makes for it.
        let job = admitted(&policy, &eight_gpu_job("platform-tools"), "ops", &admins);
        let pod = controller_pod(&job);
        let decision = ask(&policy, Endpoint::Validate, &pod, JOB_CONTROLLER, &[]);
        assert!(decision.response.allowed, "{:?}", decision.response);
        assert_eq!(
            decision.summary.exempted_by.as_deref(),
            Some("platform-smoke-tests")
        );
        let mutated = ask(&policy, Endpoint::Mutate, &pod, JOB_CONTROLLER, &[]);
        assert!(mutated.patch.0.is_empty(), "{:?}", mutated.patch);
        // A second pass over the exempt Job (reinvocation) changes nothing more.
        let again = ask(&policy, Endpoint::Mutate, &job, "ops", &admins);
        assert!(again.patch.0.is_empty(), "{:?}", again.patch);

        // Someone else's same Job in that namespace is judged.
        let theirs = ask(
            &policy,
            Endpoint::Validate,
            &eight_gpu_job("platform-tools"),
            "alice",
            &["system:authenticated"],
        );
        assert!(!theirs.response.allowed);
        // A tenant who copies the mark into their Job: removed, and denied if it stays.
        let mut forged = eight_gpu_job("platform-tools");
        forged["spec"]["template"]["metadata"]["annotations"] =
            json!({EXEMPTED_BY_ANNOTATION: "platform-smoke-tests"});
        forged["metadata"]["annotations"] = json!({EXEMPTED_BY_ANNOTATION: "platform-smoke-tests"});
        let m = ask(&policy, Endpoint::Mutate, &forged, "alice", &[]);
        let mut stored = forged.clone();
        json_patch::patch(&mut stored, &m.patch).unwrap();
        assert!(
            !serde_json::to_string(&stored)
                .unwrap()
                .contains(EXEMPTED_BY_ANNOTATION)
        );
        assert!(
            m.response.warnings.iter().any(|w| w.contains("removed")),
            "{:?}",
            m.response.warnings
        );
        let v = ask(&policy, Endpoint::Validate, &forged, "alice", &[]);
        let message = &v.response.status.as_ref().unwrap().message;
        assert!(
            message
                .contains("spec.template.metadata.annotations carries launchgate.io/exempted-by"),
            "{message}"
        );
        // A bare pod with the mark (and a copied owner claim) is not the controller's.
        let bare = ask(&policy, Endpoint::Validate, &pod, "alice", &[]);
        assert!(!bare.response.allowed, "{:?}", bare.response);
        // The controller's pod in a namespace the exemption does not cover is judged.
        let mut elsewhere = pod.clone();
        elsewhere["metadata"]["namespace"] = json!("team-a");
        let d = ask(&policy, Endpoint::Validate, &elsewhere, JOB_CONTROLLER, &[]);
        assert!(!d.response.allowed, "{:?}", d.response);
    }

    #[test]
    fn an_exempt_jobsets_jobs_and_their_pods_inherit_its_exemption() {
        let policy = platform_policy();
        let admins = ["platform-admins"];
        let jobset = json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "ddp", "namespace": "platform-tools", "uid": "js-1",
                "labels": {"wandb.ai/monitor": "true"}},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": 1, "template": {"spec": {
                "parallelism": 2, "completions": 2, "completionMode": "Indexed",
                "template": {"metadata": {"labels": {"wandb.ai/monitor": "true"}},
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "t",
                        "image": "acme/train:1",
                        "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}}}]}});
        let jobset = admitted(&policy, &jobset, "ops", &admins);
        // The Job JobSet's controller makes from the replicated job.
        let mut job = json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "ddp-workers-0", "namespace": "platform-tools", "uid": "job-uid-1",
                "labels": {"jobset.sigs.k8s.io/jobset-uid": "js-1"},
                "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                    "name": "ddp", "uid": "js-1", "controller": true}]}});
        job["spec"] = jobset["spec"]["replicatedJobs"][0]["template"]["spec"].clone();
        let jobset_controller = "system:serviceaccount:jobset-system:jobset-controller-manager";
        let d = ask(&policy, Endpoint::Validate, &job, jobset_controller, &[]);
        assert_eq!(
            d.summary.exempted_by.as_deref(),
            Some("platform-smoke-tests"),
            "{:?}",
            d.response
        );
        let job = admitted(&policy, &job, jobset_controller, &[]);
        let d = ask(
            &policy,
            Endpoint::Validate,
            &controller_pod(&job),
            JOB_CONTROLLER,
            &[],
        );
        assert!(d.response.allowed, "{:?}", d.response);
        assert_eq!(
            d.summary.exempted_by.as_deref(),
            Some("platform-smoke-tests")
        );
        // The same Job from anyone else is a workload of its own, judged.
        let d = ask(&policy, Endpoint::Validate, &job, "alice", &[]);
        assert!(!d.response.allowed, "{:?}", d.response);
    }

    #[test]
    fn an_exemption_whose_pods_could_never_inherit_it_is_a_config_error() {
        let err = Policy::from_yaml(
            "defaultQueue: q\nmatch:\n  exemptions: []\n  podCreators: {Job: [], VolcanoJob: [v], PyTorchJob: [p], JobSet: [j]}\nqueues:\n  q:\n    exemptions: [{name: ops, groups: [ops], namespaces: [ops]}]\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("match.podCreators.Job:"), "{err}");
        assert!(err.contains(r#"exemption "ops""#), "{err}");
    }

    #[test]
    fn a_scale_that_cannot_be_attributed_to_a_launch_workload_is_not_denied() {
        use crate::cluster::StaticCluster;
        // A queue whose totals a scale-up could break, so a judged Scale would be refused.
        let policy = Policy::from_yaml(
            "queues:\n  gpu-queue:\n    limits: {totals: {nvidia.com/gpu: {maximum: 16}}}\n",
        )
        .unwrap();
        let answer = |cluster: &dyn ClusterView, body: Vec<u8>| {
            let out = review(&policy, Endpoint::Validate, &body, cluster).unwrap();
            let response = serde_json::from_slice::<Value>(&out.body).unwrap()["response"].clone();
            (response, out.summary)
        };
        // The HPA scales any team's PyTorchJob; a view that cannot say whose it is — offline, no
        // cluster lookups, a namespace they do not watch, not listed yet — attributes it to no
        // launch workload: allowed untouched, up or down.
        struct Blind;
        impl ClusterView for Blind {
            fn is_connected(&self) -> bool {
                true
            }
        }
        let hpa = |old: i64, new: i64| {
            let mut body: Value = serde_json::from_slice(&scale_review(old, new)).unwrap();
            body["request"]["userInfo"] =
                json!({"username": "system:serviceaccount:kube-system:horizontal-pod-autoscaler"});
            serde_json::to_vec(&body).unwrap()
        };
        for cluster in [&NoCluster as &dyn ClusterView, &Blind] {
            for body in [scale_review(2, 64), hpa(2, 64), hpa(2, 1)] {
                let (response, summary) = answer(cluster, body);
                assert_eq!(response["allowed"], true, "{response}");
                assert!(response.get("warnings").is_none(), "{response}");
                assert!(summary.violations.is_empty());
                assert_eq!(summary.skipped, Some("scale"));
            }
        }
        // A cache that holds every PyTorchJob of the namespace and not this one: created a
        // moment ago, perhaps a launch workload; a scale-up waits for it (retry), a scale-down
        // passes.
        let (up, _) = answer(&StaticCluster::default(), scale_review(2, 64));
        assert_eq!(up["allowed"], false, "{up}");
        let message = up["status"]["message"].as_str().unwrap();
        assert!(
            message.contains("from 2 to 64 Worker replicas")
                && message.contains("not in launchgate's cache yet (created a moment ago)")
                && message.contains("retry"),
            "{message}"
        );
        assert_eq!(
            answer(&StaticCluster::default(), scale_review(2, 1)).0["allowed"],
            true
        );
        // Mutation never touches a Scale.
        let mutate = review(&policy, Endpoint::Mutate, &scale_review(2, 64), &NoCluster).unwrap();
        let mutate: Value = serde_json::from_slice(&mutate.body).unwrap();
        assert_eq!(mutate["response"]["allowed"], true);
    }
}

mod kueue_tests {
    use super::*;
    use crate::cluster::NoCluster;
    use serde_json::json;

    const CONFIG: &str = "defaultQueue: q\nqueues:\n  q:\n    kueue: {localQueue: team-a, priorityClass: research, maxExecutionSeconds: 3600}\n";

    fn job(labels: Value) -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j", "namespace": "wandb", "labels": labels},
            "spec": {"suspend": true, "template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "t", "image": "acme/t:1"}]}}}})
    }

    fn labels(queue_name: &str, seconds: &str) -> Value {
        json!({"wandb.ai/monitor": "true", "kueue.x-k8s.io/queue-name": queue_name,
            "kueue.x-k8s.io/priority-class": "research",
            "kueue.x-k8s.io/max-exec-time-seconds": seconds})
    }

    fn ask(endpoint: Endpoint, object: Value, old: Option<Value>) -> Decision {
        let policy = Policy::from_yaml(CONFIG).unwrap();
        let mut request = AdmissionRequest::synthetic_create(object, Some("wandb")).unwrap();
        if let Some(old) = old {
            request.operation = Operation::Update;
            request.old_object = Some(old);
        }
        request.user_info = Some(json!({"username": "alice"}));
        decide(&policy, endpoint, &request, &NoCluster)
    }

    #[test]
    fn a_tenants_kueue_labels_are_replaced_at_create_and_denied_when_they_still_differ() {
        for (queue_name, seconds) in [("", "3600"), ("team-b", "3600"), ("team-a", "7200")] {
            let tenant = job(labels(queue_name, seconds));
            let mutated = ask(Endpoint::Mutate, tenant.clone(), None);
            let patch = serde_json::to_string(&mutated.patch).unwrap();
            assert!(
                patch.contains("team-a") || patch.contains("\"3600\""),
                "{patch}"
            );
            assert!(!patch.contains("suspend"), "{patch}");
            // The mutating webhook bypassed: the validating webhook denies it.
            let denied = ask(Endpoint::Validate, tenant.clone(), None);
            assert!(!denied.response.allowed, "{queue_name:?} {seconds}");
            let message = &denied.response.status.as_ref().unwrap().message;
            assert!(
                message.contains("queue \"q\": label kueue.x-k8s.io/"),
                "{message}"
            );
            // Applying the patch gives a Job the validating webhook admits.
            let mut fixed = tenant.clone();
            json_patch::patch(&mut fixed, &mutated.patch).unwrap();
            assert!(ask(Endpoint::Validate, fixed, None).response.allowed);
        }
    }

    #[test]
    fn kueues_admission_update_passes_and_a_changed_queue_name_is_denied() {
        let admitted = job(labels("team-a", "3600"));
        let mut unsuspended = admitted.clone();
        unsuspended["spec"]["suspend"] = json!(false);
        unsuspended["spec"]["template"]["spec"]["nodeSelector"] = json!({"flavor": "a100"});
        let update = ask(
            Endpoint::Validate,
            unsuspended.clone(),
            Some(admitted.clone()),
        );
        assert!(update.response.allowed);
        let mutate = ask(Endpoint::Mutate, unsuspended, Some(admitted.clone()));
        assert!(
            mutate.patch.0.is_empty(),
            "Kueue's admission UPDATE is never patched"
        );
        // A tenant's UPDATE taking the Job out of Kueue.
        let mut out = admitted.clone();
        out["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = json!("");
        let denied = ask(Endpoint::Validate, out, Some(admitted.clone()));
        assert!(!denied.response.allowed);
        assert!(denied.response.status.as_ref().unwrap().message.contains(
            r#"label kueue.x-k8s.io/queue-name="" is not the queue's "team-a" (kueue.localQueue)"#
        ));
        // A Job that already differed before launchgate's rule: its UPDATEs pass, with a warning.
        let old = job(labels("team-b", "3600"));
        let mut relabelled = old.clone();
        relabelled["metadata"]["labels"]["note"] = json!("x");
        let kept = ask(Endpoint::Validate, relabelled, Some(old));
        assert!(kept.response.allowed);
        assert!(kept.response.warnings[0].contains("already so before this update"));
    }
}

mod docs_link_tests {
    use super::*;

    /// The recorded 8-GPU launch Job, validated under the built-in policy with `docsUrl` set
    /// (or not) and the queue's limits enforced as `enforcement`.
    fn denial(docs_url: Option<&str>, enforcement: &str) -> Decision {
        let mut config: crate::policy::Config =
            serde_yaml::from_str(crate::policy::DEFAULT_CONFIG_YAML).unwrap();
        config.docs_url = docs_url.map(str::to_owned);
        let queue = config.queues.get_mut("gpu-queue").unwrap();
        queue.limits.enforcement = serde_yaml::from_str(enforcement).unwrap();
        let policy = Policy::from_config(config).unwrap();
        let body = std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/admission/create-job-launch-acme-mnist.json"),
        )
        .unwrap();
        let request = super::parse_request(&body).unwrap();
        decide(
            &policy,
            Endpoint::Validate,
            &request,
            &crate::cluster::NoCluster,
        )
    }

    #[test]
    fn a_denial_links_each_of_its_rules_when_the_site_is_known() {
        let plain = denial(None, "deny");
        let linked = denial(Some("https://docs.example.com/launchgate/"), "deny");
        let plain = plain.response.status.unwrap().message;
        let message = linked.response.status.as_ref().unwrap().message.clone();
        assert_eq!(
            message,
            format!(
                "{plain}\nsee https://docs.example.com/launchgate/reference/rules.html#limits-variables"
            )
        );
        assert_eq!(linked.summary.message.as_deref(), Some(message.as_str()));
        // A queue that only warns denies nothing, and gets no link.
        let warned = denial(Some("https://docs.example.com/launchgate"), "warn");
        assert!(warned.response.allowed);
        assert!(warned.response.status.is_none());
    }

    #[test]
    fn a_docs_url_that_links_cannot_be_appended_to_is_a_config_error() {
        for (url, why) in [
            ("docs.example.com", "no http(s) URL"),
            ("https://", "no host"),
            ("https://docs.example.com/?v=1", "holds '?'"),
            ("https://docs.example.com/#top", "holds '#'"),
        ] {
            let mut config: crate::policy::Config =
                serde_yaml::from_str(crate::policy::DEFAULT_CONFIG_YAML).unwrap();
            config.docs_url = Some(url.into());
            let errors = Policy::from_config(config).unwrap_err().to_string();
            assert!(
                errors.contains("docsUrl") && errors.contains(why),
                "{url}: {errors}"
            );
        }
    }
}
