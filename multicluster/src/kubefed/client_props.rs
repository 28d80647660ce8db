//! Property tests of the KubeFedCluster fields a user writes: `apiEndpoint`, `proxyURL`,
//! `caBundle` and `disabledTLSValidations`, alone and together through
//! [`ClientInputs::config`]. Every input builds a configuration or is rejected with a
//! message (the ConfigMalformed condition), never a panic; a proxy's credentials never
//! appear in that message.

use base64::Engine as _;
use flotilla_api::KubeFedClusterSpec;
use flotilla_api::core::TlsValidation;
use proptest::prelude::*;
use serde_json::json;

use super::client::{
    ClientInputs, decode_ca_bundle, parse_api_endpoint, parse_proxy_url, pem_certificates,
};

fn config() -> ProptestConfig {
    ProptestConfig::with_cases(256)
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Strings shaped like URLs, broken in the ways people break them, plus anything else.
fn url_like() -> impl Strategy<Value = String> {
    prop_oneof![
        "(https?|socks5|ftp|)(://|:/|:|)[a-z0-9.:@\\[\\]/%?#-]{0,20}",
        " *https://[a-z0-9.-]{0,10}(:[0-9]{0,6})?(/[a-z]{0,4})? *",
        any::<String>(),
    ]
}

fn host() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z][a-z0-9-]{0,10}(\\.[a-z][a-z0-9-]{0,10}){0,3}",
        (any::<u8>(), any::<u8>(), any::<u8>(), any::<u8>())
            .prop_map(|(a, b, c, d)| format!("{a}.{b}.{c}.{d}")),
    ]
}

/// A PEM `CERTIFICATE` block around `der`, its base64 wrapped at 64 columns.
fn pem_block(der: &[u8]) -> String {
    let body = b64(der);
    let lines: Vec<&str> = body
        .as_bytes()
        .chunks(64)
        .map(|c| std::str::from_utf8(c).expect("base64 is ASCII"))
        .collect();
    format!(
        "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
        lines.join("\n")
    )
}

fn tls_validation() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("*".to_string()),
        Just("SubjectName".to_string()),
        Just("ValidityPeriod".to_string()),
        "[A-Za-z*]{0,6}",
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn any_api_endpoint_is_parsed_or_rejected_with_a_reason(endpoint in url_like()) {
        match parse_api_endpoint(&endpoint) {
            Ok(uri) => {
                prop_assert!(matches!(uri.scheme_str(), Some("https" | "http")), "{uri}");
                prop_assert!(uri.host().is_some_and(|h| !h.is_empty()), "{uri}");
            }
            Err(e) => prop_assert!(e.to_string().contains("spec.apiEndpoint")),
        }
    }

    #[test]
    fn a_valid_api_endpoint_keeps_its_host_and_port(
        host in host(), port in prop::option::of(1u16..), path in "(/[a-z0-9]{1,6}){0,3}",
    ) {
        let port_part = port.map(|p| format!(":{p}")).unwrap_or_default();
        let endpoint = format!("https://{host}{port_part}{path}");
        let uri = parse_api_endpoint(&format!("  {endpoint}\n")).expect("a valid endpoint");
        prop_assert_eq!(uri.host(), Some(host.as_str()));
        prop_assert_eq!(uri.port_u16(), port);
    }

    #[test]
    fn any_proxy_url_is_parsed_or_rejected_without_repeating_it(
        url in url_like(), scheme in "(https?|socks5|ftp|)", rest in url_like(),
    ) {
        for url in [url, format!("{scheme}://user:S3cr3tPassw0rd@{rest}")] {
            match parse_proxy_url(&url) {
                Ok(uri) => {
                    prop_assert!(matches!(uri.scheme_str(), Some("https" | "http" | "socks5")));
                    prop_assert!(uri.host().is_some_and(|h| !h.is_empty()));
                }
                Err(e) => prop_assert!(!e.to_string().contains("S3cr3tPassw0rd"), "{e}"),
            }
        }
    }

    #[test]
    fn a_valid_proxy_url_keeps_its_scheme_and_host(
        scheme in "(https?|socks5)", host in host(), port in 1u16..,
    ) {
        let uri = parse_proxy_url(&format!("{scheme}://{host}:{port}")).expect("a valid proxy");
        prop_assert_eq!(uri.scheme_str(), Some(scheme.as_str()));
        prop_assert_eq!(uri.host(), Some(host.as_str()));
        prop_assert_eq!(uri.port_u16(), Some(port));
    }

    #[test]
    fn any_ca_bundle_is_decoded_or_rejected(bundle in any::<String>(), raw in any::<Vec<u8>>()) {
        for bundle in [bundle, b64(&raw)] {
            if let Ok(certs) = decode_ca_bundle(&bundle) {
                prop_assert!(!certs.is_empty() && certs.iter().all(|c| !c.is_empty()));
            }
        }
        let _ = pem_certificates(&raw);
    }

    #[test]
    fn a_pem_bundle_of_any_certificates_round_trips(
        ders in prop::collection::vec(prop::collection::vec(any::<u8>(), 1..200), 1..4),
        wrap in 1usize..80,
    ) {
        let pem: String = ders.iter().map(|d| pem_block(d)).collect();
        // The bundle may be wrapped anywhere (as `base64 -w N` does): whitespace is ignored.
        let encoded = b64(pem.as_bytes());
        let wrapped: Vec<String> = encoded
            .as_bytes()
            .chunks(wrap)
            .map(|c| String::from_utf8_lossy(c).into_owned())
            .collect();
        prop_assert_eq!(decode_ca_bundle(&encoded).expect("a PEM bundle"), ders.clone());
        prop_assert_eq!(decode_ca_bundle(&wrapped.join("\n")).expect("wrapped"), ders);
    }

    #[test]
    fn any_cluster_spec_builds_a_configuration_or_says_why(
        endpoint in url_like(),
        ca_bundle in prop::option::of(prop_oneof![any::<String>(), Just(b64(pem_block(b"x").as_bytes()))]),
        proxy in prop::option::of(url_like()),
        validations in prop::collection::vec(tls_validation(), 0..3),
        token in prop::option::of(prop::option::of(prop::collection::vec(any::<u8>(), 0..8))),
    ) {
        let spec = json!({
            "apiEndpoint": endpoint, "caBundle": ca_bundle, "proxyURL": proxy,
            "disabledTLSValidations": validations, "secretRef": {"name": "t"},
        });
        let known = validations.iter().all(|v| matches!(v.as_str(), "*" | "SubjectName" | "ValidityPeriod"));
        let spec = match serde_json::from_value::<KubeFedClusterSpec>(spec) {
            Ok(spec) => spec,
            Err(e) => {
                // Only an unknown TLS validation name makes the object itself unreadable.
                prop_assert!(!known, "{e}");
                return Ok(());
            }
        };
        prop_assert!(known);
        let inputs = ClientInputs { spec: spec.clone(), namespace: "kube-federation-system".into(), token, exec_plugin_dir: None };
        match inputs.config() {
            Ok(config) => {
                prop_assert!(parse_api_endpoint(&spec.api_endpoint).is_ok());
                prop_assert_eq!(
                    config.accept_invalid_certs,
                    spec.disabled_tls_validations.contains(&TlsValidation::All)
                );
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }
}
