//! [`SqlAuthRepo`]: the OAuth persistence of `gatehouse-auth`
//! ([`AuthRepo`]) in the instance's database (`gatehouse-db`, the pools the
//! entity store uses too), so that every instance on one PostgreSQL
//! database shares clients, users, signing keys and token records.
//!
//! One internal table per record type (the `_gatehouse` prefix is reserved,
//! so the Model's tables never clash and migration plans never list them):
//! lists (scopes, grants, audiences) are JSON text, hashes and sealed keys
//! are stored exactly as the records hold them (`BLOB` / `BYTEA`), times are
//! seconds since the epoch (`BIGINT`).
//!
//! Every method is one statement (`purge_expired` is two in one transaction),
//! except [`AuthRepo::insert_token`], which is group-committed: records
//! handed in while a transaction is committing wait and go together in the
//! next one (see [`TokenWriter`]). Each call still returns only once its
//! record is committed, so an acknowledged token survives a killed process.
//! The single-use guarantee of refresh tokens rests on
//! [`AuthRepo::mark_refresh_used`] and [`AuthRepo::replace_successor`] being
//! conditional `UPDATE`s whose `WHERE` re-checks the state: PostgreSQL
//! re-evaluates it on the locked row after a concurrent update commits
//! (READ COMMITTED), SQLite runs one writer at a time, so of two racing
//! requests exactly one sees a changed row.

#![warn(missing_docs)]

use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use gatehouse_auth::{
    AuthRepo, ClientRecord, ClientType, CodeRecord, ConsumerRecord, FlowKind, FlowPurpose,
    FlowToken, Grant, IdentityKind, IdentityRecord, KeyRecord, MAIL_INTERVAL, MAILS_PER_HOUR,
    MAX_CODE_ATTEMPTS, NameTaken, NewIdentity, OAuth1TokenKind, OAuth1TokenRecord, ProviderFlow,
    RepoError, SigningAlg, TokenKind, TokenRecord, UserRecord, name_key,
};
use gatehouse_db::{Built, Conn, Db, DbError, DbRow, Dialect, SCHEMA_LOCK, SqlKind, q};
use sea_query::Value;
use serde_json::Value as Json;
use tokio::sync::{OnceCell, oneshot};

const CLIENTS: &str = "_gatehouse_oauth_clients";
const USERS: &str = "_gatehouse_oauth_users";
const KEYS: &str = "_gatehouse_oauth_keys";
const TOKENS: &str = "_gatehouse_oauth_tokens";
const CONSUMERS: &str = "_gatehouse_oauth1_consumers";
const OAUTH1_TOKENS: &str = "_gatehouse_oauth1_tokens";
/// OAuth 1.0 nonces: the primary key (consumer, nonce) is what refuses a
/// replay, on one instance or many.
const NONCES: &str = "_gatehouse_oauth1_nonces";
/// Authorization codes: `use_code`'s conditional `UPDATE` is what makes a
/// code single-use across instances.
const CODES: &str = "_gatehouse_oauth_codes";
/// Names of removed users, clients and consumers, by their case-folded
/// key (`gatehouse_auth::name_key`): `register` refuses them, so a `sub`
/// is never given to someone else.
const RETIRED: &str = "_gatehouse_oauth_retired_names";
/// Tokens of the e-mail flows (and notices, which only count towards an
/// address's limits): `use_flow_token_statement`'s conditional `UPDATE` is
/// what makes one single-use across instances.
const EMAIL_TOKENS: &str = "_gatehouse_email_tokens";
/// The rows of sign-ins through other identity providers under way.
const PROVIDER_FLOWS: &str = "_gatehouse_provider_flows";
/// Identities of other providers linked to accounts.
const IDENTITIES: &str = "_gatehouse_identities";

/// Creates the OAuth tables and their indexes when missing (under the
/// schema lock, [`SqlAuthRepo::ensure_tables`]).
async fn create_tables(conn: &mut Conn<'_>, d: Dialect) -> Result<(), gatehouse_db::Error> {
    // Byte-wise collation on PostgreSQL so "ordered by id" means the same
    // thing as on SQLite and in `MemoryRepo`.
    let text = match d {
        Dialect::Sqlite => "TEXT",
        Dialect::Postgres => "TEXT COLLATE \"C\"",
    };
    let blob = match d {
        Dialect::Sqlite => "BLOB",
        Dialect::Postgres => "BYTEA",
    };
    let boolean = match d {
        Dialect::Sqlite => "INTEGER",
        Dialect::Postgres => "BOOLEAN",
    };
    let statements = [
        format!(
            "CREATE TABLE IF NOT EXISTS {} (client_id {text} PRIMARY KEY NOT NULL, \
             secret_hash {blob} NOT NULL, grants TEXT NOT NULL, scopes TEXT NOT NULL, \
             audiences TEXT NOT NULL, created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL)",
            q(CLIENTS)
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {} (username {text} PRIMARY KEY NOT NULL, \
             password_hash TEXT NOT NULL, scopes TEXT NOT NULL, \
             created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL, \
             claims TEXT NOT NULL DEFAULT '{{}}')",
            q(USERS)
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {} (kid {text} PRIMARY KEY NOT NULL, alg TEXT NOT NULL, \
             public_jwk TEXT NOT NULL, private_sealed {blob} NOT NULL, created_at BIGINT NOT NULL, \
             retired_at BIGINT, publish_until BIGINT)",
            q(KEYS)
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {} (id {text} PRIMARY KEY NOT NULL, kind TEXT NOT NULL, \
             subject {text} NOT NULL, username {text}, client_id {text} NOT NULL, \
             scope TEXT NOT NULL, audience TEXT NOT NULL, issued_at BIGINT NOT NULL, \
             expires_at BIGINT NOT NULL, revoked {boolean} NOT NULL DEFAULT FALSE, \
             family_id {text} NOT NULL, parent_id {text}, used_at BIGINT, successor_id {text})",
            q(TOKENS)
        ),
        // Lookups by id use the primary key; these serve the set-based
        // revocations and the purge.
        index(TOKENS, "family_id"),
        index(TOKENS, "client_id"),
        index(TOKENS, "subject"),
        index(TOKENS, "username"),
        index(TOKENS, "expires_at"),
        format!(
            "CREATE TABLE IF NOT EXISTS {} (consumer_key {text} PRIMARY KEY NOT NULL, \
             secret_sealed {blob} NOT NULL, scopes TEXT NOT NULL, \
             created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL)",
            q(CONSUMERS)
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {} (id {text} PRIMARY KEY NOT NULL, kind TEXT NOT NULL, \
             consumer_key {text} NOT NULL, secret_sealed {blob} NOT NULL, callback TEXT, \
             verifier_hash TEXT, username {text}, scopes TEXT NOT NULL, \
             created_at BIGINT NOT NULL, expires_at BIGINT NOT NULL, used_at BIGINT)",
            q(OAUTH1_TOKENS)
        ),
        index(OAUTH1_TOKENS, "consumer_key"),
        index(OAUTH1_TOKENS, "expires_at"),
        format!(
            "CREATE TABLE IF NOT EXISTS {} (consumer_key {text} NOT NULL, nonce {text} NOT NULL, \
             expires_at BIGINT NOT NULL, PRIMARY KEY (consumer_key, nonce))",
            q(NONCES)
        ),
        index(NONCES, "expires_at"),
        format!(
            "CREATE TABLE IF NOT EXISTS {} (id {text} PRIMARY KEY NOT NULL, \
             client_id {text} NOT NULL, redirect_uri TEXT NOT NULL, \
             code_challenge TEXT NOT NULL, scope TEXT NOT NULL, username {text} NOT NULL, \
             nonce TEXT, auth_time BIGINT NOT NULL, issued_at BIGINT NOT NULL, \
             expires_at BIGINT NOT NULL, used_at BIGINT, family_id {text} NOT NULL)",
            q(CODES)
        ),
        index(CODES, "expires_at"),
        format!(
            "CREATE TABLE IF NOT EXISTS {} (name_key {text} PRIMARY KEY NOT NULL, \
             kind TEXT NOT NULL, name {text} NOT NULL)",
            q(RETIRED)
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {} (id {text} PRIMARY KEY NOT NULL, \
             purpose TEXT NOT NULL, sub {text}, address {text} NOT NULL, link_hash {text}, \
             code_hash TEXT, payload TEXT NOT NULL, created_at BIGINT NOT NULL, \
             expires_at BIGINT NOT NULL, code_expires_at BIGINT NOT NULL, \
             attempts BIGINT NOT NULL DEFAULT 0, used_at BIGINT)",
            q(EMAIL_TOKENS)
        ),
        index(EMAIL_TOKENS, "link_hash"),
        // An e-mail change's code is checked against the account's latest token.
        index(EMAIL_TOKENS, "sub"),
        index(EMAIL_TOKENS, "expires_at"),
        // The per-address limits count an address's recent messages.
        format!(
            "CREATE INDEX IF NOT EXISTS {} ON {} (address, created_at)",
            q(&format!("{EMAIL_TOKENS}_address_idx")),
            q(EMAIL_TOKENS)
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {} (id {text} PRIMARY KEY NOT NULL, kind TEXT NOT NULL, \
             provider {text} NOT NULL, browser TEXT NOT NULL, payload TEXT NOT NULL, \
             created_at BIGINT NOT NULL, expires_at BIGINT NOT NULL, used_at BIGINT)",
            q(PROVIDER_FLOWS)
        ),
        index(PROVIDER_FLOWS, "expires_at"),
        // The pair (issuer, subject) is the identity: linked once.
        format!(
            "CREATE TABLE IF NOT EXISTS {} (id {text} PRIMARY KEY NOT NULL, sub {text} NOT NULL, \
             provider {text} NOT NULL, issuer {text} NOT NULL, subject {text} NOT NULL, \
             email TEXT, linked_at BIGINT NOT NULL, UNIQUE (issuer, subject))",
            q(IDENTITIES)
        ),
        index(IDENTITIES, "sub"),
        // `register` looks names up without regard to ASCII case.
        folded_index(USERS, "username"),
        folded_index(CLIENTS, "client_id"),
        folded_index(CONSUMERS, "consumer_key"),
    ];
    for sql in &statements {
        conn.ddl(sql).await?;
    }
    add_missing_columns(conn, d).await
}

