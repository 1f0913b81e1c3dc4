"""An RLQS client that behaves as Envoy's rate_limit_quota filter does, for
the tests and benchmarks of rl-server's RLQS (docs/rlqs.md); Envoy cannot be
installed here.

What it copies from the filter (envoy source/extensions/filters/http/
rate_limit_quota/: global_client_impl.cc, filter.cc, quota_bucket_cache.h):

- A request matched into a bucket not seen before creates the bucket, is
  decided by the no-assignment behaviour, and an initial usage report of
  that bucket alone goes out at once (createBucketImpl). The stream opens
  with the first bucket.
- Every reporting interval one report of every bucket: requests allowed and
  denied since the last report (the counters reset), time_elapsed in whole
  seconds, the domain in every report.
- An assignment replaces the bucket's action; a token bucket is kept (with
  its tokens) when max_tokens, tokens_per_fill and fill_interval are those
  of the one in force, else a new one starts full (shouldReplaceTokenBucket).
  Its rate is tokens_per_fill / fill_interval's whole seconds, refilled
  continuously up to max_tokens (AtomicTokenBucketImpl).
- Each assignment (re)starts the bucket's expiry timer: TTL's seconds; when
  it fires the bucket falls back to the no-assignment behaviour (no
  expired_assignment_behavior configured).
- An abandon_action erases the bucket (its usage too); a later request
  creates it again as new.
- An action for a bucket it does not know is ignored.

Requests are fed by the caller (request(bucket) -> allowed?); time is the
wall clock, and a lock keeps the reporting thread and the callers apart."""

import queue
import threading
import time

import grpc
from envoy.service.rate_limit_quota.v3 import rlqs_pb2, rlqs_pb2_grpc
from envoy.type.v3 import ratelimit_strategy_pb2

BLANKET = ratelimit_strategy_pb2.RateLimitStrategy
ALLOW_ALL, DENY_ALL = BLANKET.ALLOW_ALL, BLANKET.DENY_ALL


class TokenBucket:
    def __init__(self, max_tokens, per_fill, interval_s):
        self.max = float(max_tokens)
        self.rate = float(per_fill) / interval_s
        self.tokens = self.max
        self.t = time.monotonic()
        self.key = (max_tokens, per_fill, interval_s)

    def consume(self):
        now = time.monotonic()
        self.tokens = min(self.max, self.tokens + (now - self.t) * self.rate)
        self.t = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


class Bucket:
    def __init__(self, bid, now):
        self.bid = dict(bid)
        self.allowed = 0
        self.denied = 0
        self.last_report = now
        self.action = None   # None | ("blanket", rule) | ("tb", TokenBucket)
        self.expires = None  # monotonic time, or None: never
        self.gen = 0


