// The decision core of ratewarden at CloudFront's viewer request: a port of
// the Go edge's decision path (package edge: Limiter.Begin and its
// collaborators canonpath, identity, challenge, limit, lists and the
// responses), held to the Go core byte for byte by the conformance vectors
// in edge/lambdaedge/testdata/vectors.json.
//
// Strings from the request are handled as byte strings (one character per
// UTF-8 byte, as Buffer's "latin1" encoding gives them), so that every
// length, cut and escape is the Go code's, which works on bytes.
//
// Times are unix nanoseconds as BigInt: a nanosecond count of today does
// not fit a double.

import { createHmac, timingSafeEqual, verify as cryptoVerify, createPublicKey } from "node:crypto";

// ---- byte strings -------------------------------------------------------

export const toBytes = (s) => Buffer.from(String(s), "utf8").toString("latin1");
export const fromBytes = (b) => Buffer.from(b, "latin1").toString("utf8");

// ---- decision JSON (decisions.AppendJSON) -------------------------------

const hexDigits = "0123456789abcdef";

// jsonString is internal/jsonstr.Append on a byte string: invalid
// UTF-8 becomes \ufffd per byte; '"' and '\' backslashed; \n \r \t short;
// other controls \u00XX; U+2028/U+2029 raw.
export function jsonString(s) {
  let out = '"';
  let start = 0;
  for (let i = 0; i < s.length; ) {
    const c = s.charCodeAt(i);
    if (c >= 0x20 && c < 0x80 && c !== 0x22 && c !== 0x5c) {
      i++;
      continue;
    }
    if (c < 0x80) {
      out += s.slice(start, i);
      switch (c) {
        case 0x22: out += '\\"'; break;
        case 0x5c: out += "\\\\"; break;
        case 0x0a: out += "\\n"; break;
        case 0x0d: out += "\\r"; break;
        case 0x09: out += "\\t"; break;
        default: out += "\\u00" + hexDigits[c >> 4] + hexDigits[c & 15];
      }
      i++;
      start = i;
      continue;
    }
    const size = utf8Size(s, i);
    if (size === 0) {
      out += s.slice(start, i) + "\\ufffd";
      i++;
      start = i;
      continue;
    }
    i += size;
  }
  return out + s.slice(start) + '"';
}

// utf8Size returns the length of the valid UTF-8 sequence at s[i], or 0.
function utf8Size(s, i) {
  const b = s.charCodeAt(i);
  let need, lo = 0x80, hi = 0xbf;
  if (b >= 0xc2 && b <= 0xdf) need = 1;
  else if (b === 0xe0) { need = 2; lo = 0xa0; }
  else if (b >= 0xe1 && b <= 0xef) { need = 2; if (b === 0xed) hi = 0x9f; }
  else if (b === 0xf0) { need = 3; lo = 0x90; }
  else if (b >= 0xf1 && b <= 0xf3) need = 3;
  else if (b === 0xf4) { need = 3; hi = 0x8f; }
  else return 0;
  for (let k = 1; k <= need; k++) {
    if (i + k >= s.length) return 0;
    const x = s.charCodeAt(i + k);
    if (x < lo || x > hi) return 0;
    lo = 0x80; hi = 0xbf;
  }
  return need + 1;
}

// duration writes ns (BigInt) in units of unit with a trimmed decimal
// fraction, as decisions.appendDuration.
function duration(ns, unit, digits) {
  let sign = "";
  if (ns < 0n) { sign = "-"; ns = -ns; }
  const whole = ns / unit, frac = ns % unit;
  if (frac === 0n) return sign + whole.toString();
  return sign + whole.toString() + "." + frac.toString().padStart(digits, "0").replace(/0+$/, "");
}

// rfc3339Nano formats unix ns in UTC as Go's time.RFC3339Nano.
export function rfc3339Nano(ns) {
  const sec = ns / 1000000000n;
  let frac = ns % 1000000000n;
  let s = sec;
  if (frac < 0n) { frac += 1000000000n; s -= 1n; }
  const iso = new Date(Number(s) * 1000).toISOString().slice(0, 19);
  if (frac === 0n) return iso + "Z";
  return iso + "." + frac.toString().padStart(9, "0").replace(/0+$/, "") + "Z";
}

// decisionJSON is decisions.AppendJSON for a decision (kind "decision").
export function decisionJSON(d) {
  return '{"v":2,"kind":"decision","time":"' + rfc3339Nano(d.time) + '"' +
    ',"request_id":' + jsonString(d.requestId) +
    ',"node":' + jsonString(d.node) +
    ',"client_ip":"' + (d.clientIp ? formatAddr(d.clientIp) : "") + '"' +
    ',"user_id":' + jsonString(d.userId) +
    ',"plan":' + jsonString(d.plan) +
    ',"tier":' + jsonString(d.tier) +
    ',"identity_source":' + jsonString(d.identitySource) +
    ',"method":' + jsonString(d.method) +
    ',"host":' + jsonString(d.host) +
    ',"path":' + jsonString(d.path) +
    ',"rule":' + jsonString(d.rule) +
    ',"algorithm":' + jsonString(d.algorithm) +
    ',"limit":' + d.limit.toString() +
    ',"window_ms":' + duration(d.window, 1000000n, 6) +
    ',"count":' + d.count.toString() +
    ',"remaining":' + d.remaining.toString() +
    ',"reset_ms":' + duration(d.reset, 1000000n, 6) +
    ',"outcome":' + jsonString(d.outcome) +
    ',"reason":' + jsonString(d.reason) +
    ',"store_latency_us":' + duration(d.storeLatency, 1000n, 3) +
    ',"privacy":""' +
    ',"status":' + String(d.status) +
    ',"upstream_latency_us":0' +
    ',"response_error":""}';
}

// ---- canonical paths (package canonpath) --------------------------------

export const MaxPathLen = 8 << 10;
export const PathErrors = {
  notAbsolute: "path does not start with /",
  tooLong: "path longer than 8 KiB",
  badEscape: "path has an invalid percent escape",
  encodedSlash: "path has an encoded slash or backslash",
  control: "path has a control character",
  doubleEncoding: "path is percent-encoded twice",
  invalidUTF8: "path is not UTF-8",
  segmentParam: "path has a parameter on an empty or dot segment",
};
const FORM_CANONICAL = 0, FORM_ENCODED = 1, FORM_AMBIGUOUS = 2;
const upperHex = "0123456789ABCDEF";

const isUnreserved = (c) =>
  (c >= 0x61 && c <= 0x7a) || (c >= 0x41 && c <= 0x5a) || (c >= 0x30 && c <= 0x39) ||
  c === 0x2d || c === 0x2e || c === 0x5f || c === 0x7e;
