// Drives headless Chromium (Debian's /usr/bin/chromium) through GraphiQL as
// served by gatehouse: the page loads with no network beyond the server, a
// query runs, and its result appears. Usage: node graphiql-browser.mjs http://HOST [AUTHORIZATION]
import { chromium } from 'playwright-core';

const base = process.argv[2];
const authorization = process.argv[3];
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
} finally {
  await browser.close();
}
if (failed) process.exit(1);
console.log('ok: GraphiQL loaded offline, ran a query and showed its result');
