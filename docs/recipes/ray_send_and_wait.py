"""Ray: send a batch of records with Ray Data, then wait for the batch's outcomes.

Install: in a virtual environment (PEP 668 refuses a system Python's bare pip install), Ray 2.51+:
         python3 -m venv .venv && .venv/bin/pip install 'ray[data]' pandas pyarrow threadgate_producer-*.whl
         (the wheel: `pip wheel python/ --no-deps -w python/dist/` in a checkout)
Run:     python ray_send_and_wait.py BATCH_ID records.jsonl
         (records.jsonl: one job per line, as `threadgate enqueue` takes; against
         `npx threadgate local --keep`, export the environment it prints first)
Ray ships the threadgate_producer package to the workers (runtime_env py_modules).
"""

import json
import os
import sys

import ray
import threadgate_producer as tg


class SendJobs:
    """Each batch of rows becomes job messages under the batch id (validated, 10 per request)."""

    def __init__(self, queue_url, batch_id):
        self.queue_url, self.batch_id = queue_url, batch_id

    def __call__(self, batch):  # a pandas DataFrame of job fields
        records = [{k: v for k, v in row.items() if v == v and v is not None}
                   for row in batch.to_dict("records")]
        result = tg.send(self.queue_url, records, batch_id=self.batch_id)
        for refusal in result.refused:
            print(f"refused {refusal.record_key}: {'; '.join(refusal.reasons)}", file=sys.stderr)
        return batch[["record_key"]]


def main(batch_id, path):
    outputs = tg.stack_outputs(os.environ.get("THREADGATE_STACK", "Threadgate"))
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    ray.init(runtime_env={"py_modules": [tg],
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
    done = tg.wait(outputs["TableName"], batch_id, expect=len(keys), timeout_s=3600,
                   state_table=outputs["LedgerTableName"])
    print(json.dumps({"batch_id": batch_id, "records": len(keys), "counts": done.counts}))
    sys.exit(done.exit_code)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
