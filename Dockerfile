# syntax=docker/dockerfile:1
# launchgate: static-ish Rust binary on distroless (glibc + libgcc, no shell, no package manager).
#   docker build -t launchgate:0.1.0 .
#   docker run --rm launchgate:0.1.0 --help
# The Helm chart (charts/launchgate) runs it as `launchgate serve` with mounted config and certs.

FROM rust:1-bookworm AS build
WORKDIR /src
# The whole crate (see .dockerignore): Cargo.lock pins every dependency (--locked).
COPY . .
# Cache mounts keep the registry and target dir between builds (BuildKit); the binary is
# copied out of the cached target dir so it ends up in the layer.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin launchgate \
 && install -D -m 0755 target/release/launchgate /out/launchgate

# Debian 12 runtime matching the bookworm builder's glibc; user 65532 (nonroot) by default.
FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.title="launchgate" \
      org.opencontainers.image.description="Kubernetes admission webhook for ML launch workloads" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/launchgate /launchgate
USER 65532:65532
# HTTPS: /mutate, /validate, /healthz, /readyz, /metrics.
EXPOSE 8443
ENTRYPOINT ["/launchgate"]
CMD ["serve"]