const subDelims = new Set([..."!$&'()*+,;=:@"].map((x) => x.charCodeAt(0)));
const isPathChar = (c) => isUnreserved(c) || subDelims.has(c);
const isHex = (c) => (c >= 0x30 && c <= 0x39) || (c >= 0x61 && c <= 0x66) || (c >= 0x41 && c <= 0x46);
const unhex = (c) => (c <= 0x39 ? c - 0x30 : c <= 0x46 ? c - 0x41 + 10 : c - 0x61 + 10);

// cleanPath is canonpath.Clean on a byte string: {path, form} or {err}.
export function cleanPath(p) {
  if (p.length > MaxPathLen) return { err: PathErrors.tooLong };
  if (p === "" || p[0] !== "/") return { err: PathErrors.notAbsolute };
  const out = ["/"];
  let form = FORM_CANONICAL;
  const u = { need: 0, lo: 0x80, hi: 0xbf };
  let seg = 1;
  for (let i = 1; ; ) {
    if (i === p.length || p[i] === "/" || p[i] === "\\") {
      if (u.need > 0) return { err: PathErrors.invalidUTF8 };
      const end = i === p.length;
      if (!end && p[i] === "\\") form = FORM_AMBIGUOUS;
      let name = seg;
      while (name < out.length && out[name] !== ";") name++;
      const params = name < out.length;
      let dot = 0;
      if (name - seg === 1 && out[seg] === ".") dot = 1;
      else if (name - seg === 2 && out[seg] === "." && out[seg + 1] === ".") dot = 2;
      if (params && (name === seg || dot > 0)) return { err: PathErrors.segmentParam };
      if (dot > 0) {
        form = FORM_AMBIGUOUS;
        out.length = seg;
        if (dot === 2 && seg > 1) {
          let j = seg - 2;
          while (out[j] !== "/") j--;
          out.length = j + 1;
        }
      } else if (out.length === seg) {
        if (!end) form = FORM_AMBIGUOUS;
      } else if (!end) {
        out.push("/");
      }
      if (end) break;
      i++;
      seg = out.length;
      continue;
    }
    const c = p.charCodeAt(i);
    if (c === 0x25) {
      if (i + 2 >= p.length || !isHex(p.charCodeAt(i + 1)) || !isHex(p.charCodeAt(i + 2))) return { err: PathErrors.badEscape };
      const b = (unhex(p.charCodeAt(i + 1)) << 4) | unhex(p.charCodeAt(i + 2));
      if (isUnreserved(b)) {
        if (u.need > 0) return { err: PathErrors.invalidUTF8 };
        out.push(String.fromCharCode(b));
        form = Math.max(form, FORM_ENCODED);
      } else if (b === 0x2f || b === 0x5c) {
        return { err: PathErrors.encodedSlash };
      } else if (b < 0x20 || b === 0x7f) {
        return { err: PathErrors.control };
      } else {
        if (!utf8Next(u, b)) return { err: PathErrors.invalidUTF8 };
        out.push("%", upperHex[b >> 4], upperHex[b & 15]);
      }
      i += 3;
    } else if (c < 0x20 || c === 0x7f) {
      return { err: PathErrors.control };
    } else {
      if (!utf8Next(u, c)) return { err: PathErrors.invalidUTF8 };
      if (isPathChar(c)) out.push(p[i]);
      else out.push("%", upperHex[c >> 4], upperHex[c & 15]);
      i++;
    }
  }
  const path = out.join("");
  for (let i = 0; i + 4 < path.length; i++) {
    if (path[i] === "%" && path[i + 1] === "2" && path[i + 2] === "5" && isHex(path.charCodeAt(i + 3)) && isHex(path.charCodeAt(i + 4))) {
      return { err: PathErrors.doubleEncoding };
    }
  }
  if (path === p) return { path, form: FORM_CANONICAL };
  // Escaping grew it past the limit: its canonical form would not clean to itself.
  if (path.length > MaxPathLen) return { err: PathErrors.tooLong };
  return { path, form: Math.max(form, FORM_ENCODED) };
}

function utf8Next(u, b) {
  if (b < 0x80) return u.need === 0;
  if (u.need > 0) {
    if (b < u.lo || b > u.hi) return false;
    u.need--;
    u.lo = 0x80; u.hi = 0xbf;
    return true;
  }
  u.lo = 0x80; u.hi = 0xbf;
  if (b >= 0xc2 && b <= 0xdf) u.need = 1;
  else if (b === 0xe0) { u.need = 2; u.lo = 0xa0; }
  else if (b >= 0xe1 && b <= 0xef) { u.need = 2; if (b === 0xed) u.hi = 0x9f; }
  else if (b === 0xf0) { u.need = 3; u.lo = 0x90; }
  else if (b >= 0xf1 && b <= 0xf3) u.need = 3;
  else if (b === 0xf4) { u.need = 3; u.hi = 0x8f; }
  else return false;
  return true;
}

const foldsToASCII = [["%E2%84%AA", "k"], ["%C5%BF", "s"], ["%C4%B1", "i"], ["%C4%B0", "i"]];
const lower = (ch) => (ch >= "A" && ch <= "Z" ? String.fromCharCode(ch.charCodeAt(0) + 32) : ch);

// delimiters are the escapes canonpath.HasPrefix reads as the delimiter
// (canonpath's delimiter): the sub-delimiters but ";", and ":" and "@".
const delimiters = new Map([["%21", "!"], ["%24", "$"], ["%26", "&"], ["%27", "'"], ["%28", "("], ["%29", ")"],
  ["%2A", "*"], ["%2B", "+"], ["%2C", ","], ["%3A", ":"], ["%3D", "="], ["%40", "@"]]);

// hasPrefix is canonpath.HasPrefix; prefix is in match form already.
export function hasPrefix(p, prefix, insensitive) {
  let i = 0, j = 0;
  while (j < prefix.length) {
    if (i === p.length) return j === prefix.length - 1 && prefix[j] === "/";
    let b = p[i];
    if (b === ";") {
      while (i < p.length && p[i] !== "/") i++;
      continue;
    }
    if (b === "%" && delimiters.get(p.substr(i, 3)) === prefix[j]) {
      i += 3;
      j++;
      continue;
    }
    if (insensitive) {
      if (b === "%") {
        const f = foldsToASCII.find(([enc, letter]) => letter === prefix[j] && p.startsWith(enc, i));
        if (f) { i += f[0].length; j++; continue; }
      }
      b = lower(b);
    }
    if (b !== prefix[j]) return false;
    i++;
    j++;
  }
  return true;
}

