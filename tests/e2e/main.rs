//! End-to-end tests on a real control plane: kube-apiserver, kube-controller-manager and etcd,
//! with launchgate (the built binary) registered by URL as the chart registers it.
//!
//! Where the cluster comes from:
//! * `KUBEBUILDER_ASSETS` (or `LAUNCHGATE_E2E_ASSETS`): a directory with `etcd`,
//!   `kube-apiserver` and `kube-controller-manager`; the suite starts them on loopback on free
//!   ports and stops them at the end (`./scripts/k8s-assets.sh` unpacks them).
//! * `LAUNCHGATE_E2E_KUBECONFIG`: an existing cluster (kind, k3d, …) whose API server can reach
//!   launchgate on `LAUNCHGATE_E2E_WEBHOOK_HOST` (default 127.0.0.1).
//!
//! Without either the suite is skipped with one line saying how to enable it, unless
//! `LAUNCHGATE_E2E_REQUIRED=1` (CI), which makes that a failure.
//!
//! A custom harness (libtest-mimic) so the control plane is started once, shared by every
//! test (each gets its own namespace), and always torn down, also when tests fail.

mod accelerators;
mod apiserver_metrics;
mod audit;
mod bypass;
mod checks;
mod cluster;
#[path = "../common/mod.rs"]
mod common;
mod ctx;
mod default_install;
mod documented;
mod guardrails;
mod install_path;
mod jobset_order;
mod launch_stack;
mod launchqueues;
mod leaderworkerset;
mod local_cluster;
mod manifests;
mod mpijob;
mod native;
mod native_rbac;
mod observability;
mod outages;
mod pytorch_guarantees;
mod ray;
mod registration;
mod safety;
mod semantics;
mod subresources;
mod trust;
mod updates;
mod webhook;
mod workloads;

use anyhow::{Context, Result};
use cluster::ControlPlane;
use ctx::{Ctx, Env};
use libtest_mimic::{Arguments, Failed, Trial};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use webhook::Launchgate;

type TestFuture<'a> = Pin<Box<dyn Future<Output = Result<()>> + 'a>>;

/// One end-to-end test: a name, whether launchgate sees its namespace from the start, whether
/// it runs alone (after the others, one at a time: it loads the API server heavily or measures
/// it), and the body.
struct E2eTest {
    name: &'static str,
    registered: bool,
    alone: bool,
    /// Why it is not run yet (listed as ignored; `--include-ignored` runs it).
    ignored: Option<&'static str>,
    run: for<'a> fn(&'a Ctx) -> TestFuture<'a>,
}

macro_rules! e2e {
    ($f:path) => {
        E2eTest {
            name: stringify!($f),
            registered: true,
            alone: false,
            ignored: None,
            run: |c| Box::pin($f(c)),
        }
    };
    ($f:path, unregistered) => {
        E2eTest {
            name: stringify!($f),
            registered: false,
            alone: false,
            ignored: None,
            run: |c| Box::pin($f(c)),
        }
    };
    ($f:path, unregistered, alone) => {
        E2eTest {
            name: stringify!($f),
            registered: false,
            alone: true,
            ignored: None,
            run: |c| Box::pin($f(c)),
        }
    };
    ($f:path, ignore = $why:literal) => {
        E2eTest {
            name: stringify!($f),
            registered: true,
            alone: false,
            ignored: Some($why),
            run: |c| Box::pin($f(c)),
        }
    };
    ($f:path, alone) => {
        E2eTest {
            name: stringify!($f),
            registered: true,
            alone: true,
            ignored: None,
            run: |c| Box::pin($f(c)),
        }
    };
}

