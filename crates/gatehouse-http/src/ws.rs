//! GraphQL over WebSocket on `{base}/graphql`, with both subprotocols:
//!
//! - `graphql-transport-ws` (the `graphql-ws` library's protocol,
//!   <https://github.com/enisdenjo/graphql-ws/blob/master/PROTOCOL.md>);
//! - `graphql-ws`, the legacy subscriptions-transport-ws protocol
//!   (`start`/`data`/`stop`, `ka` keep-alives).
//!
//! Both authenticate in `connection_init` (payload `Authorization`, else the
//! upgrade request's header) and feed one bounded outbound queue per socket:
//! a subscription joins the group of identical subscriptions
//! ([`crate::fanout`]), which executes once for all of them; any other
//! operation runs as its own task. They close the socket when the credential goes
//! stale (4403), the client falls behind (1013) or the server shuts down
//! (1001). `docs/design/subscriptions.md` records each decision.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{FromRequestParts, Request};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use gatehouse_auth::Principal;
use gatehouse_graphql::error::Code;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;

use crate::AppState;
use crate::authn::AuthFailure;
use crate::fanout::{self, Delivery, Membership, Sink};
use crate::live::{Credential, close_reason, stale};
use crate::telemetry::SubscriptionGuard;

/// `graphql-transport-ws`, the current protocol.
const TRANSPORT_WS: &str = "graphql-transport-ws";
/// `graphql-ws`, the legacy subscriptions-transport-ws protocol.
const LEGACY_WS: &str = "graphql-ws";

/// Bytes read from a socket at a time.
const READ_BUFFER: usize = 1024;

/// Bytes of queued messages collected before they are written to the
/// socket (one write for all of them). Small, because the buffer keeps its
/// size once grown, and a few small GraphQL messages already fill it.
const WRITE_BUFFER: usize = 4096;

/// Queued messages written at most before one flush, so that a fast
/// producer cannot hold the other branches of a connection's loop.
const WRITE_BATCH: usize = 64;

/// How long one frame may take to reach the client's socket buffer before
/// the connection is given up as dead.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

// Close codes (graphql-transport-ws; the legacy protocol uses the same ones
// where the rule they enforce applies to it).
const BAD_REQUEST: u16 = 4400;
const UNAUTHORIZED: u16 = 4401;
const FORBIDDEN: u16 = 4403;
const SUBPROTOCOL_NOT_ACCEPTABLE: u16 = 4406;
const INIT_TIMEOUT: u16 = 4408;
const DUPLICATE_ID: u16 = 4409;
const TOO_MANY_INITS: u16 = 4429;
const INTERNAL_ERROR: u16 = 4500;
/// RFC 6455 §7.4.1: the endpoint is going away (server shutdown).
const GOING_AWAY: u16 = 1001;
/// RFC 6455 §7.4.1 (IANA registry): try again later. Used for a client that
/// does not read fast enough; graphql-ws clients reconnect on it.
const TRY_AGAIN_LATER: u16 = 1013;

/// A WebSocket upgrade of `{base}/graphql` (the dispatch in
/// `endpoint.rs` sends it here). Not behind authentication: the
/// protocols authenticate in `connection_init` (or with the upgrade
/// request's `Authorization`, checked there), and refuse with a close
/// code, not a 401.
pub(crate) async fn upgrade_request(state: Arc<AppState>, req: Request) -> Response {
    let (mut parts, _body) = req.into_parts();
    if let Err(refused) = same_or_allowed_origin(&state, &parts) {
        return *refused;
    }
    match WebSocketUpgrade::from_request_parts(&mut parts, &state).await {
        Ok(ws) => {
            let peer = gatehouse_oauth::client_addr(&parts.extensions);
            upgrade(state, &parts.headers, ws, peer)
        }
        Err(rejection) => rejection.into_response(),
    }
}