// ---- addresses (net/netip) ----------------------------------------------

// An address is {bytes: Uint8Array(4|16)}; zones are never kept.

function parseIPv4(s) {
  if (s.length < 7 || s.length > 15) return null;
  const ip = new Uint8Array(4);
  let field = 0, val = 0, digits = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0x30 && c <= 0x39) {
      if (digits === 1 && val === 0) return null;
      val = val * 10 + (c - 0x30);
      digits++;
      if (val > 255) return null;
    } else if (c === 0x2e && digits > 0 && field < 3) {
      ip[field++] = val;
      val = 0; digits = 0;
    } else return null;
  }
  if (field !== 3 || digits === 0) return null;
  ip[3] = val;
  return { bytes: ip };
}

// parseAddr is netip.ParseAddr: {bytes, zone} or null.
export function parseAddr(s) {
  if (s.indexOf(":") < 0) return parseIPv4(s);
  let zone = "";
  const z = s.indexOf("%");
  if (z >= 0) {
    zone = s.slice(z + 1);
    s = s.slice(0, z);
    if (zone === "") return null;
  }
  const out = new Uint8Array(16);
  let ellipsis = -1, i = 0, k = 0;
  if (s.length >= 2 && s[0] === ":" && s[1] === ":") {
    ellipsis = 0;
    i = 2;
    if (i === s.length) return { bytes: out, zone };
  }
  while (k < 16) {
    let off = 0, acc = 0;
    while (off < s.length - i) {
      const c = s.charCodeAt(i + off);
      if (c >= 0x30 && c <= 0x39) acc = (acc << 4) + (c - 0x30);
      else if (c >= 0x61 && c <= 0x66) acc = (acc << 4) + (c - 0x61 + 10);
      else if (c >= 0x41 && c <= 0x46) acc = (acc << 4) + (c - 0x41 + 10);
      else break;
      off++;
      if (off > 4) return null;
      if (acc > 0xffff) return null;
    }
    if (off === 0) return null;
    if (i + off < s.length && s[i + off] === ".") {
      if (ellipsis < 0 && k !== 12) return null;
      if (k + 4 > 16) return null;
      const v4 = parseIPv4(s.slice(i));
      if (!v4) return null;
      out.set(v4.bytes, k);
      k += 4;
      i = s.length;
      break;
    }
    out[k] = acc >> 8;
    out[k + 1] = acc & 0xff;
    k += 2;
    i += off;
    if (i === s.length) break;
    if (s[i] !== ":" || i + 1 === s.length) return null;
    i++;
    if (s[i] === ":") {
      if (ellipsis >= 0) return null;
      ellipsis = k;
      i++;
      if (i === s.length) break;
    }
  }
  if (i !== s.length) return null;
  if (k < 16) {
    if (ellipsis < 0) return null;
    const n = 16 - k;
    for (let j = k - 1; j >= ellipsis; j--) out[j + n] = out[j];
    for (let j = ellipsis + n - 1; j >= ellipsis; j--) out[j] = 0;
  } else if (ellipsis >= 0) {
    return null;
  }
  return { bytes: out, zone };
}

const is4in6 = (a) => a.bytes.length === 16 && a.bytes.slice(0, 10).every((b) => b === 0) && a.bytes[10] === 0xff && a.bytes[11] === 0xff;
// isNAT64 reports whether a is in NAT64's well-known prefix 64:ff9b::/96.
const isNAT64 = (a) => a.bytes.length === 16 && a.bytes[1] === 0x64 && a.bytes[2] === 0xff && a.bytes[3] === 0x9b &&
  [0, 4, 5, 6, 7, 8, 9, 10, 11].every((i) => a.bytes[i] === 0);
// unmap is clientip.Of: an address that carries an IPv4 address (IPv4-mapped,
// or in NAT64's well-known prefix) as that address, and without a zone.
export const unmap = (a) => (a && (is4in6(a) || isNAT64(a)) ? { bytes: a.bytes.slice(12) } : a && { bytes: a.bytes });

// formatAddr is netip.Addr.String.
export function formatAddr(a) {
  const b = a.bytes;
  if (b.length === 4) return b.join(".");
  if (is4in6(a)) return "::ffff:" + Array.from(b.slice(12)).join(".");
  const g = [];
  for (let i = 0; i < 16; i += 2) g.push((b[i] << 8) | b[i + 1]);
  let zs = -1, zl = 0;
  for (let i = 0; i < 8; ) {
    let j = i;
    while (j < 8 && g[j] === 0) j++;
    if (j - i >= 2 && j - i > zl) { zs = i; zl = j - i; }
    i = j === i ? i + 1 : j;
  }
  let s = "";
  for (let i = 0; i < 8; i++) {
    if (i === zs) {
      s += "::";
      i += zl - 1;
      continue;
    }
    if (s !== "" && !s.endsWith(":")) s += ":";
    s += g[i].toString(16);
  }
  return s;
}

// maskAddr returns a's first bits bits, the rest zero (Addr.Prefix().Addr()).
function maskAddr(a, bits) {
  const out = new Uint8Array(a.bytes.length);
  for (let i = 0; i < out.length; i++) {
    const keep = Math.max(0, Math.min(8, bits - 8 * i));
    out[i] = a.bytes[i] & ((0xff << (8 - keep)) & 0xff);
  }
  return { bytes: out };
}

const sameAddr = (a, b) => a.bytes.length === b.bytes.length && a.bytes.every((x, i) => x === b.bytes[i]);

// parsePrefix reads a prefix compiled by the Go side: "addr/bits", masked.
function parsePrefix(s) {
  const [a, bits] = s.split("/");
  return { addr: parseAddr(a), bits: Number(bits) };
}
const prefixContains = (p, a) => p.addr.bytes.length === a.bytes.length && sameAddr(maskAddr(a, p.bits), p.addr);

// countingAddr is identity.CountingAddr.
export const countingAddr = (a, bits) => (a && a.bytes.length === 16 && bits < 128 ? maskAddr(a, bits) : a);

function validPort(s) {
  if (s.length === 0 || s.length > 5) return false;
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x30 || c > 0x39) return false;
    n = n * 10 + (c - 0x30);
  }
  return n <= 65535;
}

