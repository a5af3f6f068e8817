"""What the emulator was asked, counted the way AWS bills it, for threadgate's moto launcher.

The bench prices a run from these counts (bench/report/costs.ts), so they are taken where the
calls land, not in the code under test. Every request is counted by caller, service, operation
and resource (table, index, queue, parameter, secret); DynamoDB calls also carry the request
units AWS would bill, worked out from the items as they were before and after the call:

- a write (PutItem, UpdateItem, DeleteItem, each item of a BatchWriteItem, TransactWriteItems ×2)
  costs ceil(max(size before, size after) / 1 KB) write units, at least 1; a write whose
  ConditionExpression fails costs the same on the item as it stands (AWS bills a failed
  conditional write) and touches no index;
- each secondary index the write changes costs its own write units on the index entry's size:
  one write when the item enters or leaves the index or a projected attribute changes, two (a
  delete and a put) when the index key changes;
- a read costs ceil(size / 4 KB) read units per item (GetItem, each key of a BatchGetItem) or
  over the summed size of the items a Query or Scan returned, at least 1, halved when eventually
  consistent (on-demand read request units).

Item sizes follow DynamoDB's rules (attribute name and value bytes, numbers about one byte per
two digits plus one, 3 bytes per list or map plus one per element); moto's own Item.size()
counts numbers as their text, which would overstate them.

The caller comes from the SDK's user agent: `exec-env/AWS_Lambda_…` marks a function (the
local runtime sets AWS_EXECUTION_ENV as Lambda does) and `app/<id>` which one
(AWS_SDK_UA_APP_ID, set per function by the runtime); `threadgate-local-runtime` marks the
runtime itself (the event source mappings' pollers, which Lambda runs for the account); anything
else is the harness (the bench's producer, probes and checks).

Control route (JSON):
  GET    USAGE_PATH   {"since": epoch ms, "calls": [ROW, ...]}
  DELETE USAGE_PATH   starts the counts again

ROW: caller, service, operation, resource, requests, errors (answered >= 400, conditional
failures included), billed_requests (SQS: one per 64 KB chunk of payload), write_units,
index_write_units, read_units, conditional_failures, items_written.
"""

import json
import math
import re
import threading
import time
from urllib.parse import parse_qs

from faults import buffer_body  # beside this file

USAGE_PATH = "/_threadgate/usage"
RUNTIME_AGENT = "threadgate-local-runtime"

_lock = threading.Lock()
_rows = {}
_since = {"t": int(time.time() * 1000)}

_DDB_WRITES = {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}
_DDB_READS = {"GetItem", "BatchGetItem", "Query", "Scan", "TransactGetItems"}
_APP_ID = re.compile(r"(?:^| )app/([^ ]+)")


def caller_of(environ):
    """`function:<app id>`, `function`, `runtime` or `harness`, from the request's user agent."""
    agent = " ".join(environ.get(h, "") for h in ("HTTP_USER_AGENT", "HTTP_X_AMZ_USER_AGENT"))
    if RUNTIME_AGENT in agent:
        return "runtime"
    if "exec-env/AWS_Lambda_" in agent:
        app = _APP_ID.search(agent)
        return "function:%s" % app.group(1) if app else "function"
    return "harness"


# --- DynamoDB item sizes (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html)


def _number_size(text):
    digits = text.lstrip("-").replace(".", "").split("e")[0].split("E")[0].strip("0")
    return (len(digits) + 1) // 2 + 1


def value_size(value):
    """Bytes of one attribute value in DynamoDB's wire form ({"S": "x"}, {"M": {...}}, …)."""
    if not isinstance(value, dict) or len(value) != 1:
        return 0
    (kind, v), = value.items()
    if kind == "S":
        return len(v.encode("utf-8"))
    if kind == "N":
        return _number_size(str(v))
    if kind == "B":
        return len(v) * 3 // 4 if isinstance(v, str) else len(v)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(s.encode("utf-8")) for s in v)
    if kind == "NS":
        return sum(_number_size(str(n)) for n in v)
    if kind == "BS":
        return sum(len(b) for b in v)
    if kind == "L":
        return 3 + sum(1 + value_size(e) for e in v)
    if kind == "M":
        return 3 + sum(1 + len(k.encode("utf-8")) + value_size(e) for k, e in v.items())
    return 0