/// Refuses an upgrade a page of another origin makes (cross-site WebSocket
/// hijacking): CORS does not cover WebSockets, and a browser attaches what
/// it holds for this server (HTTP Basic credentials it cached) to an
/// upgrade any page starts. An upgrade without `Origin` (not a browser),
/// from a page of this server (an origin the client may have addressed it
/// by, `gatehouse_oauth::origin::own_origins`) or from an origin of
/// `[cors] allowed_origins` goes through; another is 403.
fn same_or_allowed_origin(
    state: &AppState,
    parts: &axum::http::request::Parts,
) -> Result<(), Box<Response>> {
    let issuer = state.authn.as_ref().map_or("", |a| a.issuer());
    let own = gatehouse_oauth::origin::own_origins(issuer, &parts.extensions, &parts.headers);
    if state
        .cors
        .allowed_origins
        .permits_request(&own, &parts.headers)
    {
        return Ok(());
    }
    tracing::info!("WebSocket upgrade from another origin refused");
    Err(Box::new(
        (
            axum::http::StatusCode::FORBIDDEN,
            "a WebSocket from a page of another origin is refused; list the origin in [cors] allowed_origins",
        )
            .into_response(),
    ))
}

/// Which protocol a socket speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    TransportWs,
    Legacy,
}

fn upgrade(
    state: Arc<AppState>,
    headers: &HeaderMap,
    ws: WebSocketUpgrade,
    peer: Option<std::net::IpAddr>,
) -> Response {
    // tungstenite's default 128 KiB read buffer per socket would dominate
    // the memory of idle subscribers; GraphQL messages are small, and a
    // larger one still arrives, in more reads.
    let ws = ws
        .protocols([TRANSPORT_WS, LEGACY_WS])
        .max_message_size(state.max_body_bytes)
        .read_buffer_size(READ_BUFFER)
        .write_buffer_size(WRITE_BUFFER);
    let protocol = match ws.selected_protocol().and_then(|p| p.to_str().ok()) {
        Some(TRANSPORT_WS) => Some(Protocol::TransportWs),
        Some(LEGACY_WS) => Some(Protocol::Legacy),
        _ => None,
    };
    let authorization = headers.get(header::AUTHORIZATION).cloned();
    ws.on_upgrade(move |socket| async move {
        match protocol {
            Some(protocol) => {
                Connection::new(state, protocol, authorization, peer)
                    .run(socket)
                    .await
            }
            // As the graphql-ws server does: accept, then close with 4406.
            None => {
                let mut socket = socket;
                let _ = close(
                    &mut socket,
                    SUBPROTOCOL_NOT_ACCEPTABLE,
                    "Subprotocol not acceptable: use graphql-transport-ws or graphql-ws",
                )
                .await;
            }
        }
    })
}

/// What an operation hands to its connection.
enum Out {
    /// A result (shared with the operation's group, or a planned answer's
    /// bytes): the message is `prefix` (the operation's
    /// `{"type":…,"id":…,"payload":`), `payload`, then `}`.
    Next { prefix: Arc<str>, payload: Arc<str> },
    /// The operation ended.
    Finished(Box<Finished>),
}

/// Operation `id` (started as `serial`) ended: its id is free again.
/// `frame` is its last message.
struct Finished {
    id: String,
    serial: u64,
    frame: Option<String>,
}

impl Out {
    fn finished(id: String, serial: u64, frame: Option<String>) -> Self {
        Self::Finished(Box::new(Finished { id, serial, frame }))
    }
}

/// A running operation of a connection; dropping it stops the operation.
struct Operation {
    /// Tells this run of an id from an earlier one whose end is still queued.
    serial: u64,
    run: Run,
}

enum Run {
    /// A query or mutation (or a subscription that cannot be shared), as its own task.
    Task(JoinHandle<()>),
    /// A member of a subscription group.
    Shared {
        _membership: Membership,
        _active: SubscriptionGuard,
    },
}

impl Drop for Operation {
    fn drop(&mut self) {
        if let Run::Task(task) = &self.run {
            task.abort();
        }
    }
}

/// A WebSocket operation as a member of a subscription group.
struct WsSink {
    id: String,
    serial: u64,
    /// `{"type":"next"|"data","id":<id>,"payload":`
    prefix: Arc<str>,
    tx: mpsc::Sender<Out>,
    overflow: Arc<Notify>,
}

