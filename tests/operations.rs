//! Operations under a running HTTPS server: certificate rotation by a Secret-volume style
//! symlink swap, config hot reload with a bad file, slow clients, client-certificate checks.

mod common;

use common::{
    fixture_bytes, fixture_json, json_post, metrics_text, options, start_with, start_with_config,
    wait_for_metrics,
};
use launchgate::certs::{GeneratedCerts, generate};
use rustls::pki_types::pem::PemObject;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A directory laid out like a mounted Secret volume: `tls.crt` and `tls.key` are symlinks
/// into `..data`, itself a symlink to a timestamped directory that the kubelet swaps
/// atomically (`rename` of a new `..data` link over the old one).
struct SecretVolume {
    root: PathBuf,
    generation: usize,
}

impl SecretVolume {
    fn create(root: &Path, certs: &GeneratedCerts) -> SecretVolume {
        std::fs::create_dir_all(root).unwrap();
        let mut vol = SecretVolume {
            root: root.to_path_buf(),
            generation: 0,
        };
        vol.swap_in(&certs.cert_pem, &certs.key_pem, &certs.ca_pem);
        for file in ["tls.crt", "tls.key", "ca.crt"] {
            std::os::unix::fs::symlink(format!("..data/{file}"), root.join(file)).unwrap();
        }
        vol
    }

    /// Writes a new timestamped directory and atomically points `..data` at it.
    fn swap_in(&mut self, cert_pem: &str, key_pem: &str, ca_pem: &str) {
        self.generation += 1;
        let dir_name = format!("..2026_11_23_{:02}", self.generation);
        let dir = self.root.join(&dir_name);
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("tls.crt"), cert_pem).unwrap();
        std::fs::write(dir.join("tls.key"), key_pem).unwrap();
        std::fs::write(dir.join("ca.crt"), ca_pem).unwrap();
        let tmp = self.root.join("..data_tmp");
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&dir_name, &tmp).unwrap();
        std::fs::rename(&tmp, self.root.join("..data")).unwrap();
    }

    fn cert(&self) -> PathBuf {
        self.root.join("tls.crt")
    }
    fn key(&self) -> PathBuf {
        self.root.join("tls.key")
    }
}

fn names() -> Vec<String> {
    vec!["localhost".into(), "127.0.0.1".into()]
}

/// `GET url` on a brand-new client trusting only `ca_pem`: a new connection and a full TLS
/// handshake (no pooled connection, no resumed session), so it sees the certificate the
/// server presents right now.
async fn fresh_get(ca_pem: &str, url: &str) -> reqwest::Result<reqwest::Response> {
    reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca_pem.as_bytes()).unwrap())
        .tls_built_in_root_certs(false)
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
        .get(url)
        .send()
        .await
}