/// Columns added to the internal tables after their first release: a
/// database created before gets them here, once. Each is nullable or has
/// a default, so existing rows stay valid.
const ADDED_COLUMNS: &[(&str, &str, &str)] = &[
    // Custom claims of a user, a JSON object.
    (USERS, "claims", "TEXT NOT NULL DEFAULT '{}'"),
    // Client kinds (authorization code flow): clients registered before
    // are confidential, third-party, without redirect URIs, as they were.
    (
        CLIENTS,
        "client_type",
        "TEXT NOT NULL DEFAULT 'confidential'",
    ),
    (CLIENTS, "first_party", "BOOLEAN NOT NULL DEFAULT FALSE"),
    (CLIENTS, "redirect_uris", "TEXT NOT NULL DEFAULT '[]'"),
    // OpenID Connect: how the client's ID tokens are signed; NULL is the
    // registration default (RS256).
    (CLIENTS, "id_token_signed_response_alg", "TEXT"),
    // Signing in through another identity provider: which one, carried
    // from the code to its tokens and through their refreshes.
    (CODES, "idp", "TEXT"),
    (TOKENS, "idp", "TEXT"),
];

async fn add_missing_columns(conn: &mut Conn<'_>, d: Dialect) -> Result<(), gatehouse_db::Error> {
    for (table, column, decl) in ADDED_COLUMNS {
        // Looked up first rather than `ADD COLUMN IF NOT EXISTS` (SQLite
        // has no such clause; on PostgreSQL it would take the table's
        // exclusive lock at every start, stalling other instances' logins).
        // Under the migration lock, so no other instance adds it meanwhile.
        let probe = match d {
            Dialect::Sqlite => Built::raw(
                "SELECT COUNT(*) FROM pragma_table_info(?) WHERE name = ?",
                vec![text(*table), text(*column)],
            ),
            Dialect::Postgres => Built::raw(
                "SELECT COUNT(*) FROM information_schema.columns \
                 WHERE table_schema = current_schema() AND table_name = $1 AND column_name = $2",
                vec![text(*table), text(*column)],
            ),
        };
        let rows = conn.fetch(probe, &[SqlKind::Count]).await?;
        let present = rows
            .first()
            .and_then(|r| r.first())
            .and_then(Json::as_i64)
            .is_some_and(|n| n > 0);
        if !present {
            conn.ddl(&format!(
                "ALTER TABLE {} ADD COLUMN {} {decl}",
                q(table),
                q(column)
            ))
            .await?;
        }
    }
    Ok(())
}

/// An index on `lower(column)`: `lower` folds ASCII only on both backends
/// (SQLite without ICU; PostgreSQL under the `C` collation of these
/// columns), as `gatehouse_auth::name_key` does.
fn folded_index(table: &str, column: &str) -> String {
    format!(
        "CREATE INDEX IF NOT EXISTS {} ON {} (lower({}))",
        q(&format!("{table}_{column}_folded_idx")),
        q(table),
        q(column)
    )
}

fn index(table: &str, column: &str) -> String {
    format!(
        "CREATE INDEX IF NOT EXISTS {} ON {} ({})",
        q(&format!("{table}_{column}_idx")),
        q(table),
        q(column)
    )
}

/// The [`AuthRepo`] of a gatehouse instance, in the same database as its
/// data. Cheap to clone.
///
/// The tables are created on the repository's first use, or by
/// [`SqlAuthRepo::ensure_tables`].
#[derive(Debug, Clone)]
pub struct SqlAuthRepo {
    db: Db,
    tokens: Arc<TokenWriter>,
    /// Set once this repository has made sure its tables exist.
    ready: Arc<OnceCell<()>>,
}

/// Most token records committed in one transaction.
const TOKEN_BATCH_MAX: usize = 256;
/// Largest multi-row `INSERT` (SQLite); a batch is split into power-of-two
/// chunks so the statement cache sees at most eight distinct statements.
const TOKEN_CHUNK_MAX: usize = 128;
/// Flushers at once on PostgreSQL: while one batch waits for its commit's
/// WAL flush, the next is already sent, so the disk is never idle between
/// flushes and a caller does not queue behind a whole commit round.
const PG_FLUSHERS: usize = 2;

type TokenWaiter = oneshot::Sender<Result<(), RepoError>>;

/// Group commit of token records. Every issued token writes a record, and
/// on SQLite each write transaction takes the single writer connection (and
/// PostgreSQL flushes its WAL per commit): one transaction per token caps
/// issuance at the commit rate. Instead, callers queue their record and
/// wait; a flusher takes everything queued, writes it in one transaction,
/// answers each caller, and repeats until the queue is empty. No timer: a
/// batch is whatever arrived during the previous commit, so a lone request
/// is written at once.
///
/// SQLite has one flusher at a time, on a blocking-pool thread: its commit
/// runs in-process, and on a runtime worker it would stall every request
/// queued on that worker for the length of the batch. PostgreSQL has up to
/// [`PG_FLUSHERS`] as tasks (they only wait on the network).
#[derive(Debug)]
struct TokenWriter {
    state: Mutex<Queue>,
    max_flushers: usize,
}

#[derive(Debug, Default)]
struct Queue {
    pending: Vec<(TokenRecord, TokenWaiter)>,
    /// Flushers running (each will look at the queue again before it stops).
    flushers: usize,
}

