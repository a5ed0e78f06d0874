// Counting in the Go DynamoDB store's table (package edge/dynamostore):
// the same binary keys, attributes and conditional UpdateItem of a fixed
// window, one request per hit, with the over-limit cache of package
// edge/syncstore in the warm container.

import { createHash } from "node:crypto";
import { takeFixed } from "./core.mjs";

const maxRawKey = 1024;
const maxInt64 = 9223372036854775807n;

function uvarint(n) {
  const out = [];
  while (n >= 0x80) {
    out.push((n & 0x7f) | 0x80);
    n >>>= 7;
  }
  out.push(n);
  return out;
}

// counterKey is dynamostore's appendKey for a fixed window (tag 'f')
// followed by appendWindow: a Buffer.
export function counterKey(region, key, idx) {
  const reg = Buffer.from(region, "utf8");
  const rule = Buffer.from(key.rule, "latin1");
  const parts = [Buffer.from([0x66]), Buffer.from(uvarint(reg.length)), reg, Buffer.from(uvarint(rule.length)), rule];
  if (key.user !== "") parts.push(Buffer.from([0x75]), Buffer.from(key.user, "latin1"));
  else if (key.addr && key.addr.bytes.length === 4) parts.push(Buffer.from([4]), Buffer.from(key.addr.bytes));
  else if (key.addr) parts.push(Buffer.from([6]), Buffer.from(key.addr.bytes));
  else parts.push(Buffer.from([0]));
  let k = Buffer.concat(parts);
  if (k.length > maxRawKey) k = Buffer.concat([Buffer.from([0x46]), createHash("sha256").update(k).digest()]);
  const w = Buffer.alloc(8);
  w.writeBigUInt64BE(BigInt.asUintN(64, idx));
  return Buffer.concat([k, w]);
}

// seconds is dynamostore's seconds: the epoch second at or after ns.
const seconds = (ns) => (ns <= 0n ? ns / 1000000000n : (ns - 1n) / 1000000000n + 1n);

// DynamoStore implements the core's Store over the SDK v3 UpdateItemCommand.
// send(command, {abortSignal}) is a DynamoDBClient's send.
export class DynamoStore {
  constructor({ send, UpdateItemCommand, table, region, cacheKeys = 100000 }) {
    this.send = send;
    this.Update = UpdateItemCommand;
    this.table = table;
    this.region = region;
    this.cache = new Map(); // key text → {idx, until (ns), b}
    this.cacheKeys = cacheKeys;
    this.stats = { updates: 0, conditionFailures: 0, cacheHits: 0 };
  }

  async take(key, rule, now, signal) {
    const w = rule.window;
    const idx = now / w;
    const kb = counterKey(this.region, key, idx);
    const ck = kb.toString("latin1");
    const cacheable = rule.maxCount > rule.limit;
    if (cacheable) {
      const c = this.cache.get(ck);
      if (c && now < c.until) {
        this.stats.cacheHits++;
        return { res: takeFixed(rule, { a: c.idx, b: c.b }, now, 1n), remote: false };
      }
      if (c) this.cache.delete(ck);
    }
    let bound = rule.maxCount > 0n ? rule.maxCount - 1n : maxInt64;
    if (bound > maxInt64 - 1n) bound = maxInt64 - 1n;
    const cmd = new this.Update({
      TableName: this.table,
      Key: { k: { B: kb } },
      UpdateExpression: "ADD c :n SET #ttl = if_not_exists(#ttl, :ttl)",
      ConditionExpression: "attribute_not_exists(c) OR c <= :b",
      ExpressionAttributeNames: { "#ttl": "ttl" },
      ExpressionAttributeValues: {
        ":n": { N: "1" },
        ":ttl": { N: seconds((idx + 1n) * w).toString() },
        ":b": { N: bound.toString() },
      },
      ReturnValues: "UPDATED_NEW",
      ReturnValuesOnConditionCheckFailure: "ALL_OLD",
    });
    this.stats.updates++;
    let before;
    try {
      const out = await this.send(cmd, { abortSignal: signal });
      const c = out.Attributes && out.Attributes.c && out.Attributes.c.N;
      if (c === undefined) throw new Error("update item: no count returned");
      before = BigInt(c) - 1n;
    } catch (err) {
      if (err && err.name === "ConditionalCheckFailedException") {
        this.stats.conditionFailures++;
        // The failed condition shows the hit refused: the count is at
        // least bound+1, whatever the item returned (dynalite returns
        // none; DynamoDB the item as it was).
        const item = err.Item && err.Item.c && err.Item.c.N;
        before = bound + 1n;
        if (item !== undefined && BigInt(item) > before) before = BigInt(item);
      } else {
        throw err;
      }
    }
    const s = { a: idx, b: before };
    const res = takeFixed(rule, s, now, 1n);
    if (cacheable && s.b >= rule.maxCount) this.remember(ck, idx, s.b, res.expires, now);
    return { res, remote: true };
  }

  remember(ck, idx, b, until, now) {
    if (this.cache.size >= this.cacheKeys) {
      for (const [k, v] of this.cache) if (v.until <= now) this.cache.delete(k);
      if (this.cache.size >= this.cacheKeys) this.cache.clear();
    }
    this.cache.set(ck, { idx, b, until });
  }
}