/// The value of the first metric line starting with `prefix` (0 when absent).
fn metric(text: &str, prefix: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_rotation_by_symlink_swap_loses_no_request() {
    let dir = tempfile::tempdir().unwrap();
    let old = generate(&names(), 30).unwrap();
    let new = generate(&names(), 30).unwrap();
    let mut vol = SecretVolume::create(&dir.path().join("secret"), &old);
    std::fs::write(dir.path().join("ca.crt"), &old.ca_pem).unwrap();
    let opts = launchgate::server::ServeOptions {
        tls_cert: Some(vol.cert()),
        tls_key: Some(vol.key()),
        reload_interval: Duration::from_millis(100),
        ..options(dir.path())
    };
    let srv = start_with(opts, dir).await;
    let base = srv.base.clone();

    // Keep-alive and fresh-connection clients that trust both CAs keep sending requests.
    let both = |fresh: bool| {
        let mut b = reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(old.ca_pem.as_bytes()).unwrap())
            .add_root_certificate(reqwest::Certificate::from_pem(new.ca_pem.as_bytes()).unwrap())
            .tls_built_in_root_certs(false)
            .timeout(Duration::from_secs(10));
        if fresh {
            b = b.pool_max_idle_per_host(0);
        }
        b.build().unwrap()
    };
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let mut senders = Vec::new();
    for fresh in [false, true] {
        let (client, stop, sent, failed, base) = (
            both(fresh),
            stop.clone(),
            sent.clone(),
            failed.clone(),
            base.clone(),
        );
        senders.push(tokio::spawn(async move {
            let body = fixture_bytes("create-job-demo.json");
            while !stop.load(Ordering::Relaxed) {
                let result = json_post(&client, format!("{base}/mutate"), body.clone())
                    .send()
                    .await;
                sent.fetch_add(1, Ordering::Relaxed);
                match result {
                    Ok(r) if r.status() == 200 => {
                        let review: Value = r.json().await.unwrap();
                        if review["response"]["allowed"] != true {
                            failed.lock().unwrap().push(format!("denied: {review}"));
                        }
                    }
                    Ok(r) => failed
                        .lock()
                        .unwrap()
                        .push(format!("status {}", r.status())),
                    Err(e) => failed.lock().unwrap().push(format!("{e:?}")),
                }
            }
        }));
    }

    let readyz = format!("{base}/readyz");
    assert_eq!(fresh_get(&old.ca_pem, &readyz).await.unwrap().status(), 200);
    assert!(
        fresh_get(&new.ca_pem, &readyz).await.is_err(),
        "before the swap the server presents the old certificate"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;

    // A half-written rotation first: the new certificate with the old key. It must be rejected
    // and the old certificate kept.
    vol.swap_in(&new.cert_pem, &old.key_pem, &new.ca_pem);
    wait_for_metrics(&both(false), &base, "mismatched pair never rejected", |t| {
        metric(
            t,
            r#"launchgate_certificate_reloads_total{result="failure"}"#,
        ) >= 1.0
    })
    .await;
    assert_eq!(
        fresh_get(&old.ca_pem, &readyz).await.unwrap().status(),
        200,
        "the old certificate is still served after a rejected pair"
    );

    // The real rotation.
    vol.swap_in(&new.cert_pem, &new.key_pem, &new.ca_pem);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(r) = fresh_get(&new.ca_pem, &readyz).await {
            assert_eq!(r.status(), 200);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "new connections never got the new certificate"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        fresh_get(&old.ca_pem, &readyz).await.is_err(),
        "after the swap new connections no longer get the old certificate"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    for s in senders {
        s.await.unwrap();
    }
    let failed = std::mem::take(&mut *failed.lock().unwrap());
    let sent = sent.load(Ordering::Relaxed);
    assert!(sent > 20, "the clients kept sending ({sent} requests)");
    assert!(
        failed.is_empty(),
        "{} of {sent} requests failed during rotation: {:?}",
        failed.len(),
        &failed[..failed.len().min(5)]
    );
    let text = metrics_text(&both(false), &base).await;
    assert!(
        metric(
            &text,
            r#"launchgate_certificate_reloads_total{result="success"}"#
        ) >= 1.0,
        "{text}"
    );
}

#[tokio::test]
async fn invalid_config_keeps_the_old_policy_and_readiness_then_a_valid_one_takes_effect() {
    let default = launchgate::policy::DEFAULT_CONFIG_YAML;
    let (srv, config_path) = start_with_config(default).await;
    let review = |endpoint: &'static str| {
        let srv = &srv;
        async move {
            let v: Value = srv
                .post_json(endpoint, fixture_bytes("create-job-launch-acme-mnist.json"))
                .await;
            v
        }
    };
    // The recorded acme-mnist Job asks for 8 GPUs: denied by the default gpus 0..4.
    assert_eq!(review("/validate").await["response"]["allowed"], false);

    // An invalid config (misspelled key): rejected, counted, old policy and readiness kept.
    std::fs::write(
        &config_path,
        default.replacen("defaultQueue:", "defaultQueeu:", 1),
    )
    .unwrap();
    srv.wait_for_metrics("bad config never rejected", |t| {
        metric(t, r#"launchgate_config_reloads_total{result="failure"}"#) >= 1.0
    })
    .await;
    assert_eq!(srv.get_status("/readyz").await, 200);
    assert_eq!(
        review("/validate").await["response"]["allowed"],
        false,
        "old policy still active"
    );

    // A valid config that raises the GPU limit to 8 takes effect.
    let raised = default.replace("maximum: 4", "maximum: 8");
    assert_ne!(raised, default, "default config has a gpus maximum of 4");
    std::fs::write(&config_path, raised).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = review("/validate").await;
        if answer["response"]["allowed"] == true {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "valid config never took effect: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let text = srv.metrics().await;
    assert!(
        metric(
            &text,
            r#"launchgate_config_reloads_total{result="success"}"#
        ) >= 1.0,
        "{text}"
    );
}

/// Opens a TLS connection to the server trusting `ca_pem`.
async fn tls_connect(
    addr: std::net::SocketAddr,
    ca_pem: &str,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    connector
        .connect("localhost".try_into().unwrap(), tcp)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_stalled_client_is_cut_off_after_the_read_timeout_while_others_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let opts = launchgate::server::ServeOptions {
        read_timeout: Duration::from_millis(500),
        ..options(dir.path())
    };
    let srv = start_with(opts, dir).await;
    let ca = srv.server.dev_ca_pem.clone().unwrap();
    let addr = srv.server.local_addr;

    // Stalls in the headers.
    let mut in_headers = tls_connect(addr, &ca).await;
    in_headers
        .write_all(
            b"POST /mutate HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n",
        )
        .await
        .unwrap();
    // Sends complete headers, then stalls in the body.
    let mut in_body = tls_connect(addr, &ca).await;
    in_body
        .write_all(
            b"POST /mutate HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: 5000\r\n\r\n{\"apiVersion\":",
        )
        .await
        .unwrap();
    // Never even finishes the TLS handshake.
    let mut no_handshake = tokio::net::TcpStream::connect(addr).await.unwrap();

    // Meanwhile other requests are served.
    for _ in 0..5 {
        let resp = srv
            .post("/mutate", fixture_bytes("create-job-demo.json"))
            .await;
        assert_eq!(resp.status(), 200);
    }

    // Each stalled connection is closed by the server (read returns EOF, an error, or the
    // 408 answer for the body), well before the test's own 10 s guard.
    let guard = Duration::from_secs(10);
    let mut buf = Vec::new();
    let headers_end = tokio::time::timeout(guard, in_headers.read_to_end(&mut buf)).await;
    assert!(
        headers_end.is_ok(),
        "connection stalled in its headers was never closed"
    );

    let mut buf = Vec::new();
    let body_end = tokio::time::timeout(guard, in_body.read_to_end(&mut buf)).await;
    assert!(
        body_end.is_ok(),
        "connection stalled in its body was never closed"
    );
    let text = String::from_utf8_lossy(&buf);
    assert!(
        text.starts_with("HTTP/1.1 408"),
        "a stalled body gets 408 Request Timeout, got: {text}"
    );

    let mut raw = [0u8; 16];
    let handshake_end = tokio::time::timeout(guard, no_handshake.read(&mut raw)).await;
    assert!(
        matches!(handshake_end, Ok(Ok(0)) | Ok(Err(_))),
        "connection without a TLS handshake was never closed: {handshake_end:?}"
    );

    let text = srv.metrics().await;
    assert!(
        metric(
            &text,
            r#"launchgate_admission_request_errors_total{endpoint="mutate",reason="read_timeout"}"#
        ) >= 1.0,
        "{text}"
    );
    assert_eq!(
        srv.post("/mutate", fixture_bytes("create-job-demo.json"))
            .await
            .status(),
        200
    );
}

/// A CA and a client certificate (clientAuth) signed by it, as the API server would present.
fn client_identity() -> (String, String) {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    };
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "apiserver client CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    (
        ca_cert.pem(),
        format!("{}{}", cert.pem(), key.serialize_pem()),
    )
}

#[tokio::test]
async fn client_ca_requires_a_certificate_signed_by_it() {
    let dir = tempfile::tempdir().unwrap();
    let (client_ca, identity_pem) = client_identity();
    let client_ca_path = dir.path().join("client-ca.crt");
    std::fs::write(&client_ca_path, &client_ca).unwrap();
    let opts = launchgate::server::ServeOptions {
        client_ca: Some(client_ca_path),
        ..options(dir.path())
    };
    let srv = start_with(opts, dir).await;
    let server_ca = srv.server.dev_ca_pem.clone().unwrap();

    // Without a client certificate: the handshake fails.
    assert!(
        srv.client.get(srv.url("/readyz")).send().await.is_err(),
        "a client without a certificate is refused"
    );
    // With one from another CA: refused too.
    let (_, stranger) = client_identity();
    let with_identity = |pem: &str| {
        reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(server_ca.as_bytes()).unwrap())
            .tls_built_in_root_certs(false)
            .identity(reqwest::Identity::from_pem(pem.as_bytes()).unwrap())
            .build()
            .unwrap()
    };
    assert!(
        with_identity(&stranger)
            .get(srv.url("/readyz"))
            .send()
            .await
            .is_err(),
        "a client certificate from another CA is refused"
    );
    // With the API server's certificate: served.
    let client = with_identity(&identity_pem);
    let resp = json_post(
        &client,
        srv.url("/mutate"),
        fixture_bytes("create-job-demo.json"),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(resp.status(), 200);
}

#[tokio::test]
async fn tls_below_1_2_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start_with(options(dir.path()), dir).await;
    // A TLS 1.1 ClientHello (record version 0x0301, client_version 0x0302) with common
    // pre-1.2 suites: the server must answer with an alert or close, never a ServerHello.
    let mut hello_body = Vec::new();
    hello_body.extend_from_slice(&[0x03, 0x02]); // client_version TLS 1.1
    hello_body.extend_from_slice(&[0u8; 32]); // random
    hello_body.push(0); // session id
    hello_body.extend_from_slice(&[0x00, 0x04, 0x00, 0x2f, 0x00, 0x35]); // AES128-SHA, AES256-SHA
    hello_body.extend_from_slice(&[0x01, 0x00]); // compression: null
    let mut handshake = vec![0x01];
    handshake.extend_from_slice(&(hello_body.len() as u32).to_be_bytes()[1..]);
    handshake.extend_from_slice(&hello_body);
    let mut record = vec![0x16, 0x03, 0x01];
    record.extend_from_slice(&(handshake.len() as u16).to_be_bytes());
    record.extend_from_slice(&handshake);
    let mut tcp = tokio::net::TcpStream::connect(srv.server.local_addr)
        .await
        .unwrap();
    tcp.write_all(&record).await.unwrap();
    let mut answer = [0u8; 5];
    let n = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut answer))
        .await
        .expect("server answers");
    match n {
        Ok(0) | Err(_) => {}
        Ok(_) => assert_eq!(
            answer[0], 0x15,
            "an alert record, not a handshake: {answer:?}"
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_gets_no_slot_within_the_deadline_is_answered_503() {
    let dir = tempfile::tempdir().unwrap();
    let opts = launchgate::server::ServeOptions {
        max_concurrency: 1,
        request_deadline: Duration::from_millis(50),
        ..options(dir.path())
    };
    let srv = start_with(opts, dir).await;

    // Holds the only slot for a while: a ~7 MiB Pod (not a launch workload) made of 500,000
    // tiny annotations, which takes the core a long time to parse in a debug build.
    let mut slow = fixture_json("create-pod-kaniko-build-abc.json");
    let annotations: serde_json::Map<String, Value> = (0..500_000)
        .map(|i| (format!("a{i}"), Value::from("")))
        .collect();
    slow["request"]["object"]["metadata"]["annotations"] = Value::Object(annotations);
    let slow_body = serde_json::to_vec(&slow).unwrap();
    assert!(slow_body.len() < launchgate::server::MAX_BODY_BYTES);
    let (client, url) = (srv.client.clone(), srv.url("/validate"));
    let holder = tokio::spawn(async move {
        json_post(&client, url, slow_body)
            .send()
            .await
            .unwrap()
            .status()
    });
    srv.wait_for_metrics("the slow request never held the slot", |t| {
        metric(t, "launchgate_admission_in_flight ") >= 1.0
    })
    .await;

    // Meanwhile a normal request finds no free slot: a fast 503 with a JSON error, so the API
    // server applies failurePolicy now rather than after its own timeout.
    let resp = srv
        .post("/mutate", fixture_bytes("create-job-demo.json"))
        .await;
    let status = resp.status();
    let err: Value = resp.json().await.unwrap();
    assert_eq!(status, 503, "{err}");
    assert!(err["error"].as_str().unwrap().contains("deadline"), "{err}");

    // The slot holder is still answered normally, and the server serves again afterwards.
    assert_eq!(holder.await.unwrap(), 200);
    assert_eq!(
        srv.post("/mutate", fixture_bytes("create-job-demo.json"))
            .await
            .status(),
        200
    );
    let text = srv.metrics().await;
    assert!(
        metric(
            &text,
            r#"launchgate_admission_request_errors_total{endpoint="mutate",reason="deadline"}"#
        ) >= 1.0,
        "{text}"
    );
}

/// A connected cluster view whose look-up panics: stands in for a bug reached while reviewing
/// (the server asks whether it is connected once, at start).
struct PanickingCluster;

impl launchgate::cluster::ClusterView for PanickingCluster {
    fn workload(&self, _: launchgate::WorkloadKind, _: &str, _: &str) -> Option<Arc<Value>> {
        panic!("cluster view bug")
    }
    fn is_connected(&self) -> bool {
        true
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_while_reviewing_answers_that_request_500_and_the_server_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let server = launchgate::server::start(options(dir.path()), Some(Arc::new(PanickingCluster)))
        .await
        .expect("server starts");
    let srv = common::TestServer::new(server, dir);
    // A Volcano pod whose Job the review looks up in the cluster view; once small (reviewed
    // inline), once over 512 KiB (reviewed on a blocking thread).
    let small = fixture_bytes("create-pod-wandb-job-run42-worker-1.json");
    let mut large = fixture_json("create-pod-wandb-job-run42-worker-1.json");
    large["request"]["object"]["metadata"]["annotations"]["filler"] =
        Value::String("x".repeat(600 * 1024));
    for body in [small, serde_json::to_vec(&large).unwrap()] {
        // `post` fails the test if the connection is dropped instead of answered.
        let resp = srv.post("/mutate", body).await;
        assert_eq!(resp.status(), 500);
        let err: Value = resp.json().await.unwrap();
        assert_eq!(err["code"], 500, "{err}");
        assert_eq!(
            err["error"],
            "internal error while reviewing the request (a bug in launchgate; it was logged)"
        );
    }
    // Other requests are served, and the failed ones hold no slot, memory or in-flight count.
    let resp = srv
        .post("/mutate", fixture_bytes("create-job-demo.json"))
        .await;
    assert_eq!(resp.status(), 200);
    let text = srv.metrics().await;
    for line in [
        r#"launchgate_admission_request_errors_total{endpoint="mutate",reason="internal"} 2"#,
        "launchgate_admission_in_flight 0",
        "launchgate_memory_in_flight_bytes 0",
    ] {
        assert!(text.lines().any(|l| l == line), "{line}:\n{text}");
    }
    srv.server.begin_shutdown();
    srv.server.wait().await.unwrap();
}
