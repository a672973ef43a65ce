//! TLS: rustls (TLS 1.2 and 1.3, rustls' modern default cipher suites), a certificate resolver
//! whose key pair can be swapped atomically on rotation, optional client-certificate checks.

use anyhow::{Context, Result, anyhow, bail};
use arc_swap::ArcSwap;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use std::sync::Arc;

/// The process-wide crypto provider (ring).
pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A loaded serving certificate.
pub(crate) struct LoadedCert {
    pub(crate) key: Arc<CertifiedKey>,
    /// `notAfter` of the leaf, seconds since the epoch.
    pub(crate) not_after_unix: i64,
}

/// Parses a PEM certificate chain and private key and checks that they belong together.
pub(crate) fn load_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<LoadedCert> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .context("reading certificate PEM")?;
    if certs.is_empty() {
        bail!("no certificate found in PEM");
    }
    let key: PrivateKeyDer<'static> = match PrivateKeyDer::from_pem_slice(key_pem) {
        Ok(key) => key,
        Err(pem::Error::NoItemsFound) => bail!("no private key found in PEM"),
        Err(e) => return Err(e).context("reading private key PEM"),
    };
    let (_, leaf) = x509_parser::parse_x509_certificate(&certs[0])
        .map_err(|e| anyhow!("parsing certificate: {e}"))?;
    let not_after_unix = leaf.validity().not_after.timestamp();
    let signing_key = provider()
        .key_provider
        .load_private_key(key)
        .context("loading private key")?;
    let certified = CertifiedKey::new(certs, signing_key);
    certified
        .keys_match()
        .map_err(|e| anyhow!("certificate and key do not match: {e}"))?;
    Ok(LoadedCert {
        key: Arc::new(certified),
        not_after_unix,
    })
}

/// A certificate resolver whose key can be replaced while connections are being accepted.
#[derive(Debug)]
pub(crate) struct SwappableCert {
    current: ArcSwap<CertifiedKey>,
}

impl SwappableCert {
    pub(crate) fn new(key: Arc<CertifiedKey>) -> Arc<Self> {
        Arc::new(SwappableCert {
            current: ArcSwap::new(key),
        })
    }
    pub(crate) fn swap(&self, key: Arc<CertifiedKey>) {
        self.current.store(key);
    }
}

impl ResolvesServerCert for SwappableCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

/// Builds the rustls server config: TLS 1.2+, ALPN h2 and http/1.1, optional client CA.
pub(crate) fn server_config(
    resolver: Arc<SwappableCert>,
    client_ca_pem: Option<&[u8]>,
) -> Result<rustls::ServerConfig> {
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?;
    let builder = match client_ca_pem {
        None => builder.with_no_client_auth(),
        Some(pem) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(pem) {
                roots
                    .add(cert.context("reading client CA PEM")?)
                    .context("adding client CA")?;
            }
            if roots.is_empty() {
                bail!("client CA file holds no certificate");
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                .build()
                .context("client certificate verifier")?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}
