"""Launch moto's server for threadgate's local stack.

moto runs an enabled SQS event source mapping itself, synchronously inside SendMessage,
by invoking the function in Docker. These machines have no Docker engine, so that path
fails after bumping the message's receive count. threadgate's local runtime is the poller,
so this launcher makes every queue's mapping registry a write-only sink: moto still stores
and reports the mappings through the Lambda API, but SendMessage never invokes anything.
DynamoDB stream mappings get the same treatment (moto would invoke inside each table write).

moto also checks a DynamoDB ConditionExpression and applies the write without a lock, so two
concurrent conditional writes to one item can both succeed (measured: 5 concurrent claims of
one key had more than one winner in 16 of 40 rounds). Real DynamoDB never allows that and
threadgate's one-solve-per-record rests on it, so this launcher serializes DynamoDB writes
(and serves reads under the same lock: moto would answer a read with half a write),
and every change to an SQS queue's messages (one message must never go to two receivers, and
a delete must not undo another delete or drop a send).

It serves HTTP/1.1 keep-alive (_KeepAliveHandler below): werkzeug's development server closes
every connection after its answer, so each call paid a connection and a server thread.

moto's CloudFormation skips AWS::CloudWatch::Alarm; stack_alarms.py (beside it) puts the stack's
alarms, which moto stores but never evaluates (the local runtime does).

It also answers one route of its own, WAKE_PATH, for the local runtime's pollers: a wait that
returns when a queue has visible messages or an event source mapping's settings change, without
receiving anything (see _wake below). faults.py (beside it) adds routes that make chosen calls
fail with an AWS error, and a log of the requests served, for tests and the chaos run; usage.py
counts every request by caller, service and operation with DynamoDB's request units, for the bench's bill.

Prints one JSON line {"port": N, "pid": P} on stdout once the server listens, then serves until
stdin closes or the process is signalled.
"""

import argparse
import functools
import io
import json
import logging
import os
import signal
import sys
import threading
import time
from urllib.parse import parse_qs

from faults import record_shed, with_faults  # beside this file: chosen calls fail on the wire, and a request log
from served_lock import ClientGone, ServedLock, served  # beside this file: calls whose client left are not served
from usage import with_usage  # beside this file: every request counted as AWS bills it

try:
    import moto.backends as moto_backends
    import moto.core.responses as moto_responses
    from moto.awslambda.models import lambda_backends
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.table import Table as DynamoDBTable
    from moto.dynamodb.responses import DynamoHandler
    from moto.moto_server.threaded_moto_server import ThreadedMotoServer
    from moto.moto_server.werkzeug_app import (
        DEFAULT_SERVICE_REGION,
        DomainDispatcherApplication,
        create_backend_app,
    )
    from moto.sqs import models as sqs_models
    from werkzeug.serving import WSGIRequestHandler, make_server

    import stack_alarms  # noqa: F401  beside this file: moto's CloudFormation gets the stack's alarms
except ImportError as exc:  # pragma: no cover - depends on the machine
    sys.stderr.write(
        "threadgate: python3 cannot import moto's server (%s).\n"
        "Install it with: python3 -m pip install 'moto[server]>=5,<6'\n" % exc
    )
    sys.exit(3)


class _Sink(dict):
    """A mapping registry that forgets whatever is put in it."""

    def __setitem__(self, key, value):
        pass


def _no_queue_mappings(self):
    return _Sink()


def _ignore(self, value):
    pass


sqs_models.Queue.lambda_event_source_mappings = property(_no_queue_mappings, _ignore)
# The same for a DynamoDB table's stream mappings: moto would invoke the function (in Docker)
# inside every write to the table, and empty the stream when that returned. The local runtime
# reads the stream through the DynamoDB Streams API instead.
DynamoDBTable.lambda_event_source_mappings = property(_no_queue_mappings, _ignore)

# A queue created by CloudFormation gets moto's AWS-style URL (https://sqs.REGION.amazonaws.com/…)
# as its Ref, so stack outputs and function environments carry a host that is not the emulator,
# and the AWS SDK for JavaScript sends requests to a QueueUrl's own host unless the client sets
# an explicit endpoint. Like LocalStack, hand out URLs on the emulator itself instead. (Queues
# created through the SQS API already get the request's host.)
_base_url = {"value": None}


def _queue_url(self):
    if _base_url["value"]:
        return f"{_base_url['value']}/{self.account_id}/{self.name}"
    return f"https://sqs.{self.region}.amazonaws.com/{self.account_id}/{self.name}"


sqs_models.Queue.physical_resource_id = property(_queue_url)

_dynamodb_write_lock = ServedLock()


def _under(lock, method):
    """`method`, run while holding `lock`."""

    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        with lock:
            return method(*args, **kwargs)

    return wrapper


