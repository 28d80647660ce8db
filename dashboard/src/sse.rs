//! Server-sent events for live pages: one `data: <version>` message when a viewer
//! connects and again whenever the state's version moves on (a burst of changes is
//! coalesced into one message), with a comment line as keep-alive. The page refetches its
//! own fragment on a new version; the watches feed the version, so no viewer makes the
//! dashboard ask the API server anything.

use std::{convert::Infallible, time::Duration};

use bytes::Bytes;
use futures::Stream;
use hyper::body::Frame;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Changes within this long after one are sent as one message.
pub const COALESCE: Duration = Duration::from_millis(250);
/// A comment is sent after this long without a change, so proxies keep the stream open.
pub const KEEPALIVE: Duration = Duration::from_secs(15);

/// The message announcing `version` (with how long the browser waits to reconnect).
pub fn message(version: u64) -> String {
    format!("retry: 2000\ndata: {version}\n\n")
}

/// What a stream sends next.
enum Next {
    Version(u64),
    KeepAlive,
    End,
}

async fn next(rx: &mut watch::Receiver<u64>, cancel: &CancellationToken, first: bool) -> Next {
    if !first {
        let changed = tokio::select! {
            _ = cancel.cancelled() => return Next::End,
            changed = tokio::time::timeout(KEEPALIVE, rx.changed()) => changed,
        };
        match changed {
            Err(_) => return Next::KeepAlive,
            Ok(Err(_)) => return Next::End,
            Ok(Ok(())) => {}
        }
        tokio::select! {
            _ = cancel.cancelled() => return Next::End,
            _ = tokio::time::sleep(COALESCE) => {}
        }
    }
    Next::Version(*rx.borrow_and_update())
}

/// The event stream of one viewer; it ends when `cancel` fires or the state goes away.
pub fn stream(
    rx: watch::Receiver<u64>,
    cancel: CancellationToken,
) -> impl Stream<Item = Result<Frame<Bytes>, Infallible>> + Send + 'static {
    futures::stream::unfold((rx, cancel, true), |(mut rx, cancel, first)| async move {
        let text = match next(&mut rx, &cancel, first).await {
            Next::Version(v) => message(v),
            Next::KeepAlive => ": keep-alive\n\n".to_owned(),
            Next::End => return None,
        };
        Some((Ok(Frame::data(Bytes::from(text))), (rx, cancel, false)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    fn text(frame: Option<Result<Frame<Bytes>, Infallible>>) -> String {
        let frame = frame.expect("a frame").expect("infallible");
        String::from_utf8(frame.into_data().expect("data").to_vec()).expect("utf-8")
    }

    #[tokio::test(start_paused = true)]
    async fn a_viewer_gets_the_current_version_then_one_message_per_burst_of_changes() {
        let (tx, rx) = watch::channel(3);
        let cancel = CancellationToken::new();
        let mut s = Box::pin(stream(rx, cancel.clone()));
        assert_eq!(text(s.next().await), "retry: 2000\ndata: 3\n\n");
        tx.send_replace(4);
        tx.send_replace(5);
        assert_eq!(text(s.next().await), "retry: 2000\ndata: 5\n\n");
        assert_eq!(text(s.next().await), ": keep-alive\n\n");
        cancel.cancel();
        assert!(s.next().await.is_none());
    }
}