fn tests() -> Vec<E2eTest> {
    vec![
        e2e!(workloads::dry_run_equals_create_for_every_recorded_kind),
        e2e!(workloads::job_controller_pods_carry_the_mutations),
        e2e!(workloads::indexed_job_pods_get_their_ranks),
        e2e!(workloads::volcano_job_and_its_pods_are_wired),
        e2e!(workloads::owner_lookup_reads_the_real_api, unregistered),
        e2e!(workloads::pytorchjob_is_mutated),
        e2e!(workloads::denial_message_reaches_the_client),
        e2e!(workloads::warnings_reach_the_client),
        e2e!(workloads::server_side_apply_is_mutated),
        e2e!(
            workloads::update_of_an_existing_job_is_admitted,
            unregistered
        ),
        e2e!(workloads::burst_of_forty_pods_is_admitted),
        e2e!(workloads::pasted_kubeflow_queue_config_is_enforced),
        e2e!(audit::audit_reports_what_a_new_config_would_break),
        e2e!(audit::audit_judges_as_the_webhook_does),
        e2e!(audit::audit_writes_openreports_and_clears_them),
        e2e!(observability::a_denial_is_logged_evented_and_counted),
        e2e!(observability::a_dry_run_denial_writes_no_event),
        e2e!(semantics::controller_pods_are_not_judged_on_workload_rules),
        e2e!(semantics::server_side_apply_intent_is_kept),
        e2e!(semantics::offline_judges_as_the_cluster_does_crd_defaults_included),
        e2e!(semantics::generate_name_jobs_are_wired_at_pod_admission),
        e2e!(semantics::host_network_pods_can_resolve_the_master),
        e2e!(semantics::torchrun_twins_follow_the_effective_env),
        e2e!(semantics::only_pytorch_workloads_get_pytorch_env),
        e2e!(trust::a_label_exempts_only_with_its_requester),
        e2e!(trust::a_claimed_owner_is_not_trusted),
        e2e!(trust::exempt_group_jobs_pods_inherit_the_exemption),
        e2e!(updates::a_relabelled_job_is_judged_as_a_create),
        e2e!(updates::kueues_admission_of_an_exempt_run_passes),
        e2e!(updates::a_tenants_update_of_an_exempt_mpijob_is_judged_as_her_create),
        e2e!(updates::the_ray_autoscaler_scales_within_what_was_admitted),
        e2e!(updates::a_grown_runtimes_jobset_is_held_to_the_runs_ceiling),
        e2e!(updates::native_policies_refuse_a_mark_they_cannot_prove),
        e2e!(safety::a_dense_pod_is_denied_within_a_256_mib_limit, alone),
        e2e!(documented::the_pages_cluster_commands_run_as_shown, alone),
        e2e!(subresources::ephemeral_containers_are_judged),
        e2e!(subresources::pytorchjob_scale_is_judged_against_its_pytorchjob),
        e2e!(pytorch_guarantees::volcano_pods_see_the_rendezvous_size_despite_the_plugin),
        e2e!(launch_stack::jobset_is_hardened_limited_and_wired),
        e2e!(jobset_order::jobset_defaults_before_or_after_launchgate_give_the_same_jobset),
        e2e!(launch_stack::trainjob_is_hardened_through_a_runtime_patch_and_limited),
        e2e!(launch_stack::trainjob_is_sized_by_its_runtime),
        e2e!(accelerators::a_gpu_is_counted_however_it_is_asked_for),
        e2e!(accelerators::a_container_that_asks_for_no_gpu_sees_none_by_environment),
        e2e!(launch_stack::trainjob_hardening_keeps_a_privileged_runtime_valid),
        e2e!(launch_stack::kueue_admission_is_left_alone_and_revalidated),
        e2e!(launch_stack::a_tenants_kueue_labels_are_replaced_or_denied),
        e2e!(ray::rayjob_is_limited_hardened_and_its_children_verified),
        e2e!(ray::a_rayjob_cluster_ends_with_the_job),
        e2e!(ray::a_kuberay_operator_in_default_is_no_controller),
        e2e!(mpijob::an_mpijob_is_limited_hardened_and_its_children_verified),
        e2e!(mpijob::a_gang_below_launcher_and_workers_is_denied),
        e2e!(leaderworkerset::a_leaderworkerset_is_limited_by_its_groups_and_stored_hardened),
        e2e!(launchqueues::a_launchqueue_is_enforced_within_seconds_and_says_so),
        e2e!(guardrails::a_gang_starts_whole_or_is_denied),
        e2e!(guardrails::a_preempted_pod_is_replaced_and_a_failure_still_fails),
        e2e!(guardrails::a_run_ends_when_rank_zero_ends),
        e2e!(guardrails::a_run_gets_a_deadline_and_an_over_cap_run_is_denied),
        e2e!(guardrails::the_gpu_hour_cap_reads_the_whole_run),
        e2e!(guardrails::the_rendezvous_service_is_preflighted),
        e2e!(native::compiled_policies_apply_to_the_api_server),
        e2e!(native::native_policies_decide_as_the_webhook_does),
        e2e!(native::native_policies_decide_as_the_webhook_does_on_generated_workloads),
        e2e!(native::a_pytorchjob_is_judged_the_same_every_time),
        e2e!(native::hybrid_mode_enforces_while_the_webhook_is_down),
        e2e!(native::a_relabelled_job_is_judged_as_a_create_natively),
        // A server keeping native policies is ready only once every slot holds its policy:
        // alone that takes these two 16-40 s; among the other tests' creates their 30 s start-up
        // wait ran out, so they run alone.
        e2e!(
            native::the_server_keeps_native_policies_in_step_with_its_config,
            alone
        ),
        e2e!(
            native_rbac::the_pods_create_no_admission_policy_and_keep_their_queues_in_the_charts_slots,
            unregistered,
            alone
        ),
        e2e!(
            native_rbac::a_server_with_more_queues_than_slots_is_never_ready,
            unregistered
        ),
        e2e!(
            bypass::the_documented_bypass_holds_while_launchgate_runs,
            unregistered
        ),
        e2e!(
            registration::a_first_install_admits_launch_workloads_until_a_replica_registers,
            unregistered
        ),
        e2e!(
            registration::a_stopped_webhook_fails_open_only_for_warn_queues,
            unregistered
        ),
        e2e!(
            outages::each_outage_the_api_server_reports_has_a_runbook_entry,
            unregistered
        ),
        e2e!(
            registration::a_stopped_webhook_never_blocks_the_job_controller,
            unregistered
        ),
        e2e!(
            default_install::a_default_install_touches_only_launch_workloads,
            unregistered
        ),
        // The pages' release is cluster-wide (`launchgate`), and its uninstall checks find
        // nothing of any release labelled launchgate's: alone.
        e2e!(
            install_path::the_documented_install_path_warns_denies_and_leaves_nothing,
            unregistered,
            alone
        ),
        // The manifests' release is cluster-wide (`launchgate`), as the pages': alone.
        e2e!(
            manifests::the_plain_manifests_install_judges_rotates_and_uninstalls,
            unregistered,
            alone
        ),
        // The page's webhooks select every namespace: alone.
        e2e!(
            local_cluster::the_local_cluster_page_registers_and_judges,
            unregistered,
            alone
        ),
        e2e!(native::admission_cost_webhook_vs_native, alone),
    ]
}