impl TokenWriter {
    fn new(dialect: Dialect) -> Self {
        Self {
            state: Mutex::new(Queue::default()),
            max_flushers: match dialect {
                Dialect::Sqlite => 1,
                Dialect::Postgres => PG_FLUSHERS,
            },
        }
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        // The queue is only pushed to and drained: a panic cannot leave it
        // half-changed.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Ends a flusher that stops abnormally (a panic, its runtime shutting
/// down, or a blocking task that never ran): if it was the last one, the
/// waiting callers get an error instead of waiting forever; the next caller
/// starts a new flusher.
struct FlusherGuard {
    writer: Arc<TokenWriter>,
    finished: bool,
}

impl Drop for FlusherGuard {
    fn drop(&mut self) {
        if !self.finished {
            let mut q = self.writer.lock();
            q.flushers = q.flushers.saturating_sub(1);
            if q.flushers == 0 {
                q.pending.clear();
            }
        }
    }
}

const CLIENT_COLS: &str = "client_id, secret_hash, grants, scopes, audiences, created_at, \
                           updated_at, client_type, first_party, redirect_uris, \
                           id_token_signed_response_alg";
const CLIENT_KINDS: &[SqlKind] = &[
    SqlKind::Text,
    SqlKind::Bytes,
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Count,
    SqlKind::Count,
    SqlKind::Text,
    SqlKind::Bool,
    SqlKind::Text,
    SqlKind::Text,
];
const USER_COLS: &str = "username, password_hash, scopes, created_at, updated_at, claims";
const USER_KINDS: &[SqlKind] = &[
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Count,
    SqlKind::Count,
    SqlKind::Text,
];
const KEY_COLS: &str =
    "kid, alg, public_jwk, private_sealed, created_at, retired_at, publish_until";
const KEY_KINDS: &[SqlKind] = &[
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Bytes,
    SqlKind::Count,
    SqlKind::Count,
    SqlKind::Count,
];
const TOKEN_COLS: &str = "id, kind, subject, username, client_id, scope, audience, issued_at, \
                          expires_at, revoked, family_id, parent_id, used_at, successor_id, idp";
const TOKEN_KINDS: &[SqlKind] = &[
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Count,
    SqlKind::Count,
    SqlKind::Bool,
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Count,
    SqlKind::Text,
    // idp
    SqlKind::Text,
];

const CONSUMER_COLS: &str = "consumer_key, secret_sealed, scopes, created_at, updated_at";
const CONSUMER_KINDS: &[SqlKind] = &[
    SqlKind::Text,
    SqlKind::Bytes,
    SqlKind::Text,
    SqlKind::Count,
    SqlKind::Count,
];
const OAUTH1_TOKEN_COLS: &str = "id, kind, consumer_key, secret_sealed, callback, verifier_hash, \
                                 username, scopes, created_at, expires_at, used_at";
const OAUTH1_TOKEN_KINDS: &[SqlKind] = &[
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Bytes,
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Count,
    SqlKind::Count,
    SqlKind::Count,
];

const CODE_COLS: &str = "id, client_id, redirect_uri, code_challenge, scope, username, nonce, \
                         auth_time, issued_at, expires_at, used_at, family_id, idp";
const CODE_KINDS: &[SqlKind] = &[
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Count,
    SqlKind::Count,
    SqlKind::Count,
    SqlKind::Count,
    SqlKind::Text,
    // idp
    SqlKind::Text,
];

const FLOW_COLS: &str = "id, purpose, sub, address, link_hash, code_hash, payload, created_at, \
                         expires_at, code_expires_at, attempts, used_at";
const FLOW_KINDS: &[SqlKind] = &[
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Count,
    SqlKind::Count,
    SqlKind::Count,
    SqlKind::Count,
    SqlKind::Count,
];

const PROVIDER_FLOW_COLS: &str = "id, kind, provider, browser, payload, created_at, expires_at, \
                                  used_at";
const PROVIDER_FLOW_KINDS: &[SqlKind] = &[
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Count,
    SqlKind::Count,
    SqlKind::Count,
];

const IDENTITY_COLS: &str = "id, sub, provider, issuer, subject, email, linked_at";
const IDENTITY_KINDS: &[SqlKind] = &[
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Text,
    SqlKind::Count,
];

fn provider_flow(row: DbRow) -> Result<ProviderFlow, RepoError> {
    let mut c = Cols::new(row, "provider flow");
    let id = c.string()?;
    let kind = c.string()?;
    Ok(ProviderFlow {
        id,
        kind: FlowKind::parse(&kind).ok_or_else(|| c.bad("a provider flow kind"))?,
        provider: c.string()?,
        browser: c.string()?,
        payload: {
            let s = c.string()?;
            serde_json::from_str(&s).map_err(|_| c.bad("JSON"))?
        },
        created_at: c.int()?,
        expires_at: c.int()?,
        used_at: c.opt_int()?,
    })
}

fn identity(row: DbRow) -> Result<IdentityRecord, RepoError> {
    let mut c = Cols::new(row, "identity");
    Ok(IdentityRecord {
        id: c.string()?,
        sub: c.string()?,
        provider: c.string()?,
        issuer: c.string()?,
        subject: c.string()?,
        email: c.opt_string()?,
        linked_at: c.int()?,
    })
}

fn flow_token(row: DbRow) -> Result<FlowToken, RepoError> {
    let mut c = Cols::new(row, "e-mail flow token");
    let id = c.string()?;
    let purpose = c.string()?;
    Ok(FlowToken {
        id,
        purpose: FlowPurpose::parse(&purpose).ok_or_else(|| c.bad("a flow purpose"))?,
        sub: c.opt_string()?,
        address: c.string()?,
        link_hash: c.opt_string()?,
        code_hash: c.opt_string()?,
        payload: {
            let s = c.string()?;
            serde_json::from_str(&s).map_err(|_| c.bad("JSON"))?
        },
        created_at: c.int()?,
        expires_at: c.int()?,
        code_expires_at: c.int()?,
        attempts: u32::try_from(c.int()?).unwrap_or(u32::MAX),
        used_at: c.opt_int()?,
    })
}

fn code(row: DbRow) -> Result<CodeRecord, RepoError> {
    let mut c = Cols::new(row, "authorization code");
    Ok(CodeRecord {
        id: c.string()?,
        client_id: c.string()?,
        redirect_uri: c.string()?,
        code_challenge: c.string()?,
        scope: c.list()?,
        username: c.string()?,
        nonce: c.opt_string()?,
        auth_time: c.int()?,
        issued_at: c.int()?,
        expires_at: c.int()?,
        used_at: c.opt_int()?,
        family_id: c.string()?,
        idp: c.opt_string()?,
    })
}

impl SqlAuthRepo {
    /// The repository over `db` (the database the entity store opened:
    /// `Store::db`).
    pub fn new(db: Db) -> SqlAuthRepo {
        let tokens = Arc::new(TokenWriter::new(db.dialect()));
        SqlAuthRepo {
            db,
            tokens,
            ready: Arc::new(OnceCell::new()),
        }
    }

    /// Creates the OAuth tables when missing and adds columns added since
    /// they were created, one instance at a time (PostgreSQL: the schema
    /// lock migrations take; SQLite: the write lock). Done once per
    /// repository; every method calls it first, and `gatehouse copy` calls
    /// it on both sides so that the tables are copied.
    pub async fn ensure_tables(&self) -> Result<(), DbError> {
        self.ready
            .get_or_try_init(|| async {
                let d = self.dialect();
                let mut tx = self.db.begin().await?;
                let mut c = tx.conn();
                if d == Dialect::Postgres {
                    c.ddl(SCHEMA_LOCK).await?;
                }
                create_tables(&mut c, d).await?;
                tx.commit().await?;
                Ok::<(), DbError>(())
            })
            .await
            .map(|_| ())
    }

    /// Starts a flusher for the queue: on SQLite on a blocking-pool thread
    /// (see [`TokenWriter`]), on PostgreSQL as a task. Either way it is not
    /// one of the callers, so a caller that goes away (a dropped connection)
    /// cannot abandon the others' batch half way.
    fn start_flusher(&self) {
        let guard = FlusherGuard {
            writer: self.tokens.clone(),
            finished: false,
        };
        let repo = self.clone();
        match self.dialect() {
            Dialect::Sqlite => {
                // Outside a runtime (never, in practice) the guard drops
                // here and the waiting callers get an error.
                let Ok(handle) = tokio::runtime::Handle::try_current() else {
                    return;
                };
                // Dropped unrun (runtime shutting down), the closure drops
                // the guard, which answers the waiting callers.
                drop(tokio::task::spawn_blocking(move || {
                    handle.block_on(repo.flush_tokens(guard));
                }));
            }
            Dialect::Postgres => drop(tokio::spawn(repo.flush_tokens(guard))),
        }
    }

    /// Drains the token queue, one transaction per batch, until it is empty.
    async fn flush_tokens(self, mut guard: FlusherGuard) {
        loop {
            let batch: Vec<(TokenRecord, TokenWaiter)> = {
                let mut q = self.tokens.lock();
                if q.pending.is_empty() {
                    q.flushers = q.flushers.saturating_sub(1);
                    guard.finished = true;
                    return;
                }
                let n = q.pending.len().min(TOKEN_BATCH_MAX);
                q.pending.drain(..n).collect()
            };
            let (records, waiters): (Vec<TokenRecord>, Vec<TokenWaiter>) =
                batch.into_iter().unzip();
            metrics::histogram!("gatehouse_oauth_token_batch_size").record(records.len() as f64);
            match self.insert_tokens_tx(&records).await {
                Ok(()) => {
                    for w in waiters {
                        let _ = w.send(Ok(()));
                    }
                }
                Err(e) if records.len() == 1 => {
                    for w in waiters {
                        let _ = w.send(Err(e.clone()));
                    }
                }
                // One bad record (a duplicate id) must not fail the others:
                // write them one by one, each with its own answer.
                Err(_) => {
                    for (r, w) in records.iter().zip(waiters) {
                        let _ = w.send(self.insert_tokens_tx(std::slice::from_ref(r)).await);
                    }
                }
            }
        }
    }

    /// Writes `records` in one transaction.
    async fn insert_tokens_tx(&self, records: &[TokenRecord]) -> Result<(), RepoError> {
        const OP: &str = "insert_token";
        if self.dialect() == Dialect::Postgres {
            // One statement, so one round trip that is its own transaction,
            // instead of BEGIN, the INSERTs and COMMIT as three or more.
            let q = self.insert_tokens_pg(records)?;
            let mut pooled = self.db().write().await.map_err(|e| store_err(OP, e))?;
            pooled.conn().execute(q).await.map_err(|e| db_err(OP, e))?;
            return Ok(());
        }
        let mut tx = self.db().begin().await.map_err(|e| store_err(OP, e))?;
        let mut rest = records;
        while !rest.is_empty() {
            // The largest power of two that fits, capped.
            let mut n = TOKEN_CHUNK_MAX;
            while n > rest.len() {
                n /= 2;
            }
            let (chunk, tail) = rest.split_at(n);
            let q = self.insert_tokens_stmt(chunk)?;
            tx.conn().execute(q).await.map_err(|e| db_err(OP, e))?;
            rest = tail;
        }
        tx.commit().await.map_err(|e| db_err(OP, e))
    }

    /// PostgreSQL: one `INSERT` of any number of `records`, passed as one
    /// JSON array parameter (one statement text whatever the batch size).
    fn insert_tokens_pg(&self, records: &[TokenRecord]) -> Result<Built, RepoError> {
        #[derive(serde::Serialize)]
        struct Row<'a> {
            id: &'a str,
            kind: &'a str,
            subject: &'a str,
            username: Option<&'a str>,
            client_id: &'a str,
            /// The JSON text stored in the column, as a JSON string.
            scope: String,
            audience: String,
            issued_at: i64,
            expires_at: i64,
            revoked: bool,
            family_id: &'a str,
            parent_id: Option<&'a str>,
            used_at: Option<i64>,
            successor_id: Option<&'a str>,
            idp: Option<&'a str>,
        }
        let encode = |v: &[String]| {
            serde_json::to_string(v).map_err(|e| RepoError::new(format!("encoding a list: {e}")))
        };
        let rows = records
            .iter()
            .map(|t| {
                Ok(Row {
                    id: &t.id,
                    kind: t.kind.as_str(),
                    subject: &t.subject,
                    username: t.username.as_deref(),
                    client_id: &t.client_id,
                    scope: encode(&t.scope)?,
                    audience: encode(&t.audience)?,
                    issued_at: t.issued_at,
                    expires_at: t.expires_at,
                    revoked: t.revoked,
                    family_id: &t.family_id,
                    parent_id: t.parent_id.as_deref(),
                    used_at: t.used_at,
                    successor_id: t.successor_id.as_deref(),
                    idp: t.idp.as_deref(),
                })
            })
            .collect::<Result<Vec<Row<'_>>, RepoError>>()?;
        let json = serde_json::to_string(&rows)
            .map_err(|e| RepoError::new(format!("encoding token records: {e}")))?;
        let sql = format!(
            "INSERT INTO {} ({TOKEN_COLS}) SELECT {TOKEN_COLS} FROM json_to_recordset(?::json) \
             AS r(id text, kind text, subject text, username text, client_id text, scope text, \
             audience text, issued_at bigint, expires_at bigint, revoked boolean, \
             family_id text, parent_id text, used_at bigint, successor_id text, idp text)",
            q(TOKENS)
        );
        Ok(self.built(&sql, vec![text(json)]))
    }

    /// One multi-row `INSERT` of `records`.
    fn insert_tokens_stmt(&self, records: &[TokenRecord]) -> Result<Built, RepoError> {
        const ROW: &str = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
        let mut sql = format!("INSERT INTO {} ({TOKEN_COLS}) VALUES ", q(TOKENS));
        let mut values = Vec::with_capacity(records.len() * 15);
        for (i, t) in records.iter().enumerate() {
            if i > 0 {
                sql.push_str(", ");
            }
            sql.push_str(ROW);
            values.extend([
                text(t.id.as_str()),
                text(t.kind.as_str()),
                text(t.subject.as_str()),
                opt_text(t.username.as_deref()),
                text(t.client_id.as_str()),
                list(&t.scope)?,
                list(&t.audience)?,
                int(t.issued_at),
                int(t.expires_at),
                Value::Bool(Some(t.revoked)),
                text(t.family_id.as_str()),
                opt_text(t.parent_id.as_deref()),
                opt_int(t.used_at),
                opt_text(t.successor_id.as_deref()),
                opt_text(t.idp.as_deref()),
            ]);
        }
        Ok(self.built(&sql, values))
    }

    /// The statement that creates or replaces a user's credential, for a
    /// caller that runs it in its own transaction (an account row's, so
    /// that the row and its credential commit together). The tables must
    /// exist ([`SqlAuthRepo::ensure_tables`]).
    pub fn upsert_user_statement(&self, u: &UserRecord) -> Result<Built, RepoError> {
        Ok(self.built(&upsert_user_sql(), user_values(u)?))
    }

    /// The statement that deletes a user's credential, for a caller's
    /// transaction. No name is retired: an account's `sub` is its row id,
    /// which no later account gets.
    pub fn delete_user_statement(&self, username: &str) -> Built {
        self.built(
            &format!("DELETE FROM {} WHERE username = ?", q(USERS)),
            vec![text(username)],
        )
    }

    /// The statement that revokes a user's tokens, for a caller's
    /// transaction: the access tokens only, or the refresh tokens too.
    pub fn revoke_user_tokens_statement(&self, username: &str, refresh_too: bool) -> Built {
        let only_access = if refresh_too {
            String::new()
        } else {
            format!(" AND kind = '{}'", TokenKind::Access.as_str())
        };
        self.built(
            &format!(
                "UPDATE {} SET revoked = TRUE WHERE username = ? AND NOT revoked{only_access}",
                q(TOKENS)
            ),
            vec![text(username)],
        )
    }

    /// The statement that stores a flow token, for the transaction that
    /// also enqueues its message, unless its address is over its limits
    /// (`MAILS_PER_HOUR` in the hour before the token's `created_at`, or
    /// one within `MAIL_INTERVAL`): then it inserts nothing (0 rows), and
    /// the caller rolls back. Run after [`SqlAuthRepo::flow_address_lock`]
    /// in the same transaction, so two messages to one address are
    /// counted one after the other. The tables must exist
    /// ([`SqlAuthRepo::ensure_tables`]).
    pub fn insert_flow_token_statement(&self, t: &FlowToken) -> Built {
        let placeholders = ["?"; 12].join(", ");
        let table = q(EMAIL_TOKENS);
        self.built(
            &format!(
                "INSERT INTO {table} ({FLOW_COLS}) SELECT {placeholders} \
                 WHERE (SELECT COUNT(*) FROM {table} WHERE address = ? AND created_at >= ?) < ? \
                 AND NOT EXISTS (SELECT 1 FROM {table} WHERE address = ? AND created_at > ?)"
            ),
            vec![
                text(&t.id),
                text(t.purpose.as_str()),
                opt_text(t.sub.as_deref()),
                text(&t.address),
                opt_text(t.link_hash.as_deref()),
                opt_text(t.code_hash.as_deref()),
                text(t.payload.to_string()),
                int(t.created_at),
                int(t.expires_at),
                int(t.code_expires_at),
                int(i64::from(t.attempts)),
                opt_int(t.used_at),
                text(&t.address),
                int(t.created_at.saturating_sub(3600)),
                int(i64::try_from(MAILS_PER_HOUR).unwrap_or(i64::MAX)),
                text(&t.address),
                int(t.created_at.saturating_sub(MAIL_INTERVAL)),
            ],
        )
    }

    /// PostgreSQL: the statement that serializes the flow messages of one
    /// address for the rest of the transaction (under READ COMMITTED two
    /// transactions would otherwise both find the address under its
    /// limits). SQLite needs none: its writer is one at a time.
    pub fn flow_address_lock(&self, address: &str) -> Option<Built> {
        (self.dialect() == Dialect::Postgres).then(|| {
            self.built(
                "SELECT pg_advisory_xact_lock(hashtextextended(?, 7428190343))",
                vec![text(address)],
            )
        })
    }

    /// The statement that spends the flow token `id` at `now`, if it is
    /// unspent, not cancelled and unexpired: of two uses racing, on one
    /// instance or many, one changes a row; the caller checks that one did.
    pub fn use_flow_token_statement(&self, id: &str, now: i64) -> Built {
        self.built(
            &format!(
                "UPDATE {} SET used_at = ? WHERE id = ? AND used_at IS NULL AND attempts < ? \
                 AND expires_at > ?",
                q(EMAIL_TOKENS)
            ),
            vec![
                int(now),
                text(id),
                int(i64::from(MAX_CODE_ATTEMPTS)),
                int(now),
            ],
        )
    }

    /// The flow token with this id.
    pub async fn flow_token(&self, id: &str) -> Result<Option<FlowToken>, RepoError> {
        let sql = format!("SELECT {FLOW_COLS} FROM {} WHERE id = ?", q(EMAIL_TOKENS));
        let rows = self
            .fetch("flow_token", &sql, vec![text(id)], FLOW_KINDS)
            .await?;
        rows.into_iter().next().map(flow_token).transpose()
    }

    /// The flow token whose link hashes to `link_hash`.
    pub async fn flow_token_by_link(
        &self,
        link_hash: &str,
    ) -> Result<Option<FlowToken>, RepoError> {
        let sql = format!(
            "SELECT {FLOW_COLS} FROM {} WHERE link_hash = ?",
            q(EMAIL_TOKENS)
        );
        let rows = self
            .fetch(
                "flow_token_by_link",
                &sql,
                vec![text(link_hash)],
                FLOW_KINDS,
            )
            .await?;
        rows.into_iter().next().map(flow_token).transpose()
    }

    /// The latest flow token of `purpose` for the account `sub`.
    pub async fn flow_token_of(
        &self,
        sub: &str,
        purpose: FlowPurpose,
    ) -> Result<Option<FlowToken>, RepoError> {
        let sql = format!(
            "SELECT {FLOW_COLS} FROM {} WHERE sub = ? AND purpose = ? \
             ORDER BY created_at DESC, id DESC LIMIT 1",
            q(EMAIL_TOKENS)
        );
        let rows = self
            .fetch(
                "flow_token_of",
                &sql,
                vec![text(sub), text(purpose.as_str())],
                FLOW_KINDS,
            )
            .await?;
        rows.into_iter().next().map(flow_token).transpose()
    }

    /// Counts a wrong code against the unspent flow token `id`.
    pub async fn flow_wrong_code(&self, id: &str) -> Result<(), RepoError> {
        self.execute(
            "flow_wrong_code",
            &format!(
                "UPDATE {} SET attempts = attempts + 1 WHERE id = ? AND used_at IS NULL",
                q(EMAIL_TOKENS)
            ),
            vec![text(id)],
        )
        .await?;
        Ok(())
    }

    /// How many flow messages went to `address` since `since`, and when
    /// the latest did.
    pub async fn flow_mails_since(
        &self,
        address: &str,
        since: i64,
    ) -> Result<(u64, Option<i64>), RepoError> {
        let sql = format!(
            "SELECT COUNT(*), MAX(created_at) FROM {} WHERE address = ? AND created_at >= ?",
            q(EMAIL_TOKENS)
        );
        let rows = self
            .fetch(
                "flow_mails_since",
                &sql,
                vec![text(address), int(since)],
                &[SqlKind::Count, SqlKind::Count],
            )
            .await?;
        let mut c = Cols::new(rows.into_iter().next().unwrap_or_default(), "mail count");
        let count = c.opt_int()?.unwrap_or(0);
        let last = c.opt_int()?;
        Ok((u64::try_from(count).unwrap_or(0), last))
    }

    /// Writes the row of a sign-in through a provider.
    pub async fn insert_provider_flow(&self, f: &ProviderFlow) -> Result<(), RepoError> {
        let values = vec![
            text(f.id.as_str()),
            text(f.kind.as_str()),
            text(f.provider.as_str()),
            text(f.browser.as_str()),
            text(f.payload.to_string()),
            int(f.created_at),
            int(f.expires_at),
            opt_int(f.used_at),
        ];
        let sql = insert_sql(
            PROVIDER_FLOWS,
            PROVIDER_FLOW_COLS,
            PROVIDER_FLOW_KINDS.len(),
        );
        self.execute("insert_provider_flow", &sql, values).await?;
        Ok(())
    }

    /// The row of a sign-in through a provider with this id.
    pub async fn provider_flow(&self, id: &str) -> Result<Option<ProviderFlow>, RepoError> {
        let sql = format!(
            "SELECT {PROVIDER_FLOW_COLS} FROM {} WHERE id = ?",
            q(PROVIDER_FLOWS)
        );
        let rows = self
            .fetch("provider_flow", &sql, vec![text(id)], PROVIDER_FLOW_KINDS)
            .await?;
        rows.into_iter().next().map(provider_flow).transpose()
    }

    /// Spends the row `id` at `now` if it is unspent and unexpired: of two
    /// uses racing, on one instance or many, one changes it.
    pub async fn spend_provider_flow(&self, id: &str, now: i64) -> Result<bool, RepoError> {
        let sql = format!(
            "UPDATE {} SET used_at = ? WHERE id = ? AND used_at IS NULL AND expires_at > ?",
            q(PROVIDER_FLOWS)
        );
        Ok(self
            .execute(
                "spend_provider_flow",
                &sql,
                vec![int(now), text(id), int(now)],
            )
            .await?
            == 1)
    }

    /// The identity (issuer, subject), if linked.
    pub async fn identity(
        &self,
        issuer: &str,
        subject: &str,
    ) -> Result<Option<IdentityRecord>, RepoError> {
        let sql = format!(
            "SELECT {IDENTITY_COLS} FROM {} WHERE issuer = ? AND subject = ?",
            q(IDENTITIES)
        );
        let rows = self
            .fetch(
                "identity",
                &sql,
                vec![text(issuer), text(subject)],
                IDENTITY_KINDS,
            )
            .await?;
        rows.into_iter().next().map(identity).transpose()
    }

    /// The identities linked to the account `sub`, oldest first.
    pub async fn identities(&self, sub: &str) -> Result<Vec<IdentityRecord>, RepoError> {
        let sql = format!(
            "SELECT {IDENTITY_COLS} FROM {} WHERE sub = ? ORDER BY linked_at, id",
            q(IDENTITIES)
        );
        let rows = self
            .fetch("identities", &sql, vec![text(sub)], IDENTITY_KINDS)
            .await?;
        rows.into_iter().map(identity).collect()
    }

    /// The statement that links an identity unless its pair is linked
    /// already (then it changes no row), for a caller that runs it in its
    /// own transaction. The tables must exist ([`SqlAuthRepo::ensure_tables`]).
    pub fn link_identity_statement(&self, i: &IdentityRecord) -> Built {
        self.built(
            &format!(
                "INSERT INTO {} ({IDENTITY_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?) \
                 ON CONFLICT DO NOTHING",
                q(IDENTITIES)
            ),
            vec![
                text(i.id.as_str()),
                text(i.sub.as_str()),
                text(i.provider.as_str()),
                text(i.issuer.as_str()),
                text(i.subject.as_str()),
                opt_text(i.email.as_deref()),
                int(i.linked_at),
            ],
        )
    }

    /// Links an identity; `false` when its pair is linked already.
    pub async fn link_identity(&self, i: &IdentityRecord) -> Result<bool, RepoError> {
        self.ready().await?;
        let statement = self.link_identity_statement(i);
        let mut pooled = self
            .db()
            .write()
            .await
            .map_err(|e| store_err("link_identity", e))?;
        Ok(pooled
            .conn()
            .execute(statement)
            .await
            .map_err(|e| db_err("link_identity", e))?
            == 1)
    }

    /// Unlinks the identity `id` of the account `sub`, unless it is the
    /// account's last way to sign in (no password, no other identity);
    /// `false` when nothing was unlinked.
    pub async fn unlink_identity(&self, sub: &str, id: &str) -> Result<bool, RepoError> {
        const OP: &str = "unlink_identity";
        self.ready().await?;
        let t = q(IDENTITIES);
        // Never the account's last way to sign in, decided in the same
        // statement as the delete. On PostgreSQL the account's identities
        // are locked first, so two unlinks of its last two identities run
        // one after the other and the second sees the first's delete (each
        // statement reads what committed before it); SQLite has one writer.
        let lock = (self.dialect() == Dialect::Postgres).then(|| {
            self.built(
                &format!("SELECT id FROM {t} WHERE sub = ? ORDER BY id FOR UPDATE"),
                vec![text(sub)],
            )
        });
        let delete = self.built(
            &format!(
                "DELETE FROM {t} WHERE id = ? AND sub = ? AND (\
                 EXISTS (SELECT 1 FROM {users} WHERE username = ? AND password_hash <> '') \
                 OR EXISTS (SELECT 1 FROM {t} other WHERE other.sub = ? AND other.id <> ?))",
                users = q(USERS)
            ),
            vec![text(id), text(sub), text(sub), text(sub), text(id)],
        );
        let mut tx = self.db().begin().await.map_err(|e| store_err(OP, e))?;
        if let Some(lock) = lock {
            tx.conn()
                .fetch(lock, &[SqlKind::Text])
                .await
                .map_err(|e| db_err(OP, e))?;
        }
        let n = tx.conn().execute(delete).await.map_err(|e| db_err(OP, e))?;
        tx.commit().await.map_err(|e| db_err(OP, e))?;
        Ok(n == 1)
    }

    /// The statement that unlinks every identity of the account `sub` (in
    /// the transaction that deletes it).
    pub fn delete_identities_statement(&self, sub: &str) -> Built {
        self.built(
            &format!("DELETE FROM {} WHERE sub = ?", q(IDENTITIES)),
            vec![text(sub)],
        )
    }

    fn db(&self) -> &Db {
        &self.db
    }

    fn dialect(&self) -> Dialect {
        self.db().dialect()
    }

    /// Makes sure the tables exist: a no-op after the first call.
    async fn ready(&self) -> Result<(), RepoError> {
        self.ensure_tables()
            .await
            .map_err(|e| RepoError::new(format!("creating the OAuth tables: {e}")))
    }

    /// Deletes the `kind` named `name` from `table` (its name in `column`)
    /// and retires the name, with `first` (the rows that go with it) in
    /// the same transaction. `false`: there was none (nothing retired).
    async fn delete_retiring(
        &self,
        op: &'static str,
        kind: IdentityKind,
        table: &str,
        column: &str,
        name: &str,
        first: Option<Built>,
    ) -> Result<bool, RepoError> {
        self.ready().await?;
        // Retired before the row goes, from the row itself, so only a name
        // that was held is retired; a name retired already keeps its
        // first record.
        let retire = self.built(
            &format!(
                "INSERT INTO {} (name_key, kind, name) SELECT ?, ?, {col} FROM {} \
                 WHERE {col} = ? ON CONFLICT (name_key) DO NOTHING",
                q(RETIRED),
                q(table),
                col = q(column)
            ),
            vec![text(name_key(name)), text(kind.as_str()), text(name)],
        );
        let delete = self.built(
            &format!("DELETE FROM {} WHERE {} = ?", q(table), q(column)),
            vec![text(name)],
        );
        let mut tx = self.db().begin().await.map_err(|e| store_err(op, e))?;
        for statement in first.into_iter().chain([retire]) {
            tx.conn()
                .execute(statement)
                .await
                .map_err(|e| db_err(op, e))?;
        }
        let n = tx.conn().execute(delete).await.map_err(|e| db_err(op, e))?;
        tx.commit().await.map_err(|e| db_err(op, e))?;
        Ok(n > 0)
    }

    /// `sql` written with `?` placeholders, for this backend.
    fn built(&self, sql: &str, values: Vec<Value>) -> Built {
        Built::raw(self.dialect().placeholders(sql), values)
    }

    async fn fetch(
        &self,
        op: &'static str,
        sql: &str,
        values: Vec<Value>,
        kinds: &[SqlKind],
    ) -> Result<Vec<DbRow>, RepoError> {
        self.ready().await?;
        let q = self.built(sql, values);
        let mut pooled = self.db().read().await.map_err(|e| store_err(op, e))?;
        pooled
            .conn()
            .fetch(q, kinds)
            .await
            .map_err(|e| db_err(op, e))
    }

    async fn execute(
        &self,
        op: &'static str,
        sql: &str,
        values: Vec<Value>,
    ) -> Result<u64, RepoError> {
        self.ready().await?;
        let q = self.built(sql, values);
        let mut pooled = self.db().write().await.map_err(|e| store_err(op, e))?;
        pooled.conn().execute(q).await.map_err(|e| db_err(op, e))
    }
}

/// A database error as a [`RepoError`]: an internal cause, logged and
/// shown by the CLI, never to API users, so it keeps what the driver said.
fn store_err(op: &str, e: DbError) -> RepoError {
    let message = format!("{op}: {}", e.with_cause());
    match e {
        DbError::Unavailable(_) | DbError::Timeout(_) => RepoError::unavailable(message),
        _ => RepoError::new(message),
    }
}

/// Driver errors as [`RepoError`]s. A duplicate key gets its own message;
/// anything else goes through the store's classification (which logs
/// internal causes). Bound values, hashes included, are never part of it.
fn db_err(op: &str, e: gatehouse_db::Error) -> RepoError {
    if e.violation()
        .is_some_and(|v| v.kind == gatehouse_db::ViolationKind::Unique)
    {
        return RepoError::new(format!("{op}: duplicate id"));
    }
    store_err(op, DbError::from(e))
}

fn text(v: impl Into<String>) -> Value {
    Value::String(Some(v.into()))
}

fn opt_text(v: Option<&str>) -> Value {
    Value::String(v.map(str::to_string))
}

fn int(v: i64) -> Value {
    Value::BigInt(Some(v))
}

fn opt_int(v: Option<i64>) -> Value {
    Value::BigInt(v)
}

fn bytes(v: &[u8]) -> Value {
    Value::Bytes(Some(v.to_vec()))
}

fn list(v: &[String]) -> Result<Value, RepoError> {
    serde_json::to_string(v)
        .map(text)
        .map_err(|e| RepoError::new(format!("encoding a list: {e}")))
}

fn object(v: &serde_json::Map<String, Json>) -> Result<Value, RepoError> {
    serde_json::to_string(v)
        .map(text)
        .map_err(|e| RepoError::new(format!("encoding an object: {e}")))
}

fn client_values(c: &ClientRecord) -> Result<Vec<Value>, RepoError> {
    let grants: Vec<String> = c.grants.iter().map(|g| g.as_str().to_string()).collect();
    Ok(vec![
        text(c.client_id.as_str()),
        bytes(&c.secret_hash),
        list(&grants)?,
        list(&c.scopes)?,
        list(&c.audiences)?,
        int(c.created_at),
        int(c.updated_at),
        text(client_type_name(c.client_type)),
        Value::Bool(Some(c.first_party)),
        list(&c.redirect_uris)?,
        opt_text(c.id_token_signed_response_alg.map(SigningAlg::as_str)),
    ])
}

fn client_type_name(t: ClientType) -> &'static str {
    match t {
        ClientType::Confidential => "confidential",
        ClientType::Public => "public",
    }
}

