//! A minimal mutating admission webhook on kube's admission types, as kube-rs's documentation
//! builds one: the AdmissionReview is read into typed structs (`AdmissionReview<DynamicObject>`),
//! an object labelled `illegal` is denied, any other gets the label `admission` by a JSON patch.
//! It is the yardstick launchgate is measured against (scripts/side-by-side.sh), so it does
//! what that example does and nothing more.
//!
//! Usage: `kube-peer LISTEN_ADDR CERT_PEM KEY_PEM`; logs at `RUST_LOG` (errors only by default).

use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use kube::core::{DynamicObject, ResourceExt};
use std::convert::Infallible;
use std::net::SocketAddr;
use tracing::{error, info, warn};
use warp::{Filter, Reply, reply};

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt::init();
    let mut args = std::env::args().skip(1);
    let usage = "usage: kube-peer LISTEN_ADDR CERT_PEM KEY_PEM";
    let addr: SocketAddr = args.next().expect(usage).parse().expect(usage);
    let cert = args.next().expect(usage);
    let key = args.next().expect(usage);
    let routes = warp::path("mutate")
        .and(warp::body::json())
        .and_then(handle)
        .with(warp::trace::request());
    warp::serve(warp::post().and(routes))
        .tls()
        .cert_path(cert)
        .key_path(key)
        .run(addr)
        .await;
}

async fn handle(review: AdmissionReview<DynamicObject>) -> Result<impl Reply, Infallible> {
    let request: AdmissionRequest<DynamicObject> = match review.try_into() {
        Ok(request) => request,
        Err(e) => {
            error!("not an admission request: {e}");
            return Ok(reply::json(
                &AdmissionResponse::invalid(e.to_string()).into_review(),
            ));
        }
    };
    let mut response = AdmissionResponse::from(&request);
    if let Some(object) = &request.object {
        let name = object.name_any();
        response = match label(response.clone(), object) {
            Ok(patched) => {
                info!("accepted: {:?} on {name}", request.operation);
                patched
            }
            Err(why) => {
                warn!("denied: {:?} on {name} ({why})", request.operation);
                response.deny(why)
            }
        };
    }
    Ok(reply::json(&response.into_review()))
}

/// Denies an object labelled `illegal`; adds the label `admission` to one without it.
fn label(response: AdmissionResponse, object: &DynamicObject) -> Result<AdmissionResponse, String> {
    let labels = object.labels();
    if labels.contains_key("illegal") {
        return Err("the object carries the label \"illegal\"".into());
    }
    if labels.contains_key("admission") {
        return Ok(response);
    }
    let mut ops = Vec::new();
    if object.metadata.labels.is_none() {
        ops.push(json_patch::PatchOperation::Add(json_patch::AddOperation {
            path: json_patch::jsonptr::PointerBuf::parse("/metadata/labels").expect("a pointer"),
            value: serde_json::json!({}),
        }));
    }
    ops.push(json_patch::PatchOperation::Add(json_patch::AddOperation {
        path: json_patch::jsonptr::PointerBuf::parse("/metadata/labels/admission")
            .expect("a pointer"),
        value: "modified-by-admission-controller".into(),
    }));
    response
        .with_patch(json_patch::Patch(ops))
        .map_err(|e| e.to_string())
}
