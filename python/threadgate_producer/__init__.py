"""threadgate_producer: send records to a threadgate deployment under a batch, wait for the
batch by the rules of `threadgate wait`, and read its outcomes. Needs only boto3.

    import threadgate_producer as tg
    out = tg.stack_outputs("Threadgate")
    sent = tg.send(out["QueueUrl"], records, batch_id="nightly-1")
    done = tg.wait(out["TableName"], "nightly-1", expect=len(sent.keys))
"""

from .outcomes import (
    BATCH_SHARDS,
    EXIT_BAD_TASK,
    EXIT_CANCELLED,
    EXIT_OK,
    EXIT_STOP,
    EXIT_TRANSIENT,
    FORM_REFUSALS,
    WaitResult,
    batch_outcomes,
    batch_shard_number,
    cancel,
    cancelled,
    form_refusals,
    key_outcomes,
    stack_outputs,
    wait,
)
from .schema import SCHEMA, validate
from .send import Refusal, SendResult, send

#: The version of the threadgate release this package belongs to (the npm package's version).
__version__ = "0.1.0"

__all__ = [
    "BATCH_SHARDS", "EXIT_BAD_TASK", "EXIT_CANCELLED", "EXIT_OK", "EXIT_STOP", "EXIT_TRANSIENT", "FORM_REFUSALS", "Refusal",
    "SCHEMA", "SendResult", "WaitResult", "batch_outcomes", "batch_shard_number", "cancel", "cancelled", "form_refusals", "key_outcomes",
    "send", "stack_outputs", "validate", "wait",
    "__version__",
]
