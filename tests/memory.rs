//! Memory stays bounded by configuration, not by traffic: a burst of large launch Pod reviews
//! against the server binary (its own process, so its memory is measured alone) with the
//! budget a 256 MiB container gets.

#[path = "../benches/support/cases.rs"]
mod cases;

use launchgate::server::budget::default_budget;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const LIMIT: u64 = 256 << 20;

/// `VmHWM` / `VmRSS` of a process, in bytes.
fn status_bytes(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("{field} in /proc/{pid}/status"));
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap();
    kib * 1024
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The server binary with the budget a 256 MiB container gets, ready, and a client for it.
async fn start_server() -> (Server, tempfile::TempDir, reqwest::Client, String) {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let budget_mib = default_budget(Some(LIMIT)) >> 20;
    let server = Server(
        Command::new(env!("CARGO_BIN_EXE_launchgate"))
            .args([
                "serve",
                &format!("--listen=127.0.0.1:{port}"),
                &format!("--dev-cert-dir={}", dir.path().display()),
                &format!("--memory-budget-mib={budget_mib}"),
                "--log-level=warn",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let base = format!("https://127.0.0.1:{port}");
    let until = Instant::now() + Duration::from_secs(30);
    let client = loop {
        if let Ok(ca) = std::fs::read_to_string(dir.path().join("ca.crt"))
            && !ca.is_empty()
        {
            let client = reqwest::Client::builder()
                .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).unwrap())
                .tls_built_in_root_certs(false)
                .http1_only()
                .timeout(Duration::from_secs(60))
                .build()
                .unwrap();
            if client
                .get(format!("{base}/readyz"))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
            {
                break client;
            }
        }
        assert!(Instant::now() < until, "server not ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    (server, dir, client, base)
}

/// Sends `body` to `/mutate` `n` times at once; the HTTP statuses and the answers.
async fn burst(
    client: &reqwest::Client,
    base: &str,
    body: bytes::Bytes,
    n: usize,
) -> Vec<Result<(u16, serde_json::Value), String>> {
    let mut requests = Vec::new();
    for _ in 0..n {
        let (client, url, body) = (client.clone(), format!("{base}/mutate"), body.clone());
        requests.push(tokio::spawn(async move {
            let r = client
                .post(url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .map_err(|e| e.to_string())?;
            let status = r.status().as_u16();
            let answer = r.json().await.unwrap_or(serde_json::Value::Null);
            Ok((status, answer))
        }));
    }
    let mut out = Vec::new();
    for r in requests {
        out.push(r.await.unwrap());
    }
    out
}

/// The API server defaults every container, so a Pod of many tiny containers costs ~65× its
/// body to review: memory is charged by shape. One that could never fit the budget (50k
/// containers, 7.6 MiB reviewed, ~500 MiB to mutate) is denied unreviewed with the reason, and
/// a burst of dense Pods that do fit is reviewed within the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dense_reviews_are_charged_by_shape_and_stay_within_a_256_mib_limit() {
    let (server, _dir, client, base) = start_server().await;
    let pid = server.0.id();
    let huge = bytes::Bytes::from(cases::dense_pod(50_000));
    let answers = burst(&client, &base, huge, 2).await;
    for a in &answers {
        let (status, answer) = a.as_ref().unwrap();
        assert_eq!(*status, 200, "{answer}");
        assert_eq!(answer["response"]["allowed"], false, "{answer}");
        let message = answer["response"]["status"]["message"].as_str().unwrap();
        assert!(
            message.contains("too large to review") && message.contains("50000 containers"),
            "{message}"
        );
    }
    // Dense Pods that fit (5k containers, ~50 MiB to mutate each): all reviewed, in turn.
    let dense = bytes::Bytes::from(cases::dense_pod(5_000));
    let answers = burst(&client, &base, dense, 8).await;
    let reviewed = answers
        .iter()
        .filter(|a| matches!(a, Ok((200, v)) if v["response"]["allowed"] == true))
        .count();
    for a in &answers {
        assert!(
            matches!(a, Ok((200, _)) | Ok((503, _))),
            "answered (200, or 503 past the deadline): {a:?}"
        );
    }
    assert!(reviewed > 0, "{answers:?}");
    let peak = status_bytes(pid, "VmHWM:");
    eprintln!(
        "memory: dense burst: {reviewed}/8 reviewed, peak (VmHWM) {} MiB",
        peak >> 20
    );
    assert!(peak < LIMIT, "peak RSS {} MiB", peak >> 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_large_reviews_stays_within_a_256_mib_limit() {
    let (server, _dir, client, base) = start_server().await;
    let pid = server.0.id();
    let budget_mib = default_budget(Some(LIMIT)) >> 20;
    let idle_rss = status_bytes(pid, "VmRSS:");

    // 16 launch Pods of ~1.5 MiB (300 containers of ~5 KiB), all at once.
    let body = bytes::Bytes::from(cases::generated_pod(300, 5 * 1024));
    assert!(body.len() > 1_400_000, "{} bytes", body.len());
    let mut requests = Vec::new();
    for _ in 0..16 {
        let (client, url, body) = (client.clone(), format!("{base}/mutate"), body.clone());
        requests.push(tokio::spawn(async move {
            client
                .post(url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .map(|r| r.status().as_u16())
                .map_err(|e| e.to_string())
        }));
    }
    let mut statuses = Vec::new();
    for r in requests {
        statuses.push(r.await.unwrap());
    }
    for status in &statuses {
        assert!(
            matches!(status, Ok(200) | Ok(503)),
            "every review is answered (200, or 503 past the deadline): {statuses:?}"
        );
    }
    let answered = statuses.iter().filter(|s| matches!(s, Ok(200))).count();
    assert!(answered > 0, "{statuses:?}");

    let peak = status_bytes(pid, "VmHWM:");
    tokio::time::sleep(Duration::from_secs(10)).await;
    let after = status_bytes(pid, "VmRSS:");
    eprintln!(
        "memory: budget {budget_mib} MiB; idle RSS {} MiB, peak (VmHWM) {} MiB, RSS 10 s after {} MiB; {answered}/16 answered 200",
        idle_rss >> 20,
        peak >> 20,
        after >> 20
    );
    assert!(peak < LIMIT, "peak RSS {} MiB", peak >> 20);
    assert!(
        after < 96 << 20,
        "RSS 10 s after the burst: {} MiB",
        after >> 20
    );
}
