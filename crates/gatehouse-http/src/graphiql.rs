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

/// The GraphiQL page; `base` is the configured base path.
pub(crate) fn page(base: &str) -> Response {
    // Without a token every query answers UNAUTHENTICATED and the docs
    // panel stays empty (introspection needs the read scope): say so where
    // a newcomer looks first, and open the Headers tab.
    let default_query = serde_json::to_string(&format!(
        "# Queries, and the docs panel, need an access token: get one from\n\
         # POST {base}/oauth/token, then put it in the Headers tab below:\n\
         #   {{\"Authorization\": \"Bearer <access token>\"}}\n\n\
         {{\n  __typename\n}}\n"
    ))
    .unwrap_or_default();
    let html = format!(
        r#"<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>gatehouse · GraphiQL</title>
  <link rel="stylesheet" href="{base}/graphql/assets/graphiql.min.css">
  <style>html, body, #graphiql {{ height: 100%; margin: 0; }}</style>
</head>
<body>
  <div id="graphiql">Loading GraphiQL…</div>
  <script src="{base}/graphql/assets/react.production.min.js"></script>
  <script src="{base}/graphql/assets/react-dom.production.min.js"></script>
  <script src="{base}/graphql/assets/graphiql.min.js"></script>
  <script>
    const url = new URL("{base}/graphql", window.location.href).toString();
    const fetcher = GraphiQL.createFetcher({{ url }});
    // Links like /graphql?query=... open with that query in the editor.
    const params = new URLSearchParams(window.location.search);
    const root = ReactDOM.createRoot(document.getElementById("graphiql"));
    root.render(React.createElement(GraphiQL, {{
      fetcher,
      query: params.get("query") || undefined,
      variables: params.get("variables") || undefined,
      defaultQuery: {default_query},
      defaultEditorToolsVisibility: "headers",
    }}));
  </script>
</body>
</html>
"#
    );
    ([(header::CACHE_CONTROL, "no-cache")], Html(html)).into_response()
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
