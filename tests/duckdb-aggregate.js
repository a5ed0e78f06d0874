// The DuckDB half of tests/bench-aggregate: the same GROUP BY (tier, rule,
// outcome) count and distinct client count as the aggregator's columnar
// path, over the Parquet export of the same events, on one thread.
//
// Usage: node tests/duckdb-aggregate.js FILE.parquet RUNS ANSWER.tsv
// Prints one JSON line per timed run (wall and CPU seconds); writes the
// counts to ANSWER.tsv.
'use strict';
const fs = require('node:fs');
const { DuckDBInstance } = require('@duckdb/node-api');

async function main() {
  const [file, runs, answer] = [process.argv[2], Number(process.argv[3] || 3), process.argv[4]];
  const inst = await DuckDBInstance.create(':memory:');
  const con = await inst.connect();
  await con.run('SET threads=1');
  const src = `read_parquet('${file.replace(/'/g, "''")}')`;
  const client = "CASE WHEN user_id <> '' THEN 'u' || user_id ELSE 'a' || client_ip END";
  const queries = {
    'duckdb: counts and exact distinct clients': [
      `SELECT tier, rule, outcome, count(*) AS n FROM ${src} WHERE kind = 'decision' GROUP BY ALL ORDER BY ALL`,
      `SELECT count(DISTINCT ${client}) AS n FROM ${src} WHERE kind = 'decision'`],
    'duckdb: counts and approx_count_distinct clients': [
      `SELECT tier, rule, outcome, count(*) AS n FROM ${src} WHERE kind = 'decision' GROUP BY ALL ORDER BY ALL`,
      `SELECT approx_count_distinct(${client}) AS n FROM ${src} WHERE kind = 'decision'`],
  };
  const rows = (await con.runAndReadAll(`SELECT count(*) AS n FROM ${src}`)).getRowObjects();
  const events = Number(rows[0].n);
  let groups;
  for (const [what, qs] of Object.entries(queries)) {
    for (let r = 0; r < runs; r++) {
      const start = process.hrtime.bigint();
      const cpu = process.cpuUsage();
      const res = [];
      for (const q of qs) res.push((await con.runAndReadAll(q)).getRowObjects());
      const seconds = Number(process.hrtime.bigint() - start) / 1e9;
      const used = process.cpuUsage(cpu); // the process's user and system time, microseconds
      groups = res[0];
      console.log(JSON.stringify({ what, seconds, cpu_seconds: (used.user + used.system) / 1e6, events_per_s: events / seconds, distinct: Number(res[1][0].n) }));
    }
  }
  fs.writeFileSync(answer, groups.map((g) => `${g.tier}\t${g.rule}\t${g.outcome}\t${g.n}\n`).join(''));
}

main().catch((e) => { console.error('duckdb-aggregate:', e); process.exit(1); });
