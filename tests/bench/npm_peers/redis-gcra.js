'use strict';
// redis-gcra (0.3.0) as its README shows it: RedisGCRA({ redis }) on an
// ioredis client (the package's own dependency, ioredis < 5, which an
// application satisfies; it defines an EVALSHA command on that client),
// limit({ key, burst, rate, period }) resolving to { limited, ... }. One
// GET and one SET PX per admitted check, in Lua, with the TAT as a float
// string. See harness.js for the loop.
const { createRequire } = require('module');
const { run } = require('./harness');

run('redis-gcra', async (req, o) => {
  const gcraReq = createRequire(req.resolve('redis-gcra'));
  const Redis = gcraReq('ioredis');
  const RedisGCRA = req('redis-gcra');
  const redis = new Redis({ host: o.host, port: o.port });
  // rate per period (ms), with a burst as large as the rate's allowance:
  // the same limit as rl-server's N/DUR:gcra with its default burst N.
  const limiter = RedisGCRA({ redis, keyPrefix: 'gcra', burst: o.limit,
                              rate: o.limit, period: o['period-ms'] });
  return {
    client: `ioredis ${gcraReq('ioredis/package.json').version}`,
    limit: key => limiter.limit({ key }).then(r => r.limited),
    close: () => redis.quit(),
  };
}).catch(e => { console.error(`redis-gcra: ${e.stack || e}`); process.exit(1); });
