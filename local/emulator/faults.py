"""Fault injection and a request log for threadgate's moto launcher (local/emulator/moto_server.py).

Tests and the chaos run make the emulator fail chosen calls on the wire, the way DynamoDB or
SQS would (throttling, a 500 after the SDK's retries, a write that landed but whose answer was
lost), and read back what the emulator was asked, without touching the code under test.

Control routes (JSON):
  POST   FAULTS_PATH  {"rules": [RULE, ...]}  adds rules, answers {"ids": [...]}
  GET    FAULTS_PATH                          every rule with `seen` (matching calls) and `failed`
  DELETE FAULTS_PATH                          removes every rule
  GET    REQUESTS_PATH?since=SEQ              the request log after SEQ: {"next": SEQ, "entries": [...]}

RULE:
  operation  "UpdateItem", "SendMessage", … (the X-Amz-Target's operation, or a query Action)
  service    optional, "dynamodb", "sqs", … (found in the X-Amz-Target prefix, lower case)
  key        optional {"record_key": "X"}: only calls whose DynamoDB Key (PutItem: Item) has these
             string values
  contains   optional list of strings that must all appear in the request body (e.g. the
             '":status":{"S":"submitted"}' of a final write)
  nth        the first matching call that fails, 1-based (default 1)
  times      how many matching calls fail from the nth on (default 1; 0 = every one)
  rate       instead of nth/times: each matching call fails with this probability (0..1), drawn
             from `seed` (default 1), so a chaos run repeats; `times` then caps the failures
  error      the AWS error code (default InternalServerError)
  status     HTTP status (default 500 for InternalServerError / ServiceUnavailable, else 400)
  message    optional error message
  apply      true: the call is carried out first and only its answer is replaced by the error
             (a write that landed but whose answer was lost)
  delay_ms   instead of failing: the call is carried out and answered after this many ms; a
             DynamoDB call holds the launcher's DynamoDB lock meanwhile, an SQS call its queue
             lock, as a slow call does in moto's one process (every other call of that service
             that needs the lock waits behind it)

Each request-log entry: seq, t (epoch ms), op ("DynamoDB_20120810.UpdateItem"), key (the
DynamoDB Key's string values), status (HTTP status answered; 499: not carried out, because its
client had hung up when its turn came, see served_lock.py), fault (the rule id when one fired),
and for DynamoDB writes `update` / `condition` (the expressions) and `values` (the short string
values of ExpressionAttributeValues). Neither tokens nor API keys travel through DynamoDB or SQS
calls' expressions; message bodies are never logged.
"""

import collections
import contextlib
import io
import itertools
import json
import random
import threading
import time
from urllib.parse import parse_qs

FAULTS_PATH = "/_threadgate/faults"
REQUESTS_PATH = "/_threadgate/requests"
LOG_SIZE = 50_000
_SERVER_ERRORS = {"InternalServerError", "InternalFailure", "ServiceUnavailable", "InternalError"}

_lock = threading.Lock()
_rules = []
_rule_ids = itertools.count(1)
_log = collections.deque(maxlen=LOG_SIZE)
_seq = itertools.count(1)


class RuleError(ValueError):
    pass


