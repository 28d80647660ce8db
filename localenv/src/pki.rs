//! Per-cluster key material: a CA, the apiserver's serving certificate, and the
//! service-account signing key. All keys are ECDSA P-256 in PKCS#8 PEM.

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// Names the serving certificate is valid for: loopback for the harness, the in-cluster
/// names and the first service IP for anything that reaches the apiserver the usual way.
const SERVING_NAMES: &[&str] = &[
    "127.0.0.1",
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "10.96.0.1",
];

/// The PEM material of one cluster.
pub(crate) struct ClusterPki {
    pub(crate) ca_cert_pem: String,
    pub(crate) ca_cert_der: Vec<u8>,
    pub(crate) ca_key_pem: String,
    pub(crate) serving_cert_pem: String,
    pub(crate) serving_key_pem: String,
    pub(crate) service_account_key_pem: String,
    pub(crate) service_account_public_pem: String,
}

/// Generates fresh key material for the cluster `name`.
pub(crate) fn generate(name: &str) -> Result<ClusterPki, rcgen::Error> {
    let ca_key = KeyPair::generate()?;
    let ca_key_pem = ca_key.serialize_pem();
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, format!("flotilla-localenv {name} CA"));
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = CertifiedIssuer::self_signed(ca_params, ca_key)?;

    let serving_key = KeyPair::generate()?;
    let mut serving_params = CertificateParams::new(
        SERVING_NAMES
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>(),
    )?;
    serving_params
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    serving_params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    serving_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    serving_params.use_authority_key_identifier_extension = true;
    let serving_cert = serving_params.signed_by(&serving_key, &ca)?;

    let service_account_key = KeyPair::generate()?;

    Ok(ClusterPki {
        ca_cert_pem: ca.pem(),
        ca_cert_der: ca.der().to_vec(),
        ca_key_pem,
        serving_cert_pem: serving_cert.pem(),
        serving_key_pem: serving_key.serialize_pem(),
        service_account_key_pem: service_account_key.serialize_pem(),
        service_account_public_pem: service_account_key.public_key_pem(),
    })
}