impl Sink for WsSink {
    fn deliver(&self, delivery: &Delivery) -> bool {
        let out = match delivery {
            Delivery::Next(payload) => Out::Next {
                prefix: self.prefix.clone(),
                payload: payload.clone(),
            },
            Delivery::Refused { errors, .. } => Out::finished(
                self.id.clone(),
                self.serial,
                Some(error_frame(&self.id, errors)),
            ),
            Delivery::Complete => {
                Out::finished(self.id.clone(), self.serial, Some(complete_frame(&self.id)))
            }
        };
        queue(&self.tx, &self.overflow, out)
    }
}

/// How handling one client message ends.
enum Step {
    Continue,
    Close(u16, String),
}

struct Connection {
    state: Arc<AppState>,
    protocol: Protocol,
    /// `Authorization` of the upgrade request, used when `connection_init` has none.
    upgrade_authorization: Option<HeaderValue>,
    /// The client's address (failed Basic logins are throttled per address).
    peer: Option<std::net::IpAddr>,
    init_received: bool,
    acked: bool,
    principal: Option<Principal>,
    credential: Option<Credential>,
    /// Whether the credential's expiry/revocation watch runs.
    watching: bool,
    operations: HashMap<String, Operation>,
    tx: mpsc::Sender<Out>,
    rx: mpsc::Receiver<Out>,
    /// Raised by an operation that found the outbound queue full.
    overflow: Arc<Notify>,
}

impl Connection {
    fn new(
        state: Arc<AppState>,
        protocol: Protocol,
        authorization: Option<HeaderValue>,
        peer: Option<std::net::IpAddr>,
    ) -> Self {
        let (tx, rx) = mpsc::channel(state.subscriptions.queue_capacity.max(1));
        Self {
            state,
            protocol,
            upgrade_authorization: authorization,
            peer,
            init_received: false,
            acked: false,
            principal: None,
            credential: None,
            watching: false,
            operations: HashMap::new(),
            tx,
            rx,
            overflow: Arc::new(Notify::new()),
        }
    }

    async fn run(mut self, mut socket: WebSocket) {
        let opts = self.state.subscriptions.clone();
        let shutdown = opts.shutdown.clone().cancelled_owned();
        tokio::pin!(shutdown);
        let init_deadline = tokio::time::sleep(opts.init_timeout);
        tokio::pin!(init_deadline);
        let mut stale_watch: std::pin::Pin<Box<dyn Future<Output = String> + Send>> =
            Box::pin(std::future::pending());
        // The legacy protocol's first `ka` goes out with the ack; then one per period.
        let mut keepalive =
            tokio::time::interval_at(tokio::time::Instant::now() + opts.keepalive, opts.keepalive);
        keepalive.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Made once: the branch ends the loop, and a fresh `Notified` per
        // turn would join and leave the `Notify`'s waiter list on every
        // delivery. A notification sent before the first poll is kept.
        let overflow = self.overflow.clone();
        let overflowed = overflow.notified();
        tokio::pin!(overflowed);

        let (code, reason) = loop {
            tokio::select! {
                biased;
                () = &mut shutdown => break (GOING_AWAY, "the server is shutting down".to_string()),
                () = &mut overflowed => {
                    tracing::info!("closing a WebSocket whose client does not read its messages");
                    break (TRY_AGAIN_LATER, format!(
                        "too slow: more than {} messages waiting to be read",
                        opts.queue_capacity
                    ));
                }
                reason = &mut stale_watch => {
                    tracing::info!(%reason, "closing a WebSocket whose credential went stale");
                    break (FORBIDDEN, format!("Forbidden: {reason}"));
                }
                () = &mut init_deadline, if !self.init_received => {
                    break (INIT_TIMEOUT, "Connection initialisation timeout".to_string());
                }
                _ = keepalive.tick(), if self.acked && self.protocol == Protocol::Legacy => {
                    if send(&mut socket, ServerMessage::Ka.frame()).await.is_err() {
                        return;
                    }
                }
                out = self.rx.recv() => {
                    if self.write_queued(&mut socket, out).await.is_err() {
                        self.abort_all();
                        return;
                    }
                }
                msg = socket.recv() => {
                    let text = match msg {
                        Some(Ok(Message::Text(t))) => t,
                        Some(Ok(Message::Binary(_))) => {
                            break (BAD_REQUEST, "Invalid message received: binary frames are not GraphQL messages".to_string());
                        }
                        Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                        Some(Ok(Message::Close(_))) | Some(Err(_)) | None => {
                            self.abort_all();
                            return;
                        }
                    };
                    // Boxed: handling a message (authentication included)
                    // is a large future that an idle socket need not carry
                    // in its task for its whole life.
                    let step = match self.protocol {
                        Protocol::TransportWs => Box::pin(self.on_transport_ws(&mut socket, text.as_str())).await,
                        Protocol::Legacy => Box::pin(self.on_legacy(&mut socket, text.as_str())).await,
                    };
                    match step {
                        Ok(Step::Continue) => {}
                        Ok(Step::Close(code, reason)) => break (code, reason),
                        Err(()) => {
                            self.abort_all();
                            return;
                        }
                    }
                    if self.acked && self.credential.is_some() && !self.watching {
                        self.watching = true;
                        stale_watch = Box::pin(stale(
                            self.state.authn.clone(),
                            self.credential.clone(),
                            opts.recheck_interval,
                        ));
                    }
                }
            }
        };
        self.abort_all();
        let _ = close(&mut socket, code, &reason).await;
    }