// parseHostPort is identity's parseHostPort: an address with an optional
// port; {addr, ok}.
function parseHostPort(s) {
  if (s === "") return { addr: null, ok: false };
  let host = s;
  const i = s.lastIndexOf(":");
  if (s[0] === "[") {
    const j = s.indexOf("]");
    if (j < 0 || (j + 1 < s.length && (s[j + 1] !== ":" || !validPort(s.slice(j + 2))))) return { addr: null, ok: false };
    host = s.slice(1, j);
  } else if (i >= 0 && s.slice(0, i).indexOf(":") < 0) {
    if (!validPort(s.slice(i + 1))) return { addr: null, ok: false };
    host = s.slice(0, i);
  }
  const v4 = parseIPv4(host);
  if (v4) return { addr: v4, ok: s[0] !== "[" };
  const a = parseAddr(host);
  if (!a || (host !== s && s[0] === "[" && a.bytes.length === 4)) return { addr: null, ok: false };
  return { addr: a, ok: true };
}

// believes is identity.Believes on byte strings: a user id
// decisions.CheckUserID accepts (valid UTF-8 of at most MaxUserLen bytes,
// no control character or U+FFFD, no white space at either end, as Go's
// unicode.IsSpace has it) and a plan of at most MaxUserLen bytes.
const utf8Strict = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
const isSpace = (c) => (c >= 0x09 && c <= 0x0d) || c === 0x20 || c === 0x85 || c === 0xa0 || c === 0x1680 ||
  (c >= 0x2000 && c <= 0x200a) || c === 0x2028 || c === 0x2029 || c === 0x202f || c === 0x205f || c === 0x3000;
function believes(user, plan) {
  if (user === "" || user.length > MaxUserLen || plan.length > MaxUserLen) return false;
  let s;
  try { s = utf8Strict.decode(Buffer.from(user, "latin1")); } catch { return false; }
  const cps = Array.from(s, (ch) => ch.codePointAt(0));
  if (cps.some((c) => c < 0x20 || c === 0x7f || (c >= 0x80 && c < 0xa0) || c === 0xfffd)) return false;
  return !isSpace(cps[0]) && !isSpace(cps[cps.length - 1]);
}

const trimOWS = (s) => s.replace(/^[ \t]+/, "").replace(/[ \t]+$/, "");

// ---- identity (package identity) ----------------------------------------

const MaxForwardedEntries = 64, MaxForwardedBytes = 8 << 10, MaxUserLen = 256, MaxTokenLen = 8 << 10;

export class Resolver {
  constructor(c, jwtKey) {
    this.trusted = c.trusted.map(parsePrefix);
    this.cloudFront = c.cloudFront;
    this.ipHeader = c.ipHeader;
    this.userHeader = c.userHeader;
    this.planHeader = c.planHeader;
    this.ipv6Bits = c.ipv6Bits;
    this.jwt = c.jwt ? new JWTVerifier(c.jwt, jwtKey) : null;
  }

  isTrusted(a) {
    return !!a && this.trusted.some((p) => prefixContains(p, a));
  }

  // trusts is Resolver.Trusts: whether the peer's headers are believed.
  trusts(peerText) {
    const { addr } = parseHostPort(peerText);
    return this.isTrusted(addr ? unmap(addr) : null);
  }

  // resolveAddr: the peer is CloudFront's clientIp.
  resolveAddr(peerText, h) {
    const { addr } = parseHostPort(peerText);
    const peer = addr ? unmap(addr) : null;
    const id = { clientIp: peer, addr: peer, user: "", plan: "", source: "peer" };
    const trusted = this.isTrusted(peer);
    if (trusted) {
      const lines = h.get(this.ipHeader) || [];
      const a = this.cloudFront ? viewerAddress(lines) : this.forwardedFor(lines);
      if (a) { id.clientIp = a; id.source = "forwarded"; }
    }
    id.addr = countingAddr(id.clientIp, this.ipv6Bits);
    return { id, trusted };
  }

  forwardedFor(lines) {
    let last = null, entries = 0, budget = MaxForwardedBytes;
    for (let i = lines.length - 1; i >= 0; i--) {
      let line = lines[i];
      for (;;) {
        let e, more = false;
        const j = line.lastIndexOf(",");
        if (j >= 0) { e = line.slice(j + 1); line = line.slice(0, j); more = true; } else e = line;
        budget -= e.length + 1;
        if (budget < 0) return last;
        e = trimOWS(e);
        if (e !== "") {
          if (++entries > MaxForwardedEntries) return last;
          const { addr, ok } = parseHostPort(e);
          if (!ok || addr.zone) return last;
          const a = unmap(addr);
          if (!this.isTrusted(a)) return a;
          last = a;
        }
        if (!more) break;
      }
    }
    return last;
  }

  resolve(peerText, h, now) {
    const { id, trusted } = this.resolveAddr(peerText, h);
    if (this.jwt) {
      const tok = bearer(h.get("authorization"));
      if (tok !== null) {
        const r = this.jwt.verify(tok, now);
        if (!r) { id.source = "invalid_jwt"; return id; }
        id.user = r.user; id.plan = r.plan; id.source = "jwt";
        return id;
      }
    }
    const users = h.get(this.userHeader) || [], plans = h.get(this.planHeader) || [];
    if (users.length === 0 && plans.length === 0) return id;
    if (!trusted) { id.source = "untrusted_header"; return id; }
    if (users.length !== 1 || plans.length > 1) return id;
    const user = trimOWS(users[0]);
    const plan = plans.length === 1 ? trimOWS(plans[0]) : "";
    if (!believes(user, plan)) return id;
    id.user = user; id.plan = plan; id.source = "header";
    return id;
  }
}

function viewerAddress(lines) {
  if (lines.length === 0) return null;
  const v = trimOWS(lines[lines.length - 1]);
  if (v.length > 64) return null;
  const i = v.lastIndexOf(":");
  if (i < 0 || !validPort(v.slice(i + 1))) return null;
  let host = v.slice(0, i);
  if (host.length > 2 && host[0] === "[" && host[host.length - 1] === "]") host = host.slice(1, -1);
  const a = parseAddr(host);
  if (!a || a.zone) return null;
  return unmap(a);
}

function bearer(lines) {
  if (!lines || lines.length === 0) return null;
  const v = trimOWS(lines[0]);
  if (v.length < 6 || v.slice(0, 6).toLowerCase() !== "bearer") return null;
  const rest = v.slice(6);
  if (rest !== "" && rest[0] !== " " && rest[0] !== "\t") return null;
  return trimOWS(rest);
}

// ---- JWT (identity's verifier: golang-jwt v5's parser) ------------------

const b64urlStrict = /^[A-Za-z0-9_-]*$/;

function decodeSegment(s) {
  if (!b64urlStrict.test(s) || s.length % 4 === 1) return null;
  const b = Buffer.from(s, "base64url");
  // Strict: the encoding of the bytes must be s itself (no stray bits).
  if (b.toString("base64url") !== s) return null;
  return b;
}

