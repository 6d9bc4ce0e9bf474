//! The Operator API client the tools call: one type whatever carries it
//! (a network channel, or the controller's own service in-process), and
//! the request that carries the caller to it.

use rmcp::RoleServer;
use rmcp::service::RequestContext;
use tonic::body::Body;
use tower::ServiceExt as _;
use tower::util::BoxCloneSyncService;

use swarm_proto::v1::operator_service_client::OperatorServiceClient;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub type GrpcChannel = BoxCloneSyncService<http::Request<Body>, http::Response<Body>, ChannelError>;

/// Why a call did not reach the Operator API. A concrete type rather than
/// a boxed one, so that the tools' futures are `Send` for every lifetime
/// (a `Box<dyn Error>` error here trips the compiler's higher-ranked
/// `Send` inference in the async tool handlers).
#[derive(Debug)]
pub struct ChannelError(BoxError);

impl std::fmt::Display for ChannelError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for ChannelError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}
pub type Operator = OperatorServiceClient<GrpcChannel>;

/// An Operator API client over `service`: a tonic `Channel` (with its
/// credentials), or an in-process `OperatorServiceServer` behind the layer
/// that authorizes its caller.
pub fn operator<S, B>(service: S) -> Operator
where
    S: tower::Service<http::Request<Body>, Response = http::Response<B>> + Clone + Send + Sync + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    B: tonic::codegen::Body<Data = tonic::codegen::Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let service = service.map_response(|r| r.map(Body::new)).map_err(|e| ChannelError(e.into()));
    OperatorServiceClient::new(BoxCloneSyncService::new(service))
}

/// A request carrying what the transport knows of the caller: over HTTP,
/// the extensions the controller's authentication put on the request (its
/// identity), which the in-process Operator API authorizes.
pub(crate) fn request<T>(ctx: &RequestContext<RoleServer>, message: T) -> tonic::Request<T> {
    let mut req = tonic::Request::new(message);
    if let Some(parts) = ctx.extensions.get::<http::request::Parts>() {
        *req.extensions_mut() = parts.extensions.clone();
    }
    req
}