fn upsert_user_sql() -> String {
    format!(
        "INSERT INTO {} ({USER_COLS}) VALUES (?, ?, ?, ?, ?, ?) \
         ON CONFLICT (username) DO UPDATE SET password_hash = excluded.password_hash, \
         scopes = excluded.scopes, created_at = excluded.created_at, \
         updated_at = excluded.updated_at, claims = excluded.claims",
        q(USERS)
    )
}

fn user_values(u: &UserRecord) -> Result<Vec<Value>, RepoError> {
    Ok(vec![
        text(u.username.as_str()),
        text(u.password_hash.as_str()),
        list(&u.scopes)?,
        int(u.created_at),
        int(u.updated_at),
        object(&u.claims)?,
    ])
}

fn consumer_values(c: &ConsumerRecord) -> Result<Vec<Value>, RepoError> {
    Ok(vec![
        text(c.key.as_str()),
        bytes(&c.secret_sealed),
        list(&c.scopes)?,
        int(c.created_at),
        int(c.updated_at),
    ])
}

/// `INSERT INTO table (cols) VALUES (?, ...)` for `n` columns.
/// The kind stored for a retired name (`IdentityKind::as_str`).
fn identity_kind(s: &str) -> Result<IdentityKind, RepoError> {
    match s {
        "user" => Ok(IdentityKind::User),
        "client" => Ok(IdentityKind::Client),
        "consumer" => Ok(IdentityKind::Consumer),
        other => Err(RepoError::new(format!("unknown identity kind {other:?}"))),
    }
}

