//! A request body with a deadline: a client that trickles its body (or stops sending it) fails
//! the read once the body timeout has passed since the headers arrived, instead of holding the
//! handler, the connection and its buffers for as long as it likes.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

/// The body did not arrive within the body timeout.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {0:?}")]
pub struct BodyTimedOut(pub std::time::Duration);

impl BodyTimedOut {
    /// Finds a `BodyTimedOut` in an error's source chain (e.g. inside an axum rejection).
    pub fn find_in<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a BodyTimedOut> {
        let mut cur = Some(err);
        while let Some(e) = cur {
            if let Some(found) = e.downcast_ref::<BodyTimedOut>() {
                return Some(found);
            }
            cur = e.source();
        }
        None
    }
}

/// `inner`, failing with [`BodyTimedOut`] when it is still incomplete at `deadline`.
pub struct DeadlineBody<B> {
    inner: B,
    timeout: std::time::Duration,
    deadline: Instant,
    /// Armed on the first poll that has to wait.
    sleep: Option<Pin<Box<Sleep>>>,
}

impl<B> DeadlineBody<B> {
    /// `inner` must be complete within `timeout` from now.
    pub fn new(inner: B, timeout: std::time::Duration) -> Self {
        Self {
            inner,
            timeout,
            deadline: Instant::now() + timeout,
            sleep: None,
        }
    }
}

impl<B> Body for DeadlineBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<axum::BoxError>,
{
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::BoxError>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        let deadline = this.deadline;
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTimedOut(this.timeout))))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