for _name in ("put_item", "update_item", "delete_item", "transact_write_items", "batch_write_item"):
    if hasattr(DynamoDBBackend, _name):
        setattr(DynamoDBBackend, _name, _under(_dynamodb_write_lock, getattr(DynamoDBBackend, _name)))

# moto applies an UpdateItem to the stored item one action at a time (a new item is stored with
# only its key first) and serves reads from that same item, so a concurrent read could answer
# with half a write: an outcome row with its status and without its reason (measured: torn
# items in every read kind, test/integration/local/emulator/whole-writes.test.ts). Real DynamoDB
# applies an item's write whole, so reads are served under the write lock too, up to their
# serialized answer (DynamoResult copies the items while the handler runs).
for _name in ("get_item", "batch_get_item", "query", "scan", "transact_get_items"):
    if hasattr(DynamoHandler, _name):
        setattr(DynamoHandler, _name, _under(_dynamodb_write_lock, getattr(DynamoHandler, _name)))

# moto's SQS changes a queue's message list without a lock too. Two concurrent receives were
# handed the same message; a delete rebuilds the list and assigns it back, so a delete running
# beside another delete brings that one's message back (it is received again after its
# visibility timeout: measured, 15 of 5,250 deletes in a 50-slot load run), and beside a send it
# drops the new message. Every change to a queue's messages (a receive pass, a send, a delete, a
# visibility change, a purge) runs under one lock here. A long poll waits for new messages
# outside it (moto's own condition wakes it), so receives stay concurrent like Lambda's pollers
# and a waiting long poll never holds up another call. Reentrant: a batch delete calls the single
# one, and a receive pass moves messages to a dead-letter queue with add_message.
_sqs_queue_lock = ServedLock()
_receive_message = sqs_models.SQSBackend.receive_message


def _locked_receive(self, queue_name, count, wait_seconds_timeout, visibility_timeout, *args, **kwargs):
    end = time.monotonic() + (wait_seconds_timeout or 0)
    while True:
        with _sqs_queue_lock:
            result = _receive_message(self, queue_name, count, 0, visibility_timeout, *args, **kwargs)
        left = end - time.monotonic()
        if result or left <= 0:
            return result
        self.get_queue(queue_name).wait_for_messages(min(left, 1.0))


sqs_models.SQSBackend.receive_message = _locked_receive
sqs_models.Queue.add_message = _under(_sqs_queue_lock, sqs_models.Queue.add_message)
sqs_models.Queue.delete_message = _under(_sqs_queue_lock, sqs_models.Queue.delete_message)
for _name in ("change_message_visibility", "purge_queue"):
    setattr(sqs_models.SQSBackend, _name, _under(_sqs_queue_lock, getattr(sqs_models.SQSBackend, _name)))

# Time in SQS. moto asks each message whether it is visible and whether it is delayed by taking
# the time as a datetime (utcnow, then subtracting utcfromtimestamp(0)) once per message per
# question, and its receive checks each candidate message's retention by computing every queue
# attribute (three passes over all of the queue's messages, each taking the time per message).
# In a load run at cap 50 that was most of moto's CPU (a sampling profile: GetQueueAttributes and
# ReceiveMessage over a few hundred queued messages spent 70 % of the server's request handling in
# those time conversions), so moto fell behind as the queue grew. The same values, cheaply: the
# epoch time from time.time(), and the retention period read from the queue itself. With 500
# messages queued, a GetQueueAttributes went from 8.8 ms to 0.4 ms and a receive from 31 ms to
# 0.2 ms of the server's one core.
_unix_time = sqs_models.unix_time


def _fast_unix_time(dt=None):
    return time.time() if dt is None else _unix_time(dt)


sqs_models.unix_time = _fast_unix_time
sqs_models.unix_time_millis = lambda dt=None: _fast_unix_time(dt) * 1000.0


def _retained(self, queue_name, message):
    retention_s = int(self.get_queue(queue_name).message_retention_period)
    return retention_s + message.sent_timestamp / 1000 > time.time()


sqs_models.SQSBackend.is_message_valid_based_on_retention_period = _retained

# Routing. moto's dispatcher picks each request's backend under one lock shared by every request,
# and inside it lists moto's package directory on disk (an isdir call per entry) and then tries
# the URL patterns of every backend. threadgate sends everything to one host, so each call to the
# emulator waited there for every other: profiling a benchmark at time scale 0.2 found about two
# fifths of the server's request-handling samples in that routing, most of them waiting for the
# lock. The directory listing is fixed for the process and a host's backend does not change, so
# both are computed once; the lock now guards only the one-time creation of a backend's app.
_moto_modules = frozenset(moto_backends.list_of_moto_modules())
moto_backends.list_of_moto_modules = lambda: _moto_modules
_backend_of_host = {}
_backend_for_host = DomainDispatcherApplication.get_backend_for_host