class FakeEnvoy:
    """One Envoy's filter: one RLQS stream to addr."""

    def __init__(self, addr, domain="envoy", interval_s=1.0,
                 no_assignment=True, name="envoy", creds=None):
        self.addr = addr
        self.domain = domain
        self.interval = interval_s
        self.no_assignment = no_assignment  # allow (True) or deny
        self.name = name
        self.lock = threading.RLock()
        self.buckets = {}
        self.q = queue.Queue()
        self.call = None
        self.stop = threading.Event()
        self.silent = False  # stops reporting, stream left open
        # What it saw, for the tests.
        self.replacements = 0   # token buckets started (full)
        self.assignments = []   # (monotonic time, key, action tuple)
        self.abandoned = []     # bucket keys
        self.ended = None       # the stream's end: (code, details)
        self.ended_ev = threading.Event()
        self.got = threading.Condition(self.lock)
        self.channel = (grpc.insecure_channel(addr) if creds is None else
                        grpc.secure_channel(addr, creds))
        self.stub = rlqs_pb2_grpc.RateLimitQuotaServiceStub(self.channel)
        self.reporter = None
        self.reader = None

    @staticmethod
    def key(bid):
        return tuple(sorted(bid.items()))

    # --- the stream -----------------------------------------------------

    def _requests(self):
        while True:
            m = self.q.get()
            if m is None:
                return
            yield m

    def _read(self):
        try:
            for resp in self.call:
                self._on_response(resp)
            self.ended = (grpc.StatusCode.OK, "")
        except grpc.RpcError as e:
            self.ended = (e.code(), e.details())
        with self.lock:
            self.got.notify_all()
        self.ended_ev.set()

    def _start_stream(self):
        self.call = self.stub.StreamRateLimitQuotas(self._requests())
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.reporter = threading.Thread(target=self._report_loop,
                                         daemon=True)
        self.reporter.start()

    def _usage(self, b, now):
        u = rlqs_pb2.RateLimitQuotaUsageReports.BucketQuotaUsage(
            num_requests_allowed=b.allowed, num_requests_denied=b.denied)
        u.bucket_id.bucket.update(b.bid)
        # Envoy sends the elapsed time's whole seconds.
        u.time_elapsed.seconds = int(now - b.last_report)
        b.allowed = b.denied = 0
        b.last_report = now
        return u

    def _report_loop(self):
        while not self.stop.wait(self.interval):
            if self.silent:
                continue
            with self.lock:
                now = time.monotonic()
                if not self.buckets:
                    continue
                m = rlqs_pb2.RateLimitQuotaUsageReports(domain=self.domain)
                for b in self.buckets.values():
                    m.bucket_quota_usages.append(self._usage(b, now))
            self.q.put(m)

    def _on_response(self, resp):
        now = time.monotonic()
        with self.lock:
            for a in resp.bucket_action:
                k = self.key(a.bucket_id.bucket)
                b = self.buckets.get(k)
                if b is None:
                    continue  # Envoy logs and ignores it
                if a.HasField("abandon_action"):
                    del self.buckets[k]
                    self.abandoned.append(k)
                    continue
                qa = a.quota_assignment_action
                s = qa.rate_limit_strategy
                which = s.WhichOneof("strategy")
                if which == "blanket_rule":
                    act = ("blanket", s.blanket_rule)
                elif which == "token_bucket":
                    tb = s.token_bucket
                    per = (tb.tokens_per_fill.value
                           if tb.HasField("tokens_per_fill") else 1)
                    key = (tb.max_tokens, per, tb.fill_interval.seconds)
                    if (b.action is not None and b.action[0] == "tb" and
                            b.action[1].key == key and
                            (b.expires is None or now < b.expires)):
                        act = b.action  # kept, with its tokens
                    else:
                        act = ("tb", TokenBucket(*key))
                        self.replacements += 1
                else:
                    continue  # requests_per_time_unit: not supported
                b.action = act
                b.expires = (now + qa.assignment_time_to_live.seconds
                             if qa.HasField("assignment_time_to_live")
                             else None)
                b.gen += 1
                self.assignments.append((now, k, act if act[0] == "blanket"
                                         else ("tb",) + act[1].key))
            self.got.notify_all()

    # --- what the test drives ------------------------------------------

    def request(self, bid):
        """One request matched into bucket bid (a dict): True if allowed."""
        k = self.key(bid)
        now = time.monotonic()
        with self.lock:
            b = self.buckets.get(k)
            if b is None:
                b = self.buckets[k] = Bucket(bid, now)
                ok = self.no_assignment
                if ok:
                    b.allowed += 1
                else:
                    b.denied += 1
                m = rlqs_pb2.RateLimitQuotaUsageReports(domain=self.domain)
                m.bucket_quota_usages.append(self._usage(b, now))
                first = self.call is None
                self.q.put(m)
            else:
                first = False
                if b.expires is not None and now >= b.expires:
                    b.action = None  # expired: the no-assignment behaviour
                    b.expires = None
                if b.action is None:
                    ok = self.no_assignment
                elif b.action[0] == "blanket":
                    ok = b.action[1] == ALLOW_ALL
                else:
                    ok = b.action[1].consume()
                if ok:
                    b.allowed += 1
                else:
                    b.denied += 1
        if first:
            self._start_stream()
        return ok

    def current(self, bid):
        """The bucket's action now: None, ("blanket", rule) or ("tb",
        max_tokens, per_fill, interval_s)."""
        with self.lock:
            b = self.buckets.get(self.key(bid))
            if b is None or b.action is None:
                return None
            if b.expires is not None and time.monotonic() >= b.expires:
                return None
            if b.action[0] == "blanket":
                return b.action
            return ("tb",) + b.action[1].key

    def wait(self, pred, timeout_s):
        """Waits until pred(self) (called under the lock) holds or the
        stream ended; returns its last value."""
        end = time.monotonic() + timeout_s
        with self.lock:
            while True:
                v = pred(self)
                left = end - time.monotonic()
                if v or left <= 0 or self.ended is not None:
                    return v
                self.got.wait(min(left, 0.1))

    def close(self):
        """Ends its side of the stream (Envoy shutting down cleanly)."""
        self.stop.set()
        self.q.put(None)
        if self.reader is not None:
            self.ended_ev.wait(5)
        self.channel.close()

    def vanish(self):
        """Disappears without a word: the stream cancelled, nothing more
        sent (a crash, a network partition)."""
        self.stop.set()
        if self.call is not None:
            self.call.cancel()
        self.channel.close()