class JWTVerifier {
  constructor(c, key) {
    this.alg = c.algorithm;
    this.userClaim = c.userClaim;
    this.planClaim = c.planClaim;
    this.leeway = BigInt(c.leewayNs);
    this.requireExp = c.requireExp;
    this.issuer = c.issuer;
    this.audience = c.audience;
    if (this.alg === "HS256") this.key = key ? Buffer.from(key, "latin1") : null;
    else this.key = createPublicKey(c.publicKeyPEM);
  }

  verify(tok, now) {
    if (tok === "" || tok.length > MaxTokenLen || !this.key) return null;
    const parts = tok.split(".");
    if (parts.length !== 3) return null;
    const hb = decodeSegment(parts[0]), cb = decodeSegment(parts[1]), sig = decodeSegment(parts[2]);
    if (!hb || !cb || !sig) return null;
    let header, claims;
    try {
      header = JSON.parse(hb.toString("utf8"));
      claims = JSON.parse(cb.toString("utf8"));
    } catch {
      return null;
    }
    if (!header || typeof header !== "object" || header.alg !== this.alg) return null;
    if (!claims || typeof claims !== "object" || Array.isArray(claims)) return null;
    const signed = Buffer.from(parts[0] + "." + parts[1], "latin1");
    let ok = false;
    try {
      if (this.alg === "HS256") {
        const want = createHmac("sha256", this.key).update(signed).digest();
        ok = want.length === sig.length && timingSafeEqual(want, sig);
      } else if (this.alg === "RS256") {
        ok = cryptoVerify("sha256", signed, this.key, sig);
      } else {
        ok = sig.length === 64 && cryptoVerify("sha256", signed, { key: this.key, dsaEncoding: "ieee-p1363" }, sig);
      }
    } catch {
      ok = false;
    }
    if (!ok) return null;
    const nowNs = now;
    const numeric = (name) => {
      const v = claims[name];
      if (v === undefined || v === null) return { present: false };
      if (typeof v !== "number") return { bad: true };
      return { present: true, ns: BigInt(Math.trunc(v)) * 1000000000n };
    };
    const exp = numeric("exp");
    if (exp.bad) return null;
    if (!exp.present && this.requireExp) return null;
    if (exp.present && !(nowNs < exp.ns + this.leeway)) return null;
    const nbf = numeric("nbf");
    if (nbf.bad) return null;
    if (nbf.present && nowNs < nbf.ns - this.leeway) return null;
    if (this.issuer !== "" && claims.iss !== this.issuer) return null;
    if (this.audience !== "") {
      const aud = claims.aud;
      const list = typeof aud === "string" ? [aud] : Array.isArray(aud) ? aud : null;
      if (!list || list.some((x) => typeof x !== "string") || !list.includes(this.audience)) return null;
    }
    const user = claims[this.userClaim];
    if (typeof user !== "string") return null;
    const p = claims[this.planClaim];
    let plan = "";
    if (p !== undefined && p !== null) {
      if (typeof p !== "string") return null;
      plan = p;
    }
    const u = toBytes(user), pl = toBytes(plan);
    return believes(u, pl) ? { user: u, plan: pl } : null;
  }
}

// ---- challenge tokens (package challenge) --------------------------------

const kidRe = /^[A-Za-z0-9_-]{1,16}$/;

// parseKeys is challenge.ParseKeys: [{id, secret}] or an Error.
export function parseKeys(s) {
  if (String(s).trim() === "") return new Error("parse challenge keys: no keys");
  const entries = s.split(",");
  if (entries.length > 16) return new Error("parse challenge keys: too many entries");
  const keys = [];
  for (const raw of entries) {
    const e = raw.trim();
    const c = e.indexOf(":");
    if (e === "" || c < 0) return new Error("parse challenge keys: an entry is not kid:base64key");
    const kid = e.slice(0, c).trim(), b64 = e.slice(c + 1).trim();
    if (!kidRe.test(kid)) return new Error("parse challenge keys: a key id is not [A-Za-z0-9_-]{1,16}");
    if (!/^[A-Za-z0-9+/_-]+={0,2}$/.test(b64)) return new Error(`parse challenge keys: kid ${kid}: key is not base64`);
    const secret = Buffer.from(b64.replace(/-/g, "+").replace(/_/g, "/"), "base64");
    if (secret.length < 32) return new Error(`parse challenge keys: kid ${kid}: key is ${secret.length} bytes; want at least 32`);
    if (keys.some((k) => k.id === kid)) return new Error(`parse challenge keys: kid ${kid} repeats`);
    keys.push({ id: kid, secret });
  }
  return keys;
}

// verifyToken is Keyring.Verify: true for a valid, unexpired token.
export function verifyToken(keys, token, subject, now) {
  if (!keys || token.length > 512 || !token.startsWith("v1.")) return false;
  const rest = token.slice(3);
  const d1 = rest.indexOf(".");
  if (d1 < 0) return false;
  const kid = rest.slice(0, d1);
  if (!kidRe.test(kid)) return false;
  const r2 = rest.slice(d1 + 1);
  const d2 = r2.indexOf(".");
  if (d2 < 0) return false;
  const expText = r2.slice(0, d2), macText = r2.slice(d2 + 1);
  if (macText.length !== 43) return false;
  if (expText === "" || expText.length > 19 || (expText[0] === "0" && expText.length > 1) || !/^[0-9]+$/.test(expText)) return false;
  const exp = BigInt(expText);
  if (exp > 9223372036854775807n) return false;
  const got = decodeSegment(macText);
  if (!got || got.length !== 32) return false;
  const k = keys.find((x) => x.id === kid);
  if (!k) return false;
  const want = createHmac("sha256", k.secret).update(Buffer.from(token.slice(0, token.length - 43) + subject, "latin1")).digest();
  if (!timingSafeEqual(got, want)) return false;
  return now < exp * 1000000000n;
}

export const subject = (addr, user) => (user !== "" ? "user:" + user : addr ? "ip:" + formatAddr(unmap(addr)) : "ip:");

// ---- limits (package limit, fixed window) --------------------------------

const remaining = (limit, count) => (limit > count ? limit - count : 0n);
const bmax = (a, b) => (a > b ? a : b);

