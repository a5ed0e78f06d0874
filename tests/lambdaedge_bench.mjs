// Measures the viewer-request function built by `ratewarden lambda-edge
// build` (tests/bench-lambda-edge runs it; a benchmark, not a test).
//
//   node lambdaedge_bench.mjs cold FUNCTION_DIR
//     one cold start: this fresh process imports index.mjs (the SDK from
//     node_modules, AWS_ENDPOINT_URL_DYNAMODB pointing at dynalite) and
//     decides one request; prints the milliseconds from process start.
//   node lambdaedge_bench.mjs warm FUNCTION_DIR ENDPOINT N
//     N decisions in one warm container, each of a new client on
//     /api/search (two conditional UpdateItems), N decisions answered by the
//     over-limit cache (no store call), and N bare UpdateItems of the same
//     shape (dynalite's own latency); prints p50 and p99 of each, in µs.
import { pathToFileURL } from "node:url";
import path from "node:path";
import { readFileSync } from "node:fs";

const [mode, dirArg, endpoint, nArg] = process.argv.slice(2);
const dir = path.resolve(dirArg);

function event(ip, uri) {
  return { Records: [{ cf: { config: { distributionDomainName: "d111111abcdef8.cloudfront.net", distributionId: "EDFDVBD6EXAMPLE", eventType: "viewer-request", requestId: "bench" },
    request: { clientIp: ip, headers: { host: [{ key: "Host", value: "api.example.com" }] }, method: "GET", querystring: "", uri } } }] };
}

if (mode === "cold") {
  const t0 = performance.now(); // since the process started
  const { handler } = await import(pathToFileURL(path.join(dir, "index.mjs")).href);
  const t1 = performance.now();
  const origLog = console.log;
  console.log = () => {};
  await handler(event("203.0.113.7", "/api/search"));
  const t2 = performance.now();
  console.log = origLog;
  console.log(JSON.stringify({ startToImport: t0, importMs: t1 - t0, firstDecisionMs: t2 - t1, totalMs: t2 }));
  process.exit(0);
}

const N = Number(nArg || 2000);
const sdk = await import(pathToFileURL(path.join(dir, "node_modules/@aws-sdk/client-dynamodb/dist-cjs/index.js")).href);
const { DynamoDBClient, UpdateItemCommand } = sdk.default || sdk;
const config = JSON.parse(readFileSync(path.join(dir, "config.json"), "utf8"));
const { createHandler } = await import(pathToFileURL(path.join(dir, "handler.mjs")).href);
const client = new DynamoDBClient({ region: "us-east-1", endpoint, credentials: { accessKeyId: "test", secretAccessKey: "test" }, maxAttempts: 1 });
let lines = 0;
const handler = createHandler(config, {
  dynamodb: { send: (cmd, opts) => client.send(cmd, opts), UpdateItemCommand, region: "us-east-1" },
  loadSecrets: async () => ({}),
  writeLine: () => { lines++; },
});
const pct = (xs) => {
  xs.sort((a, b) => a - b);
  const at = (p) => xs[Math.min(xs.length - 1, Math.floor(p * xs.length))];
  return { p50: Math.round(at(0.5)), p99: Math.round(at(0.99)) };
};
const time = async (fn) => {
  const t = process.hrtime.bigint();
  await fn();
  return Number(process.hrtime.bigint() - t) / 1e3; // µs
};
const ip = (i) => `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`;

for (let i = 0; i < 200; i++) await handler(event(ip(1000000 + i), "/api/search"));
const fresh = [];
for (let i = 0; i < N; i++) fresh.push(await time(() => handler(event(ip(i), "/api/search"))));
for (let i = 0; i < 70; i++) await handler(event("203.0.113.99", "/api/reports")); // past the ceiling: cached
const cached = [];
for (let i = 0; i < N; i++) cached.push(await time(() => handler(event("203.0.113.99", "/api/reports"))));
const bare = [];
for (let i = 0; i < N; i++) {
  const k = Buffer.from("bench-" + i);
  bare.push(await time(() => client.send(new UpdateItemCommand({
    TableName: config.store.table, Key: { k: { B: k } },
    UpdateExpression: "ADD c :n SET #ttl = if_not_exists(#ttl, :ttl)", ConditionExpression: "attribute_not_exists(c) OR c <= :b",
    ExpressionAttributeNames: { "#ttl": "ttl" }, ExpressionAttributeValues: { ":n": { N: "1" }, ":ttl": { N: "1800000000" }, ":b": { N: "120" } },
    ReturnValues: "UPDATED_NEW" }))));
}
const s = handler.core().store.stats;
console.log(JSON.stringify({ n: N, newClientUs: pct(fresh), cachedUs: pct(cached), bareUpdateItemUs: pct(bare), updates: s.updates, cacheHits: s.cacheHits, lines }));
client.destroy();
