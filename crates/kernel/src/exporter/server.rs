//! The exporter's HTTP server: hyper on a current-thread tokio runtime.
//!
//! One thread serves every connection, so idle and slow clients cost a few
//! kilobytes each instead of a thread each, and what a client can make the
//! exporter hold is bounded three ways:
//!
//! - **header size**: a request head larger than [`MAX_HEADER_BYTES`] is
//!   answered `431` and the connection closed (hyper's `max_buf_size`);
//! - **header time**: a connection that has not sent a whole request head
//!   within [`HEADER_TIMEOUT`] (idle connections included) is closed
//!   (hyper's `header_read_timeout`);
//! - **connections**: at most [`MAX_CONNECTIONS`] are open (fewer if the
//!   open-file limit cannot be raised to hold them); one more closes the
//!   connection that has been quiet the longest, so a flood of idle or slow
//!   connections cannot lock a scrape out.
//!
//! Scrapes read files and run on a blocking pool of at most
//! [`SCRAPE_THREADS`] threads, so the serving thread keeps accepting while
//! one is collected. The exporter never has more than `1 + SCRAPE_THREADS`
//! threads of its own, however many clients connect.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use tokio::sync::{watch, Notify};

use super::{Scraper, CONTENT_TYPE as METRICS_CONTENT_TYPE};
use crate::{KernelError, Result};

/// Largest request head accepted, in bytes (hyper's smallest allowed buffer;
/// a Prometheus scrape's head is about 300 bytes).
pub const MAX_HEADER_BYTES: usize = 8 << 10;
/// Time a connection has to send a whole request head, counted from when
/// the server starts waiting for one (so an idle connection closes too).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections open at once; one more closes the quietest. Each costs about
/// 10 KiB (hyper's read buffer and the task), so they stay near 10 MiB, far
/// below the unit's `MemoryMax=128M`.
pub const MAX_CONNECTIONS: usize = 1024;
/// File descriptors kept free for everything but connections (the listener,
/// the files a scrape reads, the runtime's own).
const SPARE_FILES: usize = 64;
/// Threads collecting scrapes (besides the one serving connections).
pub const SCRAPE_THREADS: usize = 2;
/// Listen backlog: connections the kernel queues before the server takes them.
const LISTEN_BACKLOG: i32 = 1024;
/// How often `serve` looks at its stop flag.
const STOP_POLL: Duration = Duration::from_millis(100);
/// How long answers in flight may take to finish once the server stops.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

const INDEX_HTML: &str = "<html><head><title>zpage exporter</title></head><body><h1>zpage exporter</h1><p><a href=\"/metrics\">Metrics</a></p></body></html>\n";

/// The HTTP server: a bound listener and what it serves.
pub struct Exporter {
    listener: std::net::TcpListener,
    scraper: Arc<Scraper>,
}

impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exporter")
            .field("address", &self.listener.local_addr().ok())
            .finish_non_exhaustive()
    }
}

fn listen_error(address: &str, detail: String) -> KernelError {
    KernelError::Command {
        command: format!("listen on {address}"),
        detail,
        fix: "pick another address with --listen (e.g. 127.0.0.1:9587)".into(),
    }
}