// takeFixed is limit.Rule.Take for a fixed window on state s ({a, b}),
// updating s; it returns {count, remaining, reset, expires}.
export function takeFixed(r, s, now, n) {
  const w = r.window;
  let idx;
  const start = s.a * w;
  if (s.a >= 0n && start <= now && now - start < w) idx = s.a;
  else {
    idx = now / w;
    if (idx === s.a - 1n) idx = s.a;
  }
  if (s.a !== idx) { s.a = idx; s.b = 0n; }
  const count = bmax(s.b + n, 0n);
  if (r.maxCount <= 0n || s.b + n <= r.maxCount || n <= 0n) s.b = count;
  const end = (idx + 1n) * w;
  return { count, remaining: remaining(r.limit, count), reset: end - now, expires: end };
}

// ---- the limiter (edge.Limiter.Begin) ------------------------------------

const LEVEL_OK = 0, LEVEL_SHADOW = 1, LEVEL_FAILOPEN = 2, LEVEL_CHALLENGE = 3, LEVEL_BLOCK = 4, LEVEL_FAILCLOSED = 5;
const passed = new Set(["allow", "allow_listed", "token_pass", "fail_open", "shadow_block"]);

function compileRule(r) {
  return {
    id: toBytes(r.id), algorithm: r.algorithm, shadow: r.shadow, challenge: r.challenge,
    capacity: BigInt(r.capacity), ceiling: BigInt(r.ceiling),
    limit: { limit: BigInt(r.limit), window: BigInt(r.windowNs), maxCount: BigInt(r.maxCount) },
    local: { limit: BigInt(r.local.limit), window: BigInt(r.windowNs), maxCount: BigInt(r.local.maxCount) },
  };
}

function grade(r, res) {
  if (res.count <= r.capacity) return LEVEL_OK;
  const level = r.challenge && res.count <= r.ceiling ? LEVEL_CHALLENGE : LEVEL_BLOCK;
  return r.shadow ? LEVEL_SHADOW : level;
}

// Breaker is edge's circuit breaker in front of the store.
export class Breaker {
  constructor(failures, cooldown) {
    this.failures = Math.max(failures, 1);
    this.cooldown = cooldown;
    this.state = 0; // 0 closed, 1 open, 2 half-open
    this.streak = 0;
    this.openedAt = 0n;
  }
  allow(now) {
    if (this.state === 0) return { ok: true, probe: false };
    if (this.state === 1) {
      if (now - this.openedAt < this.cooldown) return { ok: false, probe: false };
      this.state = 2;
      return { ok: true, probe: true };
    }
    return { ok: false, probe: false };
  }
  success() { this.streak = 0; this.state = 0; }
  failure(now) {
    this.streak++;
    if (this.state === 2 || (this.state === 0 && this.streak >= this.failures)) {
      this.openedAt = now;
      this.state = 1;
    }
  }
  abandon(now) {
    if (this.state === 2) { this.openedAt = now - this.cooldown; this.state = 1; }
  }
}

// keyText names a counter for the warm container's maps.
const keyText = (k) => k.rule + "\u0000" + (k.user !== "" ? "u" + k.user : k.addr ? formatAddr(k.addr) : "");

// Local is the fallback memory store (memstore) for the breaker's open
// spells: a bounded map, emptied when full.
class Local {
  constructor(maxKeys) { this.max = maxKeys; this.m = new Map(); }
  take(key, rule, now, n) {
    const k = keyText(key);
    let s = this.m.get(k);
    if (!s) {
      if (this.m.size >= this.max) this.m.clear();
      s = { a: 0n, b: 0n };
      this.m.set(k, s);
    }
    return takeFixed(rule, s, now, n);
  }
}

// A Store counts: take(key, rule, now, signal) → Promise<{res, remote}>.
// StoreTimeout is what a store throws when signal aborted the call.
export class StoreTimeout extends Error {}

// Core decides requests. One Core lives in a warm container; JavaScript
// runs one decision at a time between awaits, so it needs no locks.
export class Core {
  // config: the compiled configuration; secrets: {challengeKeys, jwtKey}
  // (strings, or undefined); store: a Store; opts.monotonic(): ns BigInt
  // for latencies.
  constructor(config, secrets, store, opts = {}) {
    this.cfg = config;
    this.node = toBytes(config.node);
    this.insensitive = config.pathCase === "insensitive";
    this.rejectAmbiguous = config.rejectAmbiguous;
    this.failClosed = config.failClosed;
    this.tiers = {};
    for (const [name, t] of Object.entries(config.tiers)) {
      this.tiers[toBytes(name)] = {
        name: toBytes(name), global: compileRule(t.global),
        paths: t.paths.map((p) => ({ match: p.match, rule: compileRule(p.rule) })),
      };
    }
    this.ident = new Resolver(config.identity, secrets.jwtKey);
    this.store = store;
    this.timeoutMs = config.store.timeoutMs;
    this.breaker = new Breaker(config.store.breaker.failures, BigInt(config.store.breaker.cooldownNs));
    this.cooldown = BigInt(config.store.breaker.cooldownNs);
    this.local = new Local(config.store.maxKeys);
    this.keys = null;
    if (config.challenge.enabled && secrets.challengeKeys) {
      const k = parseKeys(secrets.challengeKeys);
      this.keys = k instanceof Error ? null : k;
      this.keysError = k instanceof Error ? k : null;
    }
    this.lists = {
      allow: compileList(config.lists.allow),
      deny: compileList(config.lists.deny),
    };
    this.monotonic = opts.monotonic || (() => process.hrtime.bigint());
  }

  tierFor(user, plan) {
    if (user === "") return this.tiers.anonymous;
    if (plan !== "" && plan !== "anonymous" && this.tiers[plan]) return this.tiers[plan];
    return this.tiers.authenticated || this.tiers.anonymous;
  }

  isFailClosed(path) {
    return this.failClosed.some((p) => hasPrefix(path, p, this.insensitive));
  }

