//! Shared harness for integration tests: start the real HTTPS server on an ephemeral port
//! with a freshly generated certificate, and a client that trusts it.
#![allow(dead_code)]

use launchgate::admission::AdmissionResponse;
use launchgate::server::{RunningServer, ServeOptions, start};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub struct TestServer {
    pub server: RunningServer,
    pub client: reqwest::Client,
    pub base: String,
    pub dir: tempfile::TempDir,
}

impl TestServer {
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The HTTP status of `GET path`.
    pub async fn get_status(&self, path: &str) -> reqwest::StatusCode {
        self.client
            .get(self.url(path))
            .send()
            .await
            .expect("request reaches the server")
            .status()
    }

    /// POSTs a JSON body to `path`.
    pub async fn post(&self, path: &str, body: Vec<u8>) -> reqwest::Response {
        self.client
            .post(self.url(path))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("request reaches the server")
    }
}

/// Runs `cmd` with `input` on its standard input; its output captured.
pub fn run_with_stdin(cmd: &mut std::process::Command, input: &[u8]) -> std::process::Output {
    use std::io::Write as _;
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the command starts");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input)
        .expect("input written");
    child.wait_with_output().expect("the command ends")
}

/// The `/metrics` text of the server at `base`.
pub async fn metrics_text(client: &reqwest::Client, base: &str) -> String {
    client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .expect("metrics reachable")
        .text()
        .await
        .expect("metrics text")
}

/// Options for an ephemeral-port server whose dev certificate lands in `dir`.
pub fn options(dir: &Path) -> ServeOptions {
    ServeOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        dev_cert_dir: dir.join("dev-certs"),
        reload_interval: Duration::from_millis(200),
        ..ServeOptions::default()
    }
}

/// A client trusting `ca_pem`.
pub fn client_for(ca_pem: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca_pem.as_bytes()).unwrap())
        .tls_built_in_root_certs(false)
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

/// Starts the server with the built-in policy and a generated certificate.
pub async fn start_default() -> TestServer {
    let dir = tempfile::tempdir().unwrap();
    start_with(options(dir.path()), dir).await
}

/// Starts the server with `opts`; the client trusts the dev CA, or `dir/ca.crt` when files
/// are configured.
pub async fn start_with(opts: ServeOptions, dir: tempfile::TempDir) -> TestServer {
    let server = start(opts, None).await.expect("server starts");
    let ca = server.dev_ca_pem.clone().unwrap_or_else(|| {
        std::fs::read_to_string(dir.path().join("ca.crt")).expect("ca.crt in test dir")
    });
    let client = client_for(&ca);
    let base = format!("https://localhost:{}", server.local_addr.port());
    TestServer {
        server,
        client,
        base,
        dir,
    }
}

/// The JSON Patch of an AdmissionReview `response` (`None` when it carries none), decoded with
/// the library's own [`AdmissionResponse::decoded_patch`].
pub fn decode_patch(response: &serde_json::Value) -> Option<json_patch::Patch> {
    let response: AdmissionResponse =
        serde_json::from_value(response.clone()).expect("an AdmissionResponse");
    response
        .decoded_patch()
        .map(|p| p.expect("patch is base64 of a JSON Patch"))
}

/// The recorded AdmissionReview fixtures, by file name.
pub fn fixtures() -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/admission");
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

/// One fixture's bytes.
pub fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/admission")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