fn insert_sql(table: &str, cols: &str, n: usize) -> String {
    format!(
        "INSERT INTO {} ({cols}) VALUES ({})",
        q(table),
        vec!["?"; n].join(", ")
    )
}

/// PostgreSQL: serializes registrations of users, clients and consumers
/// across instances for the rest of the transaction (under READ COMMITTED,
/// two transactions inserting one name into two tables would otherwise
/// both see it free). SQLite's `BEGIN IMMEDIATE` already serializes them.
const REGISTER_LOCK: &str = "SELECT pg_advisory_xact_lock(7428190342)";

/// Reads the columns of one decoded row in order.
struct Cols {
    row: std::vec::IntoIter<Json>,
    what: &'static str,
}

impl Cols {
    fn new(row: DbRow, what: &'static str) -> Self {
        Cols {
            row: row.into_iter(),
            what,
        }
    }

    fn bad(&self, expected: &str) -> RepoError {
        RepoError::new(format!("{}: a stored value is not {expected}", self.what))
    }

    fn opt_string(&mut self) -> Result<Option<String>, RepoError> {
        match self.row.next() {
            Some(Json::String(s)) => Ok(Some(s)),
            Some(Json::Null) => Ok(None),
            _ => Err(self.bad("text")),
        }
    }

    fn string(&mut self) -> Result<String, RepoError> {
        self.opt_string()?.ok_or_else(|| self.bad("text"))
    }