/// Where the suite's cluster comes from.
enum Target {
    Assets(PathBuf),
    Kubeconfig(PathBuf),
}

fn target() -> Option<Target> {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    if let Some(k) = var("LAUNCHGATE_E2E_KUBECONFIG") {
        return Some(Target::Kubeconfig(k.into()));
    }
    var("LAUNCHGATE_E2E_ASSETS")
        .or_else(|| var("KUBEBUILDER_ASSETS"))
        .map(|a| Target::Assets(a.into()))
}

/// The control plane (when the suite started one), launchgate, and what tests share.
struct Suite {
    plane: Option<ControlPlane>,
    launchgate: Launchgate,
    env: Arc<Env>,
    dir: tempfile::TempDir,
}

async fn client_for(kubeconfig: &Path) -> Result<kube::Client> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await?;
    Ok(kube::Client::try_from(config)?)
}

async fn set_up(target: &Target) -> Result<Suite> {
    let (plane, kubeconfig) = match target {
        Target::Assets(assets) => {
            let plane = ControlPlane::start(assets)
                .await
                .context("starting the control plane")?;
            let kc = plane.kubeconfig.clone();
            (Some(plane), kc)
        }
        Target::Kubeconfig(kc) => (None, kc.clone()),
    };
    let client = client_for(&kubeconfig).await?;
    install_crds(&client).await?;
    let dir = tempfile::Builder::new()
        .prefix("launchgate-e2e-webhook-")
        .tempdir()?;
    let host = std::env::var("LAUNCHGATE_E2E_WEBHOOK_HOST").unwrap_or_else(|_| "127.0.0.1".into());
    let mut launchgate = Launchgate::start(dir.path(), &kubeconfig, &host).await?;
    let run = format!("{:06x}", cluster::rand_u64() & 0xff_ffff);
    launchgate.register(&client, &run).await?;
    let env = Arc::new(Env {
        client,
        kubeconfig: kubeconfig.clone(),
        launchgate_log: dir.path().join("launchgate.log"),
        launchgate_base: launchgate.base.clone(),
        launchgate_pid: launchgate.pid(),
        launchgate_client: reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(
                launchgate.ca_pem.as_bytes(),
            )?)
            .tls_built_in_root_certs(false)
            .timeout(Duration::from_secs(10))
            .build()?,
    });
    wait_until_registered(&env).await?;
    Ok(Suite {
        plane,
        launchgate,
        env,
        dir,
    })
}

