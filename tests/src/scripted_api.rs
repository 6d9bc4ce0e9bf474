//! What the scripted model APIs ([`crate::messages_api`],
//! [`crate::responses_api`]) share: an axum server on a free port of
//! 127.0.0.1 on a thread and runtime of its own, stopped when dropped; a
//! bounded log of the requests it answered; the parts of a request every
//! log entry keeps; and a JSON response.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use serde_json::Value;

/// Requests kept for the test; later ones are counted, not kept.
const MAX_RECORDED: usize = 2000;

/// A running server; it stops when dropped.
pub(crate) struct Running {
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Running {
    /// Serves `app` on a free port of 127.0.0.1, on its own thread and
    /// runtime so that sync and async tests alike can use it.
    pub fn start(name: &str, app: axum::Router) -> Running {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binding 127.0.0.1:0");
        listener.set_nonblocking(true).expect("non-blocking listener");
        let addr = listener.local_addr().expect("local address");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
                rt.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
                    // Dropping the runtime at the end cancels open
                    // connections: a stop never waits for a client.
                    tokio::select! {
                        r = axum::serve(listener, app) => r.expect("scripted API server"),
                        _ = stopped => {}
                    }
                });
            })
            .expect("spawning the scripted API thread");
        Running { addr, stop: Some(stop), thread: Some(thread) }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The requests answered, oldest first, and how many more were not kept.
pub(crate) struct Log<R> {
    inner: Mutex<(Vec<R>, u64)>,
}

impl<R: Clone> Log<R> {
    pub fn new() -> Log<R> {
        Log { inner: Mutex::new((Vec::new(), 0)) }
    }

    pub fn record(&self, r: R) {
        let mut log = self.inner.lock().unwrap();
        if log.0.len() < MAX_RECORDED {
            log.0.push(r);
        } else {
            log.1 += 1;
        }
    }

    pub fn all(&self) -> Vec<R> {
        self.inner.lock().unwrap().0.clone()
    }

    pub fn dropped(&self) -> u64 {
        self.inner.lock().unwrap().1
    }
}

/// What every log entry keeps of a request.
pub(crate) struct Parts {
    pub method: String,
    /// Path and query.
    pub path: String,
    /// Lower-case names; a repeated header keeps its last value.
    pub headers: BTreeMap<String, String>,
    /// The JSON body; `Null` without one or when it is not JSON.
    pub body: Value,
    pub unix_ms: u64,
}

impl Parts {
    pub fn of(method: &Method, uri: &Uri, headers: &HeaderMap, body: &Bytes) -> Parts {
        Parts {
            method: method.to_string(),
            path: uri.path_and_query().map(|p| p.to_string()).unwrap_or_else(|| uri.path().to_string()),
            headers: headers
                .iter()
                .map(|(k, v)| (k.as_str().to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
                .collect(),
            body: serde_json::from_slice(body).unwrap_or(Value::Null),
            unix_ms: SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0),
        }
    }
}

/// One line of a server's summary, for failure messages.
pub(crate) fn summary_line(
    method: &str,
    path: &str,
    script: Option<&str>,
    step: Option<usize>,
    status: u16,
) -> String {
    let at = match (script, step) {
        (Some(s), Some(n)) => format!(" script {s} step {n}"),
        _ => String::new(),
    };
    format!("{method} {path}{at} -> {status}")
}

pub(crate) fn json_response(status: u16, body: &Value, headers: &[(String, String)]) -> Response {
    let mut r = Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header("content-type", "application/json");
    for (k, v) in headers {
        r = r.header(k.as_str(), v.as_str());
    }
    r.body(Body::from(body.to_string())).unwrap()
}
