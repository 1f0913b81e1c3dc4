#!/usr/bin/python3
"""Writes the seed corpus of fuzz_xds_conf.c (tests/fuzz/corpus/xds_conf/):
DiscoveryResponses a control plane could send (nested descriptors, every
RateLimitConfig field, metadata, strings that would be YAML if written
bare, another resource type, an empty world). Needs grpcio-tools (Debian's
/usr/bin/python3 has it); stubs are generated from proto/ into a temporary
directory. Run from anywhere; rewrites the seeds."""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = os.path.join(HERE, "..", "..", "proto")
OUT = os.path.join(HERE, "corpus", "xds_conf")
TMP = tempfile.mkdtemp(prefix="rl-xds-seeds-")
subprocess.check_call([sys.executable, "-m", "grpc_tools.protoc", "-I", PROTO,
                       "--python_out=" + TMP,
                       "envoy/service/discovery/v3/discovery.proto",
                       "envoy/config/core/v3/node.proto",
                       "google/rpc/status.proto",
                       "ratelimit/config/ratelimit/v3/rls_conf.proto"])
sys.path.insert(0, TMP)
from envoy.service.discovery.v3 import discovery_pb2  # noqa: E402
from ratelimit.config.ratelimit.v3 import rls_conf_pb2 as rc  # noqa: E402

TYPE = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"


def resp(version, confs, type_url=TYPE):
    r = discovery_pb2.DiscoveryResponse(version_info=version, nonce="n-" +
                                        version, type_url=TYPE)
    for c in confs:
        a = r.resources.add()
        a.type_url = type_url
        a.value = c.SerializeToString()
    return r.SerializeToString()


def D(key, value="", unit=0, rpu=0, **kw):
    d = rc.RateLimitDescriptor(key=key, value=value, **kw)
    if unit or rpu or kw.get("shadow_mode"):
        d.rate_limit.unit = unit
        d.rate_limit.requests_per_unit = rpu
    return d


seeds = {}
basic = rc.RateLimitConfig(name="a", domain="mongo_cps", descriptors=[
    D("database", "users", rc.SECOND, 500, descriptors=[
        D("tenant", "gold", rc.MINUTE, 7), D("tenant", "", rc.HOUR, 3)]),
    D("path", "/x", rc.DAY, 9, shadow_mode=True)])
unl = rc.RateLimitConfig(name="b", domain="other")
d = unl.descriptors.add(key="remote_address")
d.rate_limit.unlimited = True
seeds["basic"] = resp("1", [basic, unl])
every = rc.RateLimitConfig(name="every", domain="d")
d = every.descriptors.add(key="k", value="v", detailed_metric=True,
                          quota_mode=True, shadow_mode=True)
d.rate_limit.unit = rc.WEEK
d.rate_limit.requests_per_unit = 5
d.rate_limit.name = "n"
d.rate_limit.replaces.add(name="old")
d.metadata.fields["s"].string_value = "x\"y"
d.metadata.fields["n"].number_value = 1.5
d.metadata.fields["l"].list_value.values.add().bool_value = True
d.metadata.fields["m"].struct_value.fields["z"].null_value = 0
seeds["every_field"] = resp("2", [every])
inj = rc.RateLimitConfig(name="i\n:x", domain="a\"\n- evil: [", descriptors=[
    D("k\\\"", "v\n  unlimited: true\u2028\x01", rc.SECOND, 1)])
seeds["injection"] = resp("3", [inj])
seeds["other_type"] = resp("4", [basic], "type.googleapis.com/x.Y")
seeds["empty_world"] = resp("5", [])
deep = D("k", "", rc.SECOND, 1)
for _ in range(12):
    deep = D("k", "", rc.SECOND, 1, descriptors=[deep])
seeds["deep"] = resp("6", [rc.RateLimitConfig(name="deep", domain="d",
                                              descriptors=[deep])])
os.makedirs(OUT, exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)
