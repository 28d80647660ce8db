//! Certificates made by each rotation step, checked with a real TLS verifier: every
//! certificate served verifies against every CA bundle published while it is served.

use std::{sync::Arc, time::Duration};

use tokio_rustls::rustls::{
    RootCertStore,
    client::{WebPkiServerVerifier, danger::ServerCertVerifier},
    crypto::ring,
    pki_types::{CertificateDer, ServerName, UnixTime, pem::PemObject},
};

use super::*;
use crate::rotation::decide;

fn names() -> Vec<String> {
    vec!["127.0.0.1".to_string(), "flotilla-webhook.svc".to_string()]
}

fn policy() -> Policy {
    Policy {
        ca_lifetime: Duration::from_secs(3000),
        cert_lifetime: Duration::from_secs(900),
        overlap: Duration::from_secs(100),
        check_every: Duration::from_secs(10),
    }
}

/// Whether `cert` verifies for `127.0.0.1` against the CAs of `bundle` at `at`.
fn verifies(cert: &ServingCert, bundle: &str, at: i64) -> bool {
    let mut roots = RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(bundle.as_bytes()) {
        roots.add(ca.expect("a PEM CA")).expect("a CA certificate");
    }
    let verifier = WebPkiServerVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::new(ring::default_provider()),
    )
    .build()
    .expect("a verifier");
    let leaf = CertificateDer::from_pem_slice(cert.cert_pem.as_bytes()).expect("a PEM certificate");
    let now =
        UnixTime::since_unix_epoch(Duration::from_secs(u64::try_from(at).expect("after 1970")));
    let name = ServerName::try_from("127.0.0.1").expect("an IP name");
    verifier
        .verify_server_cert(&leaf, &[], &name, &[], now)
        .is_ok()
}

/// Takes the step due at `now`, checking that the certificate served before it still
/// verifies against the bundle published after it, and the one served after it against the
/// bundle published before it (the API server may see either order).
fn step(stored: &Stored, now: i64) -> (Stored, Step) {
    let step = decide(&stored.observe(&names(), true), &policy(), now);
    let next = stored
        .advance(step, &policy(), &names(), now)
        .expect("advanced");
    if let (Some(before), Some(old_bundle)) = (&stored.serving, stored.bundle()) {
        let after = next.serving.as_ref().expect("a certificate");
        let new_bundle = next.bundle().expect("a bundle");
        assert!(
            verifies(before, &new_bundle, now),
            "{step:?}: old certificate, new bundle"
        );
        assert!(
            verifies(after, &new_bundle, now),
            "{step:?}: new certificate, new bundle"
        );
        // A switch included: its CA was staged (trusted) an overlap earlier.
        assert!(
            verifies(after, &old_bundle, now),
            "{step:?}: new certificate, old bundle"
        );
    }
    (next, step)
}

#[test]
fn a_rotation_through_two_ca_rollovers_never_serves_an_unverifiable_certificate() {
    let t0 = 1_800_000_000;
    let (mut stored, first) = step(&Stored::default(), t0);
    assert_eq!(first, Step::Bootstrap);
    assert!(verifies(
        stored.serving.as_ref().expect("cert"),
        &stored.bundle().expect("bundle"),
        t0
    ));
    let mut taken = Vec::new();
    // Ten seconds at a time (the check interval) through two CA lifetimes.
    for now in (t0..t0 + 6000).step_by(10) {
        let (next, s) = step(&stored, now);
        if !matches!(s, Step::Keep { .. }) {
            taken.push(s);
        }
        let served = next.serving.as_ref().expect("a certificate");
        assert!(
            verifies(served, &next.bundle().expect("bundle"), now),
            "at {now}: {s:?}"
        );
        stored = next;
    }
    let count = |want: Step| taken.iter().filter(|s| **s == want).count();
    assert!(count(Step::IssueServing) >= 4, "{taken:?}");
    assert_eq!(count(Step::StageCa), 2, "{taken:?}");
    assert_eq!(count(Step::SwitchCa), 2, "{taken:?}");
    assert_eq!(count(Step::DropPrevious), 2, "{taken:?}");
    assert!(
        !taken.contains(&Step::Bootstrap),
        "never starts over: {taken:?}"
    );
}

