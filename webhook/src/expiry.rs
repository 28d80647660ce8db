//! When the certificate the webhook serves expires and when it became valid, as the
//! Prometheus series `flotilla_webhook_certificate_expiry_timestamp_seconds` and
//! `flotilla_webhook_certificate_start_timestamp_seconds` (Unix seconds): read from the
//! certificate itself (`notAfter`, `notBefore`), not from the Secret's annotations, and set
//! each time the acceptor starts serving a certificate; the start lets an alert judge the
//! time left against the certificate's own lifetime. A stuck rotation shows as a timestamp that
//! stops moving while time catches up with it. It only reports; it never changes a
//! certificate.

use prometheus_client::{
    metrics::gauge::Gauge,
    registry::{Registry, Unit},
};
use tokio_rustls::rustls::pki_types::{CertificateDer, pem::PemObject};
use tracing::warn;

use super::{Error, certs::ServingCert};

/// The families' names; the registry's prefix goes before them and `_seconds` after them.
pub const CERTIFICATE_EXPIRY: &str = "webhook_certificate_expiry_timestamp";
/// See [`CERTIFICATE_EXPIRY`].
pub const CERTIFICATE_START: &str = "webhook_certificate_start_timestamp";

/// The webhook's series. Clones share the value.
#[derive(Clone, Debug, Default)]
pub struct WebhookMetrics {
    /// When the serving certificate in use expires (Unix seconds); 0 until one is served.
    pub certificate_expiry: Gauge,
    /// When it became valid (Unix seconds); 0 until one is served.
    pub certificate_start: Gauge,
}

impl WebhookMetrics {
    /// The series, registered in `registry` (the controller-manager's, prefix `flotilla`).
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = WebhookMetrics::default();
        registry.register_with_unit(
            CERTIFICATE_EXPIRY,
            "When the admission webhook's serving certificate in use expires (its notAfter), in Unix seconds",
            Unit::Seconds,
            metrics.certificate_expiry.clone(),
        );
        registry.register_with_unit(
            CERTIFICATE_START,
            "When the admission webhook's serving certificate in use became valid (its notBefore), in Unix seconds",
            Unit::Seconds,
            metrics.certificate_start.clone(),
        );
        metrics
    }

    /// Records that `cert` is being served now. A certificate whose end cannot be read is
    /// logged and leaves the previous value (the TLS acceptor refuses such a certificate
    /// anyway).
    pub fn serving(&self, cert: &ServingCert) {
        match validity(&cert.cert_pem) {
            Ok((start, end)) => {
                self.certificate_start.set(start);
                self.certificate_expiry.set(end);
            }
            Err(error) => warn!(%error, "cannot read the serving certificate's expiry"),
        }
    }
}

/// The `notAfter` of the first certificate of a PEM chain, in Unix seconds.
pub fn not_after(cert_pem: &str) -> Result<i64, Error> {
    validity(cert_pem).map(|(_, end)| end)
}

/// The `notBefore` and `notAfter` of the first certificate of a PEM chain, in Unix seconds.
pub fn validity(cert_pem: &str) -> Result<(i64, i64), Error> {
    let bad = |e: &dyn std::fmt::Display| Error::Config(format!("the serving certificate: {e}"));
    let der = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .next()
        .ok_or_else(|| bad(&"no certificate in the PEM"))?
        .map_err(|e| bad(&e))?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der).map_err(|e| bad(&e))?;
    let v = cert.validity();
    Ok((v.not_before.timestamp(), v.not_after.timestamp()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{certs, rotation::Policy};

    #[test]
    fn the_expiry_is_the_certificates_own_not_after_and_a_served_one_is_exported() {
        let policy = Policy::default();
        let now = 1_800_000_000;
        let ca = certs::new_ca(&policy, now).expect("ca");
        let cert = certs::issue(&ca, &["127.0.0.1".into()], &policy, now).expect("cert");
        let expires = cert.validity.as_ref().expect("validity").expires;
        assert_eq!(not_after(&cert.cert_pem).expect("not after"), expires);
        let (start, _) = validity(&cert.cert_pem).expect("validity");
        assert!(
            start <= now,
            "valid from its issue (or a little before): {start}"
        );

        let mut registry = Registry::with_prefix("flotilla");
        let metrics = WebhookMetrics::register(&mut registry);
        metrics.serving(&cert);
        let mut page = String::new();
        prometheus_client::encoding::text::encode(&mut page, &registry).expect("encode");
        assert!(
            page.contains(&format!(
                "flotilla_webhook_certificate_expiry_timestamp_seconds {expires}\n"
            )),
            "{page}"
        );
        assert!(
            page.contains(&format!(
                "flotilla_webhook_certificate_start_timestamp_seconds {start}\n"
            )),
            "{page}"
        );
    }

    #[test]
    fn text_that_is_no_certificate_is_an_error() {
        assert!(not_after("").is_err());
        assert!(
            not_after("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n").is_err()
        );
    }
}
