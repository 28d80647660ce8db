//! Bearer tokens read as client-go reads them: surrounding whitespace trimmed. A token
//! file written by hand or mounted from a Secret often ends in a newline; kube sends a
//! token as it is, and no HTTP header may carry a newline, so every request would fail
//! ("invalid bearer token: failed to parse header value") — or building the client would
//! panic, for an inline kubeconfig token. [`client`] builds every client of the project
//! from a [`kube::Config`]: an inline token trimmed, a token file (the in-cluster
//! ServiceAccount's included) read trimmed, again at most every minute, the last good
//! token kept when the file cannot be read (as client-go and kube do).
//!
//! A token that is unusable even trimmed is a local credential problem, and
//! [`is_credential_error`] says so for any error chain: it must never be reported as an
//! unreachable cluster. Token values are never put into an error or a log line.

use std::{
    path::PathBuf,
    sync::{Arc, Mutex},
    task::{Context, Poll},
    time::{Duration, Instant},
};

use futures::future::BoxFuture;
use http::{HeaderValue, Request, header::AUTHORIZATION};
use kube::{
    Client, Config,
    client::{AuthError, ClientBuilder},
};
use secrecy::{ExposeSecret as _, SecretString};
use tower::{BoxError, Layer, Service};

use crate::{Error, kubefed::client::ClientError, sync_state::lock};

/// How long a token read from a file is used before the file is read again.
const RELOAD: Duration = Duration::from_secs(60);

/// The token as an `Authorization` header may carry it: surrounding whitespace trimmed;
/// `None` when nothing is left or it holds anything but printable ASCII.
pub fn usable_token(text: &str) -> Option<&str> {
    let token = text.trim();
    (!token.is_empty() && token.bytes().all(|b| b.is_ascii_graphic())).then_some(token)
}

/// A client for `config`, its bearer token (inline or in a file) trimmed as client-go
/// trims it. Other credentials (client certificates, exec plugins, basic auth) are kube's.
pub fn client(mut config: Config) -> Result<Client, Error> {
    let auth = &mut config.auth_info;
    // kube's precedence: an auth provider, then basic auth, then an inline token, then a
    // token file; only the last two are bearer tokens.
    let basic = auth.username.is_some() && auth.password.is_some();
    let mut file = None;
    if auth.auth_provider.is_none() && !basic {
        if let Some(token) = &auth.token {
            let trimmed =
                usable_token(token.expose_secret()).ok_or_else(|| Error::InvalidToken {
                    origin: "of the kubeconfig (inline)".into(),
                })?;
            auth.token = Some(SecretString::from(trimmed.to_owned()));
        } else if let Some(path) = auth.token_file.take() {
            file = Some(TokenFile::read(PathBuf::from(path))?);
        }
    }
    let built = |source| Error::Client(ClientError::ClientBuild { source });
    match file {
        None => Client::try_from(config).map_err(built),
        Some(file) => {
            let builder = ClientBuilder::try_from(config).map_err(built)?;
            Ok(builder.with_layer(&TokenFileLayer(Arc::new(file))).build())
        }
    }
}

/// Whether `error` (or any error in its chain) is a local credential problem: kube's
/// authentication errors (a token that is no valid header, an exec plugin that failed, a
/// token file that cannot be read) and this module's. Such an error is the caller's
/// configuration, never the cluster being unreachable.
pub fn is_credential_error(error: &(dyn std::error::Error + 'static)) -> bool {
    std::iter::successors(Some(error), |e| e.source()).any(|e| {
        e.is::<AuthError>()
            || matches!(
                e.downcast_ref::<Error>(),
                Some(Error::InvalidToken { .. } | Error::TokenFile { .. })
            )
            || matches!(e.downcast_ref::<kube::Error>(), Some(kube::Error::Auth(_)))
    })
}

/// A token file, read trimmed; read again after [`RELOAD`].
#[derive(Debug)]
struct TokenFile {
    path: PathBuf,
    cached: Mutex<(HeaderValue, Instant)>,
}

impl TokenFile {
    /// Reads the file now: a client is not built from a token that cannot be used.
    fn read(path: PathBuf) -> Result<TokenFile, Error> {
        let header = header_from(&path)?;
        Ok(TokenFile {
            path,
            cached: Mutex::new((header, Instant::now())),
        })
    }

    /// The `Authorization` header: the cached one, or the file read again when due. A
    /// file that cannot be read again (or holds no usable token mid-rotation) keeps the
    /// last good token, which the server will judge.
    fn header(&self) -> HeaderValue {
        let mut cached = lock(&self.cached);
        if cached.1.elapsed() >= RELOAD {
            if let Ok(header) = header_from(&self.path) {
                cached.0 = header;
            }
            cached.1 = Instant::now();
        }
        cached.0.clone()
    }
}

fn header_from(path: &PathBuf) -> Result<HeaderValue, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::TokenFile {
        path: path.clone(),
        source,
    })?;
    let invalid = || Error::InvalidToken {
        origin: format!("in {}", path.display()),
    };
    let token = usable_token(&text).ok_or_else(invalid)?;
    let mut header = HeaderValue::try_from(format!("Bearer {token}")).map_err(|_| invalid())?;
    header.set_sensitive(true);
    Ok(header)
}

