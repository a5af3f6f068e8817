"""Reading outcomes back (by batch, by keys) and waiting for a batch by the rules of `threadgate wait`."""

import json
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from . import _aws

#: The outcomes table's batch index (functions/records/batch-index.ts): partition batch_shard,
#: "<batch_id>#<n>" with n = FNV-1a 32 of the record key's UTF-8 bytes mod BATCH_SHARDS, sort
#: status_at; it holds each row's batch_id, status and reason (what a wait counts), so the whole
#: rows of a batch are read by key.
BATCH_INDEX = "batch_shard-status_at"
#: Index partitions one batch is spread over; a reader queries every one.
BATCH_SHARDS = 16
#: Statuses after which a record is done: final rows, and `stopped` (its message is in the DLQ).
ENDED = ("submitted", "failed", "rejected", "cancelled", "stopped")
#: `threadgate wait`'s exit codes.
EXIT_OK, EXIT_BAD_TASK, EXIT_STOP, EXIT_TRANSIENT = 0, 2, 3, 4
#: `threadgate wait`'s exit code for a cancelled batch (`threadgate cancel`, cancel() below).
EXIT_CANCELLED = 5
#: A cancel's propagation bound at time scale 1, seconds (functions/worker/cancel-watch.ts): until
#: cancelled_at + this, a worker may still act on a stale "not cancelled" and post a record.
CANCEL_BOUND_S = 10
#: The outcomes-table key of a batch's cancel (functions/records/cancellations.ts): never a record key.
CANCEL_KEY_PREFIX = "cancelled batch "
#: Every attribute a cancel item holds (functions/records/cancellations.ts CANCEL_ITEM_ATTRIBUTES).
CANCEL_ITEM_ATTRIBUTES = ("record_key", "cancelled_batch", "cancel_reason", "cancelled_at", "cancelled_by")
#: The state item in the slot-ledger table (stack output LedgerTableName; functions/pipeline/state-item.ts):
#: its `state` attribute holds the pipeline state as JSON {paused, reason, code, since, by}.
STATE_ITEM_KEY = {"pk": "pipeline", "sk": "state"}
#: Reasons of `failed` rows the form itself refused by the job's `expect` block; the row's
#: `expect_rule` names the check (e.g. "body_excludes[0]"). They count as failed (exit 2).
FORM_REFUSALS = ("FORM_REJECTED", "FORM_UNCONFIRMED")


def _client(name, client):
    return _aws.client(name, client)


def _plain(item):
    from boto3.dynamodb.types import TypeDeserializer

    deserialize = TypeDeserializer().deserialize
    row = {k: deserialize(v) for k, v in item.items()}
    # Numbers come back as Decimal; outcome numbers are whole.
    return {k: int(v) if hasattr(v, "is_integer") and v == int(v) else v for k, v in row.items()}


def stack_outputs(stack_name: str = "Threadgate", *, cloudformation=None) -> Dict[str, str]:
    """The stack's CloudFormation outputs (QueueUrl, TableName, OutcomesQueueUrl, ...)."""
    stack = _client("cloudformation", cloudformation).describe_stacks(StackName=stack_name)["Stacks"][0]
    return {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}


def batch_outcomes(table_name: str, batch_id: str, *, dynamodb=None) -> List[dict]:
    """Every outcome row of one batch, whole: its keys by a Query on the batch index (no scan),
    then the rows by key (key_outcomes), shard by shard. Never a token."""
    index_rows = _batch_index_rows(table_name, batch_id, dynamodb=dynamodb)
    rows = key_outcomes(table_name, [r["record_key"] for r in index_rows], dynamodb=dynamodb)
    return [rows[r["record_key"]] for r in index_rows if r["record_key"] in rows]


def batch_shard_number(record_key: str, shards: int = BATCH_SHARDS) -> int:
    """The batch index shard of a record key: FNV-1a (32 bits) of its UTF-8 bytes, mod shards."""
    value = 0x811C9DC5
    for byte in record_key.encode("utf-8"):
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return value % shards


