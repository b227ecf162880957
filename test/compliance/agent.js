#!/usr/bin/env node
'use strict';
// The compliance suite's agent for the Node client (test/compliance/driver.py):
// one JSON request a line on stdin, one JSON answer a line on stdout, every
// request run concurrently. The protocol: test/compliance/README.md.
//   node agent.js --redis redis://127.0.0.1:6379/0 [--prefix rwlock]
// A redis+cluster://host1:port1[,host2:port2...]/ URL (the extension's) makes
// it connect through ioredis's Cluster, those nodes its startup nodes.
const path = require('path');
const readline = require('readline');

const CLIENT = path.join(__dirname, '..', '..', 'clients', 'node');
const Redis = require(require.resolve('ioredis', { paths: [CLIENT] }));
const rw = require(CLIENT);

const arg = (name, dflt) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : dflt;
};
// --no-resend: commands cut off in flight are not sent again after a
// reconnection (so the client's own owed releases are tested); ioredis then
// never settles them, so they time out (commandTimeout).
const url = arg('redis');
const CLUSTER = 'redis+cluster://';
const redis = url.startsWith(CLUSTER)
  ? new Redis.Cluster(url.slice(CLUSTER.length).split('/')[0].split(',').map((s) => {
    const i = s.lastIndexOf(':');
    return { host: s.slice(0, i), port: Number(s.slice(i + 1)) };
  }))
  : new Redis(url, process.argv.includes('--no-resend')
    ? { autoResendUnfulfilledCommands: false, commandTimeout: 1000 } : {});
redis.on('error', () => {});
const locks = new rw.Locks(redis, { prefix: arg('prefix', 'rwlock') });
const handles = new Map();
const lostEvents = new Map();
const sec = (s) => (s === null || s === undefined ? undefined : s * 1000);

const mono = () => Number(process.hrtime.bigint()); // CLOCK_MONOTONIC, as Python's time.monotonic_ns

// One line out; mono: when the call returned, start: when it began (ns).
function emit(msg, start) {
  msg.mono = mono();
  if (start !== undefined) msg.start = start;
  process.stdout.write(`${JSON.stringify(msg)}\n`);
}

function errorKind(e) {
  if (e instanceof rw.ProtocolVersionError) return 'version';
  if (e instanceof rw.LockTimeout) return 'timeout';
  if (e instanceof rw.UpgradeConflict) return 'conflict';
  if (e instanceof rw.DeadlockDetected) return 'deadlock';
  if (e instanceof rw.StaleRequestError) return 'stale';
  if (e && /connect|closed|timed out|ECONN|EPIPE|MaxRetries|Connection/i.test(`${e.name} ${e.message}`)) return 'connection';
  return 'other';
}

const ops = {
  hello: async () => ({ client: 'node' }),
  new: async (req) => {
    const make = req.mode === 'w' ? 'writeLock' : 'readLock';
    // names: several names, all or none (a MultiLock).
    const lk = req.names ? locks[`${make}s`](req.names, { lease: sec(req.lease) })
      : locks[make](req.name, { lease: sec(req.lease) });
    if (req.owner) lk.owner = req.owner; // one holder in two lock objects
    lk.on('lost', () => {
      lostEvents.set(req.lock, (lostEvents.get(req.lock) || 0) + 1);
      emit({ event: 'lost', lock: req.lock });
    });
    handles.set(req.lock, lk);
    return { owner: lk.owner };
  },
  state: async (req) => {
    const lk = handles.get(req.lock);
    return { held: lk.held, lost: lk.lost, token: lk.tokens || lk.token, lost_events: lostEvents.get(req.lock) || 0, mode: lk.mode };
  },
  info: async (req) => {
    const i = await locks.info(req.name);
    return { info: { state: i.state, token: i.token, writer: i.writer, writer_ms: i.writerMs, readers: i.readers, waiting: i.waiting } };
  },
  acquire: async (req) => ({ token: await handles.get(req.lock).acquire(sec(req.timeout)) }),
  try: async (req) => ({ got: await handles.get(req.lock).tryAcquire(sec(req.wait || 0)) }),
  upgrade: async (req) => ({ got: await handles.get(req.lock).upgrade(sec(req.timeout)) }),
  downgrade: async (req) => ({ held: await handles.get(req.lock).downgrade() }),
  release: async (req) => ({ held: await handles.get(req.lock).release() }),
};

readline.createInterface({ input: process.stdin }).on('line', (line) => {
  const req = JSON.parse(line);
  if (req.op === 'exit') process.exit(0);
  const start = mono();
  Promise.resolve().then(() => ops[req.op](req)).then(
    (res) => emit({ ...res, id: req.id, ok: true }, start),
    (e) => emit({ id: req.id, ok: false, error: errorKind(e), message: String(e && e.message) }),
  );
}).on('close', () => process.exit(0));