    /// Writes `first` and whatever else is queued behind it (up to
    /// [`WRITE_BATCH`] messages), then flushes once: the messages that
    /// queued up while the socket was busy leave in as few writes as
    /// tungstenite's write buffer allows instead of one each. `Err` when
    /// the client is gone or stopped reading.
    async fn write_queued(&mut self, socket: &mut WebSocket, first: Option<Out>) -> Result<(), ()> {
        let mut next = first;
        let mut written = 0;
        while let Some(out) = next.take() {
            if let Some(frame) = self.frame(out) {
                feed(socket, frame).await?;
                written += 1;
            }
            if written < WRITE_BATCH {
                next = self.rx.try_recv().ok();
            }
        }
        if written == 0 {
            return Ok(());
        }
        flush(socket).await
    }

    /// The message `out` stands for, if any; notes an operation's end.
    fn frame(&mut self, out: Out) -> Option<String> {
        match out {
            Out::Next { prefix, payload } => {
                let mut f = String::with_capacity(prefix.len() + payload.len() + 1);
                f.push_str(&prefix);
                f.push_str(&payload);
                f.push('}');
                Some(f)
            }
            Out::Finished(end) => {
                let Finished { id, serial, frame } = *end;
                if self
                    .operations
                    .get(&id)
                    .is_some_and(|op| op.serial == serial)
                {
                    self.operations.remove(&id);
                }
                frame
            }
        }
    }

    fn abort_all(&mut self) {
        self.operations.clear();
    }