fn bind_one(address: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(address),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    // As std's TcpListener::bind does: a restarted exporter may take its
    // port back while old connections linger in TIME_WAIT.
    socket.set_reuse_address(true)?;
    socket.bind(&address.into())?;
    socket.listen(LISTEN_BACKLOG)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

impl Exporter {
    /// Binds `address` (e.g. [`super::DEFAULT_LISTEN`]; port 0 picks a free port).
    pub fn bind(address: &str, scraper: Scraper) -> Result<Exporter> {
        use std::net::ToSocketAddrs;
        let candidates = address
            .to_socket_addrs()
            .map_err(|e| listen_error(address, e.to_string()))?;
        let mut last_error = format!("{address} names no address");
        for candidate in candidates {
            match bind_one(candidate) {
                Ok(listener) => {
                    return Ok(Exporter {
                        listener,
                        scraper: Arc::new(scraper),
                    })
                }
                Err(e) => last_error = format!("{candidate}: {e}"),
            }
        }
        Err(listen_error(address, last_error))
    }

    /// The bound address.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.listener
            .local_addr()
            .map_err(|e| KernelError::Command {
                command: "exporter".into(),
                detail: format!("the listening socket has no address: {e}"),
                fix: "listen on host:port".into(),
            })
    }

    /// Answers requests until `stop` is set or `max_requests` were answered;
    /// returns how many were answered. Runs on the calling thread (plus at
    /// most [`SCRAPE_THREADS`] scrape threads).
    pub fn serve(&self, max_requests: Option<u64>, stop: &AtomicBool) -> Result<u64> {
        let runtime_error = |e: std::io::Error| KernelError::Command {
            command: "exporter".into(),
            detail: format!("cannot start the server: {e}"),
            fix: "check the process's limits on threads and open files (ulimit -u, ulimit -n)"
                .into(),
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .max_blocking_threads(SCRAPE_THREADS)
            .thread_name("zpage-scrape")
            .build()
            .map_err(runtime_error)?;
        let listener = self.listener.try_clone().map_err(runtime_error)?;
        let open_files = crate::sys::raise_open_file_limit((MAX_CONNECTIONS + SPARE_FILES) as u64);
        let capacity = (open_files as usize)
            .saturating_sub(SPARE_FILES)
            .clamp(1, MAX_CONNECTIONS);
        let context = Arc::new(Context {
            scraper: Arc::clone(&self.scraper),
            max_requests,
            served: AtomicU64::new(0),
            limit_reached: Notify::new(),
            connections: Mutex::new(Connections::new(capacity)),
        });
        runtime.block_on(async {
            let listener = tokio::net::TcpListener::from_std(listener).map_err(runtime_error)?;
            accept_loop(listener, &context, stop).await;
            Ok(())
        })?;
        Ok(context
            .served
            .load(Ordering::SeqCst)
            .min(max_requests.unwrap_or(u64::MAX)))
    }
}

/// What every connection's task shares.
struct Context {
    scraper: Arc<Scraper>,
    max_requests: Option<u64>,
    served: AtomicU64,
    limit_reached: Notify,
    connections: Mutex<Connections>,
}

/// One open connection: when it was last heard from, and how to close it.
struct Slot {
    id: u64,
    last_active: Instant,
    close: Arc<Notify>,
}

/// The open connections (at most `capacity`; a scan of a thousand is
/// cheaper than keeping them ordered).
struct Connections {
    slots: Vec<Slot>,
    capacity: usize,
    next_id: u64,
}

impl Connections {
    fn new(capacity: usize) -> Connections {
        Connections {
            slots: Vec::with_capacity(capacity),
            capacity,
            next_id: 0,
        }
    }

    /// Admits a new connection; closes the quietest one when full.
    fn admit(&mut self, now: Instant) -> (u64, Arc<Notify>) {
        if self.slots.len() >= self.capacity {
            if let Some(quietest) = self
                .slots
                .iter()
                .enumerate()
                .min_by_key(|(_, slot)| slot.last_active)
                .map(|(i, _)| i)
            {
                // notify_one keeps a permit if the task is not waiting yet.
                self.slots.swap_remove(quietest).close.notify_one();
            }
        }
        let id = self.next_id;
        self.next_id += 1;
        let close = Arc::new(Notify::new());
        self.slots.push(Slot {
            id,
            last_active: now,
            close: Arc::clone(&close),
        });
        (id, close)
    }

    /// A request arrived on connection `id`: it is the least likely to be closed.
    fn touch(&mut self, id: u64, now: Instant) {
        if let Some(slot) = self.slots.iter_mut().find(|s| s.id == id) {
            slot.last_active = now;
        }
    }

    fn remove(&mut self, id: u64) {
        if let Some(i) = self.slots.iter().position(|s| s.id == id) {
            self.slots.swap_remove(i);
        }
    }
}

impl Context {
    fn connections(&self) -> std::sync::MutexGuard<'_, Connections> {
        self.connections.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn limit_is_reached(&self) -> bool {
        self.max_requests
            .is_some_and(|m| self.served.load(Ordering::SeqCst) >= m)
    }
}

async fn accept_loop(listener: tokio::net::TcpListener, context: &Arc<Context>, stop: &AtomicBool) {
    let (shutdown, shutdown_seen) = watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    let mut poll_stop = tokio::time::interval(STOP_POLL);
    while !stop.load(Ordering::Relaxed) && !context.limit_is_reached() {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    // Answers are written whole; no reason to wait for an ACK.
                    let _ = stream.set_nodelay(true);
                    let (id, close) = context.connections().admit(Instant::now());
                    tasks.spawn(connection(stream, id, close, Arc::clone(context), shutdown_seen.clone()));
                }
                // Out of file descriptors or memory for a moment: wait
                // instead of spinning on the same error.
                Err(_) => tokio::time::sleep(STOP_POLL).await,
            },
            // Reap finished connections so their results do not pile up.
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            _ = context.limit_reached.notified() => {}
            _ = poll_stop.tick() => {}
        }
    }
    drop(listener);
    let _ = shutdown.send(true);
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
}

