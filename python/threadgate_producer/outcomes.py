"""Reading outcomes back (by batch, by keys) and waiting for a batch by the rules of `threadgate wait`."""

import json
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

#: The outcomes table's index on batch_id + updated_at (every attribute projected).
BATCH_INDEX = "batch_id-updated_at"
#: Statuses after which a record is done: final rows, and `stopped` (its message is in the DLQ).
ENDED = ("submitted", "failed", "rejected", "stopped")
#: `threadgate wait`'s exit codes.
EXIT_OK, EXIT_BAD_TASK, EXIT_STOP, EXIT_TRANSIENT = 0, 2, 3, 4
#: Reasons of `failed` rows the form itself refused by the job's `expect` block; the row's
#: `expect_rule` names the check (e.g. "body_excludes[0]"). They count as failed (exit 2).
FORM_REFUSALS = ("FORM_REJECTED", "FORM_UNCONFIRMED")


def _client(name, client):
    if client is not None:
        return client
    import boto3

    return boto3.client(name)


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
    """Every outcome row of one batch: a Query on the batch index (no scan). Never a token."""
    client = _client("dynamodb", dynamodb)
    rows, start = [], None
    while True:
        kwargs = {
            "TableName": table_name,
            "IndexName": BATCH_INDEX,
            "KeyConditionExpression": "batch_id = :b",
            "ExpressionAttributeValues": {":b": {"S": batch_id}},
        }
        if start:
            kwargs["ExclusiveStartKey"] = start
        page = client.query(**kwargs)
        rows.extend(_plain(item) for item in page.get("Items", []))
        start = page.get("LastEvaluatedKey")
        if not start:
            return rows


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

    batch_id: str
    expected: int
    ended: int
    #: Rows by status (submitted, failed, rejected, stopped, in_progress).
    counts: Dict[str, int]
    #: done, too_many, paused or timeout.
    end: str
    exit_code: int
    message: str
    rows: List[dict] = field(default_factory=list, repr=False)
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
    if counts.get("failed", 0) + counts.get("rejected", 0):
        return counts, ended, ("done", EXIT_BAD_TASK)
    return counts, ended, ("done", EXIT_OK)


def _paused(ssm, parameter):
    if parameter is None:
        return None
    state = json.loads(_client("ssm", ssm).get_parameter(Name=parameter)["Parameter"]["Value"])
    return state if state.get("paused") else None


def wait(table_name: str, batch_id: str, *, expect: int, timeout_s: float = 600, dynamodb=None,
         interval_s: float = 2, state_parameter: Optional[str] = None, ssm=None,
         sleep=time.sleep, now=time.monotonic) -> WaitResult:
    """Polls the batch's rows until it is done, the pipeline is paused, or `timeout_s` passes.

    As `threadgate wait` decides: more rows under the batch than `expect` end it at once
    ("too_many", exit 2); it is done when `expect` records ended (submitted, failed, rejected or
    stopped) and none is in progress, with exit code 3 if one was stopped (the pipeline paused
    on a stop-class error), 2 if one failed (the form's own refusals FORM_REJECTED and
    FORM_UNCONFIRMED included: `form_refused` counts them) or was rejected, else 0; 4 on timeout. With `state_parameter` (stack output PipelineStateParameter) a paused
    pipeline ends the wait with 3 at once, as the CLI does. The CLI also counts records whose
    message reached the DLQ without a row; this function reads only the table, so such a record
    makes it time out.
    """
    if not isinstance(expect, int) or isinstance(expect, bool) or expect < 1:
        raise ValueError(f"expect must be a positive whole number, got {expect!r}")
    started = now()
    while True:
        rows = batch_outcomes(table_name, batch_id, dynamodb=dynamodb)
        counts, ended, verdict = tally(rows, expect)

        refused = form_refusals(rows)

        def result(end, exit_code, message):
            return WaitResult(batch_id, expect, ended, counts, end, exit_code, message, rows, refused)

        if verdict == ("too_many", EXIT_BAD_TASK):
            return result("too_many", EXIT_BAD_TASK,
                          f"batch {batch_id}: {len(rows)} records carry this batch_id, more than the {expect} "
                          "expected: the batch_id was used before, or the expected count misses a part")
        if verdict is not None:
            said_no = ", ".join(f"{r} {refused[r]}" for r in FORM_REFUSALS if refused.get(r))
            tail = f"; the form said no: {said_no} (each row's expect_rule names the check)" if said_no else ""
            return result("done", verdict[1], f"batch {batch_id}: all {expect} records ended{tail}")
        paused = _paused(ssm, state_parameter)
        if paused:
            return result("paused", EXIT_STOP, f"batch {batch_id}: {expect - ended} of {expect} records have not "
                          f"ended and the pipeline is paused: {paused.get('reason', 'no reason recorded')}")
        if now() - started >= timeout_s:
            return result("timeout", EXIT_TRANSIENT,
                          f"batch {batch_id}: timed out after {timeout_s:g} s with {max(0, expect - ended)} of {expect} records not ended")
        sleep(interval_s)
