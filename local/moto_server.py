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
threadgate's one-solve-per-record rests on it, so this launcher serializes DynamoDB writes,
and each SQS ReceiveMessage pass (one message must never go to two receivers).

Prints one JSON line {"port": N} on stdout once the server listens, then serves until
stdin closes or the process is signalled.
"""

import argparse
import functools
import json
import os
import signal
import sys
import threading
import time

try:
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.table import Table as DynamoDBTable
    from moto.moto_server.threaded_moto_server import ThreadedMotoServer
    from moto.sqs import models as sqs_models
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

_dynamodb_write_lock = threading.RLock()


def _serialized(method):
    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        with _dynamodb_write_lock:
            return method(*args, **kwargs)

    return wrapper


for _name in ("put_item", "update_item", "delete_item", "transact_write_items", "batch_write_item"):
    if hasattr(DynamoDBBackend, _name):
        setattr(DynamoDBBackend, _name, _serialized(getattr(DynamoDBBackend, _name)))

# ReceiveMessage picks and marks messages without a lock too: two concurrent receives were handed
# the same message. Each pass over the queue runs under a lock here; a long poll waits for new
# messages outside it (moto's own condition wakes it), so receives stay concurrent like Lambda's
# pollers and a waiting long poll never holds up another receive.
_sqs_receive_lock = threading.Lock()
_receive_message = sqs_models.SQSBackend.receive_message


def _locked_receive(self, queue_name, count, wait_seconds_timeout, visibility_timeout, *args, **kwargs):
    end = time.monotonic() + (wait_seconds_timeout or 0)
    while True:
        with _sqs_receive_lock:
            result = _receive_message(self, queue_name, count, 0, visibility_timeout, *args, **kwargs)
        left = end - time.monotonic()
        if result or left <= 0:
            return result
        self.get_queue(queue_name).wait_for_messages(min(left, 1.0))


sqs_models.SQSBackend.receive_message = _locked_receive


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()

    server = ThreadedMotoServer(ip_address=args.host, port=args.port, verbose=False)
    server.start()
    _, port = server.get_host_and_port()
    _base_url["value"] = "http://localhost:%d" % port
    sys.stdout.write(json.dumps({"port": port}) + "\n")
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

    def watch_parent(parent=os.getppid()):
        # Belt and braces for a parent that dies while another process still holds our stdin.
        while os.getppid() == parent and not done.wait(1):
            pass
        done.set()

    threading.Thread(target=watch_parent, daemon=True).start()
    done.wait()
    server.stop()


if __name__ == "__main__":
    main()