/// Serves one connection until the client leaves, a bound closes it, it is
/// the quietest when another arrives, or the server stops (answers in
/// flight finish first).
async fn connection(
    stream: tokio::net::TcpStream,
    id: u64,
    close: Arc<Notify>,
    context: Arc<Context>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .max_buf_size(MAX_HEADER_BYTES)
        .max_headers(64);
    let service_context = Arc::clone(&context);
    let service = hyper::service::service_fn(move |request| {
        let context = Arc::clone(&service_context);
        async move {
            context.connections().touch(id, Instant::now());
            answer(request, &context).await
        }
    });
    let served = http.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
    tokio::pin!(served);
    tokio::select! {
        // A client error (bad request, timeout, reset) only ends its own connection.
        _ = served.as_mut() => {}
        _ = close.notified() => {}
        // The flag only ever turns true (or its sender is gone): either way, stop.
        _ = shutdown.changed() => {
            served.as_mut().graceful_shutdown();
            let _ = served.await;
        }
    }
    context.connections().remove(id);
}

type Answer = Response<Full<Bytes>>;

fn response(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Answer {
    let mut answer = Response::new(Full::new(body.into()));
    *answer.status_mut() = status;
    answer
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    answer
}

fn text(status: StatusCode, body: &'static str) -> Answer {
    response(status, "text/plain; charset=utf-8", body)
}

async fn answer(request: Request<Incoming>, context: &Context) -> Result<Answer, Infallible> {
    // Count before answering, so a limit is never overshot by concurrent requests.
    let n = context.served.fetch_add(1, Ordering::SeqCst);
    if context.max_requests.is_some_and(|m| n >= m) {
        return Ok(text(StatusCode::SERVICE_UNAVAILABLE, "shutting down\n"));
    }
    let answer = match (request.method(), request.uri().path()) {
        (&Method::GET | &Method::HEAD, "/metrics") => {
            let scraper = Arc::clone(&context.scraper);
            match tokio::task::spawn_blocking(move || scraper.scrape()).await {
                Ok(body) => response(StatusCode::OK, METRICS_CONTENT_TYPE, body),
                Err(_) => text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the scrape failed; the exporter's log says why\n",
                ),
            }
        }
        (&Method::GET | &Method::HEAD, "/") => {
            response(StatusCode::OK, "text/html; charset=utf-8", INDEX_HTML)
        }
        (&Method::GET | &Method::HEAD, _) => text(
            StatusCode::NOT_FOUND,
            "not found: the metrics are at /metrics\n",
        ),
        _ => {
            let mut answer = text(
                StatusCode::METHOD_NOT_ALLOWED,
                "only GET and HEAD are served\n",
            );
            answer
                .headers_mut()
                .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
            answer
        }
    };
    if context.max_requests == Some(n + 1) {
        context.limit_reached.notify_one();
    }
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_table_closes_the_quietest_connection() {
        const CAPACITY: usize = 16;
        let mut connections = Connections::new(CAPACITY);
        let start = Instant::now();
        let mut closers = Vec::new();
        for i in 0..CAPACITY {
            closers.push(connections.admit(start + Duration::from_millis(i as u64)).1);
        }
        // The first connection asked for something since: the second is quietest.
        connections.touch(0, start + Duration::from_secs(5));
        let (_, newest) = connections.admit(start + Duration::from_secs(6));
        assert_eq!(connections.slots.len(), CAPACITY);
        assert!(connections.slots.iter().all(|s| s.id != 1));
        assert!(connections.slots.iter().any(|s| s.id == 0));
        // The closed connection's task finds its permit waiting.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        runtime.block_on(async {
            tokio::time::timeout(Duration::from_secs(1), closers[1].notified())
                .await
                .expect("the quietest connection was told to close");
            assert!(
                tokio::time::timeout(Duration::from_millis(10), newest.notified())
                    .await
                    .is_err(),
                "the newest connection stays"
            );
        });
        connections.remove(0);
        assert_eq!(connections.slots.len(), CAPACITY - 1);
    }
}