  // decide decides req at now (ns BigInt). req: {clientIp, method, host,
  // path, uri, headers: Map of lower-case name → [values], requestId}, all
  // byte strings. It never throws for a store failure.
  async decide(req, now) {
    const id = this.ident.resolve(req.clientIp, req.headers, now);
    const d = {
      time: now, requestId: req.requestId, node: this.node,
      clientIp: id.clientIp, userId: id.user, plan: id.plan, identitySource: id.source,
      method: req.method, host: req.host, path: "", tier: "",
      rule: "", algorithm: "", limit: 0n, window: 0n, count: 0n, remaining: 0n, reset: 0n,
      outcome: "", reason: "", storeLatency: 0n, status: 0,
    };
    const v = { d, retryAfter: 0n, policies: [], uri: req.uri, form: 0, pathErr: null };
    const t = this.tierFor(id.user, id.plan);
    d.tier = t.name;
    const c = cleanPath(req.path);
    if (c.err) {
      d.path = req.path.length > 256 ? req.path.slice(0, 256) : req.path;
      v.pathErr = c.err;
      return finish(v, "rejected", c.err);
    }
    d.path = c.path;
    v.form = c.form;
    if (c.form === FORM_AMBIGUOUS && this.rejectAmbiguous) {
      d.path = req.path.length > 256 ? req.path.slice(0, 256) : req.path;
      return finish(v, "rejected", "ambiguous path: dot segments, repeated slashes or backslashes");
    }
    if (!id.clientIp && id.user === "") return finish(v, this.isFailClosed(c.path) ? "fail_closed" : "fail_open", reasonNoClientAddress);
    if (this.lists.deny.contains(id.clientIp, id.user)) return finish(v, "deny_listed", "deny list");
    if (this.lists.allow.contains(id.clientIp, id.user)) return finish(v, "allow_listed", "allow list");

    const key = { addr: id.addr, user: id.user, rule: "" };
    const sc = { signal: null, timer: null, err: null };
    const evals = [];
    try {
      const pr = t.paths.find((p) => hasPrefix(c.path, p.match, this.insensitive));
      if (pr) evals.push(await this.evaluate(sc, now, key, pr.rule, c.path));
      if (evals.length === 0 || evals[0].level < LEVEL_BLOCK) evals.push(await this.evaluate(sc, now, key, t.global, c.path));
    } finally {
      if (sc.timer) clearTimeout(sc.timer);
    }
    let w = 0;
    if (evals.length === 2) {
      const [a, b] = evals;
      if (b.level > a.level || (b.level === a.level && b.res.remaining < a.res.remaining)) w = 1;
    }
    for (const e of evals) {
      d.storeLatency += e.lat;
      v.policies.push({ name: e.rule.id, limit: e.rule.capacity, window: e.rule.limit.window, remaining: e.res.remaining, reset: e.res.reset });
    }
    if (w === 1) v.policies.reverse();
    const e = evals[w];
    d.rule = e.rule.id; d.algorithm = e.rule.algorithm; d.limit = e.rule.capacity; d.window = e.rule.limit.window;
    d.count = e.res.count; d.remaining = e.res.remaining; d.reset = e.res.reset;
    let [outcome, reason] = this.outcome(e, req, id, now);
    if (outcome === "challenge" && this.onChallengePage(c.path)) {
      // Redirected to the page it is asking for, the client would loop.
      [outcome, reason] = ["allow", "over the limit: the challenge page"];
    }
    if (!passed.has(outcome)) {
      v.retryAfter = e.rule.limit.limit >= 0n && e.res.count <= e.rule.capacity ? 0n : e.res.reset;
      if (outcome === "fail_closed") v.retryAfter = this.cooldown;
    }
    return finish(v, outcome, reason);
  }

  async evaluate(sc, now, key, rule, path) {
    const k = { ...key, rule: rule.id };
    const e = { rule, res: { count: 0n, remaining: 0n, reset: 0n }, level: LEVEL_OK, fall: 0, err: null, lat: 0n };
    let ok = false, probe = false;
    if (sc.err === null) ({ ok, probe } = this.breaker.allow(now));
    if (ok) {
      if (!sc.signal) {
        const ac = new AbortController();
        sc.timer = setTimeout(() => ac.abort(new StoreTimeout("store timeout")), this.timeoutMs);
        sc.signal = ac.signal;
      }
      const start = this.monotonic();
      try {
        const { res, remote } = await this.store.take(k, rule.limit, now, sc.signal);
        e.lat = this.monotonic() - start;
        e.res = res;
        if (remote) this.breaker.success();
        else if (probe) this.breaker.abandon(now);
        e.level = grade(rule, res);
        return e;
      } catch (err) {
        e.lat = this.monotonic() - start;
        sc.err = sc.signal.aborted ? new StoreTimeout("store timeout") : err;
        this.breaker.failure(now);
      }
    }
    if (sc.err !== null) {
      e.err = sc.err;
      e.level = LEVEL_FAILOPEN; e.fall = 1;
      if (this.isFailClosed(path)) { e.level = LEVEL_FAILCLOSED; e.fall = 2; }
      return e;
    }
    if (this.isFailClosed(path)) {
      e.level = LEVEL_FAILCLOSED; e.fall = 2;
      return e;
    }
    e.fall = 3;
    e.res = this.local.take(k, rule.local, now, 1n);
    e.level = e.res.count <= rule.local.limit ? LEVEL_OK : LEVEL_BLOCK;
    return e;
  }

  // onChallengePage is Limiter.onChallengePage: the canonical path is the
  // challenge page's, or below it.
  onChallengePage(path) {
    const m = this.cfg.challenge.pageMatch;
    return typeof m === "string" && m !== "" && hasPrefix(path, m, this.insensitive);
  }

  outcome(e, req, id, now) {
    switch (e.fall) {
      case 1: return ["fail_open", storeReason(e.err, "fails open")];
      case 2: return ["fail_closed", storeReason(e.err, "fails closed")];
      case 3:
        if (e.level >= LEVEL_CHALLENGE) return ["local_limit", "store unavailable: over the local limit"];
        return ["fail_open", "store unavailable: within the local limit"];
    }
    switch (e.level) {
      case LEVEL_SHADOW: return ["shadow_block", "over the limit (shadow rule)"];
      case LEVEL_CHALLENGE:
        if (this.tokenValid(req, id, now)) return ["token_pass", "over the limit: valid challenge token"];
        return ["challenge", "over the limit"];
      case LEVEL_BLOCK:
        return ["block", e.rule.challenge ? "over the challenge ceiling" : "over the limit"];
    }
    return ["allow", "within the limit"];
  }

  tokenValid(req, id, now) {
    if (!this.keys) return false;
    const h = req.headers.get(this.cfg.challenge.header);
    let tok = h && h.length > 0 ? h[0] : "";
    if (tok === "") tok = cookieValue(req.headers.get("cookie"), this.cfg.challenge.cookie);
    if (tok === "") return false;
    return verifyToken(this.keys, tok, subject(id.addr, id.user), now);
  }
}

function storeReason(err, mode) {
  if (err === null) return "store unavailable (breaker open): path " + mode;
  if (err instanceof StoreTimeout) return "store timeout: path " + mode;
  return "store error: path " + mode;
}

function finish(v, outcome, reason) {
  v.d.outcome = outcome;
  v.d.reason = reason;
  v.passed = passed.has(outcome);
  return v;
}

