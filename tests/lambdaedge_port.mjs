// Applies the viewer-request function's ports of canonpath.Clean,
// canonpath.HasPrefix, netip's address parsing and printing and
// jsonstr.Append to inputs from lambdaedge_test.go, which compares them
// with the Go originals. Strings travel as byte strings: each byte one
// character, so that any byte sequence, valid UTF-8 or not, reaches the
// port as the Go code sees it.
//
// argv[2]: the built function's directory. stdin: {paths, prefixes, addrs,
// strings, identity: {config, jwtKey, now, cases: [{peer, headers}]},
// tokens: {keys, now, cases: [{token, subject}]}, cookies: [{lines, name}]}
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import path from "node:path";

const core = await import(pathToFileURL(path.join(path.resolve(process.argv[2]), "core.mjs")).href);
const input = JSON.parse(readFileSync(0, "utf8"));
const out = {
  clean: input.paths.map((p) => {
    const r = core.cleanPath(p);
    return r.err ? { err: r.err } : { path: r.path, form: r.form };
  }),
  prefix: input.prefixes.map(([p, prefix, insensitive]) => core.hasPrefix(p, prefix, insensitive)),
  addrs: input.addrs.map((s) => {
    const a = core.parseAddr(s);
    if (!a) return "";
    const u = core.unmap(a);
    return core.formatAddr(u) + (a.zone && u.bytes.length === 16 ? "%" + a.zone : "");
  }),
  json: input.strings.map((s) => core.jsonString(s)),
};
if (input.identity) {
  const r = new core.Resolver(input.identity.config, input.identity.jwtKey);
  const now = BigInt(input.identity.now);
  out.identity = input.identity.cases.map((c) => {
    const id = r.resolve(c.peer, new Map(Object.entries(c.headers)), now);
    return [id.clientIp ? core.formatAddr(id.clientIp) : "", id.addr ? core.formatAddr(id.addr) : "", id.user, id.plan, id.source];
  });
}
if (input.tokens) {
  const keys = core.parseKeys(input.tokens.keys);
  const now = BigInt(input.tokens.now);
  out.tokens = input.tokens.cases.map((c) => core.verifyToken(keys, c.token, c.subject, now));
}
if (input.cookies) out.cookies = input.cookies.map((c) => core.cookieValue(c.lines, c.name));
process.stdout.write(JSON.stringify(out));
