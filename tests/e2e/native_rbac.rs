//! The native policies' ClusterRole (the chart's `<release>-native-policies`) on the real
//! API server: the identity it is bound to may update, patch and delete its own set's policies
//! (their slot names), and gets 403 on every other admission policy in the cluster.

use crate::ctx::Ctx;
use anyhow::{Context, Result, ensure};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};
use std::time::Duration;

const VAPS: &str = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies";

/// The chart's rules for the native policies of `set` with `slots` slots: list and create on
/// every name (RBAC cannot limit create by name), everything else on the set's slot names.
fn chart_rules(set: &str, slots: usize) -> Value {
    let resources = json!([
        "validatingadmissionpolicies",
        "validatingadmissionpolicybindings",
        "mutatingadmissionpolicies",
        "mutatingadmissionpolicybindings"
    ]);
    json!([
        {"apiGroups": ["admissionregistration.k8s.io"], "resources": resources,
         "verbs": ["list", "create"]},
        {"apiGroups": ["admissionregistration.k8s.io"], "resources": resources,
         "resourceNames": launchgate::native::slot_names(set, slots),
         "verbs": ["get", "patch", "update", "delete"]},
    ])
}

/// A policy that matches nothing any test creates.
fn inert_policy(name: &str) -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": ["e2e.launchgate.invalid"],
                "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["nothings"]}]},
            "validations": [{"expression": "true"}],
        },
    })
}

/// `method` on `path` as `user` (`Impersonate-User`; `None`: the suite's admin): the HTTP
/// status and the body.
async fn send_as(
    ctx: &Ctx,
    user: Option<&str>,
    method: http::Method,
    path: &str,
    body: Option<(&str, &Value)>,
) -> Result<(u16, Value)> {
    let mut request = http::Request::builder().method(method).uri(path);
    if let Some(user) = user {
        request = request.header("impersonate-user", user);
    }
    let bytes = match body {
        Some((content_type, value)) => {
            request = request.header("content-type", content_type);
            serde_json::to_vec(value)?
        }
        None => Vec::new(),
    };
    let response = ctx
        .client
        .send(request.body(bytes)?.map(kube::client::Body::from))
        .await?;
    let status = response.status().as_u16();
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await?
        .to_bytes();
    Ok((status, serde_json::from_slice(&body).unwrap_or(Value::Null)))
}

/// As `user`: an update (PUT) of the policy `name`, read as the admin.
async fn update_as(ctx: &Ctx, user: &str, name: &str) -> Result<(u16, Value)> {
    let (status, mut current) = send_as(
        ctx,
        None,
        http::Method::GET,
        &format!("{VAPS}/{name}"),
        None,
    )
    .await?;
    ensure!(status == 200, "reading {name}: {status} {current}");
    current["metadata"]["labels"]["e2e.launchgate.io/touched"] = json!("yes");
    send_as(
        ctx,
        Some(user),
        http::Method::PUT,
        &format!("{VAPS}/{name}"),
        Some(("application/json", &current)),
    )
    .await
}

/// The chart's ClusterRole for the native policies, bound to a service account: that identity
/// updates its own set's policy, and gets 403 updating, patching or deleting another one.
pub async fn the_native_policy_role_writes_only_its_own_policies(ctx: &Ctx) -> Result<()> {
    let set = format!("e2e-rbac-{}", &ctx.ns[ctx.ns.len() - 4..]);
    let sa = "launchgate";
    let user = format!("system:serviceaccount:{}:{sa}", ctx.ns);
    let own = launchgate::native::slot_names(&set, 2)[1].clone();
    let foreign = format!("{set}-other-vendor");
    let roles: Api<ClusterRole> = Api::all(ctx.client.clone());
    let bindings: Api<ClusterRoleBinding> = Api::all(ctx.client.clone());
    let policies: Api<kube::api::DynamicObject> = Api::all_with(
        ctx.client.clone(),
        &kube::discovery::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk(
                "admissionregistration.k8s.io",
                "v1",
                "ValidatingAdmissionPolicy",
            ),
            "validatingadmissionpolicies",
        ),
    );
    let result = async {
        roles
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": format!("{set}-native-policies")},
                    "rules": chart_rules(&set, 2),
                }))?,
            )
            .await?;
        bindings
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": format!("{set}-native-policies")},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": format!("{set}-native-policies")},
                    "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ctx.ns}],
                }))?,
            )
            .await?;
        // The service account creates its own policy (create is not limited by name); as the
        // admin, another vendor's.
        ctx.wait_for(
            "the ClusterRoleBinding to take effect",
            Duration::from_secs(30),
            || async {
                let (status, body) = send_as(
                    ctx,
                    Some(&user),
                    http::Method::POST,
                    VAPS,
                    Some(("application/json", &inert_policy(&own))),
                )
                .await?;
                ensure!(
                    matches!(status, 201 | 403),
                    "creating {own}: {status} {body}"
                );
                Ok(status == 201)
            },
        )
        .await?;
        let (status, body) = send_as(
            ctx,
            None,
            http::Method::POST,
            VAPS,
            Some(("application/json", &inert_policy(&foreign))),
        )
        .await?;
        ensure!(
            status == 201,
            "creating {foreign} as the admin: {status} {body}"
        );

        let (status, body) = update_as(ctx, &user, &own).await?;
        ensure!(status == 200, "updating its own {own}: {status} {body}");
        let patch = json!({"metadata": {"labels": {"e2e.launchgate.io/patched": "yes"}}});
        let (status, body) = send_as(
            ctx,
            Some(&user),
            http::Method::PATCH,
            &format!("{VAPS}/{own}"),
            Some(("application/merge-patch+json", &patch)),
        )
        .await?;
        ensure!(status == 200, "patching its own {own}: {status} {body}");

        let (status, body) = update_as(ctx, &user, &foreign).await?;
        ensure!(
            status == 403,
            "updating the foreign {foreign}: {status} {body}"
        );
        let (status, body) = send_as(
            ctx,
            Some(&user),
            http::Method::PATCH,
            &format!("{VAPS}/{foreign}"),
            Some(("application/merge-patch+json", &patch)),
        )
        .await?;
        ensure!(
            status == 403,
            "patching the foreign {foreign}: {status} {body}"
        );
        let (status, body) = send_as(
            ctx,
            Some(&user),
            http::Method::DELETE,
            &format!("{VAPS}/{foreign}"),
            None,
        )
        .await?;
        ensure!(
            status == 403,
            "deleting the foreign {foreign}: {status} {body}"
        );
        let still = policies
            .get_opt(&foreign)
            .await?
            .context("the foreign policy")?;
        ensure!(
            !still
                .metadata
                .labels
                .unwrap_or_default()
                .contains_key("e2e.launchgate.io/touched"),
            "the foreign policy was changed"
        );

        let (status, body) = send_as(
            ctx,
            Some(&user),
            http::Method::DELETE,
            &format!("{VAPS}/{own}"),
            None,
        )
        .await?;
        ensure!(status == 200, "deleting its own {own}: {status} {body}");
        Ok(())
    }
    .await;
    let _ = policies.delete(&own, &DeleteParams::default()).await;
    let _ = policies.delete(&foreign, &DeleteParams::default()).await;
    let _ = bindings
        .delete(&format!("{set}-native-policies"), &DeleteParams::default())
        .await;
    let _ = roles
        .delete(&format!("{set}-native-policies"), &DeleteParams::default())
        .await;
    result
}