/// The real upstream CRDs (Volcano Job, PyTorchJob v1, Trainer v2, JobSet, Kueue; full schemas,
/// so the API server defaults and prunes as in production — no controller of theirs runs: the
/// tests create their pods as they would) and the wgpolicyk8s.io PolicyReport the audit writes.
async fn install_crds(client: &kube::Client) -> Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let api: kube::Api<CustomResourceDefinition> = kube::Api::all(client.clone());
    let mut texts = common::upstream_crds().map_err(anyhow::Error::msg)?;
    for path in common::crd_paths() {
        texts.push((path.display().to_string(), std::fs::read_to_string(&path)?));
    }
    let mut names = Vec::new();
    for (file, text) in texts {
        let crd: CustomResourceDefinition =
            serde_yaml::from_str(&text).with_context(|| file.clone())?;
        let name = crd.metadata.name.clone().unwrap_or_default();
        if api.get_opt(&name).await?.is_none() {
            api.create(&Default::default(), &crd).await?;
        }
        names.push(name);
    }
    for name in names {
        let established = kube::runtime::wait::conditions::is_crd_established();
        tokio::time::timeout(
            Duration::from_secs(30),
            kube::runtime::wait::await_condition(api.clone(), &name, established),
        )
        .await
        .with_context(|| format!("CRD {name} not established"))??;
    }
    Ok(())
}

/// The API server applies new webhook configurations a moment after they are created: wait
/// until a dry-run launch pod comes back mutated.
async fn wait_until_registered(env: &Arc<Env>) -> Result<()> {
    let ctx = Ctx::new(env.clone(), "registration", true).await?;
    let probe = ctx.launch_pod("probe");
    let result = ctx
        .wait_for(
            "the webhooks to take effect",
            Duration::from_secs(30),
            || async {
                let pod = ctx.create(&probe, true).await?;
                Ok(ctx::mutations(&pod).is_some())
            },
        )
        .await;
    ctx.cleanup().await;
    result
}