    fn opt_int(&mut self) -> Result<Option<i64>, RepoError> {
        match self.row.next() {
            Some(Json::Null) => Ok(None),
            Some(Json::Number(n)) => n.as_i64().map(Some).ok_or_else(|| self.bad("an integer")),
            _ => Err(self.bad("an integer")),
        }
    }

    fn int(&mut self) -> Result<i64, RepoError> {
        self.opt_int()?.ok_or_else(|| self.bad("an integer"))
    }

    fn boolean(&mut self) -> Result<bool, RepoError> {
        match self.row.next() {
            Some(Json::Bool(b)) => Ok(b),
            _ => Err(self.bad("a boolean")),
        }
    }

    fn bytes(&mut self) -> Result<Vec<u8>, RepoError> {
        let s = self.string()?;
        hex::decode(&s).map_err(|_| self.bad("binary"))
    }

    fn list(&mut self) -> Result<Vec<String>, RepoError> {
        let s = self.string()?;
        serde_json::from_str(&s).map_err(|_| self.bad("a JSON list of strings"))
    }

    fn object(&mut self) -> Result<serde_json::Map<String, Json>, RepoError> {
        let s = self.string()?;
        serde_json::from_str(&s).map_err(|_| self.bad("a JSON object"))
    }
}

fn client(row: DbRow) -> Result<ClientRecord, RepoError> {
    let mut c = Cols::new(row, "client");
    let client_id = c.string()?;
    let secret_hash = c.bytes()?;
    let grants = c
        .list()?
        .iter()
        .map(|g| Grant::parse(g).ok_or_else(|| c.bad("a known grant type")))
        .collect::<Result<_, _>>()?;
    Ok(ClientRecord {
        client_id,
        secret_hash,
        grants,
        scopes: c.list()?,
        audiences: c.list()?,
        created_at: c.int()?,
        updated_at: c.int()?,
        client_type: match c.string()?.as_str() {
            "public" => ClientType::Public,
            "confidential" => ClientType::Confidential,
            _ => return Err(c.bad("a client type")),
        },
        first_party: c.boolean()?,
        redirect_uris: c.list()?,
        id_token_signed_response_alg: match c.opt_string()? {
            None => None,
            Some(alg) => Some(SigningAlg::parse(&alg).ok_or_else(|| c.bad("a JWS algorithm"))?),
        },
    })
}

fn user(row: DbRow) -> Result<UserRecord, RepoError> {
    let mut c = Cols::new(row, "user");
    Ok(UserRecord {
        username: c.string()?,
        password_hash: c.string()?,
        scopes: c.list()?,
        created_at: c.int()?,
        updated_at: c.int()?,
        claims: c.object()?,
    })
}

fn key(row: DbRow) -> Result<KeyRecord, RepoError> {
    let mut c = Cols::new(row, "signing key");
    Ok(KeyRecord {
        kid: c.string()?,
        alg: c.string()?,
        public_jwk: c.string()?,
        private_sealed: c.bytes()?,
        created_at: c.int()?,
        retired_at: c.opt_int()?,
        publish_until: c.opt_int()?,
    })
}

fn token(row: DbRow) -> Result<TokenRecord, RepoError> {
    let mut c = Cols::new(row, "token");
    Ok(TokenRecord {
        id: c.string()?,
        kind: {
            let k = c.string()?;
            TokenKind::parse(&k).ok_or_else(|| c.bad("a token kind"))?
        },
        subject: c.string()?,
        username: c.opt_string()?,
        client_id: c.string()?,
        scope: c.list()?,
        audience: c.list()?,
        issued_at: c.int()?,
        expires_at: c.int()?,
        revoked: c.boolean()?,
        family_id: c.string()?,
        parent_id: c.opt_string()?,
        used_at: c.opt_int()?,
        successor_id: c.opt_string()?,
        idp: c.opt_string()?,
    })
}

fn consumer(row: DbRow) -> Result<ConsumerRecord, RepoError> {
    let mut c = Cols::new(row, "consumer");
    Ok(ConsumerRecord {
        key: c.string()?,
        secret_sealed: c.bytes()?,
        scopes: c.list()?,
        created_at: c.int()?,
        updated_at: c.int()?,
    })
}

fn oauth1_token(row: DbRow) -> Result<OAuth1TokenRecord, RepoError> {
    let mut c = Cols::new(row, "OAuth 1.0 token");
    Ok(OAuth1TokenRecord {
        id: c.string()?,
        kind: {
            let k = c.string()?;
            OAuth1TokenKind::parse(&k).ok_or_else(|| c.bad("a token kind"))?
        },
        consumer_key: c.string()?,
        secret_sealed: c.bytes()?,
        callback: c.opt_string()?,
        verifier_hash: c.opt_string()?,
        username: c.opt_string()?,
        scopes: c.list()?,
        created_at: c.int()?,
        expires_at: c.int()?,
        used_at: c.opt_int()?,
    })
}