def _check_rule(raw):
    if not isinstance(raw, dict):
        raise RuleError("a rule must be an object")
    known = {"operation", "service", "key", "contains", "nth", "times", "rate", "seed", "error", "status", "message", "apply", "delay_ms"}
    unknown = set(raw) - known
    if unknown:
        raise RuleError("unknown rule fields: %s" % ", ".join(sorted(unknown)))
    if not isinstance(raw.get("operation"), str) or not raw["operation"]:
        raise RuleError("operation is required (e.g. UpdateItem)")
    nth, times = raw.get("nth", 1), raw.get("times", 1)
    for name, value, low in (("nth", nth, 1), ("times", times, 0)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise RuleError("%s must be an integer >= %d" % (name, low))
    rate = raw.get("rate")
    if rate is not None and not (isinstance(rate, (int, float)) and not isinstance(rate, bool) and 0 <= rate <= 1):
        raise RuleError("rate must be between 0 and 1")
    if rate is not None and "times" not in raw:
        times = 0
    key = raw.get("key")
    if key is not None and not (isinstance(key, dict) and all(isinstance(v, str) for v in key.values())):
        raise RuleError("key must be an object of string values")
    contains = raw.get("contains", [])
    if not (isinstance(contains, list) and all(isinstance(c, str) for c in contains)):
        raise RuleError("contains must be a list of strings")
    delay_ms = raw.get("delay_ms", 0)
    if not isinstance(delay_ms, (int, float)) or isinstance(delay_ms, bool) or not 0 <= delay_ms <= 60_000:
        raise RuleError("delay_ms must be between 0 and 60000")
    error = raw.get("error", "InternalServerError")
    status = raw.get("status", 500 if error in _SERVER_ERRORS else 400)
    if not isinstance(status, int) or not 400 <= status <= 599:
        raise RuleError("status must be an HTTP error status")
    return {
        "id": next(_rule_ids),
        "operation": raw["operation"],
        "service": raw.get("service"),
        "key": key,
        "contains": contains,
        "nth": nth,
        "times": times,
        "error": error,
        "status": status,
        "message": raw.get("message", "injected by threadgate's moto launcher"),
        "apply": bool(raw.get("apply", False)),
        "delay_ms": delay_ms,
        "rate": rate,
        "seed": raw.get("seed", 1),
        "_random": random.Random(str(raw.get("seed", 1))),
        "seen": 0,
        "failed": 0,
    }


def _string_values(values):
    """{"record_key": {"S": "x"}} → {"record_key": "x"} (string attributes only)."""
    out = {}
    for name, value in (values or {}).items():
        if isinstance(value, dict) and isinstance(value.get("S"), str):
            out[name] = value["S"]
    return out


def _describe(environ, raw):
    """What one request is: its operation and, for DynamoDB, the key and expressions."""
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    if target:
        prefix, _, op = target.rpartition(".")
    else:
        query = parse_qs(environ.get("QUERY_STRING", ""))
        form = parse_qs(raw.decode("utf-8", "replace")) if b"Action=" in raw[:200] else {}
        prefix, op = "", (query.get("Action") or form.get("Action") or [""])[0]
    info = {"op": target or op, "operation": op, "service": prefix.split("_")[0].lower()}
    if target.startswith("DynamoDB_"):
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        info["key"] = _string_values(body.get("Key"))
        if not info["key"] and isinstance(body.get("Item"), dict):  # PutItem: match on the item (not logged)
            info["item"] = _string_values(body["Item"])
        for field, name in (("UpdateExpression", "update"), ("ConditionExpression", "condition")):
            if isinstance(body.get(field), str):
                info[name] = body[field][:300]
        values = _string_values(body.get("ExpressionAttributeValues"))
        if values:
            info["values"] = {k: v for k, v in values.items() if len(v) <= 64}
    return info


def _matches(rule, info, raw):
    if rule["operation"] != info["operation"]:
        return False
    if rule["service"] and rule["service"].lower() not in info["service"]:
        return False
    key = info.get("key") or info.get("item") or {}
    if rule["key"] and any(key.get(k) != v for k, v in rule["key"].items()):
        return False
    text = raw.decode("utf-8", "replace")
    return all(c in text for c in rule["contains"])


def _fault_for(info, raw):
    """The rule that fails this call, counting it against every matching rule."""
    chosen = None
    with _lock:
        for rule in _rules:
            if not _matches(rule, info, raw):
                continue
            rule["seen"] += 1
            if rule["rate"] is not None:
                fails = rule["_random"].random() < rule["rate"] and (rule["times"] == 0 or rule["failed"] < rule["times"])
            else:
                last = rule["nth"] + rule["times"] - 1
                fails = rule["seen"] >= rule["nth"] and (rule["times"] == 0 or rule["seen"] <= last)
            if chosen is None and fails:
                rule["failed"] += 1
                chosen = rule
    return chosen


def _record(info, status, rule):
    entry = {k: v for k, v in info.items() if k not in ("operation", "service", "item")}
    entry.update({"seq": next(_seq), "t": int(time.time() * 1000), "status": status})
    if rule:
        entry["fault"] = rule["id"]
    with _lock:
        _log.append(entry)


def _json(start_response, status, body):
    data = json.dumps(body).encode()
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
    return [data]


def _control(environ, start_response):
    method = environ.get("REQUEST_METHOD", "GET")
    if environ.get("PATH_INFO") == REQUESTS_PATH:
        since = int((parse_qs(environ.get("QUERY_STRING", "")).get("since") or ["0"])[0])
        with _lock:
            entries = [e for e in _log if e["seq"] > since]
            last = _log[-1]["seq"] if _log else 0  # the newest entry: ask after it next time
        return _json(start_response, "200 OK", {"next": last, "entries": entries})
    if method == "GET":
        with _lock:
            rules = [{k: v for k, v in r.items() if not k.startswith("_")} for r in _rules]
            return _json(start_response, "200 OK", {"rules": rules})
    if method == "DELETE":
        with _lock:
            _rules.clear()
        return _json(start_response, "200 OK", {"rules": []})
    try:
        body = json.loads(read_body(environ) or b"{}")
        rules = [_check_rule(r) for r in (body.get("rules") or [])]
    except (ValueError, AttributeError) as exc:
        return _json(start_response, "400 Bad Request", {"error": str(exc)})
    with _lock:
        _rules.extend(rules)
    return _json(start_response, "200 OK", {"ids": [r["id"] for r in rules]})


def read_body(environ):
    length = environ.get("CONTENT_LENGTH") or ""
    stream = environ["wsgi.input"]
    if length.isdigit():
        return stream.read(int(length))
    # A chunked body is de-chunked by werkzeug and ends; without either there is no body (reading
    # the raw socket would wait for the client to close it).
    return stream.read() if environ.get("wsgi.input_terminated") else b""


def buffer_body(environ):
    """The request's body, read once and put back for the app behind (which reads it again)."""
    stream = environ["wsgi.input"]
    if isinstance(stream, io.BytesIO) and stream.tell() == 0:
        # Already whole and unread (the launcher's keep-alive handler reads every body whole):
        # no second read and copy per wrapper.
        return stream.getvalue()
    raw = read_body(environ)
    environ["wsgi.input"] = io.BytesIO(raw)
    environ["CONTENT_LENGTH"] = str(len(raw))
    return raw


def _error_response(rule, start_response):
    # The JSON protocols' error shape (DynamoDB, SQS, Secrets Manager, SSM): the SDK reads the
    # code from x-amzn-ErrorType or __type.
    body = json.dumps({"__type": "com.amazonaws.threadgate#%s" % rule["error"], "message": rule["message"]}).encode()
    reason = "Internal Server Error" if rule["status"] >= 500 else "Bad Request"
    start_response(
        "%d %s" % (rule["status"], reason),
        [
            ("Content-Type", "application/x-amz-json-1.0"),
            ("x-amzn-ErrorType", rule["error"]),
            ("x-amzn-query-error", "%s;Sender" % rule["error"]),
            ("Content-Length", str(len(body))),
        ],
    )
    return [body]


def _service_key(service):
    """"dynamodb" or "sqs" from the X-Amz-Target prefix's service ("dynamodb", "amazonsqs")."""
    return "sqs" if "sqs" in service else service


def record_shed(environ):
    """Log a request that was not carried out because its client had gone (status 499)."""
    stream = environ.get("wsgi.input")
    raw = stream.getvalue() if isinstance(stream, io.BytesIO) else b""
    info = _describe(environ, raw)
    if info["operation"]:
        _record(info, 499, None)


def with_faults(app, locks):
    """`app` behind the control routes, the rules and the request log. `locks`: the launcher's
    lock per service ({"dynamodb": ..., "sqs": ...}), held by a delayed call of it while it waits."""

    def wrapped(environ, start_response):
        path = environ.get("PATH_INFO", "")
        if path in (FAULTS_PATH, REQUESTS_PATH):
            return _control(environ, start_response)
        if path.startswith("/_threadgate/") or path.startswith("/moto-api"):
            return app(environ, start_response)
        raw = buffer_body(environ)
        info = _describe(environ, raw)
        rule = _fault_for(info, raw) if info["operation"] else None
        if rule and rule["delay_ms"]:
            with locks.get(_service_key(info["service"])) or contextlib.nullcontext():
                time.sleep(rule["delay_ms"] / 1000)
                return _served(info, rule, app, environ, start_response)
        if rule and not rule["apply"]:
            _record(info, rule["status"], rule)
            return _error_response(rule, start_response)
        if rule:  # carried out, answer replaced
            _carry_out(app, environ, lambda status, headers, exc_info=None: None)
            _record(info, rule["status"], rule)
            return _error_response(rule, start_response)
        return _served(info, None, app, environ, start_response)

    return wrapped


def _carry_out(app, environ, start_response):
    """moto serves the call: its HTTP status and its answer, read whole (so a call's answer is
    made while a delayed call holds its lock)."""
    answered = {}

    def note_status(status, headers, exc_info=None):
        answered["status"] = int(status.split(" ", 1)[0])
        return start_response(status, headers, exc_info)

    result = app(environ, note_status)
    try:
        chunks = list(result)
    finally:
        getattr(result, "close", lambda: None)()
    return answered.get("status", 0), chunks


def _served(info, rule, app, environ, start_response):
    """The call carried out and answered as moto answers it, logged (with the delay rule's id)."""
    status, chunks = _carry_out(app, environ, start_response)
    _record(info, status, rule)
    return chunks
