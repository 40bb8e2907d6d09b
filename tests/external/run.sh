#!/usr/bin/env bash
# Runs third-party clients against a real gatehouse: an OAuth 2.0 client
# library (authlib + pyjwt; also the authorization code flow with PKCE and
# its RS256 ID token), an OAuth 1.0 signer (oauthlib + requests-oauthlib),
# the graphql-http audit, the graphql-ws subscription client, graphql-js
# on the introspection result, GraphiQL (with its sign-in) and the example SPA
# (oidc-client-ts) in headless Chromium, a sign-in through a real OpenID
# Connect provider (npm oidc-provider) from an oidc-client-ts app in
# headless Chromium (providers-browser.mjs), sign-up with verification and
# a password reset in headless Chromium against a real SMTP server
# (aiosmtpd; mailflows-browser.mjs), and schemathesis on the
# REST API; and the webhook deliveries of a server of its own, verified
# with standardwebhooks (webhooks.sh). Installs what it needs (npm and PyPI
# packages, Debian's chromium) when missing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"

log() { printf '\n--> %s\n' "$*"; }

log "npm packages"
(cd "$here" && npm ci --no-audit --no-fund --loglevel=error)

if [ ! -x /usr/bin/chromium ]; then
  log "installing Debian's chromium"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q chromium
fi

log "building gatehouse"
cargo build --quiet --bin gatehouse
target_dir="$(cargo metadata --format-version 1 --no-deps \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
bin="$target_dir/debug/gatehouse"

work="$(mktemp -d)"
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# Start the example on a free port with a throw-away database.
database="${GATEHOUSE_EXTERNAL_DATABASE:-sqlite://$work/external.db}"
"$bin" serve --config examples/library/gatehouse.toml --listen 127.0.0.1:0 \
  --database "$database" >"$work/stdout" 2>"$work/server.log" &
server_pid=$!
for _ in $(seq 1 100); do
  grep -q "listening on" "$work/stdout" 2>/dev/null && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log"; echo "server exited"; exit 1; }
  sleep 0.1
done
base="$(grep -o 'http://[0-9.:]*' "$work/stdout" | head -n1)"
[ -n "$base" ] || { cat "$work/server.log"; echo "server did not report its address"; exit 1; }
echo "server at $base ($database)"

log "OAuth 2.0 client (authlib, pyjwt)"
venv="${XDG_CACHE_HOME:-$HOME/.cache}/gatehouse/oauth-client-venv"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import authlib, jwt, requests' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check \
    "Authlib==1.9.9" "PyJWT[crypto]==2.15.1" "requests==2.34.2"
fi
"$venv/bin/python" crates/gatehouse-oauth/tests/external/oauth_client.py --base-url "$base" \
  --client-id demo-app --client-secret demo-secret-change-me \
  --username alice --password alice-password --audience https://reports.example

log "Authorization code flow with PKCE and OpenID Connect (authlib, pyjwt)"
"$venv/bin/python" crates/gatehouse-oauth/tests/external/code_flow_client.py --base-url "$base" \
  --client-id demo-spa --redirect-uri http://127.0.0.1/callback \
  --username bob --password bob-password

log "OAuth 1.0 client (oauthlib, requests-oauthlib)"
venv1="${XDG_CACHE_HOME:-$HOME/.cache}/gatehouse/oauth1-client-venv"
if [ ! -x "$venv1/bin/python" ] || ! "$venv1/bin/python" -c 'import oauthlib, requests_oauthlib, requests' 2>/dev/null; then
  python3 -m venv "$venv1"
  "$venv1/bin/pip" install --quiet --disable-pip-version-check \
    "oauthlib==3.3.1" "requests-oauthlib==2.0.0" "requests==2.34.2"
fi
"$venv1/bin/python" crates/gatehouse-oauth/tests/external/oauth1_client.py --base-url "$base" \
  --consumer-key demo-consumer --consumer-secret demo-consumer-secret \
  --username alice --password alice-password

# Every API below needs credentials: a token for the example's user.
token="$(curl -sS --fail -u demo-app:demo-secret-change-me \
  -d grant_type=password -d username=alice -d password=alice-password \
  -d 'scope=read write' "$base/oauth/token" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["access_token"])')"
authorization="Bearer $token"

log "graphql-http audit"
node "$here/graphql-http-audit.mjs" "$base/graphql" "$authorization"

log "graphql-ws client: subscriptions over WebSocket"
node "$here/graphql-ws-subscribe.mjs" "$base" "$authorization"

log "graphql-js buildClientSchema on /graphql/schema.json"
node "$here/graphql-schema-check.mjs" "$base" "$authorization"

log "GraphiQL in headless Chromium"
node "$here/graphiql-browser.mjs" "$base" "$authorization" alice alice-password

log "the example SPA in headless Chromium (oidc-client-ts, cross-origin)"
node "$here/spa-browser.mjs" "$base" alice alice-password

log "signing in through oidc-provider in headless Chromium (an oidc-client-ts app)"
node "$here/providers-browser.mjs" "$bin" "$work"

log "sign-up with verification and a password reset in headless Chromium (aiosmtpd)"
smtp_venv="${XDG_CACHE_HOME:-$HOME/.cache}/gatehouse/smtp-venv"
if [ ! -x "$smtp_venv/bin/python" ] || ! "$smtp_venv/bin/python" -c 'import aiosmtpd' 2>/dev/null; then
  python3 -m venv "$smtp_venv"
  "$smtp_venv/bin/pip" install --quiet --disable-pip-version-check "aiosmtpd==1.4.6"
fi
node "$here/mailflows-browser.mjs" "$bin" "$work" "$smtp_venv/bin/python"

log "schemathesis on /v1/openapi.json"
"$here/rest-schemathesis.sh" "$base" "$authorization"

log "webhook deliveries verified with standardwebhooks"
"$here/webhooks.sh" "$bin"

log "external clients passed"
