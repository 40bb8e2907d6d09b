// Subscription load: opens N graphql-transport-ws sockets, each subscribed to
// bookCreated, then creates one book per second over HTTP and measures, per
// mutation, the delay from sending the mutation to each subscriber's `next`
// (the commit happens inside that window, so this is an upper bound of
// commit-to-delivery). Prints one JSON line with p50/p99 over all deliveries,
// the p50/p99 of "last subscriber" per mutation, and the server's RSS growth
// per subscriber (from /proc/PID/status).
// Usage: node load.mjs BASE_URL TOKEN SERVER_PID N MUTATIONS
import WebSocket from 'ws';
import { readFileSync } from 'node:fs';

const [base, token, pid, nArg, mArg] = process.argv.slice(2);
const N = Number(nArg);
const MUTATIONS = Number(mArg);
const url = base.replace(/^http/, 'ws') + '/graphql';
const rss = () => {
  const m = readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+) kB/);
  return m ? Number(m[1]) : NaN;
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const gql = async (query, variables) => {
  const r = await fetch(`${base}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify({ query, variables }),
  });
  return r.json();
};

const author = (await gql('mutation($n: String!) { createAuthor(name: $n) { id } }', {
  n: `load ${Date.now()}`,
})).data.createAuthor.id;

await sleep(500);
const rssBefore = rss();
let sent = null; // mutation number -> send time
const arrivals = new Map(); // title -> [ms]
let ready = 0;
let failed = 0;

function open(i) {
  return new Promise((resolve) => {
    const ws = new WebSocket(url, 'graphql-transport-ws');
    ws.on('open', () =>
      ws.send(JSON.stringify({ type: 'connection_init', payload: { Authorization: `Bearer ${token}` } })),
    );
    ws.on('message', (data) => {
      const m = JSON.parse(data);
      if (m.type === 'connection_ack') {
        ws.send(JSON.stringify({ type: 'subscribe', id: '1', payload: { query: 'subscription { bookCreated { title } }' } }));
        ready++;
        resolve();
      } else if (m.type === 'next') {
        const title = m.payload?.data?.bookCreated?.title;
        const t0 = sent?.get(title);
        if (t0 !== undefined) arrivals.get(title).push(performance.now() - t0);
      }
    });
    ws.on('error', () => { failed++; resolve(); });
    ws.on('close', (code) => { if (code !== 1000) failed++; });
  });
}

// Open in batches so the accept queue is not flooded.
for (let i = 0; i < N; i += 500) {
  await Promise.all(Array.from({ length: Math.min(500, N - i) }, (_, k) => open(i + k)));
}
await sleep(2000);
const rssIdle = rss();

sent = new Map();
for (let k = 0; k < MUTATIONS; k++) {
  const title = `load-${k}`;
  arrivals.set(title, []);
  sent.set(title, performance.now());
  await gql('mutation($i: BookInput!) { createBook(input: $i) { id } }', {
    i: { title, status: 'AVAILABLE', author },
  });
  await sleep(1000);
}
await sleep(2000);

const pct = (xs, p) => {
  if (!xs.length) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};
const all = [...arrivals.values()].flat();
const last = [...arrivals.values()].filter((a) => a.length).map((a) => Math.max(...a));
const delivered = [...arrivals.values()].map((a) => a.length);
console.log(JSON.stringify({
  subscribers: ready,
  failed,
  mutations: MUTATIONS,
  deliveries: all.length,
  min_delivered_per_mutation: Math.min(...delivered),
  p50_ms: +pct(all, 50).toFixed(1),
  p99_ms: +pct(all, 99).toFixed(1),
  last_subscriber_p50_ms: +pct(last, 50).toFixed(1),
  last_subscriber_p99_ms: +pct(last, 99).toFixed(1),
  rss_before_kb: rssBefore,
  rss_idle_kb: rssIdle,
  kb_per_subscriber: +((rssIdle - rssBefore) / Math.max(1, ready)).toFixed(2),
}));
process.exit(0);
