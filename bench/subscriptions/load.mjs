// Subscription load: opens N graphql-transport-ws sockets, each subscribed to
// bookCreated, then creates one book per second over HTTP and measures, per
// mutation, the delay from sending the mutation to each subscriber's `next`
// (the commit happens inside that window, so this is an upper bound of
// commit-to-delivery). Prints one JSON line with p50/p99 over all deliveries,
// the p50/p99 of "last subscriber" per mutation, and the server's RSS growth
// per subscriber (from /proc/PID/status).
//
// The sockets are spread over CLIENT_THREADS worker threads (default 2), each
// with its own event loop, so one JavaScript thread does not have to take
// 10,000 messages per mutation in turn. A worker only timestamps a message
// and keeps its bytes when it arrives; parsing happens after the run. Times
// are absolute (performance.timeOrigin + now()), comparable across threads.
// Usage: node load.mjs BASE_URL TOKEN SERVER_PID N MUTATIONS
import WebSocket from 'ws';
import { readFileSync } from 'node:fs';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';

const now = () => performance.timeOrigin + performance.now();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

if (!isMainThread) {
  // A worker: opens its share of the sockets, records arrivals.
  const { url, token, count } = workerData;
  const arrivals = []; // [time, Buffer] of every `next`
  let ready = 0;
  let failed = 0;
  const open = () =>
    new Promise((resolve) => {
      const ws = new WebSocket(url, 'graphql-transport-ws', { perMessageDeflate: false });
      let acked = false;
      ws.on('open', () =>
        ws.send(JSON.stringify({ type: 'connection_init', payload: { Authorization: `Bearer ${token}` } })),
      );
      ws.on('message', (data) => {
        const t = now();
        if (acked) {
          arrivals.push(t, data);
          return;
        }
        if (JSON.parse(data).type === 'connection_ack') {
          acked = true;
          ws.send(JSON.stringify({ type: 'subscribe', id: '1', payload: { query: 'subscription { bookCreated { title } }' } }));
          ready++;
          resolve();
        }
      });
      ws.on('error', () => { failed++; resolve(); });
      ws.on('close', (code) => { if (code !== 1000) failed++; });
    });
  // Open in batches so the accept queue is not flooded.
  for (let i = 0; i < count; i += 250) {
    await Promise.all(Array.from({ length: Math.min(250, count - i) }, open));
  }
  parentPort.postMessage({ kind: 'ready', ready, failed });
  parentPort.on('message', () => {
    // title -> arrival times
    const out = {};
    let other = 0;
    for (let i = 0; i < arrivals.length; i += 2) {
      const m = JSON.parse(arrivals[i + 1]);
      const title = m.type === 'next' ? m.payload?.data?.bookCreated?.title : undefined;
      if (title === undefined) { other++; continue; }
      (out[title] ??= []).push(arrivals[i]);
    }
    parentPort.postMessage({ kind: 'arrivals', out, other, failed });
  });
} else {
  const [base, token, pid, nArg, mArg] = process.argv.slice(2);
  const N = Number(nArg);
  const MUTATIONS = Number(mArg);
  const THREADS = Math.max(1, Number(process.env.CLIENT_THREADS ?? 2));
  const url = base.replace(/^http/, 'ws') + '/graphql';
  const rss = () => {
    const m = readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+) kB/);
    return m ? Number(m[1]) : NaN;
  };
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
  const workers = [];
  let ready = 0;
  let failed = 0;
  await Promise.all(Array.from({ length: THREADS }, (_, w) => {
    const count = Math.floor(N / THREADS) + (w < N % THREADS ? 1 : 0);
    const worker = new Worker(new URL(import.meta.url), { workerData: { url, token, count } });
    workers.push(worker);
    return new Promise((resolve) => worker.once('message', (m) => {
      ready += m.ready;
      failed += m.failed;
      resolve();
    }));
  }));
  await sleep(2000);
  const rssIdle = rss();

  const sent = new Map(); // title -> send time
  for (let k = 0; k < MUTATIONS; k++) {
    const title = `load-${k}`;
    sent.set(title, now());
    await gql('mutation($i: BookInput!) { createBook(input: $i) { id } }', {
      i: { title, status: 'AVAILABLE', author },
    });
    await sleep(1000);
  }
  await sleep(2000);

  const arrivals = new Map([...sent.keys()].map((t) => [t, []]));
  failed = 0;
  for (const worker of workers) {
    const m = await new Promise((resolve) => {
      worker.once('message', resolve);
      worker.postMessage('report');
    });
    failed += m.failed;
    for (const [title, times] of Object.entries(m.out)) {
      const t0 = sent.get(title);
      if (t0 !== undefined) arrivals.get(title).push(...times.map((t) => t - t0));
    }
  }

  const pct = (xs, p) => {
    if (!xs.length) return NaN;
    const s = [...xs].sort((a, b) => a - b);
    return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
  };
  const all = [...arrivals.values()].flat();
  const last = [...arrivals.values()].filter((a) => a.length).map((a) => a.reduce((x, y) => Math.max(x, y)));
  const delivered = [...arrivals.values()].map((a) => a.length);
  console.log(JSON.stringify({
    subscribers: ready,
    failed,
    client_threads: THREADS,
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
}
