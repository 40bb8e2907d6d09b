// Drives headless Chromium (Debian's /usr/bin/chromium) through GraphiQL as
// served by gatehouse: the page loads with no network beyond the server, a
// query runs, and its result appears. Then, with USERNAME and PASSWORD, a
// fresh browser clicks "Sign in", signs in on the server's page, runs the
// query with the token the page holds in memory only, and signs out.
// Usage: node graphiql-browser.mjs http://HOST AUTHORIZATION [USERNAME PASSWORD]
import { chromium } from 'playwright-core';

const base = process.argv[2];
const authorization = process.argv[3];
const [username, password] = process.argv.slice(4);
const marker = `GraphiQL probe ${Date.now()}`;
const headers = { 'content-type': 'application/json', ...(authorization ? { authorization } : {}) };

// Seed a row whose name the result must show.
const seed = await fetch(`${base}/graphql`, {
  method: 'POST',
  headers,
  body: JSON.stringify({ query: `mutation { createAuthor(name: "${marker}") { id } }` }),
});
const seeded = await seed.json();
if (seeded.errors) {
  console.error('seeding failed:', JSON.stringify(seeded));
  process.exit(1);
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
         '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
let failed = false;
try {
  const context = await browser.newContext(authorization ? { extraHTTPHeaders: { authorization } } : {});
  const page = await context.newPage();
  const outside = [];
  page.on('request', (req) => {
    if (!req.url().startsWith(base)) outside.push(req.url());
  });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  // The page's own policy must not block what the page loads (its fonts).
  page.on('console', (msg) => {
    if (msg.type() === 'error' && /Content Security Policy/i.test(msg.text())) errors.push(msg.text());
  });
  const query = `{ authors(name_starts_with: "${marker}") { name } }`;
  await page.goto(`${base}/graphql?query=${encodeURIComponent(query)}`, { waitUntil: 'load' });
  await page.waitForSelector('.graphiql-execute-button', { timeout: 20000 });
  await page.click('.graphiql-execute-button');
  await page.waitForFunction(
    (m) => document.querySelector('.graphiql-response')?.textContent.includes(m),
    marker,
    { timeout: 20000 },
  );
  const text = await page.textContent('.graphiql-response');
  console.log('result pane shows:', text.replace(/\s+/g, ' ').slice(0, 200));
  if (outside.length) {
    failed = true;
    console.error('the page requested URLs outside the server:', outside);
  }
  if (errors.length) {
    failed = true;
    console.error('page errors:', errors);
  }
} catch (e) {
  failed = true;
  console.error('GraphiQL check failed:', e);
}

// Signing in through GraphiQL's own button: no header given to the browser.
if (!failed && username) {
  try {
    const context = await browser.newContext();
    const page = await context.newPage();
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    const query = `{ authors(name_starts_with: "${marker}") { name } }`;
    await page.goto(`${base}/graphql?query=${encodeURIComponent(query)}`, { waitUntil: 'load' });
    await page.waitForSelector('.graphiql-execute-button', { timeout: 20000 });
    await page.click('#gatehouse-sign-in');
    await page.waitForSelector('input[name=password]', { timeout: 20000 });
    if (!page.url().startsWith(`${base}/oauth/authorize`)) throw new Error(`sign-in page at ${page.url()}`);
    await page.fill('input[name=username]', username);
    await page.fill('input[name=password]', password);
    await Promise.all([
      page.waitForURL((u) => u.pathname.endsWith('/graphql'), { timeout: 20000 }),
      page.click('button[type=submit]'),
    ]);
    await page.waitForFunction(
      () => document.getElementById('gatehouse-who')?.textContent.startsWith('Signed in'),
      null,
      { timeout: 20000 },
    );
    console.log('after sign-in:', await page.textContent('#gatehouse-who'));
    if (page.url().includes('code=')) throw new Error(`the code stayed in the address bar: ${page.url()}`);
    await page.waitForSelector('.graphiql-execute-button', { timeout: 20000 });
    // The editor's query survived the round trip to the sign-in page.
    await page.waitForFunction(
      (m) => document.querySelector('.graphiql-query-editor')?.textContent.includes(m),
      marker,
      { timeout: 20000 },
    );
    await page.click('.graphiql-execute-button');
    await page.waitForFunction(
      (m) => document.querySelector('.graphiql-response')?.textContent.includes(m),
      marker,
      { timeout: 20000 },
    );
    console.log('signed-in query shows:', (await page.textContent('.graphiql-response')).replace(/\s+/g, ' ').slice(0, 200));
    // The token lives in the page's memory only.
    const stored = await page.evaluate(() => JSON.stringify([
      Object.entries(localStorage), Object.entries(sessionStorage), document.cookie,
    ]));
    const cookies = JSON.stringify(await context.cookies());
    if (/eyJ/.test(stored) || /eyJ/.test(cookies)) {
      throw new Error(`a token was stored outside the page's memory: ${stored} ${cookies}`);
    }
    await page.click('#gatehouse-sign-out');
    await page.waitForFunction(
      () => document.getElementById('gatehouse-who')?.textContent === 'Not signed in',
      null,
      { timeout: 20000 },
    );
    await page.click('.graphiql-execute-button');
    await page.waitForFunction(
      () => document.querySelector('.graphiql-response')?.textContent.includes('UNAUTHENTICATED'),
      null,
      { timeout: 20000 },
    );
    if (errors.length) throw new Error(`page errors: ${errors}`);
    console.log('ok: GraphiQL signed in with its button, ran the query, and signed out');
  } catch (e) {
    failed = true;
    console.error('GraphiQL sign-in check failed:', e);
  }
}
await browser.close();
if (failed) process.exit(1);
console.log('ok: GraphiQL loaded offline, ran a query and showed its result');