fn trial(test: E2eTest, env: Arc<Env>, rt: tokio::runtime::Handle) -> Trial {
    let ignored = test.ignored.is_some();
    Trial::test(test.name, move || {
        rt.block_on(async {
            let ctx = Ctx::new(env, test.name, test.registered).await?;
            let result = (test.run)(&ctx).await;
            if result.is_ok() || std::env::var_os("LAUNCHGATE_E2E_KEEP").is_none() {
                ctx.cleanup().await;
            }
            result.with_context(|| format!("namespace {}", ctx.ns))
        })
        .map_err(|e| Failed::from(format!("{e:#}")))
    })
    .with_ignored_flag(ignored)
}

/// The harness itself: a test that fails (panics) while its control plane runs leaves no
/// etcd, kube-apiserver or kube-controller-manager behind.
fn no_process_survives_a_failing_test(assets: PathBuf, rt: tokio::runtime::Handle) -> Trial {
    Trial::test("harness::no_process_survives_a_failing_test", move || {
        let mut seen: Option<(Vec<u32>, PathBuf)> = None;
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let plane = rt
                .block_on(ControlPlane::start(&assets))
                .expect("a second control plane starts");
            seen = Some((plane.pids(), plane.dir.path().to_path_buf()));
            panic!("(intended) a test fails while its control plane runs");
        }));
        if outcome.is_ok() {
            return Err("the failing test did not fail".into());
        }
        let (pids, dir) = seen.ok_or("the control plane did not start")?;
        if pids.len() != 3 {
            return Err(format!("expected 3 processes, saw {pids:?}").into());
        }
        let left = cluster::survivors(&pids, &dir);
        if !left.is_empty() {
            return Err(format!("left behind: {left:?}").into());
        }
        Ok(())
    })
}

/// The API server's own measurement of its calls to launchgate
/// (`apiserver_admission_webhook_admission_duration_seconds`): per webhook, calls, mean and the
/// p99 bucket bound.
async fn webhook_latency(client: &kube::Client) -> Result<Vec<String>> {
    let text = apiserver_metrics::scrape(client).await?;
    let metric = "apiserver_admission_webhook_admission_duration_seconds";
    let mut out = Vec::new();
    for hook in ["mutate.launchgate.io", "validate.launchgate.io"] {
        let name = format!("name=\"{hook}\"");
        let h = apiserver_metrics::Histogram::read(&text, metric, |labels| labels.contains(&name));
        if h.count == 0.0 {
            out.push(format!("{hook}: no calls recorded"));
        } else {
            out.push(format!("{hook}: {}", h.summary()));
        }
    }
    Ok(out)
}

/// Tears the suite down and returns the processes that survived it (there must be none).
fn tear_down(mut suite: Suite, rt: &tokio::runtime::Runtime) -> Result<()> {
    let mut pids: Vec<u32> = suite.launchgate.pid().into_iter().collect();
    if suite.plane.is_none() {
        // An existing cluster keeps running: remove what the suite registered there.
        rt.block_on(suite.launchgate.unregister(&suite.env.client));
    }
    suite.launchgate.check_running()?;
    let status = suite.launchgate.stop();
    anyhow::ensure!(
        status.is_some_and(|s| s.success()),
        "launchgate did not exit cleanly on SIGTERM: {status:?}"
    );
    let mut dirs = vec![suite.dir.path().to_path_buf()];
    if let Some(plane) = suite.plane.as_mut() {
        plane.check_running()?;
        pids.extend(plane.pids());
        dirs.push(plane.dir.path().to_path_buf());
        plane.stop();
    }
    let left: Vec<String> = dirs
        .iter()
        .flat_map(|d| cluster::survivors(&pids, d))
        .collect();
    anyhow::ensure!(left.is_empty(), "processes left behind: {left:?}");
    println!(
        "e2e: teardown: launchgate exited 0 on SIGTERM; {} processes stopped, none left",
        pids.len()
    );
    Ok(())
}

