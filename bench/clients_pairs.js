'use strict';
// Acquire + release of a free write lock in a loop, one client, from Node:
// the rwlock package beside a plain lock (SET NX PX + a compare-and-delete
// script) on the same ioredis connection, same run, interleaved repetitions;
// µs per pair (median) and the ratio. Part of bench/clients.sh.
//   node bench/clients_pairs.js --port 6396 [--seconds 2] [--reps 3]
const path = require('path');
const crypto = require('crypto');

const CLIENT = path.join(__dirname, '..', 'clients', 'node');
const Redis = require(require.resolve('ioredis', { paths: [CLIENT] }));
const { Locks } = require(CLIENT);

const arg = (name, dflt) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : dflt;
};
const CAD = `if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1]) else return 0 end`;

async function timed(pair, seconds) {
  for (let i = 0; i < 200; i++) await pair();
  let n = 0;
  const t0 = performance.now();
  for (;;) {
    for (let i = 0; i < 100; i++) await pair();
    n += 100;
    const t = performance.now();
    if (t - t0 >= seconds * 1000) return ((t - t0) * 1000) / n;
  }
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

(async () => {
  const seconds = arg('seconds', 2);
  const reps = arg('reps', 3);
  const redis = new Redis({ port: arg('port') });
  redis.defineCommand('cad', { numberOfKeys: 1, lua: CAD });
  const locks = new Locks(redis);
  const lk = locks.writeLock('bench:node');
  const cases = [
    ['pg-rwlock-redis', async () => { await lk.acquire(); await lk.release(); }],
    ['SET NX PX + compare-and-delete', async () => {
      const tok = crypto.randomBytes(16).toString('hex');
      if ((await redis.set('bench:plain:node', tok, 'PX', 30000, 'NX')) !== 'OK') throw new Error('busy');
      await redis.cad('bench:plain:node', tok);
    }],
  ];
  const runs = Object.fromEntries(cases.map(([name]) => [name, []]));
  for (let r = 0; r < reps; r++) for (const [name, fn] of cases) runs[name].push(await timed(fn, seconds));
  console.log(`node, acquire + release of a free write lock, 1 client, µs per pair (median of ${reps} x ${seconds} s):`);
  for (const [name] of cases) console.log(`  ${name.padEnd(32)} ${median(runs[name]).toFixed(1).padStart(8)}`);
  console.log(`  pg-rwlock-redis / plain = ${(median(runs['pg-rwlock-redis']) / median(runs['SET NX PX + compare-and-delete'])).toFixed(2)}`);
  locks.close();
  redis.disconnect();
})().catch((e) => { console.error(e); process.exit(1); });