/// Sets the `Authorization` header of every request from a [`TokenFile`].
#[derive(Clone)]
struct TokenFileLayer(Arc<TokenFile>);

impl<S> Layer<S> for TokenFileLayer {
    type Service = TokenFileService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        TokenFileService {
            inner,
            file: self.0.clone(),
        }
    }
}

/// The service of [`TokenFileLayer`].
#[derive(Clone)]
struct TokenFileService<S> {
    inner: S,
    file: Arc<TokenFile>,
}

impl<S, B> Service<Request<B>> for TokenFileService<S>
where
    S: Service<Request<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<S::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        request
            .headers_mut()
            .insert(AUTHORIZATION, self.file.header());
        let response = self.inner.call(request);
        Box::pin(async move { response.await.map_err(Into::into) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_loses_its_surrounding_whitespace_as_client_go_trims_it() {
        assert_eq!(usable_token("abc.def\n"), Some("abc.def"));
        assert_eq!(usable_token("  abc\r\n"), Some("abc"));
        assert_eq!(usable_token("\n"), None);
        assert_eq!(usable_token("ab c"), None);
        assert_eq!(usable_token("abé"), None);
    }

    #[test]
    fn a_token_file_ending_in_a_newline_builds_a_client_and_its_header() {
        let dir = std::env::temp_dir().join(format!("flotilla-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory");
        let path = dir.join("token");
        std::fs::write(&path, "s3cr3t\n").expect("written");
        let file = TokenFile::read(path.clone()).expect("a usable token");
        assert_eq!(file.header(), HeaderValue::from_static("Bearer s3cr3t"));
        assert!(file.header().is_sensitive());
        std::fs::write(&path, "two words\n").expect("written");
        let refused = TokenFile::read(path.clone()).expect_err("no usable token");
        assert!(!refused.to_string().contains("two"), "{refused}");
        std::fs::remove_dir_all(&dir).expect("removed");
    }

    #[test]
    fn credential_errors_are_told_apart_from_unreachable_clusters_through_the_chain() {
        let header = HeaderValue::try_from("Bearer a\n").expect_err("not a header value");
        let kube_auth = kube::Error::Auth(AuthError::InvalidBearerToken(header));
        assert!(is_credential_error(&kube_auth));
        // What a request failing in the auth layer becomes: a service error wrapping it.
        let header = HeaderValue::try_from("Bearer a\n").expect_err("not a header value");
        let boxed: BoxError = Box::new(AuthError::InvalidBearerToken(header));
        assert!(is_credential_error(&kube::Error::Service(boxed)));
        let unreadable = Error::TokenFile {
            path: "/x".into(),
            source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        };
        assert!(is_credential_error(&unreadable));
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let boxed: BoxError = Box::new(refused);
        assert!(!is_credential_error(&kube::Error::Service(boxed)));
    }

    #[tokio::test]
    async fn an_inline_token_with_a_newline_builds_a_client_and_one_with_a_space_is_refused() {
        let mut config = Config::new("https://127.0.0.1:6443".parse().expect("a URL"));
        config.auth_info.token = Some("s3cr3t\n".to_owned().into());
        // kube alone panics here (tower-http's bearer header).
        assert!(client(config.clone()).is_ok());
        config.auth_info.token = Some("s3 cr3t".to_owned().into());
        let Err(refused) = client(config) else {
            panic!("a token with a space built a client")
        };
        assert!(is_credential_error(&refused));
        assert!(!refused.to_string().contains("cr3t"), "{refused}");
    }
}