def _batch_index_rows(table_name: str, batch_id: str, *, dynamodb=None) -> List[dict]:
    """One batch's rows as the batch index holds them (record_key, batch_shard, status_at, batch_id,
    status, reason), shard by shard: one Query per shard, page by page."""
    client = _client("dynamodb", dynamodb)
    rows: Dict[str, dict] = {}
    for shard in range(BATCH_SHARDS):
        start = None
        while True:
            kwargs = {
                "TableName": table_name,
                "IndexName": BATCH_INDEX,
                "KeyConditionExpression": "batch_shard = :s",
                "ExpressionAttributeValues": {":s": {"S": f"{batch_id}#{shard}"}},
            }
            if start:
                kwargs["ExclusiveStartKey"] = start
            page = client.query(**kwargs)
            for item in page.get("Items", []):
                row = _plain(item)
                rows.setdefault(row["record_key"], row)
            start = page.get("LastEvaluatedKey")
            if not start:
                break
    return list(rows.values())


def key_outcomes(table_name: str, record_keys, *, dynamodb=None, sleep=time.sleep) -> Dict[str, dict]:
    """The outcome rows of these keys (BatchGetItem, 100 keys a call); keys without a row are absent."""
    client = _client("dynamodb", dynamodb)
    rows, keys = {}, list(dict.fromkeys(record_keys))
    for start in range(0, len(keys), 100):
        request = {table_name: {"Keys": [{"record_key": {"S": k}} for k in keys[start:start + 100]]}}
        for attempt in range(8):
            page = client.batch_get_item(RequestItems=request)
            for item in page.get("Responses", {}).get(table_name, []):
                row = _plain(item)
                rows[row["record_key"]] = row
            request = page.get("UnprocessedKeys") or {}
            if not request:
                break
            sleep(0.05 * 2 ** attempt)
        if request:
            raise RuntimeError(f"DynamoDB left {len(request[table_name]['Keys'])} keys unprocessed after 8 attempts")
    return rows


@dataclass
class WaitResult:
    """How a wait ended; `exit_code` is the one `threadgate wait --batch` would give."""

    #: The batch waited for.
    batch_id: str
    #: `expect` as passed.
    expected: int
    #: Records of the batch that ended (submitted, failed, rejected, cancelled or stopped).
    ended: int
    #: Rows by status (submitted, failed, rejected, cancelled, stopped, in_progress).
    counts: Dict[str, int]
    #: done, too_many, cancelled, paused or timeout (timeout_s passed; `message` says what was left).
    end: str
    #: EXIT_OK (0), EXIT_BAD_TASK (2), EXIT_STOP (3), EXIT_TRANSIENT (4: timeout) or EXIT_CANCELLED (5).
    exit_code: int
    #: One line saying how it ended and why, as the CLI prints it.
    message: str
    #: The batch's outcome rows at the end (dicts with the table's attributes; never a token).
    rows: List[dict] = field(default_factory=list, repr=False)
    #: The batch's cancel when it was cancelled (see cancel()).
    cancel: Optional[dict] = None
    #: Of the failed rows, those the form refused (FORM_REJECTED, FORM_UNCONFIRMED), by reason.
    form_refused: Dict[str, int] = field(default_factory=dict)


def form_refusals(rows) -> Dict[str, int]:
    """Counts by reason of the rows the form itself refused (`failed` FORM_REJECTED / FORM_UNCONFIRMED)."""
    counts: Dict[str, int] = {}
    for row in rows:
        if row.get("status") == "failed" and row.get("reason") in FORM_REFUSALS:
            counts[row["reason"]] = counts.get(row["reason"], 0) + 1
    return counts


def tally(rows, expected):
    """Counts by status, records ended, and how the wait ends now: ("too_many" or "done", exit code),
    or None while it goes on. The rules of `threadgate wait` (cli/commands/wait.ts): more records
    under the batch than expected ends it at once with 2 (the batch_id was used before, or the
    count misses a part); it is done only when `expected` records ended and none is in progress."""
    counts: Dict[str, int] = {}
    for row in rows:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    ended = sum(counts.get(s, 0) for s in ENDED)
    if len(rows) > expected:
        return counts, ended, ("too_many", EXIT_BAD_TASK)
    if ended < expected or counts.get("in_progress", 0) > 0:
        return counts, ended, None
    if counts.get("stopped", 0):
        return counts, ended, ("done", EXIT_STOP)
    if counts.get("cancelled", 0):
        return counts, ended, ("done", EXIT_CANCELLED)
    if counts.get("failed", 0) + counts.get("rejected", 0):
        return counts, ended, ("done", EXIT_BAD_TASK)
    return counts, ended, ("done", EXIT_OK)


