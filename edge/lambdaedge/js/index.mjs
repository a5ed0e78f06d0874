// The Lambda@Edge entry point (handler "index.handler"): the compiled
// configuration beside it, the AWS SDK for JavaScript v3 that the Node.js
// runtime provides, and the secrets from SSM Parameter Store or Secrets
// Manager, read once per cold start. Lambda@Edge allows no environment
// variables, so nothing here reads any: everything is in config.json.

import { readFileSync } from "node:fs";
import { DynamoDBClient, UpdateItemCommand } from "@aws-sdk/client-dynamodb";
import { createHandler } from "./handler.mjs";

const config = JSON.parse(readFileSync(new URL("./config.json", import.meta.url), "utf8"));

// The table's region: the configured one, else the region running the
// function (a Global Table replica there). Every key holds it, so regions
// count apart, as the Go store's keys do.
const region = config.store.region || process.env.AWS_REGION || "us-east-1";
const client = new DynamoDBClient({ region, maxAttempts: config.store.maxAttempts });

async function loadSecrets() {
  const s = config.secrets;
  const names = Object.entries(s.names).filter(([, name]) => name);
  if (names.length === 0) return {};
  const out = {};
  if (s.source === "secretsmanager") {
    const { SecretsManagerClient, GetSecretValueCommand } = await import("@aws-sdk/client-secrets-manager");
    const sm = new SecretsManagerClient({ region: s.region });
    for (const [what, name] of names) out[what] = (await sm.send(new GetSecretValueCommand({ SecretId: name }))).SecretString;
    return out;
  }
  const { SSMClient, GetParametersCommand } = await import("@aws-sdk/client-ssm");
  const ssm = new SSMClient({ region: s.region });
  const res = await ssm.send(new GetParametersCommand({ Names: names.map(([, n]) => n), WithDecryption: true }));
  for (const [what, name] of names) {
    const p = (res.Parameters || []).find((x) => x.Name === name);
    if (!p) throw new Error("SSM parameter " + name + " not found in " + s.region);
    out[what] = p.Value;
  }
  return out;
}

export const handler = createHandler(config, {
  dynamodb: { send: (cmd, opts) => client.send(cmd, opts), UpdateItemCommand, region },
  loadSecrets,
});