    /// Authenticates `connection_init`: its payload's `Authorization` (any
    /// case), else the upgrade request's header, else anonymous (if allowed).
    async fn authenticate(
        &mut self,
        payload: Option<&serde_json::Map<String, Json>>,
    ) -> Result<(), AuthFailure> {
        let Some(authn) = self.state.authn.clone() else {
            return Ok(());
        };
        let from_payload = payload
            .and_then(|p| {
                p.iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case("authorization"))
            })
            .map(|(_, v)| v);
        let authorization =
            match from_payload {
                Some(Json::String(s)) => Some(HeaderValue::from_str(s).map_err(|_| {
                    AuthFailure::InvalidToken("malformed Authorization value".into())
                })?),
                Some(_) => {
                    return Err(AuthFailure::InvalidToken(
                        "`Authorization` in connection_init must be a string".into(),
                    ));
                }
                None => self.upgrade_authorization.clone(),
            };
        let mut headers = HeaderMap::new();
        if let Some(v) = &authorization {
            headers.insert(header::AUTHORIZATION, v.clone());
        }
        // Basic here is throttled per (user, address) like every login.
        let principal = authn.authenticate_from(&headers, self.peer).await?;
        self.credential = Some(Credential {
            authorization,
            principal: principal.clone(),
        });
        self.principal = Some(principal);
        Ok(())
    }

    /// One message of `graphql-transport-ws`. `Err` when the socket is gone.
    async fn on_transport_ws(&mut self, socket: &mut WebSocket, text: &str) -> Result<Step, ()> {
        let msg = match serde_json::from_str::<TransportIn>(text) {
            Ok(m) => m,
            Err(e) => {
                return Ok(Step::Close(
                    BAD_REQUEST,
                    format!("Invalid message received: {e}"),
                ));
            }
        };
        match msg {
            TransportIn::ConnectionInit { payload } => {
                if self.init_received {
                    return Ok(Step::Close(
                        TOO_MANY_INITS,
                        "Too many initialisation requests".into(),
                    ));
                }
                self.init_received = true;
                match self.authenticate(payload.as_ref()).await {
                    Ok(()) => {
                        self.acked = true;
                        send(socket, ServerMessage::ConnectionAck.frame()).await?;
                        Ok(Step::Continue)
                    }
                    Err(AuthFailure::Unavailable) => Ok(Step::Close(
                        INTERNAL_ERROR,
                        AuthFailure::Unavailable.message(),
                    )),
                    Err(f) => Ok(Step::Close(
                        FORBIDDEN,
                        format!("Forbidden: {}", f.message()),
                    )),
                }
            }
            TransportIn::Ping { payload } => {
                let payload = payload.as_ref().filter(|p| !p.is_null());
                send(socket, ServerMessage::Pong { payload }.frame()).await?;
                Ok(Step::Continue)
            }
            TransportIn::Pong {} => Ok(Step::Continue),
            TransportIn::Subscribe {
                id: OperationId(id),
                payload,
            } => {
                let params = match crate::params::from_json(&payload) {
                    Ok(p) => p,
                    Err(e) => {
                        return Ok(Step::Close(
                            BAD_REQUEST,
                            format!("Invalid message received: {e}"),
                        ));
                    }
                };
                if !self.acked {
                    return Ok(Step::Close(UNAUTHORIZED, "Unauthorized".into()));
                }
                self.start(socket, id, params).await
            }
            TransportIn::Complete {
                id: OperationId(id),
            } => {
                // The client ended it: no `complete` goes back (the protocol's rule).
                self.operations.remove(&id);
                Ok(Step::Continue)
            }
        }
    }

    /// One message of the legacy `graphql-ws` protocol.
    async fn on_legacy(&mut self, socket: &mut WebSocket, text: &str) -> Result<Step, ()> {
        let msg = match serde_json::from_str::<LegacyIn>(text) {
            Ok(m) => m,
            Err(e) => {
                let reply = match serde_json::from_str::<LegacyEnvelope>(text) {
                    // Every field of the known types takes any value of
                    // the envelope's type: a message that reads as an
                    // envelope has a type the protocol does not have.
                    Ok(envelope) => {
                        let message = format!("unexpected message type `{}`", envelope.kind);
                        ServerMessage::Error {
                            id: envelope.id.as_deref(),
                            payload: ErrorPayload::Message(Described { message: &message }),
                        }
                        .frame()
                    }
                    // subscriptions-transport-ws answers unparseable
                    // messages with `connection_error` and keeps the socket.
                    Err(_) => ServerMessage::ConnectionError {
                        payload: Described {
                            message: &e.to_string(),
                        },
                    }
                    .frame(),
                };
                send(socket, reply).await?;
                return Ok(Step::Continue);
            }
        };
        match msg {
            LegacyIn::ConnectionInit { payload } => {
                if self.init_received {
                    return Ok(Step::Close(
                        TOO_MANY_INITS,
                        "Too many initialisation requests".into(),
                    ));
                }
                self.init_received = true;
                let payload = payload.as_ref().and_then(Json::as_object);
                match self.authenticate(payload).await {
                    Ok(()) => {
                        self.acked = true;
                        send(socket, ServerMessage::ConnectionAck.frame()).await?;
                        send(socket, ServerMessage::Ka.frame()).await?;
                        Ok(Step::Continue)
                    }
                    Err(f) => {
                        let message = f.message();
                        let refusal = ServerMessage::ConnectionError {
                            payload: Described { message: &message },
                        };
                        send(socket, refusal.frame()).await?;
                        let code = if f == AuthFailure::Unavailable {
                            INTERNAL_ERROR
                        } else {
                            FORBIDDEN
                        };
                        Ok(Step::Close(code, format!("Forbidden: {message}")))
                    }
                }
            }
            LegacyIn::Start { id, payload } => {
                let Some(id) = id.filter(|i| !i.is_empty()) else {
                    let complaint = ServerMessage::Error {
                        id: None,
                        payload: ErrorPayload::Message(Described {
                            message: "start needs a non-empty string `id`",
                        }),
                    };
                    send(socket, complaint.frame()).await?;
                    return Ok(Step::Continue);
                };
                if !self.acked {
                    return Ok(Step::Close(UNAUTHORIZED, "Unauthorized".into()));
                }
                let params = match payload
                    .as_ref()
                    .ok_or_else(|| "start needs a payload".to_string())
                    .and_then(crate::params::from_json)
                {
                    Ok(p) => p,
                    Err(e) => {
                        send(socket, error_frame(&id, &[bad_input(&e)])).await?;
                        return Ok(Step::Continue);
                    }
                };
                self.start(socket, id, params).await
            }
            LegacyIn::Stop { id } => {
                if let Some(id) = id
                    && self.operations.remove(&id).is_some()
                {
                    // subscriptions-transport-ws confirms a stop with `complete`.
                    send(socket, complete_frame(&id)).await?;
                }
                Ok(Step::Continue)
            }
            LegacyIn::ConnectionTerminate => Ok(Step::Close(1000, String::new())),
        }
    }

    /// Starts operation `id`, or refuses it.
    async fn start(
        &mut self,
        socket: &mut WebSocket,
        id: String,
        params: crate::params::Params,
    ) -> Result<Step, ()> {
        if self.operations.contains_key(&id) {
            return Ok(Step::Close(
                DUPLICATE_ID,
                close_reason(&format!("Subscriber for {id} already exists")),
            ));
        }
        let max = self.state.subscriptions.max_per_connection;
        if self.operations.len() >= max {
            let e = bad_input(&format!(
                "this connection already runs {max} operations, the most allowed; complete one first"
            ));
            send(socket, error_frame(&id, &[e])).await?;
            return Ok(Step::Continue);
        }
        let request = params.into_request(self.principal.clone());
        let graphql = &self.state.graphql;
        let shared = if graphql.is_subscription(&request.query, request.operation_name.as_deref()) {
            graphql.sharing_key(&request)
        } else {
            None
        };
        let serial = fanout::next_serial();
        let run = match shared {
            Some(key) => {
                let prefix = self.protocol.result_prefix(&id);
                let sink = WsSink {
                    id: id.clone(),
                    serial,
                    prefix: Arc::from(prefix),
                    tx: self.tx.clone(),
                    overflow: self.overflow.clone(),
                };
                Run::Shared {
                    _membership: self.state.subscriptions.fanout.join(
                        graphql,
                        key,
                        request,
                        Box::new(sink),
                    ),
                    _active: crate::telemetry::subscription_started("websocket"),
                }
            }
            None => Run::Task(tokio::spawn(operation(
                graphql.answer_stream(request),
                WsSink {
                    id: id.clone(),
                    serial,
                    prefix: Arc::from(self.protocol.result_prefix(&id)),
                    tx: self.tx.clone(),
                    overflow: self.overflow.clone(),
                },
            ))),
        };
        self.operations.insert(id, Operation { serial, run });
        Ok(Step::Continue)
    }
}

