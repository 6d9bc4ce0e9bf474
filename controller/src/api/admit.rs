//! The one tower layer that stands in front of the gRPC services and
//! either lets a request through or answers it with a status: what is
//! decided is an [`Admit`] (the caller's credentials and role in `auth.rs`,
//! "not the leader" on a standby in `leader/standby.rs`), the plumbing is
//! written once here.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tonic::Status;

/// Decides whether a request reaches the service behind the layer. It may
/// add to the request (an identity in its extensions); a refusal is the
/// status the caller receives.
pub trait Admit: Clone {
    fn admit<B>(&self, req: &mut http::Request<B>) -> Result<(), Status>;
}

/// Puts `A` in front of every service it wraps.
#[derive(Clone)]
pub struct AdmitLayer<A> {
    admit: A,
}

impl<A> AdmitLayer<A> {
    pub fn with(admit: A) -> AdmitLayer<A> {
        AdmitLayer { admit }
    }
}

impl<S, A: Clone> tower::Layer<S> for AdmitLayer<A> {
    type Service = AdmitService<S, A>;

    fn layer(&self, inner: S) -> Self::Service {
        AdmitService { inner, admit: self.admit.clone() }
    }
}

#[derive(Clone)]
pub struct AdmitService<S, A> {
    inner: S,
    admit: A,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, A, B, R> tower::Service<http::Request<B>> for AdmitService<S, A>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    A: Admit,
    R: Default + Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        match self.admit.admit(&mut req) {
            Ok(()) => Box::pin(self.inner.call(req)),
            Err(status) => {
                let response = status.into_http::<R>();
                Box::pin(async move { Ok(response) })
            }
        }
    }
}
