//! Certificates: a CA and a serving certificate for a Service DNS name (manual installs and
//! the self-signed development certificate of `launchgate serve`).

use anyhow::{Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use std::path::{Path, PathBuf};

/// PEM-encoded CA certificate, serving certificate and serving key.
pub struct GeneratedCerts {
    /// The CA certificate (PEM) that signed the serving certificate: the webhook's `caBundle`.
    pub ca_pem: String,
    /// The serving certificate (PEM).
    pub cert_pem: String,
    /// Its private key (PEM).
    pub key_pem: String,
}

/// Generates a fresh CA and a serving certificate valid for `dns_names` (IP literals become
/// IP SANs), valid for `days`.
pub fn generate(dns_names: &[String], days: i64) -> Result<GeneratedCerts> {
    let now = time_now();
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "launchgate CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca_params.not_before = now - time::Duration::days(1);
    ca_params.not_after = now + time::Duration::days(days + 365);
    let ca_key = KeyPair::generate()?;
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);

    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name.push(
        DnType::CommonName,
        dns_names
            .first()
            .cloned()
            .unwrap_or_else(|| "launchgate".into()),
    );
    for name in dns_names {
        let san = match name.parse::<std::net::IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(name.clone().try_into().context("invalid DNS name")?),
        };
        params.subject_alt_names.push(san);
    }
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.not_before = now - time::Duration::days(1);
    params.not_after = now + time::Duration::days(days);
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;
    Ok(GeneratedCerts {
        ca_pem: ca_cert.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

fn time_now() -> time::OffsetDateTime {
    time::OffsetDateTime::now_utc()
}

/// Paths written by [`write_to_dir`].
pub struct WrittenCerts {
    /// Where the CA certificate was written.
    pub ca: PathBuf,
    /// Where the serving certificate was written.
    pub cert: PathBuf,
    /// Where its key was written.
    pub key: PathBuf,
}

/// Writes `ca.crt`, `tls.crt` and `tls.key` (mode 0600) into `dir`.
pub fn write_to_dir(certs: &GeneratedCerts, dir: &Path) -> Result<WrittenCerts> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let ca = dir.join("ca.crt");
    let cert = dir.join("tls.crt");
    let key = dir.join("tls.key");
    std::fs::write(&ca, &certs.ca_pem)?;
    std::fs::write(&cert, format!("{}{}", certs.cert_pem, certs.ca_pem))?;
    write_private(&key, certs.key_pem.as_bytes())?;
    Ok(WrittenCerts { ca, cert, key })
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    #[cfg(unix)]
    use std::os::unix::fs::OpenOptionsExt;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    opts.mode(0o600);
    let mut f = opts
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    f.write_all(bytes)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generates_parseable_chain() {
        let c = generate(&["localhost".into(), "127.0.0.1".into()], 30).unwrap();
        assert!(c.ca_pem.contains("BEGIN CERTIFICATE"));
        assert!(c.key_pem.contains("PRIVATE KEY"));
        let dir = tempfile::tempdir().unwrap();
        let w = write_to_dir(&c, dir.path()).unwrap();
        assert!(
            std::fs::read_to_string(w.cert)
                .unwrap()
                .matches("BEGIN CERTIFICATE")
                .count()
                == 2
        );
    }
}
