"""A moto server factory for runs that start many emulators (the test suite starts dozens).

Each moto_server.py launch pays about 3 s of CPU before it serves its first calls: the
launcher's imports (moto, flask, werkzeug, about 0.9 s here), then on first use each service's
modules (moto.ssm imports moto.ec2: about 1.3 s; CloudFormation 0.4 s). This process pays that
once. It imports the launcher and the services the stack uses, builds each service's app (which
also creates the default account's empty us-east-1 backends the first request would create),
then listens on a Unix socket. Every connection is one server: the connection sends one JSON
line {"port": N, "env": {...}}, and a child forked from here runs moto_server.main with the
connection as its stdin, stdout and stderr. The child is then what a launch would be: it prints
{"port": N, "pid": P} once it listens, logs to the connection, and stops when the connection
closes or it is signalled. Its moto state is its own from the fork on.

Prints {"zygote": PATH} on stdout once it listens; stops when stdin closes or its parent dies.
Exits 3, like the launcher, when python3 cannot import moto's server. Hand-written: moto has no
pre-forking mode, and multiprocessing's forkserver hands out Python calls, not processes that
take over a connection's file descriptors.
"""

import gc
import json
import os
import random
import select
import socket
import sys
import traceback

import moto_server  # beside this file; exits 3 when moto's server is not importable
from moto.core.utils import get_pagination_model, get_service_model
from moto.moto_api._internal import mock_random
from moto.moto_server.werkzeug_app import create_backend_app

# What the deployed stack, `cdk bootstrap` and the CLI call (a service left out still works:
# the child imports it on first use, as a launch does).
SERVICES = (
    "cloudformation",
    "cloudwatch",
    "dynamodb",
    "dynamodbstreams",
    "ecr",
    "events",
    "iam",
    "kms",
    "lambda",
    "logs",
    "s3",
    "secretsmanager",
    "sqs",
    "ssm",
    "sts",
)


def _read_line(conn):
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(4096)
        if not chunk:
            return None
        data += chunk
    return json.loads(data)


def _serve(conn, request):
    """In the forked child: become a launched server whose stdio is the connection."""
    for fd in (0, 1, 2):
        os.dup2(conn.fileno(), fd)
    conn.close()
    os.environ.update(request.get("env") or {})
    # The fork copied the generators' state: reseed, or every server hands out the same ids.
    random.seed()
    mock_random.seed()
    sys.argv = [moto_server.__file__, "--port", str(int(request.get("port") or 0))]
    # Its lifetime is the connection's: a server outlives the zygote that forked it.
    moto_server.main(watch_parent=False)


def _reap():
    """Waits for the servers that have exited. Waited for, their CPU time counts as this
    process's children's, as a launched server's counts as its parent's: `time` over a test run
    shows it (left to the system, it would not)."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass  # none left


def main():
    path = sys.argv[1]
    for service in SERVICES:
        create_backend_app(service)  # imports the service's backend and creates its default one
        # Its API model too: moto parses botocore's JSON on a server's first call to a service
        # (30-60 ms of CPU apiece, most of it botocore listing its data folders), once per server
        # otherwise. Both are cached per process (functools.cache), so the children inherit them.
        get_service_model(service)
        get_pagination_model(service)
    # Everything imported so far lives as long as every server: out of the collector's sight,
    # it is neither traversed by each child's full collections nor copied into each child by them.
    gc.freeze()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    sys.stdout.write(json.dumps({"zygote": path}) + "\n")
    sys.stdout.flush()
    parent = os.getppid()
    # One thread only, so that fork() copies a consistent process: no watcher threads here.
    try:
        while os.getppid() == parent:
            ready, _, _ = select.select([listener, 0], [], [], 1.0)
            _reap()
            if 0 in ready and not os.read(0, 1024):
                break
            if listener not in ready:
                continue
            conn, _ = listener.accept()
            try:
                request = _read_line(conn)
            except (OSError, ValueError):
                request = None
            if request is None:
                conn.close()
                continue
            if os.fork() == 0:
                listener.close()
                code = 0
                try:
                    _serve(conn, request)
                except BaseException:  # noqa: B036 - the child must never return into this loop
                    traceback.print_exc()
                    code = 1
                finally:
                    sys.stderr.flush()
                    os._exit(code)
            conn.close()
    finally:
        listener.close()
        os.unlink(path)
        _reap()


if __name__ == "__main__":
    main()
