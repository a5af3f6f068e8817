"""Sending records to the jobs queue: validated first, then in batches of 10, failed entries retried."""

import json
import time
from dataclasses import dataclass, field
from typing import List, Optional

from . import _aws
from .schema import validate

BATCH_ENTRIES = 10
#: SQS's limit on one SendMessageBatch request (the sum of its bodies), as `threadgate enqueue` uses it.
BATCH_BYTES = 262_144
#: Attempts for entries SQS failed on its side (SenderFault false), with doubling waits.
ATTEMPTS = 6


@dataclass
class Refusal:
    """A record that was not sent, with why: the schema's reasons, or SQS's for a sender fault."""

    #: The record's position in `records`.
    index: int
    #: Its record_key, when it has a string one.
    record_key: Optional[str]
    #: Why: `field: problem` per schema rule broken, or `SQS: <code>: <message>`.
    reasons: List[str]


@dataclass
class SendResult:
    """What `send` did with the records."""

    #: Messages SQS accepted.
    sent: int = 0
    #: Records not sent: refused by the schema before sending, or by SQS as the sender's fault.
    refused: List[Refusal] = field(default_factory=list)
    #: The distinct record keys sent (what `wait(..., expect=len(result.keys))` waits for).
    keys: List[str] = field(default_factory=list)


def _client(sqs):
    return _aws.client("sqs", sqs)


def _batches(entries):
    """Groups (index, key, body, group) entries into requests of at most 10 entries and BATCH_BYTES."""
    batch, size = [], 0
    for entry in entries:
        length = len(entry[2].encode("utf-8"))
        if batch and (len(batch) == BATCH_ENTRIES or size + length > BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(entry)
        size += length
    if batch:
        yield batch


#: SQS's limit on a MessageGroupId.
MAX_GROUP_ID = 128


def group_of(record: dict, tenant: Optional[str]) -> Optional[str]:
    """The message's MessageGroupId (its tenant for SQS fair queues): `tenant`, else the record's
    batch_id (cut to SQS's 128 characters), else none. `threadgate enqueue` picks it the same way."""
    group = tenant if tenant is not None else record.get("batch_id")
    return group[:MAX_GROUP_ID] if isinstance(group, str) and group else None


def send(queue_url: str, records, *, batch_id: Optional[str] = None, tenant: Optional[str] = None,
         sqs=None, sleep=time.sleep) -> SendResult:
    """Validates each record (a dict) against the job schema and sends the valid ones.

    `tenant` sets every message's MessageGroupId: on a standard queue SQS then treats each tenant
    fairly (a tenant with a backlog does not hold the others' messages back). By default the
    record's batch is its tenant; records without a batch and no `tenant` carry no group.

    `batch_id`, when given, is set on every record, replacing a `batch_id` the record carries.
    Entries SQS fails on its side are retried with doubling waits; after the last attempt the rest raise RuntimeError (nothing is dropped silently). Sending a record
    twice is safe: the worker solves and submits each record_key once.
    """
    if tenant is not None and (not isinstance(tenant, str) or not 0 < len(tenant) <= MAX_GROUP_ID
                               or any(not 0x21 <= ord(c) <= 0x7E for c in tenant)):
        raise ValueError(f"tenant must be 1-{MAX_GROUP_ID} printable ASCII characters without spaces, got {tenant!r}")
    client = _client(sqs)
    result = SendResult()
    valid = []
    for index, record in enumerate(records):
        key = record.get("record_key") if isinstance(record, dict) else None
        key = key if isinstance(key, str) else None
        if isinstance(record, dict) and batch_id is not None:
            # The caller's batch wins over one a job line carries, so `wait(..., batch_id)` finds every record sent.
            record = {**record, "batch_id": batch_id}
        reasons = validate(record)
        if reasons:
            result.refused.append(Refusal(index, key, reasons))
            continue
        valid.append((index, key, json.dumps(record, separators=(",", ":")), group_of(record, tenant)))

    keys = {}
    for batch in _batches(valid):
        pending = {str(index): (index, key, body, group) for index, key, body, group in batch}
        for attempt in range(ATTEMPTS):
            entries = [{"Id": id_, "MessageBody": body, **({"MessageGroupId": group} if group else {})}
                       for id_, (_, _, body, group) in pending.items()]
            response = client.send_message_batch(QueueUrl=queue_url, Entries=entries)
            for ok in response.get("Successful", []):
                index, key, _, _ = pending.pop(ok["Id"])
                result.sent += 1
                keys[key] = True
            for failed in response.get("Failed", []):
                if failed.get("SenderFault"):
                    index, key, _, _ = pending.pop(failed["Id"])
                    result.refused.append(Refusal(index, key, [f"SQS: {failed.get('Code')}: {failed.get('Message', '')}".rstrip(": ")]))
            if not pending:
                break
            if attempt < ATTEMPTS - 1:
                sleep(0.2 * 2 ** attempt)
        if pending:
            raise RuntimeError(f"{len(pending)} entries still failing on SQS's side after {ATTEMPTS} attempts "
                               f"({result.sent} sent so far); sending again is safe")
    result.keys = list(keys)
    return result