def item_size(attrs):
    """Bytes of an item ({name: wire value}); 0 for no item."""
    return sum(len(k.encode("utf-8")) + value_size(v) for k, v in (attrs or {}).items())


def _units(size, unit):
    return max(1, math.ceil(size / unit))


# --- the emulated tables


def _backend(region):
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.dynamodb.models import dynamodb_backends

    return dynamodb_backends[DEFAULT_ACCOUNT_ID][region]


def _table(region, name):
    try:
        return _backend(region).get_table(name)
    except Exception:  # no such table: the call fails on its own
        return None


def _stored(table, key):
    """The item under `key` ({name: wire value}) as moto holds it now, or None."""
    from moto.dynamodb.models.dynamo_type import DynamoType

    if table is None or not key or table.hash_key_attr not in key:
        return None
    hash_key = DynamoType(key[table.hash_key_attr])
    range_key = DynamoType(key[table.range_key_attr]) if table.range_key_attr and table.range_key_attr in key else None
    try:
        item = table.get_item(hash_key, range_key)
    except Exception:
        return None
    return json.loads(json.dumps(item.to_json()["Attributes"], default=str)) if item else None


def _key_of(table, item):
    names = [n for n in (table.hash_key_attr, table.range_key_attr) if n] if table else []
    return {n: item[n] for n in names if n in (item or {})}


def _index_entry_size(index, table, item):
    projection = (index.projection or {}).get("ProjectionType", "ALL")
    if projection == "ALL":
        return item_size(item)
    names = set(index.schema_key_attrs) | {n for n in (table.hash_key_attr, table.range_key_attr) if n}
    if projection == "INCLUDE":
        names |= set(index.projection.get("NonKeyAttributes", []))
    return item_size({k: v for k, v in item.items() if k in names})


def index_write_units(table, old, new):
    """Write units the change old → new costs in the table's secondary indexes."""
    total = 0
    for index in (table.global_indexes or []) + (table.indexes or []) if table else []:
        keys = index.schema_key_attrs
        was = bool(old) and all(k in old for k in keys)
        now = bool(new) and all(k in new for k in keys)
        if was and now:
            if any(old[k] != new[k] for k in keys):  # the entry moves: a delete and a put
                total += _units(_index_entry_size(index, table, old), 1024) + _units(_index_entry_size(index, table, new), 1024)
            elif _projected_changed(index, table, old, new):
                total += _units(_index_entry_size(index, table, new), 1024)
        elif now:
            total += _units(_index_entry_size(index, table, new), 1024)
        elif was:
            total += _units(_index_entry_size(index, table, old), 1024)
    return total


def _projected_changed(index, table, old, new):
    projection = (index.projection or {}).get("ProjectionType", "ALL")
    if projection == "ALL":
        return old != new
    names = set(index.schema_key_attrs) | {n for n in (table.hash_key_attr, table.range_key_attr) if n}
    if projection == "INCLUDE":
        names |= set(index.projection.get("NonKeyAttributes", []))
    return any(old.get(n) != new.get(n) for n in names)


def write_targets(operation, body, region):
    """(table, key, multiplier) of each item a write call touches."""
    out = []
    if operation in ("PutItem", "UpdateItem", "DeleteItem"):
        table = _table(region, body.get("TableName"))
        key = body.get("Key") if operation != "PutItem" else _key_of(table, body.get("Item"))
        out.append((table, key, 1))
    elif operation == "BatchWriteItem":
        for name, requests in (body.get("RequestItems") or {}).items():
            table = _table(region, name)
            for request in requests:
                if "PutRequest" in request:
                    out.append((table, _key_of(table, request["PutRequest"].get("Item")), 1))
                elif "DeleteRequest" in request:
                    out.append((table, request["DeleteRequest"].get("Key"), 1))
    elif operation == "TransactWriteItems":
        for entry in body.get("TransactItems") or []:
            for kind, spec in entry.items():
                table = _table(region, spec.get("TableName"))
                key = _key_of(table, spec.get("Item")) if kind == "Put" else spec.get("Key")
                out.append((table, key, 2))  # a transactional write costs two units per 1 KB
    return out