def _cached_backend_for_host(self, host):
    if host not in _backend_of_host:
        _backend_of_host[host] = _backend_for_host(self, host)
    return _backend_of_host[host]


def _get_application(self, environ):
    """moto's get_application, with the backend found outside the lock (see above)."""
    path_info = environ.get("PATH_INFO", "")
    if isinstance(path_info, bytes):
        path_info = path_info.decode("utf-8")
    if path_info.startswith("/moto-api") or path_info == "/favicon.ico":
        host = "moto_api"
    elif path_info.startswith("/latest/meta-data/") or path_info.startswith("/latest/api/"):
        host = "instance_metadata"
    else:
        host = None
    backend = self.get_backend_for_host(host)
    if not backend:
        host = self.infer_service_region_host(environ, path_info)
        if host is None:
            service, region = DEFAULT_SERVICE_REGION
            host = f"{service}.{region}.amazonaws.com"
        backend = self.get_backend_for_host(host)
    app = self.app_instances.get(backend)
    if app is None:
        with self.lock:
            app = self.app_instances.get(backend)
            if app is None:
                app = self.create_app(backend)
                self.app_instances[backend] = app
    return app


DomainDispatcherApplication.get_backend_for_host = _cached_backend_for_host
DomainDispatcherApplication.get_application = _get_application

# Each request's action is looked up in the names of its responses class's methods, which moto
# lists afresh per request (inspect.getmembers over the whole class: 2-3 % of a server's request
# handling in a profile of the e2e suite). A class's methods do not change: list them once.
moto_responses.method_names_from_class = functools.cache(moto_responses.method_names_from_class)

# Many server threads share one GIL: with Python's default 5 ms switch interval a short request
# that wakes while another thread computes waits up to 5 ms each time it needs the GIL back
# (after every socket read and write). A shorter interval trades a little throughput for much
# shorter waits, which is what the functions' serial calls feel.
sys.setswitchinterval(0.001)

# werkzeug logs every request to stderr, coloured, under a lock: a few per cent of the server's
# time, and nobody reads it (local/emulator/moto.ts keeps only the tail, for errors, which still appear).
logging.getLogger("werkzeug").setLevel(logging.WARNING)

# The local runtime's wake-up (local/runtime/pollers/queue-watch.ts). Lambda's pollers long-poll, so a
# message sent to an empty queue is picked up at once; a long ReceiveMessage here would take a
# message even after the mapping was disabled while it waited (its receive count grows). This
# wait receives nothing: it returns as soon as the queue has a visible message (when asked to)
# or the mapping's settings (or its function's reserved concurrency) differ from the version the
# caller already has, so a poller sleeps until there is work and learns of a disable or a new cap
# within CHECK_S, without reading the mapping before every receive.
WAKE_PATH = "/_threadgate/wake"
CHECK_S = 0.05
MAX_WAIT_S = 20.0
_MAPPING_FIELDS = ("State", "BatchSize", "ScalingConfig", "FunctionResponseTypes")


def _mapping_view(account, region, uuid):
    """The mapping's settings and its function's reserved concurrency: what a poller's limit rests on."""
    backend = lambda_backends[account][region]
    esm = backend.get_event_source_mapping(uuid)
    if esm is None:
        return None
    conf = esm.get_configuration()
    view = {k: conf[k] for k in _MAPPING_FIELDS if k in conf}
    try:
        reserved = backend.get_function(esm.function_arn).reserved_concurrency
    except Exception:  # the function is gone: the mapping alone
        reserved = None
    view["ReservedConcurrentExecutions"] = None if reserved is None else int(reserved)
    return view


def _wake(environ):
    q = parse_qs(environ.get("QUERY_STRING", ""))

    def one(name, default=""):
        return (q.get(name) or [default])[0]

    _, _, _, region, account, queue_name = one("queue_arn").split(":")
    uuid = one("mapping")
    seen = one("seen")
    want_messages = one("messages") == "1"
    end = time.monotonic() + min(float(one("timeout", "10")), MAX_WAIT_S)
    queue = sqs_models.sqs_backends[account][region].get_queue(queue_name)
    while True:
        mapping = _mapping_view(account, region, uuid)
        version = json.dumps(mapping, sort_keys=True)
        visible = len(queue.messages)
        if version != seen or (want_messages and visible) or time.monotonic() >= end:
            return {"mapping": mapping, "version": version, "visible": visible}
        with queue._messages_lock:
            # New messages notify this condition; a message whose visibility timeout ran out
            # does not, so the wait is cut into CHECK_S pieces (that also bounds a mapping change).
            if not (want_messages and queue.messages):
                queue._messages_lock.wait(min(CHECK_S, max(0.0, end - time.monotonic())))