def _cancel_of(item):
    if not item:
        return None
    row = _plain(item)
    cancel = {"batch_id": row.get("cancelled_batch"), "cancelled_at": row.get("cancelled_at"),
              "by": row.get("cancelled_by")}
    if row.get("cancel_reason"):
        cancel["reason"] = row["cancel_reason"]
    return cancel


def cancelled(table_name: str, batch_id: str, *, dynamodb=None) -> Optional[dict]:
    """The batch's cancel ({batch_id, cancelled_at, by, reason?}), or None when it is not cancelled."""
    item = _client("dynamodb", dynamodb).get_item(
        TableName=table_name, Key={"record_key": {"S": CANCEL_KEY_PREFIX + batch_id}}, ConsistentRead=True,
        # Named, not all: a role granted only the cancel item's attributes (grantCancelBatches) may read them.
        ProjectionExpression=", ".join(CANCEL_ITEM_ATTRIBUTES),
    ).get("Item")
    return _cancel_of(item)


def cancel(table_name: str, batch_id: str, reason: Optional[str] = None, *, by: str = "producer",
           dynamodb=None) -> dict:
    """Cancels one batch, as `threadgate cancel --batch` does: its records not yet solved end
    `cancelled` without a CAPTCHA task or a POST, once every worker has seen the cancel (within
    10 s x the deployment's time scale, at least 1 s); a record already posted ends as it would have.
    Final: a second cancel changes nothing and returns the first. Other batches go on.
    Returns the cancel with `already` (True when the batch was cancelled before).
    The table is the stack output TableName (stack_outputs(name)["TableName"])."""
    if not isinstance(batch_id, str) or not 0 < len(batch_id) <= 256 or any(not 0x21 <= ord(c) <= 0x7E for c in batch_id):
        raise ValueError(f"batch_id must be 1-256 printable ASCII characters without spaces, got {batch_id!r}")
    client = _client("dynamodb", dynamodb)
    at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + f".{int(time.time() * 1000) % 1000:03d}Z"
    item = {"record_key": {"S": CANCEL_KEY_PREFIX + batch_id}, "cancelled_batch": {"S": batch_id},
            "cancelled_at": {"S": at}, "cancelled_by": {"S": by}}
    reason = (reason or "").strip()[:500]
    if reason:
        item["cancel_reason"] = {"S": reason}
    try:
        client.put_item(TableName=table_name, Item=item, ConditionExpression="attribute_not_exists(record_key)")
    except Exception as err:  # botocore's ConditionalCheckFailedException, without importing botocore
        if getattr(err, "response", {}).get("Error", {}).get("Code") != "ConditionalCheckFailedException":
            raise
        return {**cancelled(table_name, batch_id, dynamodb=client), "already": True}
    return {**_cancel_of(item), "already": False}


def _paused(dynamodb, state_table):
    """The recorded pause, or None: one strongly consistent GetItem of the state item's `state` alone
    (what grantProduce allows: an IAM condition names that attribute and no other)."""
    if state_table is None:
        return None
    item = _client("dynamodb", dynamodb).get_item(
        TableName=state_table, Key={k: {"S": v} for k, v in STATE_ITEM_KEY.items()}, ConsistentRead=True,
        ProjectionExpression="#state", ExpressionAttributeNames={"#state": "state"}).get("Item", {})
    state = json.loads(item.get("state", {}).get("S", "{}"))
    return state if state.get("paused") is True else None


