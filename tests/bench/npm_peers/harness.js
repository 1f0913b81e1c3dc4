'use strict';
// The load loop shared by the npm peers' drivers (tests/bench/algorithms.sh
// runs them): what an application using one of these packages does, many
// checks in flight from one Node process on one Redis connection, each an
// awaited promise, on a uniform key spread.
//
//   node PKG.js --modules DIR --port P [--concurrency C] [--keys K]
//               [--warmup S] [--duration S] [--json FILE]
//               [--limit N] [--period-ms MS]
//
// DIR holds node_modules (algorithms.sh installs the packages there with
// npm install --no-save). C workers each loop: pick a key uniformly among
// K, await the package's limit call (N allowed per MS, by default 10^9
// per 1000 s, the limit algorithms.sh gives rl-server: nothing refused),
// count it. Checks answered during the
// first S of --warmup are sent but not measured (sent_total counts them,
// as rl-bench's does, so CPU read over the whole run divides by it).
// Writes decisions/s, allowed/denied/errors, p50/p99 latency of measured
// checks and this process's CPU (process.cpuUsage) as JSON. The run ends
// on its own at warmup + duration; a check still pending then is waited
// for at most 5 s.

const fs = require('fs');
const path = require('path');
const { createRequire } = require('module');

function parseArgs(argv) {
  const o = { concurrency: 128, keys: 100000, warmup: 1, duration: 4,
              port: 0, modules: '', json: '', host: '127.0.0.1',
              limit: 1000000000, 'period-ms': 1000000 };
  for (let i = 0; i < argv.length; i += 2) {
    const k = argv[i].replace(/^--/, '');
    const v = argv[i + 1];
    if (!(k in o) || v === undefined) {
      throw new Error(`unknown or incomplete option ${argv[i]}`);
    }
    o[k] = typeof o[k] === 'number' ? Number(v) : v;
  }
  if (!o.port || !o.modules) throw new Error('--port and --modules are required');
  return o;
}

// run(name, setup): setup(req, opts) returns { limit(key) -> Promise of
// true when refused, close() -> Promise, client: a description }; req
// requires from the installed node_modules.
async function run(name, setup) {
  const o = parseArgs(process.argv.slice(2));
  const req = createRequire(path.join(path.resolve(o.modules), 'package.json'));
  const peer = await setup(req, o);
  const lat = [];
  let sent = 0, allowed = 0, denied = 0, errors = 0, lastError = '';
  const t0 = process.hrtime.bigint();
  const warmEnd = t0 + BigInt(Math.round(o.warmup * 1e9));
  const end = warmEnd + BigInt(Math.round(o.duration * 1e9));

  async function worker() {
    for (;;) {
      const start = process.hrtime.bigint();
      if (start >= end) return;
      const key = 'bench:' + Math.floor(Math.random() * o.keys);
      sent++;
      let refused;
      try {
        refused = await peer.limit(key);
      } catch (e) {
        errors++;
        lastError = String(e && e.message || e);
        continue;
      }
      if (start < warmEnd) continue;
      lat.push(Number(process.hrtime.bigint() - start) / 1000);
      if (refused) denied++; else allowed++;
    }
  }

  const cpuStart = process.cpuUsage();
  const workers = [];
  for (let i = 0; i < o.concurrency; i++) workers.push(worker());
  await Promise.all(workers);
  const seconds = Number(process.hrtime.bigint() - warmEnd) / 1e9;
  const cpu = process.cpuUsage(cpuStart);
  await Promise.race([peer.close(), new Promise(r => setTimeout(r, 5000))]);

  lat.sort((a, b) => a - b);
  const pct = p => (lat.length ? lat[Math.min(lat.length - 1,
    Math.floor(lat.length * p / 100))] : 0);
  const decisions = allowed + denied;
  const res = {
    peer: name,
    client: peer.client,
    concurrency: o.concurrency,
    keys: o.keys,
    decisions,
    seconds,
    decisions_per_sec: decisions / seconds,
    sent_total: sent,
    allowed,
    denied,
    errors,
    last_error: lastError,
    p50_us: pct(50),
    p99_us: pct(99),
    // This process's CPU (the application, the package and its client):
    // over the whole run, in us.
    cpu_us: cpu.user + cpu.system,
  };
  const text = JSON.stringify(res, null, 2) + '\n';
  if (o.json) fs.writeFileSync(o.json, text);
  process.stdout.write(`${name}: ${decisions} decisions in ${seconds.toFixed(2)} s ` +
    `(${Math.round(res.decisions_per_sec)}/s), allowed ${allowed}, denied ` +
    `${denied}, errors ${errors}${lastError ? ' (' + lastError + ')' : ''}; ` +
    `p50 ${res.p50_us.toFixed(0)} us, p99 ${res.p99_us.toFixed(0)} us\n`);
  process.exitCode = errors > 0 && decisions === 0 ? 1 : 0;
}

module.exports = { run };