fn main() -> ExitCode {
    let mut args = Arguments::from_args();
    // Tests mostly wait on controllers: run several at once (each in its own namespace).
    args.test_threads.get_or_insert(6);
    let required = std::env::var_os("LAUNCHGATE_E2E_REQUIRED").is_some_and(|v| v == "1");
    let Some(target) = target() else {
        eprintln!(
            "\n==> e2e SKIPPED: no cluster. Run the real-control-plane suite with \
             `KUBEBUILDER_ASSETS=$(./scripts/k8s-assets.sh) ./scripts/test.sh` \
             (or LAUNCHGATE_E2E_KUBECONFIG=<kubeconfig>).\n"
        );
        if required {
            eprintln!("e2e: LAUNCHGATE_E2E_REQUIRED=1 but no cluster is configured");
            return ExitCode::FAILURE;
        }
        let trials = tests()
            .into_iter()
            .map(|t| t.name)
            .chain(["harness::no_process_survives_a_failing_test"])
            .map(|name| Trial::test(name, || Ok(())).with_ignored_flag(true))
            .collect();
        return libtest_mimic::run(&args, trials).exit_code();
    };
    if args.list {
        let trials = tests()
            .into_iter()
            .map(|t| (t.name, t.ignored.is_some()))
            .chain([("harness::no_process_survives_a_failing_test", false)])
            .map(|(name, ignored)| Trial::test(name, || Ok(())).with_ignored_flag(ignored))
            .collect();
        return libtest_mimic::run(&args, trials).exit_code();
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("tokio runtime");
    // Processes are started from this (the main) thread: their parent-death signal is tied to
    // the thread that spawned them, and this one lives until the end.
    let suite = match rt.block_on(set_up(&target)) {
        Ok(suite) => suite,
        Err(e) => {
            eprintln!("e2e: set-up failed: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    let env = suite.env.clone();
    let (alone, together): (Vec<E2eTest>, Vec<E2eTest>) =
        tests().into_iter().partition(|t| t.alone);
    let mut trials: Vec<Trial> = together
        .into_iter()
        .map(|t| trial(t, env.clone(), rt.handle().clone()))
        .collect();
    trials.push(match &target {
        Target::Assets(assets) => {
            no_process_survives_a_failing_test(assets.clone(), rt.handle().clone())
        }
        Target::Kubeconfig(_) => {
            Trial::test("harness::no_process_survives_a_failing_test", || Ok(()))
                .with_ignored_flag(true)
        }
    });
    let mut conclusion = libtest_mimic::run(&args, trials);
    // Then the tests that must not share the API server, one at a time.
    let alone: Vec<Trial> = alone
        .into_iter()
        .map(|t| trial(t, env.clone(), rt.handle().clone()))
        .collect();
    let mut one_at_a_time = args.clone();
    one_at_a_time.test_threads = Some(1);
    let second = libtest_mimic::run(&one_at_a_time, alone);
    conclusion.num_passed += second.num_passed;
    conclusion.num_failed += second.num_failed;
    conclusion.num_ignored += second.num_ignored;
    conclusion.num_filtered_out += second.num_filtered_out;
    println!(
        "e2e: {} tests run against {} ({} passed, {} failed)",
        conclusion.num_passed + conclusion.num_failed,
        match &target {
            Target::Assets(_) => "a real control plane started from the assets",
            Target::Kubeconfig(_) => "the cluster of LAUNCHGATE_E2E_KUBECONFIG",
        },
        conclusion.num_passed,
        conclusion.num_failed
    );
    match rt.block_on(webhook_latency(&env.client)) {
        Ok(lines) => {
            for line in lines {
                println!("e2e: API server's view of launchgate: {line}");
            }
        }
        Err(e) => println!("e2e: webhook latency unreadable: {e:#}"),
    }
    if conclusion.has_failed() {
        eprintln!(
            "e2e: launchgate's log ends:\n{}",
            cluster::tail(&env.launchgate_log, 30)
        );
    }
    drop(env);
    if let Err(e) = tear_down(suite, &rt) {
        eprintln!("e2e: teardown failed: {e:#}");
        return ExitCode::FAILURE;
    }
    conclusion.exit_code()
}
