// Runs the built viewer-request function's handler (handler.mjs of the
// directory `ratewarden lambda-edge build` wrote) on CloudFront events, for
// the Go tests in lambdaedge_test.go. What production takes from the Lambda
// runtime is injected here, and only here: the DynamoDB client (pointed at
// dynalite), the secrets (the runtime reads them from SSM), the clock of
// each event, and the line writer that captures each decision line.
//
// stdin: {functionDir, dynamodb: {endpoint, region, maxAttempts}, secrets,
//         zeroLatency, stdoutDecisions, cases: [{time: unix ns string, event}]}
// stdout: one JSON line per case: {decision, result}; with stdoutDecisions,
// the function's own output instead: its decision lines, as console.log
// writes them.
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import path from "node:path";
import { DynamoDBClient, UpdateItemCommand } from "@aws-sdk/client-dynamodb";

const input = JSON.parse(readFileSync(0, "utf8"));
const dir = path.resolve(input.functionDir);
const config = JSON.parse(readFileSync(path.join(dir, "config.json"), "utf8"));
const { createHandler } = await import(pathToFileURL(path.join(dir, "handler.mjs")).href);

const client = new DynamoDBClient({
  region: input.dynamodb.region,
  endpoint: input.dynamodb.endpoint,
  credentials: { accessKeyId: "test", secretAccessKey: "test" },
  maxAttempts: input.dynamodb.maxAttempts || 1,
});
let now = 0n;
let lines = [];
const handler = createHandler(config, {
  dynamodb: { send: (cmd, opts) => client.send(cmd, opts), UpdateItemCommand, region: input.dynamodb.region },
  loadSecrets: async () => input.secrets || {},
  now: () => now,
  monotonic: input.zeroLatency ? () => 0n : undefined,
  writeLine: input.stdoutDecisions ? undefined : (line) => lines.push(line),
});
for (const c of input.cases) {
  now = BigInt(c.time);
  lines = [];
  const result = await handler(c.event);
  if (!input.stdoutDecisions) process.stdout.write(JSON.stringify({ decision: lines.join("\n"), result }) + "\n");
}
client.destroy();
