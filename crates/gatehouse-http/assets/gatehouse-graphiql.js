// GraphiQL with "Sign in" / "Sign out": the authorization code flow with
// PKCE through the server's built-in public client. The PKCE verifier and
// the editor's query sit in sessionStorage only for the round trip to the
// sign-in page; the tokens live in this page's memory only (never
// localStorage, sessionStorage or a cookie), so a reload signs out.
(function () {
  'use strict';
  const root = document.getElementById('graphiql');
  const cfg = root.dataset;
  const who = document.getElementById('gatehouse-who');
  const signInButton = document.getElementById('gatehouse-sign-in');
  const signOutButton = document.getElementById('gatehouse-sign-out');
  const PENDING = 'gatehouse.graphiql.pending';
  // The redirect URI is this page, without its query: `{issuer}/graphql`.
  const redirectUri = new URL(cfg.endpoint, window.location.href).toString();

  let accessToken = null;
  let refreshToken = null;
  let currentQuery = null;
  let currentVariables = null;

  function base64url(bytes) {
    let s = '';
    for (const b of new Uint8Array(bytes)) s += String.fromCharCode(b);
    return btoa(s).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
  }
  function randomString() {
    return base64url(crypto.getRandomValues(new Uint8Array(32)));
  }
  function claimsOf(jwt) {
    try {
      const part = jwt.split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
      return JSON.parse(atob(part));
    } catch (_) {
      return {};
    }
  }
  function show(text, isError) {
    who.textContent = text;
    who.classList.toggle('gatehouse-error', Boolean(isError));
  }
  function signedIn(name) {
    show(name ? 'Signed in as ' + name : 'Signed in');
    signInButton.hidden = true;
    signOutButton.hidden = false;
  }
  function signedOut(message, isError) {
    show(message || 'Not signed in', isError);
    signInButton.hidden = false;
    signOutButton.hidden = true;
  }

  async function signIn() {
    const verifier = randomString();
    const state = randomString();
    const challenge = base64url(
      await crypto.subtle.digest('SHA-256', new TextEncoder().encode(verifier)));
    sessionStorage.setItem(PENDING, JSON.stringify({
      verifier, state, query: currentQuery, variables: currentVariables,
    }));
    const url = new URL(cfg.authorize, window.location.href);
    // No `scope`: the token carries every scope the user holds.
    const query = new URLSearchParams({
      response_type: 'code',
      client_id: cfg.clientId,
      redirect_uri: redirectUri,
      state,
      code_challenge: challenge,
      code_challenge_method: 'S256',
    });
    url.search = query.toString();
    window.location.assign(url.toString());
  }

  async function signOut() {
    const token = refreshToken;
    accessToken = null;
    refreshToken = null;
    signedOut();
    if (token) {
      // RFC 7009: the refresh token must not outlive the page's sign-out.
      await fetch(cfg.revoke, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ token, token_type_hint: 'refresh_token', client_id: cfg.clientId }),
      }).catch(() => {});
    }
  }

  // Back from the sign-in page: `?code=&state=` or `?error=`.
  async function finishSignIn() {
    const params = new URLSearchParams(window.location.search);
    if (!params.has('code') && !params.has('error')) return null;
    const pending = JSON.parse(sessionStorage.getItem(PENDING) || 'null');
    sessionStorage.removeItem(PENDING);
    // The code must not stay in the address bar or the history.
    window.history.replaceState(null, '', redirectUri);
    if (!pending || params.get('state') !== pending.state) {
      signedOut('Sign-in failed: the answer does not match a sign-in started here', true);
      return pending;
    }
    if (params.has('error')) {
      signedOut('Sign-in failed: ' + (params.get('error_description') || params.get('error')), true);
      return pending;
    }
    const response = await fetch(cfg.token, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({
        grant_type: 'authorization_code',
        code: params.get('code'),
        redirect_uri: redirectUri,
        client_id: cfg.clientId,
        code_verifier: pending.verifier,
      }),
    });
    const body = await response.json().catch(() => ({}));
    if (!response.ok || !body.access_token) {
      signedOut('Sign-in failed: ' + (body.error_description || body.error || response.status), true);
      return pending;
    }
    accessToken = body.access_token;
    refreshToken = body.refresh_token || null;
    const claims = claimsOf(body.id_token || body.access_token);
    signedIn(claims.preferred_username || claims.sub);
    return pending;
  }

  function render(pending) {
    const params = new URLSearchParams(window.location.search);
    const fetcher = GraphiQL.createFetcher({
      url: new URL(cfg.endpoint, window.location.href).toString(),
      fetch: (input, init) => {
        const headers = new Headers((init && init.headers) || {});
        if (accessToken && !headers.has('authorization')) {
          headers.set('authorization', 'Bearer ' + accessToken);
        }
        return fetch(input, Object.assign({}, init, { headers }));
      },
    });
    const query = (pending && pending.query) || params.get('query') || undefined;
    const variables = (pending && pending.variables) || params.get('variables') || undefined;
    currentQuery = query || null;
    currentVariables = variables || null;
    ReactDOM.createRoot(root).render(React.createElement(GraphiQL, {
      fetcher,
      query,
      variables,
      defaultQuery:
        '# Sign in (top right) to run queries and fill the docs panel,\n' +
        '# or put a token in the Headers tab:\n' +
        '#   {"Authorization": "Bearer <access token>"}\n\n{\n  __typename\n}\n',
      onEditQuery: (q) => { currentQuery = q; },
      onEditVariables: (v) => { currentVariables = v; },
    }));
  }

  signInButton.addEventListener('click', () => {
    signIn().catch((e) => signedOut('Sign-in failed: ' + e, true));
  });
  signOutButton.addEventListener('click', () => { signOut(); });
  signedOut();
  finishSignIn()
    .catch((e) => { signedOut('Sign-in failed: ' + e, true); return null; })
    .then(render);
})();