/// Runs one operation: its results become `next`/`data` messages (a
/// planned answer's bytes as they are), a refusal before execution an
/// `error` message, and its end `complete`; as a group hands them to its
/// members.
async fn operation(
    stream: impl futures::Stream<Item = gatehouse_graphql::Answer> + Send,
    sink: WsSink,
) {
    let _active = crate::telemetry::subscription_started("websocket");
    let mut stream = std::pin::pin!(stream);
    while let Some(item) = stream.next().await {
        let delivery = Delivery::of(&item);
        // A refusal (parse, validation, limits) also ends the operation.
        let last = matches!(delivery, Delivery::Refused { .. });
        if !sink.deliver(&delivery) || last {
            return;
        }
    }
    sink.deliver(&Delivery::Complete);
}

/// Queues `out` without waiting; a full queue raises `overflow` (the
/// connection then closes), a closed one means the connection is gone.
fn queue(tx: &mpsc::Sender<Out>, overflow: &Notify, out: Out) -> bool {
    match tx.try_send(out) {
        Ok(()) => true,
        Err(mpsc::error::TrySendError::Full(_)) => {
            overflow.notify_one();
            false
        }
        Err(mpsc::error::TrySendError::Closed(_)) => false,
    }
}

/// An `error` message; both protocols carry the GraphQL errors as an array
/// in `payload`.
fn error_frame(id: &str, errors: &[Json]) -> String {
    ServerMessage::Error {
        id: Some(id),
        payload: ErrorPayload::Errors(errors),
    }
    .frame()
}

