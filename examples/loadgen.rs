//! Load generator for `launchgate serve`: real TLS, HTTP/1.1 keep-alive, many connections.
//!
//! ```text
//! # open loop: a fixed arrival rate, latency measured from each request's *intended* send time
//! cargo run --release --example loadgen -- --url https://127.0.0.1:8443/mutate \
//!     --body tests/fixtures/admission/create-pod-launch-acme-mnist-mzxkz.json \
//!     --ca /tmp/launchgate-dev-certs/ca.crt --rate 5000 --duration 20s
//! # closed loop: N connections sending back to back (maximum throughput)
//! cargo run --release --example loadgen -- --url https://127.0.0.1:8443/mutate \
//!     --body tests/fixtures/admission/create-pod-launch-acme-mnist-mzxkz.json \
//!     --insecure --connections 32 --duration 20s
//! ```
//!
//! Open loop (`--rate R`): a pacer thread releases request tickets at exactly `R` per second,
//! each stamped with its intended send time; idle connections pick tickets from a shared queue.
//! When the server (or the client) falls behind, tickets wait and the wait is counted, so the
//! percentiles are free of coordinated omission. Also printed: the service time (from the
//! actual send), which leaves the queueing out.
//!
//! Closed loop (no `--rate`): every connection sends its next request as soon as the previous
//! answer is in.
//!
//! The client is deliberately cheap, because on a small machine it shares the cores with the
//! server: hyper's low-level HTTP/1.1 connection API (no pool, no redirects, no header maps
//! beyond the three we send), rustls with session resumption, one tokio worker by default
//! (`--threads`). Its own CPU use is printed so it can be subtracted.
//!
//! Errors are transport failures, timeouts and HTTP statuses other than 200. A `200` answer
//! whose review says `allowed: false` is a valid answer, not an error.
//!
//! With `--pid` (the server's process id) the server's peak and final RSS (VmRSS) and its CPU
//! time per request are reported.

use anyhow::{Context, Result, anyhow, bail};
use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio::sync::{Mutex, mpsc};
use tokio_rustls::TlsConnector;

#[derive(Parser, Debug, Clone)]
#[command(about = "HTTPS load generator for launchgate (open and closed loop)")]
struct Args {
    /// Target, e.g. https://127.0.0.1:8443/mutate
    #[arg(long)]
    url: String,
    /// Request body (an AdmissionReview JSON file). Repeat to rotate through several bodies.
    #[arg(long, required = true)]
    body: Vec<PathBuf>,
    /// Open loop at this many requests per second; omitted = closed loop.
    #[arg(long)]
    rate: Option<f64>,
    /// Measured duration (e.g. 20s, 500ms, 1m).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    duration: Duration,
    /// Warm-up before measuring (requests are sent, not counted).
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    warmup: Duration,
    /// Keep-alive connections (default: 64 open loop, 32 closed loop).
    #[arg(long)]
    connections: Option<usize>,
    /// CA certificate (PEM) to trust, e.g. the path `launchgate serve` prints.
    #[arg(long)]
    ca: Option<PathBuf>,
    /// Accept any server certificate (still TLS, no verification).
    #[arg(long, default_value_t = false)]
    insecure: bool,
    /// Client tokio worker threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Per-request timeout.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    timeout: Duration,
    /// Server process id: report its RSS and CPU time.
    #[arg(long)]
    pid: Option<u32>,
    /// Print one machine-readable JSON line at the end as well.
    #[arg(long, default_value_t = false)]
    json: bool,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .map_or((s, "s"), |i| (&s[..i], &s[i..]));
    let n: f64 = num.parse().map_err(|_| format!("bad duration {s:?}"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        _ => return Err(format!("bad duration unit in {s:?} (ms, s, m)")),
    };
    Ok(Duration::from_secs_f64(secs))
}

struct Target {
    host: String,
    port: u16,
    path: String,
    authority: String,
}

fn parse_url(url: &str) -> Result<Target> {
    let rest = url
        .strip_prefix("https://")
        .ok_or_else(|| anyhow!("only https:// URLs are supported"))?;
    let (authority, path) = rest
        .split_once('/')
        .map_or((rest, "/".to_string()), |(a, p)| (a, format!("/{p}")));
    let (host, port) = if let Some(h) = authority.strip_prefix('[') {
        let (h, p) = h
            .split_once(']')
            .ok_or_else(|| anyhow!("bad IPv6 authority"))?;
        (h.to_string(), p.strip_prefix(':').unwrap_or("443"))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), p),
            None => (authority.to_string(), "443"),
        }
    };
    Ok(Target {
        host,
        port: port.parse().context("port")?,
        path,
        authority: authority.to_string(),
    })
}

