// The e-mail flows end to end in headless Chromium, against a real SMTP
// server process (Python's aiosmtpd, writing a maildir): a person signs up
// from an app's authorization request with `verification = "required"`,
// opens the link of the message the server sent, and ends at the app with
// a code; then forgets the password, follows the reset message's link,
// sets a new one and signs in with it. Links are read from the received
// messages, parsed with mailparser.
// Usage: node mailflows-browser.mjs PATH/TO/gatehouse WORKDIR PYTHON
// (PYTHON: an interpreter that has aiosmtpd).
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readdir, readFile, writeFile } from 'node:fs/promises';
import { createServer as netServer } from 'node:net';
import { join } from 'node:path';
import { simpleParser } from 'mailparser';
import { chromium } from 'playwright-core';

const [bin, work, python] = process.argv.slice(2);
if (!bin || !work || !python) throw new Error('usage: node mailflows-browser.mjs GATEHOUSE_BIN WORKDIR PYTHON');

const freePort = () => new Promise((ok, fail) => {
  const s = netServer();
  s.once('error', fail);
  s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => ok(port)); });
});
const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

const project = await mkdtemp(join(work, 'mailflows-'));
const maildir = join(project, 'maildir');
const smtpPort = await freePort();
const smtp = spawn(python, ['-m', 'aiosmtpd', '-n', '-l', `127.0.0.1:${smtpPort}`,
  '-c', 'aiosmtpd.handlers.Mailbox', maildir], { stdio: ['ignore', 'pipe', 'pipe'] });
let smtpLog = '';
smtp.stderr.on('data', (d) => { smtpLog += d; });

const gatehousePort = await freePort();
const gatehouse = `http://127.0.0.1:${gatehousePort}`;
const redirect = 'http://127.0.0.1:9/callback';
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
sign_up_scopes = ["openid"]

[auth.email]
verification = "required"

[email]
transport = "smtp"
url = "smtp://127.0.0.1:${smtpPort}?tls=off"
from = "Gatehouse <no-reply@example.com>"

[[bootstrap.clients]]
client_id = "web"
public = true
first_party = true
grants = ["authorization_code"]
scopes = ["openid"]
redirect_uris = ["${redirect}"]
`);
const server = spawn(bin, ['serve', '--config', 'gatehouse.toml', '--listen', `127.0.0.1:${gatehousePort}`,
  '--database', `sqlite://${join(project, 'data.db')}`], {
  cwd: project,
  env: { ...process.env, GATEHOUSE_SECRET: 'external-mailflows-secret-0123456789' },
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

// Every message aiosmtpd has written, parsed.
async function received() {
  const dir = join(maildir, 'new');
  let names = [];
  try { names = (await readdir(dir)).sort(); } catch { return []; }
  return Promise.all(names.map(async (n) => simpleParser(await readFile(join(dir, n)))));
}

// The `n`th message (from 1) to `to`, waiting up to 30 s for it.
async function message(to, n) {
  for (let i = 0; i < 300; i++) {
    const mine = (await received()).filter((m) => m.to?.text === to);
    if (mine.length >= n) return mine[n - 1];
    await sleep(100);
  }
  throw new Error(`no message ${n} to ${to} within 30 s`);
}

// The link of a message that starts with `prefix`.
function linkIn(msg, prefix) {
  const link = (msg.text.match(/https?:\/\/\S+/g) || []).find((l) => l.startsWith(prefix));
  if (!link) throw new Error(`no ${prefix} link in:\n${msg.text}`);
  return link;
}

const verifier = randomBytes(32).toString('base64url');
const challenge = createHash('sha256').update(verifier).digest('base64url');
const authorize = `${gatehouse}/oauth/authorize?${new URLSearchParams({
  response_type: 'code', client_id: 'web', redirect_uri: redirect, scope: 'openid',
  state: 'st-1', code_challenge: challenge, code_challenge_method: 'S256',
})}`;