def _with_wake(app):
    def wrapped(environ, start_response):
        if environ.get("PATH_INFO") != WAKE_PATH:
            return app(environ, start_response)
        try:
            body, status = json.dumps(_wake(environ)).encode(), "200 OK"
        except Exception as exc:  # a bad query or an unknown queue: the caller falls back
            body, status = json.dumps({"error": repr(exc)}).encode(), "400 Bad Request"
        start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]

    return wrapped


class _KeepAliveHandler(WSGIRequestHandler):
    """werkzeug's request handler, with HTTP/1.1 keep-alive.

    werkzeug's development server closes the connection after every answer (and then waits for
    the client to close it), so every AWS call the local stack makes opened a TCP connection and
    started a server thread for itself: about half of moto's CPU per call, and the clients'
    connect and close on top. moto[server] brings no WSGI server but werkzeug's, and werkzeug
    has no switch for keep-alive, so this handler reads each request's body whole, answers with
    a Content-Length, and keeps the connection for the client's next request, as AWS's
    endpoints do. werkzeug's request parsing and its WSGI environ are kept as they are.
    """

    protocol_version = "HTTP/1.1"
    # The headers and the body are two writes: without TCP_NODELAY the body would wait for the
    # client's delayed ACK of the headers (40 ms a call).
    disable_nagle_algorithm = True

    def run_wsgi(self):
        environ = self.make_environ()
        try:
            # The body, read whole (de-chunked by werkzeug when chunked), so the stream stands at
            # the next request whatever the app reads.
            if environ.get("wsgi.input_terminated"):
                body = environ["wsgi.input"].read()
            else:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length > 0 else b""
        except (ConnectionError, TimeoutError):
            self.close_connection = True
            return
        environ.pop("wsgi.input_terminated", None)
        environ.pop("HTTP_TRANSFER_ENCODING", None)
        environ["wsgi.input"] = io.BytesIO(body)
        environ["CONTENT_LENGTH"] = str(len(body))
        answer = {}
        chunks = []

        def start_response(status, headers, exc_info=None):
            answer["status"], answer["headers"] = status, headers
            return chunks.append

        served.connection = self.connection
        try:
            result = self.server.app(environ, start_response)
            try:
                chunks.extend(result)
            finally:
                getattr(result, "close", lambda: None)()
        except ClientGone:  # nobody to answer (served_lock.py): the request log notes it, status 499
            record_shed(environ)
            self.close_connection = True
            return
        except Exception:  # answered as a 500 and the connection closed, as werkzeug's own server does
            logging.getLogger("werkzeug").exception("error on %s %s", self.command, self.path)
            answer, chunks = {"status": "500 Internal Server Error", "headers": []}, [b"Internal Server Error"]
            self.close_connection = True
        finally:
            served.connection = None
        payload = b"".join(chunks)
        code, _, reason = answer["status"].partition(" ")
        code = int(code)
        self.send_response(code, reason)
        bodiless = self.command == "HEAD" or code < 200 or code in (204, 304)
        for name, value in answer["headers"]:
            lower = name.lower()
            if lower in ("connection", "transfer-encoding") or (lower == "content-length" and not bodiless):
                continue
            self.send_header(name, value)
        if not bodiless:
            self.send_header("Content-Length", str(len(payload)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if not bodiless:
            self.wfile.write(payload)
        self.wfile.flush()


class _Server(ThreadedMotoServer):
    """moto's threaded server with the wake route, the usage counts (usage.py), then fault injection (faults.py), in front of moto's own dispatcher."""

    def _server_entry(self):
        app = with_faults(
            DomainDispatcherApplication(create_backend_app),
            {"dynamodb": _dynamodb_write_lock, "sqs": _sqs_queue_lock},
        )
        self._server = make_server(
            self._ip_address,
            self._port,
            _with_wake(with_usage(app, _dynamodb_write_lock)),
            threaded=True,
            request_handler=_KeepAliveHandler,
        )
        self._server_ready_event.set()
        self._server.serve_forever()


def main(watch_parent=True):
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()

    server = _Server(ip_address=args.host, port=args.port, verbose=False)
    server.start()
    _, port = server.get_host_and_port()
    _base_url["value"] = "http://localhost:%d" % port
    sys.stdout.write(json.dumps({"port": port, "pid": os.getpid()}) + "\n")
    sys.stdout.flush()

    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())

    def wait_stdin():
        # The parent holds our stdin open; when it dies, stdin closes and we stop with it.
        try:
            while sys.stdin.read(1024):
                pass
        finally:
            done.set()

    threading.Thread(target=wait_stdin, daemon=True).start()

    def watch(parent=os.getppid()):
        # Belt and braces for a parent that dies while another process still holds our stdin.
        while os.getppid() == parent and not done.wait(1):
            pass
        done.set()

    if watch_parent:
        threading.Thread(target=watch, daemon=True).start()
    done.wait()
    server.stop()


if __name__ == "__main__":
    main()
