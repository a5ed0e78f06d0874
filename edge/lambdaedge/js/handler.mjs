// The viewer-request handler: CloudFront's event in, the decision core in
// between, and CloudFront's answer out (the request to forward, or a
// generated response). One JSON line per decision goes to stdout, which
// CloudWatch Logs collects in the region that served the request.

import { Core, toBytes, fromBytes, refusal, responseHeaders, statusText, decisionJSON } from "./core.mjs";
import { DynamoStore } from "./store.mjs";

// createHandler returns the Lambda handler for a compiled configuration.
// deps are what the runtime provides, and what tests replace:
//   dynamodb: {send, UpdateItemCommand, region}: the counter store's client
//   loadSecrets(): Promise<{challengeKeys, jwtKey}>, called once per cold start
//   now(): unix ns (BigInt); default the wall clock
//   monotonic(): ns (BigInt) for store latencies
//   writeLine(line): where decisions go; default console.log
//   logError(msg): the function's own errors; default console.error
export function createHandler(config, deps) {
  const now = deps.now || (() => BigInt(Date.now()) * 1000000n);
  const writeLine = deps.writeLine || ((line) => console.log(line));
  const logError = deps.logError || ((msg) => console.error(msg));
  let core = null;
  let pending = null;
  let retryAt = 0;

  // The secrets are read once per container. A failed read is logged and
  // tried again after a minute; meanwhile the core runs without them
  // (challenges still redirect but no token passes; bearer tokens are not
  // believed).
  async function build() {
    let secrets = {};
    retryAt = 0;
    try {
      secrets = await deps.loadSecrets();
    } catch (err) {
      logError("ratewarden: read secrets: " + (err && err.message ? err.message : String(err)));
      retryAt = Date.now() + 60000;
    }
    const store = new DynamoStore({
      send: deps.dynamodb.send, UpdateItemCommand: deps.dynamodb.UpdateItemCommand,
      table: config.store.table, region: deps.dynamodb.region, cacheKeys: config.store.cacheKeys,
    });
    const c = new Core(config, secrets, store, { monotonic: deps.monotonic });
    if (c.keysError) logError("ratewarden: challenge keys: " + c.keysError.message);
    return c;
  }

  async function getCore() {
    if (core && !(retryAt !== 0 && Date.now() >= retryAt)) return core;
    if (!pending) pending = build().finally(() => { pending = null; });
    core = await pending;
    return core;
  }

  async function handler(event) {
    const cf = event.Records[0].cf;
    const request = cf.request;
    if (!request.headers) request.headers = {};
    const c = await getCore();
    const headers = new Map();
    for (const [name, list] of Object.entries(request.headers)) {
      const lname = name.toLowerCase();
      const vals = headers.get(lname) || [];
      for (const h of list) vals.push(toBytes(h.value));
      headers.set(lname, vals);
    }
    const uri = toBytes(request.uri);
    const query = toBytes(request.querystring || "");
    const hostLines = headers.get("host");
    const ridLines = headers.get(config.requestIdHeader);
    let requestId = ridLines && ridLines.length > 0 ? ridLines[0] : "";
    let setRequestId = false;
    if (requestId === "" || requestId.length > 128) {
      // As the Go edge does with an id it makes: the origin gets it too.
      requestId = toBytes(cf.config.requestId || "");
      setRequestId = requestId !== "";
    }
    const req = {
      clientIp: toBytes(request.clientIp || ""), method: toBytes(request.method), host: hostLines ? hostLines[0] : "",
      path: uri, uri: query === "" ? uri : uri + "?" + query, headers, requestId,
    };
    const v = await c.decide(req, now());
    const resp = refusal(v, config.challenge.page, config.challenge.param);
    if (resp) v.d.status = resp.status;
    writeLine(fromBytes(decisionJSON(v.d)));
    if (resp) return cloudFrontResponse(v, resp);
    if (setRequestId) {
      const name = config.requestIdHeader;
      request.headers[name] = [{ key: canonicalKey(name), value: fromBytes(requestId) }];
    }
    return forward(c, request, v);
  }
  handler.core = () => core;
  return handler;
}

// canonicalKey is textproto.CanonicalMIMEHeaderKey for a valid name.
const canonicalKey = (name) => name.toLowerCase().replace(/(^|-)([a-z])/g, (m, d, c) => d + c.toUpperCase());

function cloudFrontResponse(v, resp) {
  const out = { status: String(resp.status), statusDescription: statusText[resp.status], headers: {} };
  for (const [k, val] of responseHeaders(v, resp)) out.headers[k.toLowerCase()] = [{ key: k, value: fromBytes(val) }];
  if (resp.body !== undefined) {
    out.body = fromBytes(resp.body);
  }
  return out;
}

// headerAliases is edge.Limiter.IsHeaderAlias for the function's
// lower-case header names: a name that is another spelling, with "_" for
// "-", of a header the edge removes from untrusted viewers or sets (an
// origin reading headers as CGI variables reads x_user_id as x-user-id),
// removed from every viewer's request.
function headerAliases(f) {
  const cgi = (k) => k.replaceAll("_", "-");
  const byCGI = new Map(); // cgi(name) -> the names of that spelling
  for (const k of [...f.strip, f.tier, f.decision]) {
    if (!k) continue;
    const l = k.toLowerCase();
    const names = byCGI.get(cgi(l)) || new Set();
    names.add(l);
    byCGI.set(cgi(l), names);
  }
  return {
    is(k) {
      const names = byCGI.get(cgi(k));
      return names !== undefined && (names.size > 1 || !names.has(k));
    },
  };
}

// forward is edge's forward for CloudFront's request: headers of an
// untrusted viewer that the edge did not believe removed, the identity it
// resolved set, the path canonical.
function forward(c, request, v) {
  const f = c.cfg.forward;
  const h = request.headers;
  c.aliases ??= headerAliases(f);
  for (const k of Object.keys(h)) {
    if (c.aliases.is(k)) delete h[k];
  }
  if (!c.ident.trusts(toBytes(request.clientIp || ""))) {
    for (const k of f.strip) delete h[k];
  }
  if (f.setUser) {
    delete h[f.user.toLowerCase()];
    delete h[f.plan.toLowerCase()];
    if (v.d.userId !== "") {
      h[f.user.toLowerCase()] = [{ key: f.user, value: fromBytes(v.d.userId) }];
      if (v.d.plan !== "") h[f.plan.toLowerCase()] = [{ key: f.plan, value: fromBytes(v.d.plan) }];
    }
  }
  if (f.tier) h[f.tier.toLowerCase()] = [{ key: f.tier, value: fromBytes(v.d.tier) }];
  if (f.decision) h[f.decision.toLowerCase()] = [{ key: f.decision, value: v.d.outcome }];
  if (v.form !== 0 && v.d.outcome !== "rejected") request.uri = fromBytes(v.d.path);
  return request;
}
