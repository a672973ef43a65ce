//! A real control plane on loopback: etcd, kube-apiserver and kube-controller-manager from a
//! `KUBEBUILDER_ASSETS` directory (the envtest convention), on free ports, torn down on drop.
//!
//! Every child gets `PR_SET_PDEATHSIG = SIGKILL`, so even a test binary killed outright leaves
//! no process behind; [`ControlPlane::stop`] (also run by `Drop`, so by a panic's unwinding)
//! kills and reaps them.

use anyhow::{Context, Result, bail};
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The controllers the suite needs: Jobs and their pods, TTL clean-up, namespaces, garbage
/// collection and the service accounts pods need.
const CONTROLLERS: &str =
    "job,serviceaccount,serviceaccount-token,namespace,garbagecollector,ttl-after-finished";

/// A free TCP port on 127.0.0.1 (bound, then released for the child to take).
pub fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A started child process with its name and log file, killed and reaped on [`Proc::stop`].
pub struct Proc {
    pub name: &'static str,
    pub log: PathBuf,
    child: Option<Child>,
}

impl Proc {
    /// Starts `program` with `args`, its output in `dir/<name>.log`, dying with this process.
    pub fn spawn(
        name: &'static str,
        program: &Path,
        args: &[String],
        envs: &[(&str, &Path)],
        dir: &Path,
    ) -> Result<Proc> {
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log)?;
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .current_dir(dir);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", program.display()))?;
        Ok(Proc {
            name,
            log,
            child: Some(child),
        })
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Fails when the process has exited (with the end of its log).
    pub fn check_running(&mut self) -> Result<()> {
        if let Some(child) = self.child.as_mut()
            && let Some(status) = child.try_wait()?
        {
            bail!(
                "{} exited ({status}); last log lines:\n{}",
                self.name,
                tail(&self.log, 20)
            );
        }
        Ok(())
    }

    /// Sends `signal`, waits up to `grace` for the exit, then kills; returns the exit status.
    pub fn stop_with(&mut self, signal: i32, grace: Duration) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        // SAFETY: signalling our own child by pid; it has not been reaped yet.
        unsafe {
            libc::kill(child.id() as i32, signal);
        }
        let until = Instant::now() + grace;
        while Instant::now() < until {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        child.wait().ok()
    }