#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn tls_connector(args: &Args) -> Result<TlsConnector> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let mut config = if args.insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify(provider)))
            .with_no_client_auth()
    } else {
        let path = args.ca.as_ref().ok_or_else(|| {
            anyhow!("give --ca FILE (the CA `launchgate serve` prints) or --insecure")
        })?;
        let pem = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&pem) {
            roots.add(cert?)?;
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsConnector::from(Arc::new(config)))
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

struct Conn {
    sender: Sender,
}

struct Shared {
    target: Target,
    server_name: ServerName<'static>,
    connector: TlsConnector,
    bodies: Vec<Bytes>,
    timeout: Duration,
    errors: AtomicU64,
    error_kinds: std::sync::Mutex<std::collections::BTreeMap<String, u64>>,
    reconnects: AtomicU64,
    done: AtomicBool,
}

impl Shared {
    fn error(&self, kind: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        *self.error_kinds.lock().unwrap().entry(kind).or_default() += 1;
    }
}

async fn connect(shared: &Shared) -> Result<Conn> {
    let tcp = TcpStream::connect((shared.target.host.as_str(), shared.target.port)).await?;
    tcp.set_nodelay(true)?;
    let tls = shared
        .connector
        .connect(shared.server_name.clone(), tcp)
        .await?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(Conn { sender })
}

/// Sends one request on `conn` (reconnecting first when needed). Ok(()) on a 200 answer.
async fn send_one(shared: &Shared, conn: &mut Option<Conn>, i: usize) -> Result<(), String> {
    if conn.as_ref().is_none_or(|c| c.sender.is_closed()) {
        if conn.is_some() {
            shared.reconnects.fetch_add(1, Ordering::Relaxed);
        }
        *conn = Some(connect(shared).await.map_err(|e| format!("connect: {e}"))?);
    }
    let c = conn.as_mut().expect("just connected");
    let body = shared.bodies[i % shared.bodies.len()].clone();
    let req = Request::post(shared.target.path.as_str())
        .header(hyper::header::HOST, shared.target.authority.as_str())
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(Full::new(body))
        .expect("valid request");
    let exchange = async {
        c.sender
            .ready()
            .await
            .map_err(|e| format!("connection: {e}"))?;
        let resp = c
            .sender
            .send_request(req)
            .await
            .map_err(|e| format!("send: {e}"))?;
        let status = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("body: {e}"))?
            .to_bytes();
        if status != hyper::StatusCode::OK {
            return Err(format!("HTTP {}", status.as_u16()));
        }
        if body.is_empty() {
            return Err("empty body".into());
        }
        Ok(())
    };
    match tokio::time::timeout(shared.timeout, exchange).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => {
            *conn = None;
            Err(e)
        }
        Err(_) => {
            *conn = None;
            Err("timeout".into())
        }
    }
}

#[derive(Default)]
struct Samples {
    /// Latency from the intended send time (open loop) or from the send (closed loop), ns.
    latency: Vec<u64>,
    /// Latency from the actual send, ns.
    service: Vec<u64>,
}

/// Open-loop worker: takes tickets (intended send times) from the shared queue.
async fn open_worker(
    shared: Arc<Shared>,
    tickets: Arc<Mutex<mpsc::UnboundedReceiver<(usize, Instant)>>>,
    measure_from: Instant,
) -> Samples {
    let mut samples = Samples::default();
    let mut conn = connect(&shared).await.ok();
    loop {
        let ticket = { tickets.lock().await.recv().await };
        let Some((i, intended)) = ticket else { break };
        let sent = Instant::now();
        let result = send_one(&shared, &mut conn, i).await;
        let done = Instant::now();
        if intended < measure_from {
            continue;
        }
        match result {
            Ok(()) => {
                samples.latency.push((done - intended).as_nanos() as u64);
                samples.service.push((done - sent).as_nanos() as u64);
            }
            Err(e) => shared.error(e),
        }
    }
    samples
}