#[async_trait]
impl AuthRepo for SqlAuthRepo {
    async fn register(&self, identity: NewIdentity<'_>) -> Result<Option<NameTaken>, RepoError> {
        const OP: &str = "register";
        self.ready().await?;
        let name = identity.name();
        let key = name_key(name);
        // Who holds the name without regard to case, if anyone: one
        // statement over the three tables and the retired names, run inside
        // the transaction that inserts; the order is `NameTaken`'s.
        let holder = self.built(
            &format!(
                "SELECT 0 AS r, 'user' AS k, username AS n FROM {} WHERE lower(username) = ? \
                 UNION ALL SELECT 1, 'client', client_id FROM {} WHERE lower(client_id) = ? \
                 UNION ALL SELECT 2, 'consumer', consumer_key FROM {} \
                 WHERE lower(consumer_key) = ? \
                 UNION ALL SELECT 3, kind, name FROM {} WHERE name_key = ? \
                 ORDER BY r, n LIMIT 1",
                q(USERS),
                q(CLIENTS),
                q(CONSUMERS),
                q(RETIRED)
            ),
            vec![
                text(key.as_str()),
                text(key.as_str()),
                text(key.as_str()),
                text(key.as_str()),
            ],
        );
        let insert = match identity {
            NewIdentity::User(u) => self.built(
                &insert_sql(USERS, USER_COLS, USER_KINDS.len()),
                user_values(u)?,
            ),
            NewIdentity::Client(c) => self.built(
                &insert_sql(CLIENTS, CLIENT_COLS, CLIENT_KINDS.len()),
                client_values(c)?,
            ),
            NewIdentity::Consumer(c) => self.built(
                &insert_sql(CONSUMERS, CONSUMER_COLS, CONSUMER_KINDS.len()),
                consumer_values(c)?,
            ),
        };
        let mut tx = self.db().begin().await.map_err(|e| store_err(OP, e))?;
        if self.dialect() == Dialect::Postgres {
            tx.conn()
                .ddl(REGISTER_LOCK)
                .await
                .map_err(|e| db_err(OP, e))?;
        }
        let rows = tx
            .conn()
            .fetch(holder, &[SqlKind::Int, SqlKind::Text, SqlKind::Text])
            .await
            .map_err(|e| db_err(OP, e))?;
        if let Some(row) = rows.into_iter().next() {
            let mut c = Cols::new(row, "name holder");
            let rank = c.int()?;
            let kind = identity_kind(&c.string()?)?;
            let held = c.string()?;
            // Nothing written: the transaction rolls back when dropped.
            return Ok(Some(if rank == 3 {
                NameTaken::Retired(kind, held)
            } else {
                NameTaken::Live(kind, held)
            }));
        }
        tx.conn().execute(insert).await.map_err(|e| db_err(OP, e))?;
        tx.commit().await.map_err(|e| db_err(OP, e))?;
        Ok(None)
    }

    async fn get_client(&self, client_id: &str) -> Result<Option<ClientRecord>, RepoError> {
        let sql = format!(
            "SELECT {CLIENT_COLS} FROM {} WHERE client_id = ?",
            q(CLIENTS)
        );
        let rows = self
            .fetch("get_client", &sql, vec![text(client_id)], CLIENT_KINDS)
            .await?;
        rows.into_iter().next().map(client).transpose()
    }

    async fn upsert_client(&self, c: &ClientRecord) -> Result<(), RepoError> {
        let sql = format!(
            "INSERT INTO {} ({CLIENT_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
             ON CONFLICT (client_id) DO UPDATE SET secret_hash = excluded.secret_hash, \
             grants = excluded.grants, scopes = excluded.scopes, \
             audiences = excluded.audiences, created_at = excluded.created_at, \
             updated_at = excluded.updated_at, client_type = excluded.client_type, \
             first_party = excluded.first_party, redirect_uris = excluded.redirect_uris, \
             id_token_signed_response_alg = excluded.id_token_signed_response_alg",
            q(CLIENTS)
        );
        self.execute("upsert_client", &sql, client_values(c)?)
            .await?;
        Ok(())
    }

    async fn list_clients(&self) -> Result<Vec<ClientRecord>, RepoError> {
        let sql = format!(
            "SELECT {CLIENT_COLS} FROM {} ORDER BY client_id",
            q(CLIENTS)
        );
        let rows = self
            .fetch("list_clients", &sql, vec![], CLIENT_KINDS)
            .await?;
        rows.into_iter().map(client).collect()
    }

    async fn delete_client(&self, client_id: &str) -> Result<bool, RepoError> {
        self.delete_retiring(
            "delete_client",
            IdentityKind::Client,
            CLIENTS,
            "client_id",
            client_id,
            None,
        )
        .await
    }

    async fn find_user(&self, username: &str) -> Result<Option<UserRecord>, RepoError> {
        let sql = format!("SELECT {USER_COLS} FROM {} WHERE username = ?", q(USERS));
        let rows = self
            .fetch("find_user", &sql, vec![text(username)], USER_KINDS)
            .await?;
        rows.into_iter().next().map(user).transpose()
    }

    async fn upsert_user(&self, u: &UserRecord) -> Result<(), RepoError> {
        self.execute("upsert_user", &upsert_user_sql(), user_values(u)?)
            .await?;
        Ok(())
    }

    async fn list_users(&self) -> Result<Vec<UserRecord>, RepoError> {
        let sql = format!("SELECT {USER_COLS} FROM {} ORDER BY username", q(USERS));
        let rows = self.fetch("list_users", &sql, vec![], USER_KINDS).await?;
        rows.into_iter().map(user).collect()
    }

    async fn delete_user(&self, username: &str) -> Result<bool, RepoError> {
        self.delete_retiring(
            "delete_user",
            IdentityKind::User,
            USERS,
            "username",
            username,
            None,
        )
        .await
    }

    async fn load_keys(&self) -> Result<Vec<KeyRecord>, RepoError> {
        // Oldest first, like the insertion order of `MemoryRepo`.
        let sql = format!(
            "SELECT {KEY_COLS} FROM {} ORDER BY created_at, kid",
            q(KEYS)
        );
        let rows = self.fetch("load_keys", &sql, vec![], KEY_KINDS).await?;
        rows.into_iter().map(key).collect()
    }

    async fn insert_key(&self, k: &KeyRecord) -> Result<(), RepoError> {
        let sql = format!(
            "INSERT INTO {} ({KEY_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
            q(KEYS)
        );
        let values = vec![
            text(k.kid.as_str()),
            text(k.alg.as_str()),
            text(k.public_jwk.as_str()),
            bytes(&k.private_sealed),
            int(k.created_at),
            opt_int(k.retired_at),
            opt_int(k.publish_until),
        ];
        self.execute("insert_key", &sql, values).await?;
        Ok(())
    }

    async fn retire_key(
        &self,
        kid: &str,
        retired_at: i64,
        publish_until: i64,
    ) -> Result<(), RepoError> {
        let sql = format!(
            "UPDATE {} SET retired_at = ?, publish_until = ? WHERE kid = ?",
            q(KEYS)
        );
        let values = vec![int(retired_at), int(publish_until), text(kid)];
        self.execute("retire_key", &sql, values).await?;
        Ok(())
    }

