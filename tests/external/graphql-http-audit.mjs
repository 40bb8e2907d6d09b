// Runs the graphql-http audit suite (GraphQL over HTTP conformance) against a
// running gatehouse. Usage: node graphql-http-audit.mjs http://127.0.0.1:8080/graphql [Authorization header]
// Exits non-zero on any `error` or `warn` result.
import { auditServer } from 'graphql-http';

const url = process.argv[2];
const authorization = process.argv[3];
if (!url) {
  console.error('usage: graphql-http-audit.mjs URL [AUTHORIZATION]');
  process.exit(2);
}
const fetchFn = authorization
  ? (input, init = {}) => {
      const headers = new Headers(init.headers || {});
      headers.set('authorization', authorization);
      return fetch(input, { ...init, headers });
    }
  : fetch;

const results = await auditServer({ url, fetchFn });
let failed = 0;
for (const r of results) {
  if (r.status === 'ok') {
    console.log(`ok     ${r.id} ${r.name}`);
  } else {
    failed += r.status === 'error' || r.status === 'warn' ? 1 : 0;
    const body = await r.response?.text?.().catch(() => '') ?? '';
    console.log(`${r.status.padEnd(6)} ${r.id} ${r.name}\n       ${r.reason}\n       ${body.slice(0, 300)}`);
  }
}
console.log(`\n${results.length} audits, ${failed} failed (error or warn)`);
process.exit(failed ? 1 : 0);
