// Signing in through another identity provider, end to end in headless
// Chromium: a real OpenID Connect provider (npm `oidc-provider`, its
// development login and consent pages) is gatehouse's upstream
// (`[[auth.providers]] kind = "oidc"`), and an app on another origin signs
// in to gatehouse with oidc-client-ts (code flow, PKCE, the ID token
// checked by the library). The user clicks "Continue with Corp" on
// gatehouse's sign-in page, signs in and consents at the provider, and the
// app ends up with gatehouse's tokens: `sub` is the gatehouse account (not
// the provider's subject), `amr` is ["fed"] and `idp` "corp", in the ID
// token and the access token.
// Usage: node providers-browser.mjs PATH/TO/gatehouse WORKDIR
import { spawn } from 'node:child_process';
import { createServer } from 'node:http';
import { mkdir, mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { createServer as netServer } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Provider from 'oidc-provider';
import { chromium } from 'playwright-core';

const [bin, work] = process.argv.slice(2);
if (!bin || !work) throw new Error('usage: node providers-browser.mjs GATEHOUSE_BIN WORKDIR');
const here = dirname(fileURLToPath(import.meta.url));
const library = join(here, 'node_modules/oidc-client-ts/dist/browser/oidc-client-ts.min.js');

const freePort = () => new Promise((ok, fail) => {
  const s = netServer();
  s.once('error', fail);
  s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => ok(port)); });
});

const gatehousePort = await freePort();
const gatehouse = `http://127.0.0.1:${gatehousePort}`;
const appOrigin = `http://127.0.0.1:${await freePort()}`;

// The upstream provider: any login name signs in as that account.
const providerPort = await freePort();
const issuer = `http://127.0.0.1:${providerPort}`;
const upstream = new Provider(issuer, {
  clients: [{
    client_id: 'gatehouse',
    client_secret: 'provider-secret-0123456789',
    redirect_uris: [`${gatehouse}/auth/providers/corp/callback`],
    grant_types: ['authorization_code'],
    response_types: ['code'],
    token_endpoint_auth_method: 'client_secret_basic',
  }],
  claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['preferred_username'] },
  findAccount: async (_ctx, id) => ({
    accountId: id,
    claims: async () => ({
      sub: `upstream-${id}`,
      email: `${id}@corp.example`,
      email_verified: true,
      preferred_username: id,
    }),
  }),
  features: { devInteractions: { enabled: true } },
  cookies: { keys: ['external-test-cookie-key'] },
});
upstream.proxy = false;
const upstreamServer = upstream.listen(providerPort, '127.0.0.1');

// gatehouse with an account type, sign-up on, the provider, and the app.
const project = await mkdtemp(join(work, 'providers-'));
await mkdir(join(project, 'schema'), { recursive: true });
await writeFile(join(project, 'schema/types.graphql'), `
type User @account @policy(read: {id: "$sub"}, update: {id: "$sub"}) {
  id: ID!
  username: String! @unique
  email: String @unique
  emailVerified: Boolean!
}
`);
await writeFile(join(project, 'gatehouse.toml'), `
schema = ["schema"]

[auth]
sign_up = true
sign_up_scopes = ["openid", "profile"]

[[auth.providers]]
id = "corp"
name = "Corp"
kind = "oidc"
issuer = "${issuer}"
client_id = "gatehouse"
client_secret_env = "CORP_CLIENT_SECRET"
trust_email = true

[cors]
allowed_origins = ["${appOrigin}"]

[[bootstrap.clients]]
client_id = "spa"
public = true
first_party = true
grants = ["authorization_code"]
scopes = ["openid", "profile"]
redirect_uris = ["${appOrigin}/"]
`);
const server = spawn(bin, ['serve', '--config', 'gatehouse.toml', '--listen', `127.0.0.1:${gatehousePort}`,
  '--database', `sqlite://${join(project, 'data.db')}`], {
  cwd: project,
  env: { ...process.env, GATEHOUSE_SECRET: 'external-providers-secret-0123456789', CORP_CLIENT_SECRET: 'provider-secret-0123456789' },
  stdio: ['ignore', 'pipe', 'pipe'],
});
let serverLog = '';
server.stderr.on('data', (d) => { serverLog += d; });
await new Promise((ok, fail) => {
  let out = '';
  const timer = setTimeout(() => fail(new Error(`gatehouse did not start:\n${serverLog}`)), 30000);
  server.stdout.on('data', (d) => {
    out += d;
    if (out.includes('listening on')) { clearTimeout(timer); ok(); }
  });
  server.on('exit', (code) => fail(new Error(`gatehouse exited (${code}):\n${serverLog}`)));
});

