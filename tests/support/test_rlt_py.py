"""rlt.py's cleanup of a script cut short: a script that imports rlt and
is sent SIGTERM (as ctest's and tests/run.sh's timeouts do) kills every
process it started, whether it listed it in its procs or not, keeps its
logs and exits with 128 + 15. Run as
    test_rlt_py.py REDIS_SERVER
it starts itself as such a script (the child mode below: a redis-server
through rlt.start_redis and a `sleep` it lists nowhere), waits until both
run, sends the SIGTERM and checks that neither survives. What the child
started is killed by pid at the end in any case."""
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rlt  # noqa: E402


def child(redis, tmp):
    procs = []
    rlt.start_redis(tmp, [], redis, procs)
    quiet = subprocess.Popen(["sleep", "600"])  # in no list
    with open(os.path.join(tmp, "pids.tmp"), "w") as f:
        f.write("%d %d\n" % (procs[0].pid, quiet.pid))
    os.rename(os.path.join(tmp, "pids.tmp"), os.path.join(tmp, "pids"))
    time.sleep(600)  # until the signal
    rlt.end_run([], procs, tmp)


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead, only not reaped yet (by a parent other than us).
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def main(redis):
    fails = []
    tmp = tempfile.mkdtemp(prefix="rlt-py-")
    pids = []
    p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "child",
                          redis, tmp], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    try:
        end = time.time() + 20
        while not os.path.exists(os.path.join(tmp, "pids")):
            if p.poll() is not None or time.time() > end:
                raise RuntimeError("the child did not start its processes:\n"
                                   + (p.communicate(timeout=5)[0] or ""))
            time.sleep(0.01)
        with open(os.path.join(tmp, "pids")) as f:
            pids = [int(x) for x in f.read().split()]
        for pid in pids:
            if not alive(pid):
                fails.append("pid %d was not running before the signal" % pid)
        p.send_signal(signal.SIGTERM)
        out = p.communicate(timeout=20)[0]
        if p.returncode != 128 + signal.SIGTERM:
            fails.append("exit status %s, want 143; output:\n%s"
                         % (p.returncode, out))
        if "killed the 2 processes it started" not in out:
            fails.append("no word of the two processes killed:\n" + out)
        for pid in pids:
            if alive(pid):
                fails.append("pid %d outlived the script" % pid)
        logs = [n for n in os.listdir(tmp) if n.startswith("redis-")]
        if not logs:
            fails.append("the redis-server's log was not kept")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        for pid in pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    for f in fails:
        print("FAIL", f)
    if not fails:
        print("ok   SIGTERM: the redis-server and the unlisted child are "
              "gone, the log is kept, exit 143")
    rlt.end_run(fails, [], tmp)


if __name__ == "__main__":
    if sys.argv[1] == "child":
        child(sys.argv[2], sys.argv[3])
    else:
        main(sys.argv[1])