#[test]
fn the_secret_round_trips_every_part() {
    let p = policy();
    let now = 1_800_000_000;
    let stored = Stored::default()
        .advance(Step::Bootstrap, &p, &names(), now)
        .and_then(|s| s.advance(Step::StageCa, &p, &names(), now + 1))
        .and_then(|s| s.advance(Step::SwitchCa, &p, &names(), now + 2))
        .and_then(|s| s.advance(Step::StageCa, &p, &names(), now + 3))
        .expect("advanced");
    assert!(stored.next.is_some() && stored.previous.is_some());
    let secret = to_secret(&stored, "ns", "cert");
    assert_eq!(from_secret(&secret), stored);
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
}

#[test]
fn a_secret_from_before_rotation_is_rolled_over_without_a_gap() {
    // CA, certificate and names, no CA key or validity: what earlier versions wrote.
    let fresh = Stored::default()
        .advance(Step::Bootstrap, &policy(), &names(), 1_800_000_000)
        .expect("bootstrapped");
    let mut old = to_secret(&fresh, "ns", "cert");
    let data = old.data.as_mut().expect("data");
    data.remove(CA_KEY);
    old.metadata.annotations = Some(BTreeMap::from([(NAMES.to_string(), names().join(","))]));
    let stored = from_secret(&old);
    let o = stored.observe(&names(), false);
    assert!(!o.ca_can_sign && o.serving.is_some());
    assert_eq!(decide(&o, &policy(), 1_800_000_100), Step::StageCa);
}

#[test]
fn a_certificate_made_for_other_names_is_not_served_as_is() {
    let stored = Stored::default()
        .advance(Step::Bootstrap, &policy(), &names(), 1_800_000_000)
        .expect("bootstrapped");
    let other = vec!["other.svc".to_string()];
    assert!(stored.observe(&other, false).serving.is_none());
    assert_eq!(
        decide(&stored.observe(&other, false), &policy(), 1_800_000_010),
        Step::IssueServing
    );
}

#[test]
fn a_step_issuing_no_certificate_keeps_a_names_change_pending() {
    let p = policy();
    let staged = Stored::default()
        .advance(Step::Bootstrap, &p, &names(), 1_800_000_000)
        .and_then(|s| s.advance(Step::StageCa, &p, &names(), 1_800_000_001))
        .and_then(|s| s.advance(Step::SwitchCa, &p, &names(), 1_800_000_002))
        .expect("switched");
    let other = vec!["other.svc".to_string()];
    let dropped = staged
        .advance(Step::DropPrevious, &p, &other, 1_800_000_200)
        .expect("dropped");
    assert!(dropped.previous.is_none());
    assert_eq!(
        decide(&dropped.observe(&other, false), &p, 1_800_000_201),
        Step::IssueServing
    );
}

#[test]
fn an_unreadable_secret_reads_as_empty_and_bootstraps() {
    let secret = Secret {
        data: Some(BTreeMap::from([(
            CA_CERT.to_string(),
            ByteString(vec![0xff, 0xfe]),
        )])),
        ..Secret::default()
    };
    let stored = from_secret(&secret);
    assert!(stored.ca.is_none());
    assert_eq!(
        decide(&stored.observe(&names(), false), &policy(), 1),
        Step::Bootstrap
    );
}

#[test]
fn a_key_never_appears_in_a_debug_rendering() {
    let stored = Stored::default()
        .advance(Step::Bootstrap, &policy(), &names(), 1_800_000_000)
        .expect("bootstrapped");
    let staged = stored
        .advance(Step::StageCa, &policy(), &names(), 1_800_000_001)
        .expect("staged");
    let rendered = format!("{staged:?}");
    assert!(rendered.contains("validity"), "{rendered}");
    assert!(!rendered.contains("PRIVATE KEY"), "{rendered}");
}