// A new browser whose visits to the app's redirect URI are answered here
// (nothing listens there); resolves with the URL the code came back to.
async function browserTab(browser) {
  const page = await (await browser.newContext()).newPage();
  let back;
  const arrived = new Promise((ok) => { back = ok; });
  await page.route(`${redirect}**`, (route) => {
    back(route.request().url());
    return route.fulfill({ status: 200, contentType: 'text/plain', body: 'back at the app' });
  });
  return { page, arrived };
}

function codeOf(url) {
  const u = new URL(url);
  if (u.searchParams.get('state') !== 'st-1' || !u.searchParams.get('code')) {
    throw new Error(`the app got no code: ${url}`);
  }
  return u.searchParams.get('code');
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
         '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
let failed = false;
try {
  // Sign-up: no account until the address is confirmed.
  const address = 'ursula@example.com';
  const first = await browserTab(browser);
  await first.page.goto(authorize);
  await first.page.click('text=Create one');
  await first.page.fill('input[name=username]', 'ursula');
  await first.page.fill('input[name=email]', address);
  await first.page.fill('input[name=password]', 'first-password-0123');
  await first.page.click('button[type=submit]');
  await first.page.waitForSelector('input[name=code]', { timeout: 20000 });
  const verify = await message(address, 1);
  console.log(`verification message: "${verify.subject}"`);
  // The link opens a page; only its button confirms (a scanner's GET
  // spends nothing). Opened in the same browser, it goes on to the app.
  await first.page.goto(linkIn(verify, `${gatehouse}/auth/verify`));
  await first.page.click('button[type=submit]');
  const firstBack = await Promise.race([
    first.arrived,
    first.page.waitForSelector('input[name=password]', { timeout: 20000 }).then(async () => {
      // Back at the sign-in page of the request: sign in as the new account.
      await first.page.fill('input[name=username]', 'ursula');
      await first.page.fill('input[name=password]', 'first-password-0123');
      await first.page.click('button[type=submit]');
      return first.arrived;
    }),
  ]);
  codeOf(firstBack);
  console.log('ok: signed up, confirmed the address from the message, and the app got a code');

  // Forgot password: the reset message's link sets a new one. An address
  // gets at most one message a minute, whatever the flow: the
  // verification message was the last.
  await sleep(61000);
  const second = await browserTab(browser);
  await second.page.goto(authorize);
  await second.page.click('text=Forgot password?');
  await second.page.fill('input[name=email]', address);
  await second.page.click('button[type=submit]');
  await second.page.waitForSelector('input[name=code]', { timeout: 20000 });
  const reset = await message(address, 2);
  console.log(`reset message: "${reset.subject}"`);
  await second.page.goto(linkIn(reset, `${gatehouse}/auth/reset`));
  await second.page.fill('input[name=password]', 'second-password-0123');
  await second.page.click('button[type=submit]');
  // Back to the request's sign-in page (or, without one, a page saying so).
  await second.page.locator('input[name=username]').or(second.page.getByText('Your password was changed'))
    .first().waitFor({ timeout: 20000 });
  // The old password no longer signs in; the new one does.
  const third = await browserTab(browser);
  await third.page.goto(authorize);
  await third.page.fill('input[name=username]', 'ursula');
  await third.page.fill('input[name=password]', 'first-password-0123');
  await third.page.click('button[type=submit]');
  const refused = await Promise.race([
    third.arrived.then(() => false),
    third.page.waitForSelector('text=The user name or password is incorrect.', { timeout: 20000 }).then(() => true),
  ]);
  if (!refused) throw new Error('the old password still signs in');
  await third.page.fill('input[name=username]', 'ursula');
  await third.page.fill('input[name=password]', 'second-password-0123');
  await third.page.click('button[type=submit]');
  codeOf(await third.arrived);
  console.log('ok: reset the password from the message; the old one is refused, the new one signs in');
} catch (e) {
  failed = true;
  console.error('e-mail flow check failed:', e);
  console.error(serverLog.split('\n').slice(-30).join('\n'));
  console.error(smtpLog);
} finally {
  await browser.close();
  server.kill();
  smtp.kill();
}
if (failed) process.exit(1);
