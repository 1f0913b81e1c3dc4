'use strict';
// rolling-rate-limiter (0.4.2) as its README shows it: a RedisRateLimiter
// on an ioredis client, limit(id) resolving to true when the action is
// blocked. It keeps a sliding LOG: per id a sorted set of every attempt's
// timestamp in the interval, each check one MULTI of ZREMRANGEBYSCORE,
// ZADD, ZRANGE WITHSCORES (the whole set comes back) and EXPIRE. It is
// the exact rolling window, not the two-counter approximation that
// rl-server's sliding-window-counter is; algorithms.sh compares them as
// the nearest npm package for the same job. See harness.js for the loop.
const { run } = require('./harness');

run('rolling-rate-limiter', async (req, o) => {
  const Redis = req('ioredis');
  const { RedisRateLimiter } = req('rolling-rate-limiter');
  const client = new Redis({ host: o.host, port: o.port });
  const limiter = new RedisRateLimiter({
    client,
    namespace: 'rrl:',
    interval: o['period-ms'],
    maxInInterval: o.limit,
  });
  return {
    client: `ioredis ${req('ioredis/package.json').version} (${limiter.detectedClientType})`,
    limit: id => limiter.limit(id),
    close: () => client.quit(),
  };
}).catch(e => { console.error(`rolling-rate-limiter: ${e.stack || e}`); process.exit(1); });