/// A `complete` message.
fn complete_frame(id: &str) -> String {
    ServerMessage::Complete { id }.frame()
}

fn bad_input(message: &str) -> Json {
    Code::BadUserInput.error_json(message)
}

/// A client message of `graphql-transport-ws`. Anything else (another
/// `type`, a missing or mistyped field) closes the socket with 4400.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum TransportIn {
    ConnectionInit {
        #[serde(default)]
        payload: Option<serde_json::Map<String, Json>>,
    },
    Ping {
        #[serde(default)]
        payload: Option<Json>,
    },
    Pong {},
    Subscribe {
        id: OperationId,
        payload: Json,
    },
    Complete {
        id: OperationId,
    },
}

/// A client message of the legacy `graphql-ws` protocol.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum LegacyIn {
    ConnectionInit {
        #[serde(default)]
        payload: Option<Json>,
    },
    Start {
        #[serde(default)]
        id: Option<String>,
        #[serde(default)]
        payload: Option<Json>,
    },
    Stop {
        #[serde(default)]
        id: Option<String>,
    },
    ConnectionTerminate,
}

/// What a legacy message that is not one of [`LegacyIn`] still says: its
/// `type` and `id`, which the `error` answer names.
#[derive(Debug, Deserialize)]
struct LegacyEnvelope {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    id: Option<String>,
}

/// An operation id: a non-empty string.
#[derive(Debug)]
struct OperationId(String);

impl<'de> Deserialize<'de> for OperationId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let id = String::deserialize(d)?;
        if id.is_empty() {
            return Err(serde::de::Error::custom("`id` must be a non-empty string"));
        }
        Ok(Self(id))
    }
}

/// A message the server sends, in either protocol (`next` is
/// `graphql-transport-ws`'s result, `data` and `ka` the legacy protocol's).
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ServerMessage<'a> {
    ConnectionAck,
    Ka,
    Pong {
        #[serde(skip_serializing_if = "Option::is_none")]
        payload: Option<&'a Json>,
    },
    /// An operation's GraphQL errors (which end it), or the legacy
    /// protocol's complaint about a message.
    Error {
        #[serde(skip_serializing_if = "Option::is_none")]
        id: Option<&'a str>,
        payload: ErrorPayload<'a>,
    },
    Complete {
        id: &'a str,
    },
    ConnectionError {
        payload: Described<'a>,
    },
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
enum ErrorPayload<'a> {
    Errors(&'a [Json]),
    Message(Described<'a>),
}

#[derive(Debug, Serialize)]
struct Described<'a> {
    message: &'a str,
}

