//! The pure half of HTTP authentication: whether an address needs it, the bearer token of an
//! `Authorization` header, what a refusal answers, and how long a review is trusted.

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use http::StatusCode;

/// How long a TokenReview's or a SubjectAccessReview's answer is reused. Short: a revoked
/// token or a removed RoleBinding stops working within this long, while a page and its
/// live updates cost the API server a review every half minute at most, not one per request.
pub const REVIEW_TTL: Duration = Duration::from_secs(30);

/// How many answers are kept before the cache starts over (a bound on memory if many
/// different tokens are tried).
pub const CACHE_LIMIT: usize = 10_000;

/// Who may reach an HTTP endpoint bound to an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exposure {
    /// Bound to loopback: only this machine reaches it; open, as before.
    Loopback,
    /// Bound elsewhere: every request carries a bearer token, checked with a TokenReview
    /// and authorised with SubjectAccessReviews against the host API server.
    Authenticated,
    /// Bound elsewhere, and the operator turned authentication off explicitly.
    InsecureOpen,
}

impl Exposure {
    /// Whether requests must be authenticated.
    pub fn requires_auth(self) -> bool {
        self == Exposure::Authenticated
    }
}

/// The exposure of a server bound to `addr`; `insecure_no_auth` is the operator's explicit
/// `--…-insecure-no-auth`.
pub fn exposure(addr: &SocketAddr, insecure_no_auth: bool) -> Exposure {
    match (addr.ip().is_loopback(), insecure_no_auth) {
        (true, _) => Exposure::Loopback,
        (false, true) => Exposure::InsecureOpen,
        (false, false) => Exposure::Authenticated,
    }
}

/// The token of an `Authorization: Bearer <token>` header (the scheme is case-insensitive,
/// as RFC 7235 says); `None` for any other header or an empty token.
pub fn bearer(header: Option<&str>) -> Option<&str> {
    let (scheme, token) = header?.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty() && !token.contains(' '))
        .then_some(token)
}

/// Why a request is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Denial {
    /// No bearer token.
    MissingToken,
    /// The API server did not authenticate the token.
    InvalidToken,
    /// Authenticated, but not allowed what the request asks (the message says what).
    Forbidden(String),
    /// The review itself could not be made (the API server is away, or Flotilla may not
    /// create reviews): refused rather than let through.
    ReviewFailed,
}

impl Denial {
    /// The HTTP status of the refusal.
    pub fn status(&self) -> StatusCode {
        match self {
            Denial::MissingToken | Denial::InvalidToken => StatusCode::UNAUTHORIZED,
            Denial::Forbidden(_) => StatusCode::FORBIDDEN,
            Denial::ReviewFailed => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The body of the refusal, for people (never the token).
    pub fn message(&self) -> String {
        match self {
            Denial::MissingToken => {
                "authentication required: send Authorization: Bearer <token> (a token of the host cluster)\n".into()
            }
            Denial::InvalidToken => "the host cluster did not accept the bearer token\n".into(),
            Denial::Forbidden(what) => format!("forbidden: {what}\n"),
            Denial::ReviewFailed => {
                "the host cluster could not review the request; try again\n".into()
            }
        }
    }
}

/// Whether an answer cached at `at` may still be used at `now`.
pub fn fresh(at: Instant, now: Instant) -> bool {
    now.saturating_duration_since(at) < REVIEW_TTL
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_non_loopback_address_needs_authentication_unless_turned_off() {
        let on = |a: &str, insecure| exposure(&a.parse().expect("addr"), insecure);
        assert_eq!(on("127.0.0.1:8090", false), Exposure::Loopback);
        assert_eq!(on("[::1]:8090", true), Exposure::Loopback);
        assert_eq!(on("0.0.0.0:8090", false), Exposure::Authenticated);
        assert_eq!(on("10.1.2.3:8090", false), Exposure::Authenticated);
        assert_eq!(on("[::]:8090", true), Exposure::InsecureOpen);
        assert!(on("0.0.0.0:1", false).requires_auth());
        assert!(!on("0.0.0.0:1", true).requires_auth());
    }

    #[test]
    fn a_bearer_token_is_read_from_the_authorization_header() {
        assert_eq!(bearer(Some("Bearer abc.def")), Some("abc.def"));
        assert_eq!(bearer(Some("bearer  abc ")), Some("abc"));
        assert_eq!(bearer(Some("Basic dXNlcjpwdw==")), None);
        assert_eq!(bearer(Some("Bearer ")), None);
        assert_eq!(bearer(Some("Bearer a b")), None);
        assert_eq!(bearer(Some("Bearer")), None);
        assert_eq!(bearer(None), None);
    }

    #[test]
    fn refusals_answer_401_403_or_503_without_the_token() {
        assert_eq!(Denial::MissingToken.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(Denial::InvalidToken.status(), StatusCode::UNAUTHORIZED);
        let forbidden = Denial::Forbidden("get federatedsecrets in demo".into());
        assert_eq!(forbidden.status(), StatusCode::FORBIDDEN);
        assert!(forbidden.message().contains("federatedsecrets"));
        assert_eq!(
            Denial::ReviewFailed.status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
    }

    #[test]
    fn a_review_is_reused_for_thirty_seconds() {
        let at = Instant::now();
        assert!(fresh(at, at + Duration::from_secs(29)));
        assert!(!fresh(at, at + REVIEW_TTL));
        // A clock that went backwards does not extend trust forever: it counts as no time.
        assert!(fresh(at + Duration::from_secs(5), at));
    }
}