    pub fn stop(&mut self) {
        self.stop_with(libc::SIGKILL, Duration::from_secs(5));
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The last `n` lines of a log file.
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A running control plane and how to reach it.
pub struct ControlPlane {
    pub dir: tempfile::TempDir,
    pub kubeconfig: PathBuf,
    pub server: String,
    procs: Vec<Proc>,
}

impl ControlPlane {
    /// Starts etcd, kube-apiserver and kube-controller-manager from `assets` and waits until
    /// the API server is ready.
    pub async fn start(assets: &Path) -> Result<ControlPlane> {
        for bin in ["etcd", "kube-apiserver", "kube-controller-manager"] {
            if !assets.join(bin).is_file() {
                bail!("{} has no {bin}", assets.display());
            }
        }
        let dir = tempfile::Builder::new()
            .prefix("launchgate-e2e-")
            .tempdir()?;
        let d = dir.path();
        let etcd_port = free_port()?;
        let peer_port = free_port()?;
        let api_port = free_port()?;
        let server = format!("https://127.0.0.1:{api_port}");
        let token = format!("e2e-{:x}", rand_u64());
        let pki = Pki::write(d, &token, &server)?;
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");

        let mut procs = Vec::new();
        procs.push(Proc::spawn(
            "etcd",
            &assets.join("etcd"),
            &[
                format!("--data-dir={}", d.join("etcd").display()),
                format!("--listen-client-urls={etcd_url}"),
                format!("--advertise-client-urls={etcd_url}"),
                format!("--listen-peer-urls=http://127.0.0.1:{peer_port}"),
                "--unsafe-no-fsync".into(),
            ],
            &[],
            d,
        )?);
        procs.push(Proc::spawn(
            "kube-apiserver",
            &assets.join("kube-apiserver"),
            &[
                format!("--etcd-servers={etcd_url}"),
                "--bind-address=127.0.0.1".into(),
                "--advertise-address=127.0.0.1".into(),
                format!("--secure-port={api_port}"),
                format!("--tls-cert-file={}", pki.serving_cert.display()),
                format!("--tls-private-key-file={}", pki.serving_key.display()),
                format!("--client-ca-file={}", pki.ca.display()),
                format!("--token-auth-file={}", pki.tokens.display()),
                "--authorization-mode=RBAC".into(),
                "--service-account-issuer=https://kubernetes.default.svc".into(),
                format!("--service-account-key-file={}", pki.sa_pub.display()),
                format!(
                    "--service-account-signing-key-file={}",
                    pki.sa_key.display()
                ),
                "--service-cluster-ip-range=10.96.0.0/16".into(),
                // A Service reference resolves through endpoints (there are none), so the
                // API server never dials a ClusterIP: webhooks are registered by URL.
                "--enable-aggregator-routing=true".into(),
            ],
            &[],
            d,
        )?);
        let mut plane = ControlPlane {
            kubeconfig: pki.kubeconfig.clone(),
            server,
            dir,
            procs,
        };
        plane.wait_ready(&token, Duration::from_secs(60)).await?;
        let kcm = Proc::spawn(
            "kube-controller-manager",
            &assets.join("kube-controller-manager"),
            &[
                format!("--kubeconfig={}", pki.kubeconfig.display()),
                "--leader-elect=false".into(),
                format!("--controllers={CONTROLLERS}"),
                format!(
                    "--service-account-private-key-file={}",
                    pki.sa_key.display()
                ),
                format!("--root-ca-file={}", pki.ca.display()),
                // Each controller acts as its own service account, as on kubeadm clusters: the
                // Job controller's pods come from system:serviceaccount:kube-system:job-controller.
                "--use-service-account-credentials=true".into(),
                "--secure-port=0".into(),
                "--bind-address=127.0.0.1".into(),
                // The Job controller creates a burst of pods quickly (its own rate, not the
                // client's default 20 qps, is what the suite exercises).
                "--kube-api-qps=200".into(),
                "--kube-api-burst=400".into(),
            ],
            &[],
            plane.dir.path(),
        )?;
        plane.procs.push(kcm);
        Ok(plane)
    }

    /// Waits for `GET /readyz` to answer `ok`, failing early when a process died.
    async fn wait_ready(&mut self, token: &str, timeout: Duration) -> Result<()> {
        let until = Instant::now() + timeout;
        let ca = std::fs::read(self.dir.path().join("ca.crt"))?;
        let client = reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(&ca)?)
            .tls_built_in_root_certs(false)
            .timeout(Duration::from_secs(2))
            .build()?;
        loop {
            for p in &mut self.procs {
                p.check_running()?;
            }
            let ready = match client
                .get(format!("{}/readyz", self.server))
                .bearer_auth(token)
                .send()
                .await
            {
                Ok(r) if r.status().is_success() => r.text().await.is_ok_and(|t| t.trim() == "ok"),
                _ => false,
            };
            if ready {
                return Ok(());
            }
            if Instant::now() > until {
                bail!(
                    "kube-apiserver not ready after {timeout:?}; last log lines:\n{}",
                    tail(&self.dir.path().join("kube-apiserver.log"), 20)
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The pids of the running processes.
    pub fn pids(&self) -> Vec<u32> {
        self.procs.iter().filter_map(Proc::pid).collect()
    }

    /// Fails when any process has died.
    pub fn check_running(&mut self) -> Result<()> {
        for p in &mut self.procs {
            p.check_running()?;
        }
        Ok(())
    }

    /// Stops every process (controller manager first, etcd last) and reaps it.
    pub fn stop(&mut self) {
        while let Some(mut p) = self.procs.pop() {
            p.stop();
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Processes still alive among `pids`, or whose command line mentions `dir`.
pub fn survivors(pids: &[u32], dir: &Path) -> Vec<String> {
    let needle = dir.to_string_lossy().into_owned();
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        // A zombie is dead (only not yet reaped by someone else): not a survivor.
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        if stat
            .rsplit(')')
            .next()
            .is_some_and(|s| s.trim_start().starts_with('Z'))
        {
            continue;
        }
        let cmdline = std::fs::read(entry.path().join("cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        if pids.contains(&pid) || (!needle.is_empty() && cmdline.contains(&needle)) {
            out.push(format!("{pid}: {}", cmdline.trim()));
        }
    }
    out
}

/// A random number for tokens and names (no crate needed for this little entropy).
pub fn rand_u64() -> u64 {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    let mut h = RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    h.finish()
}

/// Certificates, keys, the token file and the admin kubeconfig of one control plane.
struct Pki {
    ca: PathBuf,
    serving_cert: PathBuf,
    serving_key: PathBuf,
    sa_key: PathBuf,
    sa_pub: PathBuf,
    tokens: PathBuf,
    kubeconfig: PathBuf,
}

impl Pki {
    fn write(dir: &Path, token: &str, server: &str) -> Result<Pki> {
        let names = vec!["127.0.0.1".to_string(), "localhost".into()];
        let certs = launchgate::certs::generate(&names, 2)?;
        let sa = rcgen::KeyPair::generate()?;
        let p = |name: &str| dir.join(name);
        std::fs::write(p("ca.crt"), &certs.ca_pem)?;
        std::fs::write(p("apiserver.crt"), &certs.cert_pem)?;
        std::fs::write(p("apiserver.key"), &certs.key_pem)?;
        std::fs::write(p("sa.key"), sa.serialize_pem())?;
        std::fs::write(p("sa.pub"), sa.public_key_pem())?;
        std::fs::write(
            p("tokens.csv"),
            format!("{token},admin,admin,\"system:masters\"\n"),
        )?;
        let kubeconfig = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "e2e", "cluster": {
                "server": server,
                "certificate-authority": p("ca.crt"),
            }}],
            "users": [{"name": "admin", "user": {"token": token}}],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "admin"}}],
            "current-context": "e2e",
        });
        std::fs::write(p("kubeconfig"), serde_json::to_vec_pretty(&kubeconfig)?)?;
        Ok(Pki {
            ca: p("ca.crt"),
            serving_cert: p("apiserver.crt"),
            serving_key: p("apiserver.key"),
            sa_key: p("sa.key"),
            sa_pub: p("sa.pub"),
            tokens: p("tokens.csv"),
            kubeconfig: p("kubeconfig"),
        })
    }
}