/// Closed-loop worker: back-to-back requests on one connection.
async fn closed_worker(
    shared: Arc<Shared>,
    id: usize,
    measure_from: Instant,
    until: Instant,
) -> Samples {
    let mut samples = Samples::default();
    let mut conn = connect(&shared).await.ok();
    let mut i = id;
    while !shared.done.load(Ordering::Relaxed) {
        let sent = Instant::now();
        if sent >= until {
            break;
        }
        let result = send_one(&shared, &mut conn, i).await;
        let done = Instant::now();
        i += 1;
        if sent < measure_from || done > until {
            continue;
        }
        match result {
            Ok(()) => {
                let ns = (done - sent).as_nanos() as u64;
                samples.latency.push(ns);
                samples.service.push(ns);
            }
            Err(e) => {
                shared.error(e);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    samples
}

/// Process CPU time (user + system) of `pid` ("self" for this process).
fn cpu_time(pid: &str) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    // USER_HZ is 100 on every Linux platform we care about.
    Some(Duration::from_millis((utime + stime) * 10))
}

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

fn percentile(sorted: &[u64], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Duration::from_nanos(sorted[idx.clamp(1, sorted.len()) - 1])
}

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1e3)
}

fn main() -> Result<()> {
    let args = Args::parse();
    let target = parse_url(&args.url)?;
    let server_name = ServerName::try_from(target.host.clone())
        .map_err(|e| anyhow!("server name {:?}: {e}", target.host))?;
    let mut bodies = Vec::new();
    for path in &args.body {
        bodies.push(Bytes::from(
            std::fs::read(path).with_context(|| format!("reading {}", path.display()))?,
        ));
    }
    if let Some(r) = args.rate
        && (r.is_nan() || r <= 0.0)
    {
        bail!("--rate must be positive");
    }
    let connections = args
        .connections
        .unwrap_or(if args.rate.is_some() { 64 } else { 32 })
        .max(1);
    let shared = Arc::new(Shared {
        connector: tls_connector(&args)?,
        target,
        server_name,
        bodies,
        timeout: args.timeout,
        errors: AtomicU64::new(0),
        error_kinds: Default::default(),
        reconnects: AtomicU64::new(0),
        done: AtomicBool::new(false),
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()?;

    // RSS sampler (peak over the measured window).
    let rss_peak = Arc::new(AtomicU64::new(0));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = args.pid.map(|pid| {
        let (peak, on) = (rss_peak.clone(), sampling.clone());
        std::thread::spawn(move || {
            while on.load(Ordering::Relaxed) {
                if let Some(k) = rss_kib(pid) {
                    peak.fetch_max(k, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    });

    let mode = match args.rate {
        Some(r) => format!("open loop at {r} req/s"),
        None => "closed loop".to_string(),
    };
    eprintln!(
        "loadgen: {mode}, {connections} connections, {} client thread(s), warm-up {:?}, measuring {:?} against {}",
        args.threads, args.warmup, args.duration, args.url
    );

    let (samples, window, server_cpu, client_cpu) = rt.block_on(async {
        let start = Instant::now() + Duration::from_millis(200);
        let measure_from = start + args.warmup;
        let until = measure_from + args.duration;
        let mut server_cpu_at_start = None;
        let mut handles = Vec::new();
        let pacer = if let Some(rate) = args.rate {
            let (tx, rx) = mpsc::unbounded_channel();
            let rx = Arc::new(Mutex::new(rx));
            for _ in 0..connections {
                handles.push(tokio::spawn(open_worker(
                    shared.clone(),
                    rx.clone(),
                    measure_from,
                )));
            }
            // The pacer: a plain thread releasing tickets at their intended times.
            Some(std::thread::spawn(move || {
                let interval = Duration::from_secs_f64(1.0 / rate);
                let mut i: usize = 0;
                loop {
                    let intended = start + interval.mul_f64(i as f64);
                    if intended >= until {
                        break;
                    }
                    let now = Instant::now();
                    if intended > now {
                        std::thread::sleep((intended - now).min(Duration::from_millis(1)));
                        continue;
                    }
                    if tx.send((i, intended)).is_err() {
                        break;
                    }
                    i += 1;
                }
            }))
        } else {
            for id in 0..connections {
                handles.push(tokio::spawn(closed_worker(
                    shared.clone(),
                    id,
                    measure_from,
                    until,
                )));
            }
            None
        };
        tokio::time::sleep_until(measure_from.into()).await;
        if let Some(pid) = args.pid {
            server_cpu_at_start = cpu_time(&pid.to_string());
        }
        let client_cpu_at_start = cpu_time("self");
        rss_peak.store(0, Ordering::Relaxed);
        tokio::time::sleep_until(until.into()).await;
        let server_cpu = args
            .pid
            .and_then(|pid| Some(cpu_time(&pid.to_string())? - server_cpu_at_start?));
        let client_cpu = cpu_time("self").and_then(|c| Some(c - client_cpu_at_start?));
        shared.done.store(true, Ordering::Relaxed);
        if let Some(p) = pacer {
            let _ = tokio::task::spawn_blocking(move || p.join()).await;
        }
        let mut all = Samples::default();
        for h in handles {
            if let Ok(Ok(mut s)) =
                tokio::time::timeout(args.timeout + Duration::from_secs(1), h).await
            {
                all.latency.append(&mut s.latency);
                all.service.append(&mut s.service);
            }
        }
        (all, args.duration, server_cpu, client_cpu)
    });
    sampling.store(false, Ordering::Relaxed);
    if let Some(s) = sampler {
        let _ = s.join();
    }

    let mut latency = samples.latency;
    let mut service = samples.service;
    latency.sort_unstable();
    service.sort_unstable();
    let ok = latency.len() as u64;
    let errors = shared.errors.load(Ordering::Relaxed);
    let rps = ok as f64 / window.as_secs_f64();
    let label = if args.rate.is_some() {
        "latency (from intended send time)"
    } else {
        "latency"
    };
    println!("mode:        {mode}, {connections} connections, HTTP/1.1 keep-alive over TLS");
    println!(
        "requests:    {ok} ok, {errors} errors in {:.1} s → {rps:.0} req/s",
        window.as_secs_f64()
    );
    for (name, v) in [
        (label, &latency),
        ("service time (from actual send)", &service),
    ] {
        if args.rate.is_none() && std::ptr::eq(v, &service) {
            break;
        }
        println!(
            "{name}: p50 {} ms  p90 {} ms  p99 {} ms  p99.9 {} ms  max {} ms",
            ms(percentile(v, 50.0)),
            ms(percentile(v, 90.0)),
            ms(percentile(v, 99.0)),
            ms(percentile(v, 99.9)),
            ms(percentile(v, 100.0)),
        );
    }
    if errors > 0 {
        println!("errors:      {:?}", shared.error_kinds.lock().unwrap());
    }
    let reconnects = shared.reconnects.load(Ordering::Relaxed);
    if reconnects > 0 {
        println!("reconnects:  {reconnects}");
    }
    let per_req = |cpu: Duration| {
        if ok == 0 {
            0.0
        } else {
            cpu.as_secs_f64() * 1e6 / ok as f64
        }
    };
    if let Some(c) = client_cpu {
        println!(
            "client CPU:  {:.2} s ({:.0}% of one core, {:.1} µs/request)",
            c.as_secs_f64(),
            100.0 * c.as_secs_f64() / window.as_secs_f64(),
            per_req(c)
        );
    }
    if let Some(c) = server_cpu {
        println!(
            "server CPU:  {:.2} s ({:.0}% of one core, {:.1} µs/request)",
            c.as_secs_f64(),
            100.0 * c.as_secs_f64() / window.as_secs_f64(),
            per_req(c)
        );
    }
    let rss_final = args.pid.and_then(rss_kib);
    if let Some(pid) = args.pid {
        println!(
            "server RSS:  peak {:.1} MiB, now {:.1} MiB (pid {pid}, VmRSS)",
            rss_peak.load(Ordering::Relaxed) as f64 / 1024.0,
            rss_final.unwrap_or(0) as f64 / 1024.0
        );
    }
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "mode": if args.rate.is_some() { "open" } else { "closed" },
                "rate": args.rate,
                "connections": connections,
                "ok": ok,
                "errors": errors,
                "rps": rps,
                "p50_ms": percentile(&latency, 50.0).as_secs_f64() * 1e3,
                "p90_ms": percentile(&latency, 90.0).as_secs_f64() * 1e3,
                "p99_ms": percentile(&latency, 99.0).as_secs_f64() * 1e3,
                "max_ms": percentile(&latency, 100.0).as_secs_f64() * 1e3,
                "service_p99_ms": percentile(&service, 99.0).as_secs_f64() * 1e3,
                "server_cpu_us_per_req": server_cpu.map(per_req),
                "client_cpu_us_per_req": client_cpu.map(per_req),
                "server_rss_peak_mib": args.pid.map(|_| rss_peak.load(Ordering::Relaxed) as f64 / 1024.0),
            })
        );
    }
    if errors > 0 {
        std::process::exit(1);
    }
    Ok(())
}