// The app: oidc-client-ts against gatehouse; it shows what it got.
const appHtml = `<!doctype html><meta charset="utf-8"><title>app</title>
<script src="/vendor/oidc-client-ts.min.js"></script>
<button id="sign-in">Sign in</button><pre id="out"></pre>
<script>
const mgr = new oidc.UserManager({
  authority: ${JSON.stringify(gatehouse)},
  client_id: 'spa',
  redirect_uri: location.origin + '/',
  scope: 'openid profile',
  response_type: 'code',
});
const payload = (jwt) => JSON.parse(atob(jwt.split('.')[1].replace(/-/g, '+').replace(/_/g, '/')));
(async () => {
  if (location.search.includes('code=')) {
    try {
      const user = await mgr.signinRedirectCallback();
      history.replaceState(null, '', '/');
      document.getElementById('out').textContent = JSON.stringify({
        id: payload(user.id_token),
        access: payload(user.access_token),
      });
    } catch (e) {
      document.getElementById('out').textContent = 'ERROR ' + e;
    }
  }
})();
document.getElementById('sign-in').onclick = () => mgr.signinRedirect();
</script>`;
const app = createServer(async (req, res) => {
  const path = new URL(req.url, appOrigin).pathname;
  if (path === '/') {
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    res.end(appHtml);
  } else if (path === '/vendor/oidc-client-ts.min.js') {
    res.writeHead(200, { 'content-type': 'text/javascript' });
    res.end(await readFile(library));
  } else {
    res.writeHead(404);
    res.end();
  }
});
await new Promise((ok) => app.listen(Number(new URL(appOrigin).port), '127.0.0.1', ok));

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
         '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
let failed = false;
try {
  const page = await (await browser.newContext()).newPage();
  await page.goto(`${appOrigin}/`, { waitUntil: 'load' });
  await page.click('#sign-in');
  // gatehouse's sign-in page, with the provider's button.
  await page.waitForSelector('text=Continue with Corp', { timeout: 20000 });
  if (!page.url().startsWith(`${gatehouse}/oauth/authorize`)) throw new Error(`sign-in page at ${page.url()}`);
  await page.click('text=Continue with Corp');
  // The provider's own login and consent pages.
  await page.waitForSelector('input[name=login]', { timeout: 20000 });
  if (!page.url().startsWith(issuer)) throw new Error(`provider login at ${page.url()}`);
  await page.fill('input[name=login]', 'ursula');
  await page.fill('input[name=password]', 'anything');
  await page.click('button[type=submit]');
  // The provider's consent page, then back through gatehouse's callback
  // (a first-party app: no consent page there) to the app, which redeems
  // the code.
  const consent = page.locator('input[name=prompt][value=consent]');
  const done = page.locator('#out:not(:empty)');
  await consent.or(done).first().waitFor({ state: 'attached', timeout: 20000 });
  if (await consent.count()) {
    await page.click('button[type=submit]');
  }
  await done.waitFor({ state: 'attached', timeout: 30000 });
  const text = await page.textContent('#out');
  if (text.startsWith('ERROR')) throw new Error(`the app failed: ${text}`);
  const { id, access } = JSON.parse(text);
  console.log('ID token claims:', JSON.stringify(id));
  console.log('access token claims:', JSON.stringify(access));
  for (const [what, claims] of [['ID token', id], ['access token', access]]) {
    if (JSON.stringify(claims.amr) !== '["fed"]') throw new Error(`${what}: amr is ${JSON.stringify(claims.amr)}`);
    if (claims.idp !== 'corp') throw new Error(`${what}: idp is ${claims.idp}`);
  }
  if (!id.sub || id.sub === 'upstream-ursula' || id.sub !== access.sub) {
    throw new Error(`sub is not a gatehouse account: ${id.sub} / ${access.sub}`);
  }
  // The account was made from what the provider said (its userinfo: the
  // ID token of this provider carries neither name nor address).
  if (id.preferred_username !== 'ursula') throw new Error(`preferred_username is ${id.preferred_username}`);
  if (access.iss !== gatehouse || id.iss !== gatehouse) throw new Error('tokens not issued by gatehouse');
} catch (e) {
  failed = true;
  console.error('provider sign-in check failed:', e);
  console.error(serverLog.split('\n').slice(-30).join('\n'));
} finally {
  await browser.close();
  app.close();
  upstreamServer.close();
  server.kill();
}
if (failed) process.exit(1);
console.log('ok: signed in through oidc-provider; the app holds gatehouse tokens with amr ["fed"] and idp "corp"');