def _read_units(operation, body, answer):
    factor = 1.0
    if operation == "TransactGetItems":
        sizes = [item_size((r or {}).get("Item")) for r in answer.get("Responses") or []]
        return sum(2 * _units(s, 4096) for s in sizes) or 2.0
    if operation == "BatchGetItem":
        units = 0.0
        for name, spec in (body.get("RequestItems") or {}).items():
            f = 1.0 if spec.get("ConsistentRead") else 0.5
            found = (answer.get("Responses") or {}).get(name) or []
            units += sum(f * _units(item_size(i), 4096) for i in found)
            units += f * max(0, len(spec.get("Keys") or []) - len(found))  # a key with no item still costs the minimum
        return units
    if not body.get("ConsistentRead"):
        factor = 0.5
    if operation == "GetItem":
        return factor * _units(item_size(answer.get("Item")), 4096)
    # Query and Scan: the summed size of the items returned, rounded up once.
    return factor * _units(sum(item_size(i) for i in answer.get("Items") or []), 4096)


# --- the counts


def _row(caller, service, operation, resource):
    key = (caller, service, operation, resource)
    row = _rows.get(key)
    if row is None:
        row = _rows[key] = {
            "caller": caller,
            "service": service,
            "operation": operation,
            "resource": resource,
            "requests": 0,
            "errors": 0,
            "billed_requests": 0,
            "write_units": 0,
            "index_write_units": 0,
            "read_units": 0.0,
            "conditional_failures": 0,
            "items_written": 0,
        }
    return row


def _resource(service, body, form):
    if service == "dynamodb":
        name = body.get("TableName") or ",".join(sorted((body.get("RequestItems") or {}).keys()))
        return "%s/%s" % (name, body["IndexName"]) if body.get("IndexName") else name
    if service == "sqs":
        url = body.get("QueueUrl") or (form.get("QueueUrl") or [""])[0]
        return url.rstrip("/").rsplit("/", 1)[-1]
    if service == "ssm":
        return body.get("Name") or ""
    if service == "secretsmanager":
        return body.get("SecretId") or body.get("Name") or ""
    return ""


def _service_of(environ, target):
    if target:
        prefix = target.split(".", 1)[0]
        for marker, name in (("DynamoDBStreams", "dynamodbstreams"), ("DynamoDB", "dynamodb"), ("AmazonSQS", "sqs"),
                             ("AmazonSSM", "ssm"), ("secretsmanager", "secretsmanager"), ("AWSEvents", "events"),
                             ("Logs", "logs"), ("GraniteServiceVersion", "cloudwatch")):
            if prefix.startswith(marker):
                return name
        return prefix.lower()
    auth = environ.get("HTTP_AUTHORIZATION", "")
    scope = re.search(r"Credential=[^/]+/[^/]+/[^/]+/([^/]+)/", auth)
    return scope.group(1) if scope else ""


def _region_of(environ):
    scope = re.search(r"Credential=[^/]+/[^/]+/([^/]+)/", environ.get("HTTP_AUTHORIZATION", ""))
    return scope.group(1) if scope else "us-east-1"


def _operation_of(environ, target, form, service):
    if target:
        return target.split(".", 1)[-1]
    query = parse_qs(environ.get("QUERY_STRING", ""))
    action = (query.get("Action") or form.get("Action") or [""])[0]
    if action:
        return action
    if service == "lambda":  # a REST API: named by its method and path
        return _lambda_operation(environ.get("REQUEST_METHOD", "GET"), environ.get("PATH_INFO", ""))
    return environ.get("REQUEST_METHOD", "GET") + " " + environ.get("PATH_INFO", "")


