// Starts the real-protocol stand-ins the Go tests talk to, on loopback only:
// kinesalite (Kinesis) and dynalite (DynamoDB), in memory. Prints one line,
// "kinesis=http://127.0.0.1:PORT dynamodb=http://127.0.0.1:PORT", once both
// listen, and runs until it is killed. Used by tests/run.
'use strict';
const kinesalite = require('kinesalite');
const dynalite = require('dynalite');

function listen(server) {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve(server.address().port));
  });
}

// dynalite throws from its request 'error' handler when a client abandons a
// request half sent (an aborted upload, ECONNRESET): a client may do that
// (AWS does not fall over), so the stand-ins log it and carry on. Anything
// else still stops them.
process.on('uncaughtException', (err) => {
  if (err && (err.code === 'ECONNRESET' || err.message === 'aborted')) {
    console.error('services: ignored an abandoned request:', err.message);
    return;
  }
  console.error('services:', err);
  process.exit(1);
});

(async () => {
  const kinesis = await listen(kinesalite({ createStreamMs: 20, deleteStreamMs: 20, updateStreamMs: 20, shardLimit: 1000 }));
  const dynamo = await listen(dynalite({ createTableMs: 20, deleteTableMs: 20, updateTableMs: 20 }));
  process.stdout.write(`kinesis=http://127.0.0.1:${kinesis} dynamodb=http://127.0.0.1:${dynamo}\n`);
})().catch((err) => {
  console.error('services:', err);
  process.exit(1);
});