// compileList is lists.List: addresses and prefixes grouped by length,
// so that a lookup costs one mask and one set lookup per length in use,
// however long the list.
function compileList(l) {
  const byLen = new Map(); // "4/24" → Set of masked addresses
  for (const text of l.prefixes || []) {
    const p = parsePrefix(text);
    const k = p.addr.bytes.length + "/" + p.bits;
    if (!byLen.has(k)) byLen.set(k, { v: p.addr.bytes.length, bits: p.bits, set: new Set() });
    byLen.get(k).set.add(formatAddr(p.addr));
  }
  const groups = [...byLen.values()];
  const users = new Set((l.users || []).map(toBytes));
  return {
    contains(addr, user) {
      if (user !== "" && users.has(user)) return true;
      if (!addr) return false;
      const a = unmap(addr);
      return groups.some((g) => g.v === a.bytes.length && g.set.has(formatAddr(maskAddr(a, g.bits))));
    },
  };
}

// cookieValue is the value of the first cookie called name in the Cookie
// header lines, as net/http's Request.Cookies reads them ("" if none).
const cookieNameRe = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const maxCookies = 3000; // net/http's defaultCookieMaxNum
const trimASCII = (s) => s.replace(/^[ \t\n\r]+/, "").replace(/[ \t\n\r]+$/, "");
export function cookieValue(lines, name) {
  if (!lines || lines.length === 0) return "";
  let count = 0;
  for (const line of lines) count += line.split(";").length;
  if (count > maxCookies) return "";
  for (const line of lines) {
    for (let part of trimASCII(line).split(";")) {
      part = trimASCII(part);
      if (part === "") continue;
      const eq = part.indexOf("=");
      const n = trimASCII(eq >= 0 ? part.slice(0, eq) : part);
      let val = eq >= 0 ? part.slice(eq + 1) : "";
      if (!cookieNameRe.test(n) || n !== name) continue;
      if (val.length > 1 && val[0] === '"' && val[val.length - 1] === '"') val = val.slice(1, -1);
      let ok = true;
      for (let i = 0; i < val.length; i++) {
        const b = val.charCodeAt(i);
        if (!(b >= 0x20 && b < 0x7f && b !== 0x22 && b !== 0x3b && b !== 0x5c)) { ok = false; break; }
      }
      if (ok) return val;
    }
  }
  return "";
}

// ---- responses (edge.Refusal, edge.SetHeaders) -------------------------

const ceilSeconds = (d) => (d <= 0n ? 0n : (d + 999999999n) / 1000000000n);

function quoted(name) {
  let b = '"';
  for (let i = 0; i < name.length; i++) {
    const c = name.charCodeAt(i);
    if (c === 0x22 || c === 0x5c) b += "\\" + name[i];
    else if (c < 0x20 || c > 0x7e) b += "_";
    else b += name[i];
  }
  return b + '"';
}

// rateLimitHeaders returns SetHeaders' headers as [canonical name, value].
export function rateLimitHeaders(v) {
  const p = v.policies[0];
  if (!p) return [];
  const reset = v.d.time + p.reset + 1000000000n - 1n;
  const resetUnix = reset >= 0n ? reset / 1000000000n : -((-reset + 999999999n) / 1000000000n);
  const pol = v.policies.map((q) => quoted(q.name) + ";q=" + q.limit + (q.window > 0n ? ";w=" + ceilSeconds(q.window) : "")).join(", ");
  return [
    ["X-Ratelimit-Limit", p.limit.toString()],
    ["X-Ratelimit-Remaining", p.remaining.toString()],
    ["X-Ratelimit-Reset", resetUnix.toString()],
    ["Ratelimit-Policy", pol],
    ["Ratelimit", quoted(p.name) + ";r=" + p.remaining + ";t=" + ceilSeconds(p.reset)],
  ];
}

// reasonNoClientAddress is edge.ReasonNoClientAddress.
const reasonNoClientAddress = "no client address";

function errorBody(code, msg, retry) {
  let b = '{"error":' + jsonString(code) + ',"message":' + jsonString(msg);
  if (retry > 0n) b += ',"retry_after":' + retry;
  return b + "}\n";
}

// queryEscape is url.QueryEscape on a byte string.
function queryEscape(s) {
  let out = "";
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (isUnreserved(c)) out += s[i];
    else if (c === 0x20) out += "+";
    else out += "%" + upperHex[c >> 4] + upperHex[c & 15];
  }
  return out;
}

// seconds is edge's seconds: "1 second", "30 seconds".
const seconds = (n) => (n === 1n ? "1 second" : n + " seconds");

// refusal is edge.Refusal: {status, location, body, retryAfter} or null for a verdict
// that passes.
export function refusal(v, page, param) {
  const retry = bmax(ceilSeconds(v.retryAfter), 1n);
  switch (v.d.outcome) {
    case "block":
    case "local_limit":
      return { status: 429, body: errorBody("rate_limit_exceeded", "Too many requests. Try again in " + seconds(retry) + ".", retry), retryAfter: retry };
    case "challenge":
      return { status: 302, location: page + (page.includes("?") ? "&" : "?") + param + "=" + queryEscape(v.uri) };
    case "deny_listed":
      return { status: 403, body: errorBody("forbidden", "Access denied.", 0n) };
    case "fail_closed":
      if (v.d.reason === reasonNoClientAddress) {
        // The request will never have an address: retrying cannot help.
        return { status: 503, body: errorBody("no_client_address", "Service unavailable: the request has no client address, which this path needs. Retrying will not help.", 0n), retryAfter: 0n };
      }
      return { status: 503, body: errorBody("service_unavailable", "Service temporarily unavailable. Try again in " + seconds(retry) + ".", retry), retryAfter: retry };
    case "rejected":
      if (v.pathErr === PathErrors.tooLong) return { status: 414, body: errorBody("uri_too_long", "The request path is too long.", 0n) };
      return { status: 400, body: errorBody("bad_request", "Bad request path: " + v.d.reason + ".", 0n) };
  }
  return null;
}

// responseHeaders are the headers Response.Write sets, as [name, value]
// (Content-Length is CloudFront's to set).
export function responseHeaders(v, resp) {
  const h = rateLimitHeaders(v);
  if (resp.retryAfter > 0n) h.push(["Retry-After", resp.retryAfter.toString()]);
  if (resp.location) {
    h.push(["Location", resp.location], ["Cache-Control", "no-store"]);
    return h;
  }
  h.push(["Content-Type", "application/json"], ["Cache-Control", "no-store"]);
  return h;
}

export const statusText = { 302: "Found", 400: "Bad Request", 403: "Forbidden", 414: "Request URI Too Long", 429: "Too Many Requests", 503: "Service Unavailable" };