impl ServerMessage<'_> {
    /// The message as a text frame. Serializing these types cannot fail
    /// (string keys, no maps of other keys).
    fn frame(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

impl Protocol {
    /// The text of the message carrying a result of operation `id`
    /// (`next` in `graphql-transport-ws`, `data` in the legacy protocol)
    /// up to its payload: results are serialized once (shared by a group,
    /// or written by the planned executor) and framed by this.
    fn result_prefix(self, id: &str) -> String {
        let kind = match self {
            Self::TransportWs => "next",
            Self::Legacy => "data",
        };
        format!(
            r#"{{"type":"{kind}","id":{},"payload":"#,
            Json::String(id.to_string())
        )
    }
}

/// Runs a socket write, giving up after [`WRITE_TIMEOUT`]; `Err` when the
/// client is gone or stopped reading.
async fn within_write_timeout<E>(
    write: impl std::future::Future<Output = Result<(), E>>,
) -> Result<(), ()> {
    match tokio::time::timeout(WRITE_TIMEOUT, write).await {
        Ok(Ok(())) => Ok(()),
        _ => Err(()),
    }
}

/// Hands one text frame to the socket's write buffer, which writes it out
/// once it holds more than [`WRITE_BUFFER`] bytes; [`flush`] writes the
/// rest. `Err` when the client is gone or stopped reading.
async fn feed(socket: &mut WebSocket, text: String) -> Result<(), ()> {
    within_write_timeout(socket.feed(Message::Text(text.into()))).await
}

/// Writes out whatever [`feed`] left in the socket's write buffer.
async fn flush(socket: &mut WebSocket) -> Result<(), ()> {
    within_write_timeout(socket.flush()).await
}

/// Sends one text frame; `Err` when the client is gone or stopped reading.
async fn send(socket: &mut WebSocket, text: String) -> Result<(), ()> {
    within_write_timeout(socket.send(Message::Text(text.into()))).await
}

async fn close(socket: &mut WebSocket, code: u16, reason: &str) -> Result<(), ()> {
    let frame = CloseFrame {
        code,
        reason: close_reason(reason).into(),
    };
    within_write_timeout(socket.send(Message::Close(Some(frame)))).await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    #[test]
    fn transport_ws_refuses_what_is_not_a_client_message() {
        for text in [
            "{not json",
            r#"{"id":"1"}"#,
            r#"{"type":"next","id":"1","payload":{}}"#,
            r#"{"type":"subscribe","id":"","payload":{}}"#,
            r#"{"type":"subscribe","payload":{}}"#,
            r#"{"type":"complete","id":7}"#,
            r#"{"type":"connection_init","payload":5}"#,
        ] {
            assert!(serde_json::from_str::<TransportIn>(text).is_err(), "{text}");
        }
        assert!(matches!(
            serde_json::from_str(r#"{"type":"connection_init","payload":null}"#).unwrap(),
            TransportIn::ConnectionInit { payload: None }
        ));
        assert!(matches!(
            serde_json::from_str(r#"{"type":"pong","payload":{"x":1}}"#).unwrap(),
            TransportIn::Pong {}
        ));
    }

    #[test]
    fn legacy_unknown_types_keep_their_id() {
        let text = r#"{"type":"bogus","id":"4"}"#;
        assert!(serde_json::from_str::<LegacyIn>(text).is_err());
        let envelope: LegacyEnvelope = serde_json::from_str(text).unwrap();
        assert_eq!(
            (envelope.kind.as_str(), envelope.id.as_deref()),
            ("bogus", Some("4"))
        );
        assert!(matches!(
            serde_json::from_str(r#"{"type":"connection_terminate","payload":1}"#).unwrap(),
            LegacyIn::ConnectionTerminate
        ));
    }

    #[test]
    fn server_messages() {
        let frame = |m: ServerMessage<'_>| serde_json::from_str::<Json>(&m.frame()).unwrap();
        assert_eq!(
            frame(ServerMessage::Pong { payload: None }),
            json!({"type": "pong"})
        );
        assert_eq!(
            frame(ServerMessage::Error {
                id: None,
                payload: ErrorPayload::Message(Described { message: "no" }),
            }),
            json!({"type": "error", "payload": {"message": "no"}})
        );
        let payload = json!({"data": {"a": 1}});
        for (protocol, kind) in [(Protocol::TransportWs, "next"), (Protocol::Legacy, "data")] {
            let shared = format!("{}{payload}}}", protocol.result_prefix("x\"y"));
            assert_eq!(
                serde_json::from_str::<Json>(&shared).unwrap(),
                json!({"type": kind, "id": "x\"y", "payload": payload})
            );
        }
    }
}
