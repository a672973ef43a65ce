//! The registries a queue allows images from (`limits.allowedRegistries`): images and
//! prefixes normalised to their registry before they are compared.

use super::Evaluation;
use crate::rules::{self, Violation};
use crate::workload::runtime;
use crate::workload::{self, CONTAINER_LISTS};
use serde_json::Value;

/// Registry prefix in the form images are compared in (`acme` → `docker.io/acme`).
pub(in crate::validate) fn normalized_registry(prefix: &str) -> String {
    let first = prefix.split('/').next().unwrap_or_default();
    if first.contains('.') || first.contains(':') || first == "localhost" {
        prefix.to_string()
    } else {
        format!("docker.io/{prefix}")
    }
}

/// An image reference with its implicit registry spelled out (`busybox` →
/// `docker.io/library/busybox`, `acme/train:1` → `docker.io/acme/train:1`).
pub(super) fn normalized_image(image: &str) -> String {
    if image.contains('/') {
        normalized_registry(image)
    } else {
        format!("docker.io/library/{image}")
    }
}

/// True when `image` (normalised) is `prefix` or lies under it (`prefix/`, `prefix:`, `prefix@`).
pub(super) fn image_allowed_by(image: &str, prefix: &str) -> bool {
    image
        .strip_prefix(prefix)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(['/', ':', '@']))
}

impl<'a> Evaluation<'a> {
    pub(super) fn check_registries(&mut self, allowed: &[String]) {
        // How a container's image not from an allowed registry is shown.
        let refused = |image: Option<&str>| match image {
            Some(image)
                if allowed
                    .iter()
                    .any(|p| image_allowed_by(&normalized_image(image), p)) =>
            {
                None
            }
            Some(image) => Some(format!("{image:?}")),
            None => Some("<none>".to_string()),
        };
        let mut bad = Vec::new();
        for (info, template) in &self.templates {
            let Some(spec) = template.get("spec") else {
                continue;
            };
            // A runtime patch carries no image (its containers' images are the runtime's).
            if runtime::is_patch_place(self.kind, &info.path_text) {
                continue;
            }
            // `kubectl debug` adds ephemeral containers to a running pod: their images too.
            for list in CONTAINER_LISTS.into_iter().chain(["ephemeralContainers"]) {
                let Some(containers) = spec.get(list).and_then(Value::as_array) else {
                    continue;
                };
                for (i, container) in containers.iter().enumerate() {
                    let place = format!("{}.{list}[{i}].image", info.spec_path_text());
                    let image = container.get("image").and_then(Value::as_str);
                    bad.extend(refused(image).map(|shown| (place, shown)));
                }
            }
        }
        // A TrainJob whose runtime is known: every image of the JobSet Trainer makes.
        for (view, (info, template)) in self
            .runtime
            .iter()
            .flat_map(|v| v.templates.iter().map(move |t| (v, t)))
        {
            let spec = workload::pod_spec(template);
            for (slot, c) in spec.into_iter().flat_map(|s| workload::containers(s, &[])) {
                let place = format!("{} {}[{}].image", view.label(info), slot.list, slot.index);
                let image = c.get("image").and_then(Value::as_str);
                bad.extend(refused(image).map(|shown| (place, shown)));
            }
        }
        // A TrainJob's image (unset and the runtime unknown: the runtime's).
        if let Some(rt) = self.kind.spec().runtime
            && self.runtime.is_none()
            && let Some(image) = runtime::settings(self.kind, self.object)
                .and_then(|t| t.get(rt.image))
                .and_then(Value::as_str)
            && let Some(shown) = refused(Some(image))
        {
            bad.push((format!("{}.{}", rt.settings.join("."), rt.image), shown));
        }
        let listed = allowed.join(", ");
        for (place, shown) in bad {
            self.report(
                Violation::new(
                    rules::LIMITS_ALLOWED_REGISTRIES,
                    format!(
                        "{place}={shown} is not from an allowed registry (allowedRegistries: {listed})"
                    ),
                )
                .at(place)
                .value(shown)
                .limit(listed.clone()),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_normalised_before_prefix_matching() {
        assert_eq!(normalized_image("busybox"), "docker.io/library/busybox");
        assert_eq!(normalized_image("acme/train:1"), "docker.io/acme/train:1");
        assert_eq!(normalized_image("ghcr.io/acme/train"), "ghcr.io/acme/train");
        assert_eq!(normalized_image("localhost:5000/x"), "localhost:5000/x");
        assert_eq!(normalized_registry("acme"), "docker.io/acme");
        assert_eq!(normalized_registry("ghcr.io/acme"), "ghcr.io/acme");
        assert!(image_allowed_by("ghcr.io/acme/train:1", "ghcr.io/acme"));
        assert!(image_allowed_by(
            "docker.io/acme/train@sha256:00",
            "docker.io/acme/train"
        ));
        assert!(!image_allowed_by("ghcr.io/acme-evil/train", "ghcr.io/acme"));
        assert!(!image_allowed_by("evil.io/ghcr.io/acme/x", "ghcr.io/acme"));
    }
}
