// The npm `graphql-ws` client (graphql-transport-ws) against a real
// gatehouse: subscribes to bookCreated with the token in connection_init,
// creates a book over HTTP, and expects the event; then checks that an
// invalid subscription is reported as an error (not a result) and that a bad
// token closes the socket with 4403.
// Usage: node graphql-ws-subscribe.mjs http://HOST "Bearer TOKEN"
import { createClient } from 'graphql-ws';
import WebSocket from 'ws';

const base = process.argv[2];
const authorization = process.argv[3];
const url = base.replace(/^http/, 'ws') + '/graphql';
const fail = (msg) => {
  console.error('graphql-ws:', msg);
  process.exit(1);
};
const timeout = (ms, what) =>
  new Promise((_, reject) => setTimeout(() => reject(new Error(`timed out: ${what}`)), ms));

async function gql(query, variables) {
  const r = await fetch(`${base}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization },
    body: JSON.stringify({ query, variables }),
  });
  const body = await r.json();
  if (body.errors) fail(`HTTP GraphQL errors: ${JSON.stringify(body.errors)}`);
  return body.data;
}

const client = createClient({
  url,
  webSocketImpl: WebSocket,
  connectionParams: { Authorization: authorization },
  retryAttempts: 0,
  lazy: false,
});

// 1. An event from a mutation over HTTP reaches the subscriber.
const author = (await gql('mutation($n: String!) { createAuthor(name: $n) { id } }', {
  n: `graphql-ws ${Date.now()}`,
})).createAuthor.id;
const iterator = client.iterate({
  query: 'subscription($a: ID) { bookCreated(author: $a) { title author { id } } }',
  variables: { a: author },
});
const first = iterator.next();
await new Promise((r) => setTimeout(r, 300)); // let the subscription start
await gql('mutation($i: BookInput!) { createBook(input: $i) { id } }', {
  i: { title: 'Delivered over graphql-ws', status: 'AVAILABLE', author },
});
const { value } = await Promise.race([first, timeout(5000, 'bookCreated event')]);
if (value?.data?.bookCreated?.title !== 'Delivered over graphql-ws') {
  fail(`unexpected event: ${JSON.stringify(value)}`);
}
await iterator.return();
console.log('bookCreated event received');

// 2. An invalid subscription is an `error` message: the sink's error callback.
const invalid = await Promise.race([
  new Promise((resolve) => {
    client.subscribe(
      { query: 'subscription { bookCreated { noSuchField } }' },
      {
        next: (v) => resolve({ kind: 'next', v }),
        error: (e) => resolve({ kind: 'error', e }),
        complete: () => resolve({ kind: 'complete' }),
      },
    );
  }),
  timeout(5000, 'invalid subscription'),
]);
if (invalid.kind !== 'error' || !Array.isArray(invalid.e)) {
  fail(`invalid subscription: expected an error message, got ${JSON.stringify(invalid)}`);
}
console.log('invalid subscription reported as error');
await client.dispose();

// 3. A bad token closes the socket with 4403.
const bad = createClient({
  url,
  webSocketImpl: WebSocket,
  connectionParams: { Authorization: 'Bearer not-a-token' },
  retryAttempts: 0,
});
const closed = await Promise.race([
  new Promise((resolve) => {
    bad.subscribe(
      { query: 'subscription { bookDeleted { id } }' },
      { next: () => {}, error: (e) => resolve(e), complete: () => resolve(null) },
    );
  }),
  timeout(5000, 'close with 4403'),
]);
if (closed?.code !== 4403) fail(`bad token: expected close 4403, got ${closed?.code ?? closed}`);
console.log('bad token closed with 4403');
await bad.dispose();
