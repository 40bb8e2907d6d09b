// Checks that /graphql/schema.json is an introspection result graphql-js
// accepts (buildClientSchema), and that /graphql/schema.graphql is valid SDL
// describing the same types (it also declares gatehouse's schema directives,
// which introspection does not list). Usage: node graphql-schema-check.mjs http://HOST [AUTHORIZATION]
import { buildClientSchema, buildSchema, printType } from 'graphql';

const base = process.argv[2];
const headers = process.argv[3] ? { authorization: process.argv[3] } : {};
const json = await (await fetch(`${base}/graphql/schema.json`, { headers })).json();
if (!json.data || !json.data.__schema) {
  console.error('schema.json has no data.__schema:', JSON.stringify(json).slice(0, 300));
  process.exit(1);
}
const fromIntrospection = buildClientSchema(json.data);
const sdl = await (await fetch(`${base}/graphql/schema.graphql`, { headers })).text();
const fromSdl = buildSchema(sdl);

const printed = (schema) =>
  Object.values(schema.getTypeMap())
    .filter((t) => !t.name.startsWith('__'))
    .map((t) => printType(t))
    .sort();
// Types that only gatehouse's directive declarations use (`@relation`'s
// `OnDelete`) are no types of the API: introspection does not list them.
const directiveOnly = new Set();
for (const d of fromSdl.getDirectives()) {
  for (const arg of d.args) {
    let t = arg.type;
    while (t.ofType) t = t.ofType;
    if (!fromIntrospection.getType(t.name)) directiveOnly.add(t.name);
  }
}
const a = printed(fromIntrospection);
const b = Object.values(fromSdl.getTypeMap())
  .filter((t) => !t.name.startsWith('__') && !directiveOnly.has(t.name))
  .map((t) => printType(t))
  .sort();
let failed = false;
if (JSON.stringify(a) !== JSON.stringify(b)) {
  failed = true;
  console.error('schema.json and schema.graphql describe different types:');
  for (const t of a) if (!b.includes(t)) console.error('only in schema.json:\n' + t);
  for (const t of b) if (!a.includes(t)) console.error('only in schema.graphql:\n' + t);
}
for (const d of fromIntrospection.getDirectives()) {
  if (!fromSdl.getDirective(d.name)) {
    failed = true;
    console.error(`directive @${d.name} is missing from schema.graphql`);
  }
}
for (const name of ['unique', 'index', 'relation', 'rest', 'auth']) {
  if (!fromSdl.getDirective(name)) {
    failed = true;
    console.error(`schema.graphql does not declare @${name}`);
  }
}
if (failed) process.exit(1);
console.log(`ok: buildClientSchema accepted schema.json (${a.length} types); schema.graphql matches it`);
