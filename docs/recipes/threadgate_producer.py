"""Plain-Python (boto3) helpers for a threadgate producer: send jobs under a batch_id, read the
batch's outcomes back, wait for it. Needs only boto3 (pip install boto3). The Spark and Ray
recipes beside this file import it; the test suite runs it against the deployed local stack.

The stack outputs it needs (QueueUrl, TableName, OutcomesQueueUrl) come from `stack_outputs()`.
Against `npx threadgate local --keep`, first `eval "$(npx threadgate local env)"` (or export the
AWS_ENDPOINT_URL, AWS_REGION and AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY it prints) so boto3
talks to the emulator.
"""

import json
import time

import boto3
from boto3.dynamodb.types import TypeDeserializer

BATCH_INDEX = "batch_id-updated_at"
FINAL = {"submitted", "failed", "rejected"}


def stack_outputs(stack_name="Threadgate", session=None):
    """The stack's CloudFormation outputs as a dict (QueueUrl, TableName, OutcomesQueueUrl, ...)."""
    cfn = (session or boto3).client("cloudformation")
    stack = cfn.describe_stacks(StackName=stack_name)["Stacks"][0]
    return {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}


def send_all(sqs, queue_url, jobs):
    """Send job dicts in batches of 10; retry entries SQS failed on its side, raise on bad ones."""
    for start in range(0, len(jobs), 10):
        entries = [
            {"Id": str(i), "MessageBody": json.dumps(job)}
            for i, job in enumerate(jobs[start : start + 10])
        ]
        for attempt in range(6):
            failed = sqs.send_message_batch(QueueUrl=queue_url, Entries=entries).get("Failed", [])
            if not failed:
                break
            bad = [f for f in failed if f["SenderFault"]]
            if bad:
                raise ValueError(f"SQS refused entries: {bad}")
            retry = {f["Id"] for f in failed}
            entries = [e for e in entries if e["Id"] in retry]
            time.sleep(0.2 * 2**attempt)
        else:
            raise RuntimeError(f"{len(entries)} entries still failing after retries")


def _plain(item):
    deserialize = TypeDeserializer().deserialize
    row = {k: deserialize(v) for k, v in item.items()}
    # Numbers come back as Decimal; outcome numbers are whole.
    return {k: int(v) if hasattr(v, "is_integer") and v == int(v) else v for k, v in row.items()}


def batch_outcomes(dynamodb, table_name, batch_id):
    """Every outcome row of one batch: a Query on the batch index (no scan)."""
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
        page = dynamodb.query(**kwargs)
        rows.extend(_plain(item) for item in page.get("Items", []))
        start = page.get("LastEvaluatedKey")
        if not start:
            return rows


def key_outcomes(dynamodb, table_name, record_keys):
    """The outcome rows of these keys (BatchGetItem, 100 keys a call); keys without a row are absent."""
    rows, keys = {}, list(dict.fromkeys(record_keys))
    for start in range(0, len(keys), 100):
        request = {table_name: {"Keys": [{"record_key": {"S": k}} for k in keys[start : start + 100]]}}
        for attempt in range(8):
            page = dynamodb.batch_get_item(RequestItems=request)
            for item in page.get("Responses", {}).get(table_name, []):
                row = _plain(item)
                rows[row["record_key"]] = row
            request = page.get("UnprocessedKeys") or {}
            if not request:
                break
            time.sleep(0.05 * 2**attempt)
    return rows


def wait_for_batch(dynamodb, table_name, batch_id, expected, timeout_s=600, interval_s=2):
    """Polls the batch until `expected` rows are final (or stopped); returns them. Raises on timeout.
    `threadgate wait --batch` does the same and also watches the DLQ and a paused pipeline."""
    deadline = time.monotonic() + timeout_s
    while True:
        rows = batch_outcomes(dynamodb, table_name, batch_id)
        ended = [r for r in rows if r["status"] in FINAL or r["status"] == "stopped"]
        if len(ended) >= expected:
            return rows
        if time.monotonic() > deadline:
            raise TimeoutError(f"batch {batch_id}: {len(ended)} of {expected} ended after {timeout_s} s")
        time.sleep(interval_s)