    async fn insert_token(&self, t: &TokenRecord) -> Result<(), RepoError> {
        self.ready().await?;
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut q = self.tokens.lock();
            q.pending.push((t.clone(), tx));
            let start = q.flushers < self.tokens.max_flushers;
            if start {
                q.flushers += 1;
            }
            start
        };
        if start {
            self.start_flusher();
        }
        rx.await
            .map_err(|_| RepoError::new("insert_token: the token writer stopped"))?
    }

    async fn get_token(&self, id: &str) -> Result<Option<TokenRecord>, RepoError> {
        let sql = format!("SELECT {TOKEN_COLS} FROM {} WHERE id = ?", q(TOKENS));
        let rows = self
            .fetch("get_token", &sql, vec![text(id)], TOKEN_KINDS)
            .await?;
        rows.into_iter().next().map(token).transpose()
    }

    async fn revoke_token(&self, id: &str) -> Result<bool, RepoError> {
        // Every row with the id counts, already revoked or not (as in
        // `MemoryRepo`): "there was one" is what the caller asks.
        let sql = format!("UPDATE {} SET revoked = TRUE WHERE id = ?", q(TOKENS));
        Ok(self.execute("revoke_token", &sql, vec![text(id)]).await? > 0)
    }

    async fn revoke_family(&self, family_id: &str) -> Result<u64, RepoError> {
        let sql = format!(
            "UPDATE {} SET revoked = TRUE WHERE family_id = ? AND NOT revoked",
            q(TOKENS)
        );
        self.execute("revoke_family", &sql, vec![text(family_id)])
            .await
    }

    async fn revoke_token_tree(&self, id: &str, family_id: &str) -> Result<u64, RepoError> {
        // Descendants share the family, so the walk stays on the family_id
        // index (no index on parent_id: most tokens have a random parent,
        // and an index on it would cost every group commit scattered pages).
        let t = q(TOKENS);
        let sql = format!(
            "WITH RECURSIVE tree(id) AS (SELECT id FROM {t} WHERE id = ? \
             UNION SELECT c.id FROM {t} c JOIN tree ON c.parent_id = tree.id \
             WHERE c.family_id = ?) \
             UPDATE {t} SET revoked = TRUE WHERE id IN (SELECT id FROM tree) AND NOT revoked"
        );
        self.execute("revoke_token_tree", &sql, vec![text(id), text(family_id)])
            .await
    }

    async fn revoke_client_tokens(&self, client_id: &str) -> Result<u64, RepoError> {
        let sql = format!(
            "UPDATE {} SET revoked = TRUE WHERE client_id = ? AND NOT revoked",
            q(TOKENS)
        );
        self.execute("revoke_client_tokens", &sql, vec![text(client_id)])
            .await
    }

    async fn revoke_user_tokens(&self, username: &str) -> Result<u64, RepoError> {
        let sql = format!(
            "UPDATE {} SET revoked = TRUE WHERE username = ? AND NOT revoked",
            q(TOKENS)
        );
        self.execute("revoke_user_tokens", &sql, vec![text(username)])
            .await
    }

    async fn mark_refresh_used(
        &self,
        id: &str,
        used_at: i64,
        successor_id: &str,
    ) -> Result<bool, RepoError> {
        // The compare-and-set: a second racer's WHERE no longer matches.
        let sql = format!(
            "UPDATE {} SET used_at = ?, successor_id = ? \
             WHERE id = ? AND kind = ? AND used_at IS NULL AND NOT revoked",
            q(TOKENS)
        );
        let values = vec![
            int(used_at),
            text(successor_id),
            text(id),
            text(TokenKind::Refresh.as_str()),
        ];
        Ok(self.execute("mark_refresh_used", &sql, values).await? == 1)
    }

    async fn replace_successor(
        &self,
        id: &str,
        expected: &str,
        successor_id: &str,
    ) -> Result<bool, RepoError> {
        let sql = format!(
            "UPDATE {} SET successor_id = ? WHERE id = ? AND successor_id = ?",
            q(TOKENS)
        );
        let values = vec![text(successor_id), text(id), text(expected)];
        Ok(self.execute("replace_successor", &sql, values).await? == 1)
    }

    async fn purge_expired(&self, now: i64) -> Result<u64, RepoError> {
        const OP: &str = "purge_expired";
        self.ready().await?;
        let tokens = self.built(
            &format!("DELETE FROM {} WHERE expires_at <= ?", q(TOKENS)),
            vec![int(now)],
        );
        let keys = self.built(
            &format!(
                "DELETE FROM {} WHERE publish_until IS NOT NULL AND publish_until <= ?",
                q(KEYS)
            ),
            vec![int(now)],
        );
        // Flow tokens stay an hour after they were made, whatever their
        // lifetime: the per-address limits count them.
        let flows = self.built(
            &format!(
                "DELETE FROM {} WHERE expires_at <= ? AND created_at <= ?",
                q(EMAIL_TOKENS)
            ),
            vec![int(now), int(now.saturating_sub(3600))],
        );
        let provider_flows = self.built(
            &format!("DELETE FROM {} WHERE expires_at <= ?", q(PROVIDER_FLOWS)),
            vec![int(now)],
        );
        let mut tx = self.db().begin().await.map_err(|e| store_err(OP, e))?;
        let mut n = tx.conn().execute(tokens).await.map_err(|e| db_err(OP, e))?;
        n += tx.conn().execute(keys).await.map_err(|e| db_err(OP, e))?;
        n += tx.conn().execute(flows).await.map_err(|e| db_err(OP, e))?;
        n += tx
            .conn()
            .execute(provider_flows)
            .await
            .map_err(|e| db_err(OP, e))?;
        tx.commit().await.map_err(|e| db_err(OP, e))?;
        Ok(n)
    }

    async fn get_consumer(&self, key: &str) -> Result<Option<ConsumerRecord>, RepoError> {
        let sql = format!(
            "SELECT {CONSUMER_COLS} FROM {} WHERE consumer_key = ?",
            q(CONSUMERS)
        );
        let rows = self
            .fetch("get_consumer", &sql, vec![text(key)], CONSUMER_KINDS)
            .await?;
        rows.into_iter().next().map(consumer).transpose()
    }

    async fn upsert_consumer(&self, c: &ConsumerRecord) -> Result<(), RepoError> {
        let sql = format!(
            "INSERT INTO {} ({CONSUMER_COLS}) VALUES (?, ?, ?, ?, ?) \
             ON CONFLICT (consumer_key) DO UPDATE SET secret_sealed = excluded.secret_sealed, \
             scopes = excluded.scopes, created_at = excluded.created_at, \
             updated_at = excluded.updated_at",
            q(CONSUMERS)
        );
        self.execute("upsert_consumer", &sql, consumer_values(c)?)
            .await?;
        Ok(())
    }

    async fn list_consumers(&self) -> Result<Vec<ConsumerRecord>, RepoError> {
        let sql = format!(
            "SELECT {CONSUMER_COLS} FROM {} ORDER BY consumer_key",
            q(CONSUMERS)
        );
        let rows = self
            .fetch("list_consumers", &sql, vec![], CONSUMER_KINDS)
            .await?;
        rows.into_iter().map(consumer).collect()
    }

    async fn delete_consumer(&self, key: &str) -> Result<bool, RepoError> {
        // Its tokens go with it, in the same transaction.
        let tokens = self.built(
            &format!("DELETE FROM {} WHERE consumer_key = ?", q(OAUTH1_TOKENS)),
            vec![text(key)],
        );
        self.delete_retiring(
            "delete_consumer",
            IdentityKind::Consumer,
            CONSUMERS,
            "consumer_key",
            key,
            Some(tokens),
        )
        .await
    }

    async fn insert_oauth1_token(&self, t: &OAuth1TokenRecord) -> Result<(), RepoError> {
        let sql = format!(
            "INSERT INTO {} ({OAUTH1_TOKEN_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            q(OAUTH1_TOKENS)
        );
        let values = vec![
            text(t.id.as_str()),
            text(t.kind.as_str()),
            text(t.consumer_key.as_str()),
            bytes(&t.secret_sealed),
            opt_text(t.callback.as_deref()),
            opt_text(t.verifier_hash.as_deref()),
            opt_text(t.username.as_deref()),
            list(&t.scopes)?,
            int(t.created_at),
            int(t.expires_at),
            opt_int(t.used_at),
        ];
        self.execute("insert_oauth1_token", &sql, values).await?;
        Ok(())
    }

    async fn get_oauth1_token(&self, id: &str) -> Result<Option<OAuth1TokenRecord>, RepoError> {
        let sql = format!(
            "SELECT {OAUTH1_TOKEN_COLS} FROM {} WHERE id = ?",
            q(OAUTH1_TOKENS)
        );
        let rows = self
            .fetch("get_oauth1_token", &sql, vec![text(id)], OAUTH1_TOKEN_KINDS)
            .await?;
        rows.into_iter().next().map(oauth1_token).transpose()
    }

    async fn approve_request_token(
        &self,
        id: &str,
        username: &str,
        verifier_hash: &str,
        scopes: &[String],
        now: i64,
    ) -> Result<bool, RepoError> {
        // A compare-and-set, like `mark_refresh_used`: of two racing
        // approvals exactly one changes the row.
        let sql = format!(
            "UPDATE {} SET username = ?, verifier_hash = ?, scopes = ? \
             WHERE id = ? AND kind = ? AND username IS NULL AND used_at IS NULL \
             AND expires_at > ?",
            q(OAUTH1_TOKENS)
        );
        let values = vec![
            text(username),
            text(verifier_hash),
            list(scopes)?,
            text(id),
            text(OAuth1TokenKind::Request.as_str()),
            int(now),
        ];
        Ok(self.execute("approve_request_token", &sql, values).await? == 1)
    }

    async fn use_request_token(&self, id: &str, now: i64) -> Result<bool, RepoError> {
        let sql = format!(
            "UPDATE {} SET used_at = ? \
             WHERE id = ? AND kind = ? AND username IS NOT NULL AND used_at IS NULL",
            q(OAUTH1_TOKENS)
        );
        let values = vec![int(now), text(id), text(OAuth1TokenKind::Request.as_str())];
        Ok(self.execute("use_request_token", &sql, values).await? == 1)
    }

    async fn insert_nonce(
        &self,
        consumer_key: &str,
        nonce: &str,
        expires_at: i64,
        now: i64,
    ) -> Result<bool, RepoError> {
        // One statement: a new nonce inserts; a live duplicate hits the
        // primary key and changes nothing; an expired one not yet purged is
        // taken over. Racing inserts of one nonce: exactly one wins.
        let sql = format!(
            "INSERT INTO {t} (consumer_key, nonce, expires_at) VALUES (?, ?, ?) \
             ON CONFLICT (consumer_key, nonce) DO UPDATE SET expires_at = excluded.expires_at \
             WHERE {t}.expires_at <= ?",
            t = q(NONCES)
        );
        let values = vec![text(consumer_key), text(nonce), int(expires_at), int(now)];
        Ok(self.execute("insert_nonce", &sql, values).await? == 1)
    }

    async fn purge_oauth1(&self, now: i64) -> Result<u64, RepoError> {
        const OP: &str = "purge_oauth1";
        self.ready().await?;
        let tokens = self.built(
            &format!("DELETE FROM {} WHERE expires_at <= ?", q(OAUTH1_TOKENS)),
            vec![int(now)],
        );
        let nonces = self.built(
            &format!("DELETE FROM {} WHERE expires_at <= ?", q(NONCES)),
            vec![int(now)],
        );
        let mut tx = self.db().begin().await.map_err(|e| store_err(OP, e))?;
        let mut n = tx.conn().execute(tokens).await.map_err(|e| db_err(OP, e))?;
        n += tx.conn().execute(nonces).await.map_err(|e| db_err(OP, e))?;
        tx.commit().await.map_err(|e| db_err(OP, e))?;
        Ok(n)
    }

    async fn insert_code(&self, c: &CodeRecord) -> Result<(), RepoError> {
        let values = vec![
            text(c.id.as_str()),
            text(c.client_id.as_str()),
            text(c.redirect_uri.as_str()),
            text(c.code_challenge.as_str()),
            list(&c.scope)?,
            text(c.username.as_str()),
            opt_text(c.nonce.as_deref()),
            int(c.auth_time),
            int(c.issued_at),
            int(c.expires_at),
            opt_int(c.used_at),
            text(c.family_id.as_str()),
            opt_text(c.idp.as_deref()),
        ];
        let sql = insert_sql(CODES, CODE_COLS, CODE_KINDS.len());
        self.execute("insert_code", &sql, values).await?;
        Ok(())
    }

    async fn get_code(&self, id: &str) -> Result<Option<CodeRecord>, RepoError> {
        let sql = format!("SELECT {CODE_COLS} FROM {} WHERE id = ?", q(CODES));
        let rows = self
            .fetch("get_code", &sql, vec![text(id)], CODE_KINDS)
            .await?;
        rows.into_iter().next().map(code).transpose()
    }

    async fn use_code(&self, id: &str, now: i64) -> Result<bool, RepoError> {
        // The compare-and-set: a second racer's WHERE no longer matches.
        let sql = format!(
            "UPDATE {} SET used_at = ? WHERE id = ? AND used_at IS NULL",
            q(CODES)
        );
        Ok(self
            .execute("use_code", &sql, vec![int(now), text(id)])
            .await?
            == 1)
    }

    async fn purge_codes(&self, before: i64) -> Result<u64, RepoError> {
        let sql = format!("DELETE FROM {} WHERE expires_at <= ?", q(CODES));
        self.execute("purge_codes", &sql, vec![int(before)]).await
    }
}