def _epoch_s(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _timeout_text(batch_id, expect, ended, counts, rows, timeout_s):
    """Why wait() gave up: when (timeout_s, not the CLI's no-limit default), what was left, and what to do."""
    in_progress, rowless = counts.get("in_progress", 0), max(0, expect - rows)
    return (f"batch {batch_id}: gave up after timeout_s={timeout_s:g} s (wait's default is 600 s; "
            f"`threadgate wait` has no limit unless --timeout) with {max(0, expect - ended)} of {expect} records "
            f"not ended: {in_progress} in progress, {rowless} without a row yet (still queued, or in the DLQ, "
            f"which wait() does not read: `threadgate wait --batch {batch_id} --expect {expect}` counts those); "
            "call wait() again, or pass a larger timeout_s")


def wait(table_name: str, batch_id: str, *, expect: int, timeout_s: float = 600, dynamodb=None,
         interval_s: float = 2, state_table: Optional[str] = None,
         cancel_bound_s: float = CANCEL_BOUND_S, sleep=time.sleep, now=time.monotonic,
         clock=time.time) -> WaitResult:
    """Polls the batch's rows until it is done, the pipeline is paused, or `timeout_s` passes.

    As `threadgate wait` decides: more rows under the batch than `expect` end it at once
    ("too_many", exit 2); it is done when `expect` records ended (submitted, failed, rejected,
    cancelled or stopped) and none is in progress, with exit code 3 if one was stopped (the pipeline
    paused on a stop-class error), 5 if one was cancelled, 2 if one failed (the form's own refusals
    FORM_REJECTED and FORM_UNCONFIRMED included: `form_refused` counts them) or was rejected, else 0;
    4 on timeout. A cancelled batch (cancel()) ends the wait with 5 ("cancelled") once none of its
    records is in progress on a look made after cancelled_at + `cancel_bound_s` (the deployment's
    bound: 10 s x its time scale, at least 1 s; before it a worker may still post a record of the
    batch): its messages still queued end `cancelled` without a task. `clock` is the wall clock
    (epoch seconds) that bound is read on. With `state_table` (stack output LedgerTableName) a paused
    pipeline ends the wait with 3 at once, as the CLI does. The CLI also counts records whose
    message reached the DLQ without a row; this function reads only the table, so such a record
    makes it time out. `expect=0` (every record refused, say) is done at once with exit 0 while no
    row carries the batch, and "too_many" if one does.
    """
    if not isinstance(expect, int) or isinstance(expect, bool) or expect < 0:
        raise ValueError(f"expect must be a whole number >= 0, got {expect!r}")
    started = now()
    while True:
        # When this look started: only a look after the cancel's bound sees every record a worker
        # could still have been working on.
        looked_at = clock()
        # Each poll reads the batch index only (status and reason); the result's rows are read whole, once.
        rows = _batch_index_rows(table_name, batch_id, dynamodb=dynamodb)
        counts, ended, verdict = tally(rows, expect)
        cancel = cancelled(table_name, batch_id, dynamodb=dynamodb)

        refused = form_refusals(rows)

        def result(end, exit_code, message):
            found = key_outcomes(table_name, [r["record_key"] for r in rows], dynamodb=dynamodb) if rows else {}
            whole = [found.get(r["record_key"], r) for r in rows]
            return WaitResult(batch_id, expect, ended, counts, end, exit_code, message, whole, cancel, refused)

        if verdict == ("too_many", EXIT_BAD_TASK):
            return result("too_many", EXIT_BAD_TASK,
                          f"batch {batch_id}: {len(rows)} records carry this batch_id, more than the {expect} "
                          "expected: the batch_id was used before, or the expected count misses a part")
        if verdict is not None:
            said_no = ", ".join(f"{r} {refused[r]}" for r in FORM_REFUSALS if refused.get(r))
            tail = f"; the form said no: {said_no} (each row's expect_rule names the check)" if said_no else ""
            return result("done", verdict[1], f"batch {batch_id}: all {expect} records ended{tail}")
        if cancel and counts.get("in_progress", 0) == 0 and looked_at >= _epoch_s(cancel["cancelled_at"]) + cancel_bound_s:
            return result("cancelled", EXIT_CANCELLED,
                          f"batch {batch_id}: the batch was cancelled at {cancel['cancelled_at']}; {ended} of "
                          f"{expect} records ended, none is in progress")
        paused = _paused(dynamodb, state_table)
        if paused:
            return result("paused", EXIT_STOP, f"batch {batch_id}: {expect - ended} of {expect} records have not "
                          f"ended and the pipeline is paused: {paused.get('reason', 'no reason recorded')}")
        if now() - started >= timeout_s:
            return result("timeout", EXIT_TRANSIENT, _timeout_text(batch_id, expect, ended, counts, len(rows), timeout_s))
        sleep(interval_s)
