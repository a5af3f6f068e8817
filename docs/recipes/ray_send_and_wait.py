"""Ray: send a batch of records with Ray Data, then wait for the batch's outcomes.

Install: pip install 'ray[data]' pandas pyarrow boto3   (Ray 2.51+; tested with 2.58)
Run:     python ray_send_and_wait.py BATCH_ID records.jsonl
         (records.jsonl: one job per line, as `threadgate enqueue` takes; against
         `npx threadgate local --keep`, export the environment it prints first)
Needs threadgate_producer.py (beside this file) on the driver; Ray ships it to the workers.
"""

import json
import os
import sys

import boto3
import ray

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from threadgate_producer import send_all, stack_outputs, wait_for_batch  # noqa: E402


class SendJobs:
    """One SQS client per actor; each batch of rows becomes job messages under the batch id."""

    def __init__(self, queue_url, batch_id):
        self.sqs, self.queue_url, self.batch_id = boto3.client("sqs"), queue_url, batch_id

    def __call__(self, batch):  # a pandas DataFrame of job fields
        jobs = [{**{k: v for k, v in row.items() if v == v and v is not None}, "batch_id": self.batch_id}
                for row in batch.to_dict("records")]
        send_all(self.sqs, self.queue_url, jobs)
        return batch[["record_key"]]


def main(batch_id, path):
    outputs = stack_outputs(os.environ.get("THREADGATE_STACK", "Threadgate"))
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    ray.init(runtime_env={"py_modules": [os.path.join(os.path.dirname(os.path.abspath(__file__)), "threadgate_producer.py")],
                          "env_vars": {k: v for k, v in os.environ.items() if k.startswith("AWS_")}})
    sent = (
        ray.data.from_items(rows)
        .map_batches(
            SendJobs,
            fn_constructor_args=(outputs["QueueUrl"], batch_id),
            batch_size=50,
            batch_format="pandas",
            # Ray 2.51+: compute= replaces the deprecated concurrency= for actor pools.
            compute=ray.data.ActorPoolStrategy(size=2),
        )
        .count()
    )
    print(f"sent {sent} records under batch {batch_id}")
    keys = {r["record_key"] for r in rows}
    outcomes = wait_for_batch(boto3.client("dynamodb"), outputs["TableName"], batch_id, len(keys))
    counts = {}
    for row in outcomes:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    print(json.dumps({"batch_id": batch_id, "records": len(keys), "counts": counts}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
