"""A control plane for the tests: a state-of-the-world aggregated
discovery service (grpcio) pushing RateLimitConfig versions, as Envoy
Gateway's serves envoy-ratelimit. Import after rlt.xds_stubs(PROTO_DIR,
TMP) has put the generated stubs on sys.path."""
import queue
import threading
from concurrent import futures

import grpc
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2

TYPE = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"


class ADS(ads_pb2_grpc.AggregatedDiscoveryServiceServicer):
    """State of the world: every stream gets the current response when it
    opens and every push after; every request read is kept."""

    def __init__(self):
        self.cv = threading.Condition()
        self.requests = []
        self.streams = []
        self.current = None

    def StreamAggregatedResources(self, it, ctx):
        q = queue.Queue()
        with self.cv:
            self.streams.append(q)
            if self.current is not None:
                q.put(self.current)

        def reader():
            try:
                for r in it:
                    with self.cv:
                        self.requests.append(r)
            except grpc.RpcError:
                pass
        threading.Thread(target=reader, daemon=True).start()
        while ctx.is_active():
            try:
                m = q.get(timeout=0.05)
            except queue.Empty:
                continue
            yield m

    def push(self, version, confs):
        r = discovery_pb2.DiscoveryResponse(version_info=version,
                                            nonce="nonce-" + version,
                                            type_url=TYPE)
        for c in confs:
            a = r.resources.add()
            a.type_url = TYPE
            a.value = c.SerializeToString()
        with self.cv:
            self.current = r
            for q in self.streams:
                q.put(r)
        return r.nonce

    def push_raw(self, version, blobs):
        """As push, with each resource's bytes given serialized."""
        r = discovery_pb2.DiscoveryResponse(version_info=version,
                                            nonce="nonce-" + version,
                                            type_url=TYPE)
        for b in blobs:
            a = r.resources.add()
            a.type_url = TYPE
            a.value = b
        with self.cv:
            self.current = r
            for q in self.streams:
                q.put(r)

    def answer_to(self, nonce):
        """The request that answered the response with this nonce."""
        with self.cv:
            for r in self.requests:
                if r.response_nonce == nonce:
                    return r
        return None


    def acked(self, nonce):
        """True once the response with this nonce was ACKed (answered
        without an error)."""
        r = self.answer_to(nonce)
        return r is not None and not r.HasField("error_detail")

def serve(ads, port, creds=None):
    s = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    ads_pb2_grpc.add_AggregatedDiscoveryServiceServicer_to_server(ads, s)
    if creds is None:
        got = s.add_insecure_port("127.0.0.1:%d" % port)
    else:
        got = s.add_secure_port("127.0.0.1:%d" % port, creds)
    s.start()
    return s, got

