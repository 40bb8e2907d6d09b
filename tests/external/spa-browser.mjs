// Drives headless Chromium through the example single-page app
// (examples/spa): the page, served on another origin (127.0.0.1:5173),
// signs in with oidc-client-ts (authorization code + PKCE, OpenID
// Connect: the library reads the discovery document and checks state,
// the ID token's iss, aud, nonce and expiry), approves the consent page, then
// lists the library's books through /graphql cross-origin with the token.
// Usage: node spa-browser.mjs http://GATEHOUSE USERNAME PASSWORD
import { createServer } from 'node:http';
import { readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const [base, username, password] = process.argv.slice(2);
const here = dirname(fileURLToPath(import.meta.url));
const spa = join(here, '../../examples/spa');
const library = join(here, 'node_modules/oidc-client-ts/dist/browser/oidc-client-ts.min.js');
const origin = 'http://127.0.0.1:5173';

// The page as `npm start` serves it, pointed at this test's server (the
// page names the example's default address).
const html = (await readFile(join(spa, 'index.html'), 'utf8'))
  .replace('const GATEHOUSE = "http://127.0.0.1:8080";', `const GATEHOUSE = ${JSON.stringify(base)};`);
if (!html.includes(JSON.stringify(base))) throw new Error('index.html no longer names GATEHOUSE as expected');
const server = createServer(async (req, res) => {
  const path = new URL(req.url, origin).pathname;
  if (path === '/') {
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    res.end(html);
  } else if (path === '/vendor/oidc-client-ts.min.js') {
    res.writeHead(200, { 'content-type': 'text/javascript' });
    res.end(await readFile(library));
  } else if (path === '/favicon.ico') {
    res.writeHead(204);
    res.end();
  } else {
    res.writeHead(404);
    res.end();
  }
});
await new Promise((ok) => server.listen(5173, '127.0.0.1', ok));

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
         '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
let failed = false;
try {
  const page = await (await browser.newContext()).newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  await page.goto(`${origin}/`, { waitUntil: 'load' });
  await page.click('#sign-in');
  await page.waitForSelector('input[name=password]', { timeout: 20000 });
  if (!page.url().startsWith(`${base}/oauth/authorize`)) throw new Error(`sign-in page at ${page.url()}`);
  await page.fill('input[name=username]', username);
  await page.fill('input[name=password]', password);
  await page.click('button[type=submit]');
  // demo-spa is a third-party client: the consent page lists the scopes.
  await page.waitForSelector('button[value=consent]', { timeout: 20000 });
  const scopes = await page.$$eval('ul.scopes li', (items) => items.map((i) => i.textContent));
  console.log('consent page lists:', scopes.join(' '));
  if (!scopes.includes('read')) throw new Error(`consent page does not list the scopes: ${scopes}`);
  await page.click('button[value=consent]');
  await page.waitForFunction(
    () => document.getElementById('who')?.textContent.startsWith('Signed in as'),
    null,
    { timeout: 20000 },
  );
  console.log('spa says:', await page.textContent('#who'));
  if (page.url() !== `${origin}/`) throw new Error(`the code stayed in the address bar: ${page.url()}`);
  await page.click('#books');
  await page.waitForFunction(() => document.querySelectorAll('#list li').length > 0, null, { timeout: 20000 });
  const books = await page.$$eval('#list li', (items) => items.map((i) => i.textContent));
  console.log('books listed cross-origin:', books.join('; '));
  if (!books.some((b) => b.includes('Earthsea'))) throw new Error(`unexpected books: ${books}`);
  await page.click('#sign-out');
  await page.waitForFunction(() => document.getElementById('who')?.textContent === 'Not signed in.', null, { timeout: 20000 });
  const errorText = await page.textContent('#error');
  if (errorText) throw new Error(`the page shows an error: ${errorText}`);
  if (errors.length) throw new Error(`page errors: ${errors.join('\n')}`);
} catch (e) {
  failed = true;
  console.error('SPA check failed:', e);
} finally {
  await browser.close();
  server.close();
}
if (failed) process.exit(1);
console.log('ok: the example SPA signed in with oidc-client-ts and listed books cross-origin');
