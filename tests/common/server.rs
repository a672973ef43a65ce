//! The real HTTPS server on an ephemeral port with a freshly generated certificate, a client
//! that trusts it, and stand-ins for the Kubernetes API served in-process on loopback.

use launchgate::server::{RunningServer, ServeOptions, start};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub struct TestServer {
    pub server: RunningServer,
    pub client: reqwest::Client,
    pub base: String,
    pub dir: tempfile::TempDir,
}

impl TestServer {
    /// Wraps a started server: a client trusting its dev CA (or `dir/ca.crt` when certificate
    /// files are configured) and its base URL.
    pub fn new(server: RunningServer, dir: tempfile::TempDir) -> TestServer {
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
        json_post(&self.client, self.url(path), body)
            .send()
            .await
            .expect("request reaches the server")
    }

    /// POSTs a JSON body to `path` and returns the JSON answer.
    pub async fn post_json(&self, path: &str, body: Vec<u8>) -> serde_json::Value {
        self.post(path, body)
            .await
            .json()
            .await
            .expect("a JSON answer")
    }

    /// The `/metrics` text.
    pub async fn metrics(&self) -> String {
        metrics_text(&self.client, &self.base).await
    }

    /// Polls `/metrics` until `check` holds, or fails with `what` after 10 s.
    pub async fn wait_for_metrics(&self, what: &str, check: impl Fn(&str) -> bool) {
        wait_for_metrics(&self.client, &self.base, what, check).await
    }
}

/// A POST of the JSON `body` to `url`, as the API server sends a review, ready to send.
pub fn json_post(
    client: &reqwest::Client,
    url: impl reqwest::IntoUrl,
    body: impl Into<reqwest::Body>,
) -> reqwest::RequestBuilder {
    client
        .post(url)
        .header("content-type", "application/json")
        .body(body)
}

/// A server started on the config file `dir/config.yaml` holding `config` (so tests can
/// rewrite it and watch the server reload), and that file's path.
pub async fn start_with_config(config: &str) -> (TestServer, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, config).unwrap();
    let opts = ServeOptions {
        config: Some(path.clone()),
        ..options(dir.path())
    };
    (start_with(opts, dir).await, path)
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

/// Polls the `/metrics` of the server at `base` until `check` holds, or fails with `what`
/// after 10 s.
pub async fn wait_for_metrics(
    client: &reqwest::Client,
    base: &str,
    what: &str,
    check: impl Fn(&str) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = metrics_text(client, base).await;
        if check(&text) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}:\n{text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
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

/// Starts the server with `opts` (no cluster view).
pub async fn start_with(opts: ServeOptions, dir: tempfile::TempDir) -> TestServer {
    TestServer::new(start(opts, None).await.expect("server starts"), dir)
}

/// Serves `app` over plain HTTP on an ephemeral loopback port, for as long as the test's
/// runtime runs; returns its base URL.
pub async fn serve_http(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

/// A Kubernetes client for the API at `base` (a stand-in from [`serve_http`]).
pub fn kube_client(base: &str) -> kube::Client {
    kube::Client::try_from(kube::Config::new(base.parse().unwrap())).unwrap()
}