# Lambda's REST API: (method, path pattern) → the operation's name, for the calls threadgate makes.
_LAMBDA_ROUTES = [
    ("GET", r"/functions/[^/]+/concurrency$", "GetFunctionConcurrency"),
    ("PUT", r"/functions/[^/]+/concurrency$", "PutFunctionConcurrency"),
    ("DELETE", r"/functions/[^/]+/concurrency$", "DeleteFunctionConcurrency"),
    ("POST", r"/functions/[^/]+/invocations$", "Invoke"),
    ("GET", r"/functions/[^/]+/configuration$", "GetFunctionConfiguration"),
    ("GET", r"/functions/[^/]+$", "GetFunction"),
    ("GET", r"/functions/?$", "ListFunctions"),
    ("GET", r"/event-source-mappings/?$", "ListEventSourceMappings"),
    ("GET", r"/event-source-mappings/[^/]+$", "GetEventSourceMapping"),
    ("PUT", r"/event-source-mappings/[^/]+$", "UpdateEventSourceMapping"),
]


def _lambda_operation(method, path):
    rest = re.sub(r"^/\d{4}-\d\d-\d\d", "", path)
    for m, pattern, name in _LAMBDA_ROUTES:
        if m == method and re.search(pattern, rest):
            return name
    return "%s %s" % (method, re.sub(r"/[^/]*[0-9a-f]{8}-[^/]*", "/{id}", rest))


def with_usage(app, write_lock):
    """`app` behind the usage counts and their control route. `write_lock`: the launcher's lock
    on DynamoDB writes (reentrant), held over the item before, the write and the item after."""

    def wrapped(environ, start_response):
        path = environ.get("PATH_INFO", "")
        if path == USAGE_PATH:
            return _control(environ, start_response)
        if path.startswith("/_threadgate/") or path.startswith("/moto-api"):
            return app(environ, start_response)
        raw = buffer_body(environ)
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        try:
            body = json.loads(raw) if raw[:1] == b"{" else {}
        except ValueError:
            body = {}
        form = parse_qs(raw.decode("utf-8", "replace")) if b"Action=" in raw[:200] else {}
        service = _service_of(environ, target)
        operation = _operation_of(environ, target, form, service)
        caller = caller_of(environ)
        region = _region_of(environ)
        answered = {}

        def note(status, headers, exc_info=None):
            answered["status"] = int(status.split(" ", 1)[0])
            return start_response(status, headers, exc_info)

        writes = service == "dynamodb" and operation in _DDB_WRITES
        if writes:
            with write_lock:
                targets = write_targets(operation, body, region)
                before = [_stored(t, k) for t, k, _ in targets]
                chunks = list(app(environ, note))
                after = [_stored(t, k) for t, k, _ in targets]
        else:
            chunks = list(app(environ, note))
        status = answered.get("status", 0)
        answer_bytes = sum(len(c) for c in chunks)
        with _lock:
            row = _row(caller, service, operation, _resource(service, body, form))
            row["requests"] += 1
            if status >= 400:
                row["errors"] += 1
            row["billed_requests"] += max(1, math.ceil(max(len(raw), answer_bytes) / 65536)) if service == "sqs" else 1
            condition_failed = status == 400 and any(b"ConditionalCheckFailed" in c for c in chunks)
            if writes and (status < 300 or condition_failed):
                failed = status >= 300
                row["conditional_failures"] += 1 if failed else 0
                for (table, _, multiplier), old, new in zip(targets, before, after):
                    row["write_units"] += multiplier * _units(max(item_size(old), item_size(new)), 1024)
                    if not failed:
                        row["items_written"] += 1
                        row["index_write_units"] += multiplier * index_write_units(table, old, new)
            elif service == "dynamodb" and operation in _DDB_READS and status < 300:
                try:
                    answer = json.loads(b"".join(chunks) or b"{}")
                except ValueError:
                    answer = {}
                row["read_units"] += _read_units(operation, body, answer)
        return chunks

    return wrapped


def _control(environ, start_response):
    if environ.get("REQUEST_METHOD") == "DELETE":
        with _lock:
            _rows.clear()
            _since["t"] = int(time.time() * 1000)
    with _lock:
        body = {"since": _since["t"], "calls": sorted(_rows.values(), key=lambda r: (r["caller"], r["service"], r["operation"], r["resource"]))}
        data = json.dumps(body).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
    return [data]
