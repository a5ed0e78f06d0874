// Validates JSON lines against a JSON Schema (draft 2020-12) with ajv, an
// independent validator, formats asserted (ajv-formats):
//
//   node tests/jsonschema.js SCHEMA FILE
//
// prints one line per input line: "ok", or "invalid" and ajv's errors.
'use strict';
const fs = require('fs');
const Ajv2020 = require('ajv/dist/2020');
const addFormats = require('ajv-formats');

const [schemaPath, file] = process.argv.slice(2);
if (!schemaPath || !file) {
  console.error('usage: node tests/jsonschema.js SCHEMA FILE');
  process.exit(2);
}
const ajv = new Ajv2020({ allErrors: true, strict: true });
addFormats(ajv);
const validate = ajv.compile(JSON.parse(fs.readFileSync(schemaPath, 'utf8')));
const out = [];
for (const line of fs.readFileSync(file, 'utf8').split('\n')) {
  if (line === '') continue;
  out.push(validate(JSON.parse(line)) ? 'ok' : 'invalid ' + ajv.errorsText(validate.errors));
}
process.stdout.write(out.join('\n') + '\n');
