//! GraphiQL for browsers, from assets built into the binary (no CDN).

use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};

struct Asset {
    name: &'static str,
    content_type: &'static str,
    bytes: &'static [u8],
}

const ASSETS: &[Asset] = &[
    Asset {
        name: "graphiql.min.js",
        content_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("../assets/graphiql/graphiql.min.js"),
    },
    Asset {
        name: "graphiql.min.css",
        content_type: "text/css; charset=utf-8",
        bytes: include_bytes!("../assets/graphiql/graphiql.min.css"),
    },
    Asset {
        name: "gatehouse-graphiql.js",
        content_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("../assets/gatehouse-graphiql.js"),
    },
    Asset {
        name: "gatehouse-graphiql.css",
        content_type: "text/css; charset=utf-8",
        bytes: include_bytes!("../assets/gatehouse-graphiql.css"),
    },
    Asset {
        name: "react.production.min.js",
        content_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("../assets/graphiql/react.production.min.js"),
    },
    Asset {
        name: "react-dom.production.min.js",
        content_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("../assets/graphiql/react-dom.production.min.js"),
    },
];

/// The public client GraphiQL signs in through: registered by the server
/// itself, first-party, redirect URI `{issuer}/graphql`.
pub const GRAPHIQL_CLIENT_ID: &str = "graphiql";

/// `Content-Security-Policy` of the GraphiQL page: scripts from the server
/// only (no inline script, no `eval`), no framing, no base, forms only to
/// the server. The bundled stylesheet carries its icons and fonts inline
/// as `data:` URLs, so images and fonts may also come from `data:`;
/// nothing else does.
pub(crate) const GRAPHIQL_CSP: &str = "default-src 'self'; img-src 'self' data:; font-src 'self' data:; \
                                style-src 'self' 'unsafe-inline'; script-src 'self'; \
                                frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// The GraphiQL page. Values reach the page only as escaped attributes
/// (no inline script), so the page runs under a `script-src 'self'` policy.
#[derive(askama::Template)]
#[template(path = "graphiql.html")]
struct Page<'a> {
    /// The configured base path (`""` or `/api`).
    base: &'a str,
    client_id: &'a str,
}

/// `GET {base}/graphql` from a browser. "Sign in" asks for no particular
/// scope: the token carries every scope the user holds.
pub(crate) fn page(base: &str) -> Response {
    let page = Page {
        base,
        client_id: GRAPHIQL_CLIENT_ID,
    };
    match askama::Template::render(&page) {
        Ok(html) => (
            [
                (header::CACHE_CONTROL, "no-store"),
                // The page receives authorization codes in its URL: no
                // framing, no referrer, scripts from the server only.
                (header::CONTENT_SECURITY_POLICY, GRAPHIQL_CSP),
                (header::X_FRAME_OPTIONS, "DENY"),
                (header::REFERRER_POLICY, "no-referrer"),
            ],
            Html(html),
        )
            .into_response(),
        Err(e) => {
            tracing::error!(error = %e, "rendering the GraphiQL page failed");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

/// `GET {base}/graphql/assets/{name}`.
pub(crate) async fn asset(Path(name): Path<String>) -> Response {
    match ASSETS.iter().find(|a| a.name == name) {
        Some(a) => (
            [
                (header::CONTENT_TYPE, a.content_type),
                (header::CACHE_CONTROL, "public, max-age=86400"),
            ],
            a.bytes,
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "no such asset").into_response(),
    }
}
