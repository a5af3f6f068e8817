import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import {
  DeleteMessageCommand,
  GetQueueAttributesCommand,
  ReceiveMessageCommand,
  SendMessageCommand,
  SQSClient,
} from '@aws-sdk/client-sqs';
import { BatchWriteCommand, DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type DlqHit,
  doneExitCode,
  tally,
  type WaitDeps,
  waitForRecords,
} from '../../../cli/commands/wait.js';
import { type DlqReaderSqs, NO_DLQ_MESSAGES, readDlq } from '../../../cli/dlq-read.js';
import { SelectionLooks } from '../../../cli/record-selection.js';
import { BATCH_INDEX_NAME } from '../../../functions/records/batch-index.js';
import { BatchCancels } from '../../../functions/records/cancellations.js';
import { type OutcomeRow, OutcomesStore } from '../../../functions/records/store.js';
import { awsUsage, resetAwsUsage } from '../../../local/emulator/usage.js';
import { recordState } from '../../fixtures/aws.js';
import { asStored, type CliStack, cliEnv, runCli, startCliStack } from '../../fixtures/cli.js';

let stack: CliStack;
let documents: DynamoDBDocumentClient;
let sqs: SQSClient;
let dynamodb: DynamoDBClient;
const dir = mkdtempSync(join(tmpdir(), 'tg-wait-'));
const now = new Date().toISOString();

beforeAll(async () => {
  stack = await startCliStack();
  documents = DynamoDBDocumentClient.from(new DynamoDBClient(stack.clientConfig));
  sqs = new SQSClient({ ...stack.clientConfig, useQueueUrlAsEndpoint: false });
  dynamodb = new DynamoDBClient(stack.clientConfig);
});
afterAll(async () => {
  await stack?.stop();
});

/** Writes rows as the worker would leave them. */
async function putRows(
  batch: string | undefined,
  statuses: string[],
  prefix = batch ?? 'nob',
): Promise<string[]> {
  const rows = statuses.map((status, i) => ({
    record_key: `${prefix}-${i}`,
    ...(batch ? { batch_id: batch } : {}),
    status,
    reason: status === 'submitted' ? 'OK' : status.toUpperCase(),
    attempts: 1,
    created_at: now,
    updated_at: now,
  }));
  await documents.send(
    new BatchWriteCommand({
      RequestItems: {
        [stack.outputs.TableName!]: rows.map((Item) => ({ PutRequest: { Item: asStored(Item) } })),
      },
    }),
  );
  return rows.map((r) => r.record_key);
}

/** Writes one row as it stands. */
async function putRow(Item: Record<string, unknown>): Promise<void> {
  await documents.send(
    new BatchWriteCommand({
      RequestItems: { [stack.outputs.TableName!]: [{ PutRequest: { Item: asStored(Item) } }] },
    }),
  );
}

/**
 * A message of the record in flight at a worker (received, invisible for a minute), as on a real
 * stack while a record is worked; the function returned deletes it, as the worker does once done.
 */
async function heldMessage(recordKey: string): Promise<() => Promise<void>> {
  const QueueUrl = stack.outputs.QueueUrl;
  await sqs.send(
    new SendMessageCommand({ QueueUrl, MessageBody: JSON.stringify({ record_key: recordKey }) }),
  );
  const held = await sqs.send(
    new ReceiveMessageCommand({ QueueUrl, VisibilityTimeout: 60, WaitTimeSeconds: 1 }),
  );
  return async () => {
    for (const m of held.Messages ?? []) {
      await sqs.send(new DeleteMessageCommand({ QueueUrl, ReceiptHandle: m.ReceiptHandle }));
    }
  };
}

async function setPaused(paused: boolean): Promise<void> {
  await recordState(
    dynamodb,
    stack.outputs.LedgerTableName!,
    paused
      ? {
          paused: true,
          reason: 'CaptchaAI answered ERROR_KEY_DOES_NOT_EXIST',
          code: 'ERROR_KEY_DOES_NOT_EXIST',
          by: 'worker',
          since: now,
        }
      : { paused: false },
  );
}

/** Empties the jobs queue (a message left there keeps later waits from seeing an idle queue). */
async function drainJobsQueue(): Promise<void> {
  for (;;) {
    const got = await sqs.send(
      new ReceiveMessageCommand({ QueueUrl: stack.outputs.QueueUrl, MaxNumberOfMessages: 10 }),
    );
    if (!got.Messages?.length) return;
    for (const m of got.Messages) {
      await sqs.send(
        new DeleteMessageCommand({ QueueUrl: stack.outputs.QueueUrl, ReceiptHandle: m.ReceiptHandle }),
      );
    }
  }
}

const wait = (args: string[]) => runCli(['wait', '--interval', '0.2', ...args], { env: cliEnv(stack.moto) });

describe('threadgate wait', () => {
  it('exits 0 once every record of the batch is submitted, with counts and a JSON report', async () => {
    // Prepare
    await putRows('all-ok', ['submitted', 'submitted', 'submitted']);
    // Act
    const run = await wait(['--batch', 'all-ok', '--expect', '3', '--json']);
    // Assess
    expect(run.code).toBe(0);
    expect(JSON.parse(run.stdout)).toMatchObject({
      batch_id: 'all-ok',
      expected: 3,
      ended: 3,
      pending: 0,
      end: 'done',
      exit_code: 0,
      counts: { submitted: 3 },
    });
    // Not a terminal: plain progress lines on stderr, with the counts by status.
    expect(run.stderr).toMatch(/wait batch "all-ok": 3\/3 records 100% \(submitted 3\)/);
  });

  it('exits 2 when a record failed or was rejected, and says so', async () => {
    await putRows('some-bad', ['submitted', 'failed', 'rejected', 'submitted']);
    const run = await wait(['--batch', 'some-bad', '--expect', '4']);
    expect(run.code).toBe(2);
    expect(run.stdout).toContain('batch "some-bad": all 4 records ended; some records did not submit');
    expect(run.stdout).toContain('submitted 2, failed 1, rejected 1');
  });

  it('exits 2 when the form said no (FORM_REJECTED, FORM_UNCONFIRMED), counting those apart', async () => {
    // Prepare: rows as the worker leaves a form's refusal, the check that decided in expect_rule.
    const rows = [
      { reason: 'OK', status: 'submitted' },
      { reason: 'FORM_REJECTED', status: 'failed', expect_rule: 'body_excludes[0]' },
      { reason: 'FORM_REJECTED', status: 'failed', expect_rule: 'status 200 not in [302]' },
      { reason: 'FORM_UNCONFIRMED', status: 'failed', expect_rule: 'body_includes[0]' },
    ].map((r, i) => ({
      record_key: `form-no-${i}`,
      batch_id: 'form-no',
      attempts: 1,
      created_at: now,
      updated_at: now,
      ...r,
    }));
    await documents.send(
      new BatchWriteCommand({
        RequestItems: {
          [stack.outputs.TableName!]: rows.map((Item) => ({ PutRequest: { Item: asStored(Item) } })),
        },
      }),
    );
    // Act
    const run = await wait(['--batch', 'form-no', '--expect', '4']);
    const json = await wait(['--batch', 'form-no', '--expect', '4', '--json']);
    // Assess
    expect(run.code).toBe(2);
    expect(run.stdout).toContain(
      'some records did not submit (the form said no: FORM_REJECTED 2, FORM_UNCONFIRMED 1;',
    );
    expect(JSON.parse(json.stdout)).toMatchObject({
      exit_code: 2,
      counts: { submitted: 1, failed: 3 },
      form_refused: { FORM_REJECTED: 2, FORM_UNCONFIRMED: 1 },
    });
  });

  it('exits 3 and says why while the pipeline is paused with records pending', async () => {
    // Prepare: 2 of 5 ended, and the pipeline paused on a revoked key
    await putRows('paused', ['submitted', 'stopped', 'in_progress']);
    await setPaused(true);
    try {
      // Act
      const run = await wait(['--batch', 'paused', '--expect', '5']);
      // Assess
      expect(run.code).toBe(3);
      expect(run.stdout).toContain(
        'batch "paused": 3 of 5 records have not ended and the pipeline is paused by worker since',
      );
      expect(run.stdout).toContain('CaptchaAI answered ERROR_KEY_DOES_NOT_EXIST');
      expect(run.stdout).toContain('threadgate resume');
    } finally {
      await setPaused(false);
    }
  });

  it('exits 2 for a batch nobody sent, saying there are no such records', async () => {
    const run = await wait(['--batch', 'never-sent', '--expect', '10']);
    expect(run.code).toBe(2);
    expect(run.stdout).toContain('batch "never-sent": no such records');
    expect(run.stdout).toContain('Is the batch id right');
  });

  it('exits 2 when the queue is empty but records of the batch are unaccounted for', async () => {
    await putRows('short', ['submitted', 'submitted']);
    const run = await wait(['--batch', 'short', '--expect', '3']);
    expect(run.code).toBe(2);
    expect(run.stdout).toContain('1 of 3 records are not accounted for');
    expect(run.stdout).toContain('keeps its first batch');
  });

  it('exits 4 on --timeout while a record is still queued', async () => {
    // Prepare: one row pending and its message still in the jobs queue
    await putRows('slow', ['submitted', 'in_progress']);
    await sqs.send(
      new SendMessageCommand({ QueueUrl: stack.outputs.QueueUrl, MessageBody: '{"record_key":"slow-1"}' }),
    );
    try {
      // Act
      const run = await wait(['--batch', 'slow', '--expect', '2', '--timeout', '1']);
      // Assess
      expect(run.code).toBe(4);
      expect(run.stdout).toContain('timed out after 1 s with 1 of 2 records not ended');
    } finally {
      await drainJobsQueue();
    }
  });

  it('waits for the keys of a job file, counting a key whose message is in the DLQ as ended (exit 2)', async () => {
    // Prepare: k-0 submitted; k-1 has no row, its message went to the DLQ after too many receives
    const [ok] = await putRows(undefined, ['submitted'], 'k');
    const lost = JSON.stringify({
      record_key: 'k-1',
      sitekey: 'x',
      pageurl: 'https://a.example/',
      submit_url: 'https://a.example/',
    });
    await sqs.send(new SendMessageCommand({ QueueUrl: stack.outputs.DlqUrl, MessageBody: lost }));
    const jobs = join(dir, 'jobs.jsonl');
    writeFileSync(jobs, `${JSON.stringify({ record_key: ok })}\n${lost}\n`);
    // Act
    const run = await wait(['--keys', jobs, '--json']);
    // Assess
    expect(run.code).toBe(2);
    expect(JSON.parse(run.stdout)).toMatchObject({ expected: 2, ended: 2, counts: { submitted: 1, dlq: 1 } });
    // The peek left the DLQ message where it was.
    const dlq = await sqs.send(
      new ReceiveMessageCommand({ QueueUrl: stack.outputs.DlqUrl, MaxNumberOfMessages: 10 }),
    );
    expect(dlq.Messages?.map((m) => m.Body)).toEqual([lost]);
  });

  it('takes the expected count from the file enqueue --counts wrote, and says when the batch is not in it', async () => {
    // Prepare: a counts file as `threadgate enqueue --counts` writes it
    const counts = join(dir, 'counts.json');
    writeFileSync(counts, JSON.stringify({ 'from-file': 2 }));
    await putRows('from-file', ['submitted', 'submitted']);
    // Act
    const run = await wait(['--batch', 'from-file', '--counts', counts]);
    const other = await wait(['--batch', 'not-there', '--counts', counts]);
    // Assess
    expect(run.code).toBe(0);
    expect(other.code).toBe(2);
    expect(other.stderr).toContain('has no count for batch "not-there" (it has "from-file")');
    expect(readFileSync(counts, 'utf8')).toContain('from-file');
  });

  it('ends with an error naming a reused batch_id when the batch holds more records than expected (exit 2)', async () => {
    // Prepare: an earlier run left 3 submitted rows under the batch; this run's 3 records are under way
    await putRows('reused', ['submitted', 'submitted', 'submitted'], 'reused-old');
    await putRows('reused', ['submitted', 'in_progress', 'in_progress'], 'reused-new');
    // Act
    const run = await wait(['--batch', 'reused', '--expect', '3', '--json']);
    // Assess: not "done" (4 ended ≥ 3 expected) but an error that says why
    expect(run.code).toBe(2);
    const report = JSON.parse(run.stdout);
    expect(report).toMatchObject({ end: 'too_many', records: 6, ended: 4, expected: 3 });
    expect(report.message).toContain('6 records carry this batch_id, more than the 3 expected');
    expect(report.message).toContain('(4 ended, 2 in_progress)');
    expect(report.message).toContain('the batch_id was used before');
  });

  it('never says done while a row of the batch is in_progress, even with as many ended as expected', async () => {
    // Prepare: 2 expected and 2 submitted, and a third record of the batch still being worked on
    await putRows('one-more', ['submitted', 'submitted', 'in_progress']);
    await sqs.send(
      new SendMessageCommand({
        QueueUrl: stack.outputs.QueueUrl,
        MessageBody: '{"record_key":"one-more-2"}',
      }),
    );
    try {
      // Act
      const run = await wait(['--batch', 'one-more', '--expect', '2', '--json']);
      // Assess
      expect(run.code).toBe(2);
      expect(JSON.parse(run.stdout)).toMatchObject({ end: 'too_many', ended: 2, records: 3 });
      expect(JSON.parse(run.stdout).message).toContain('(2 ended, 1 in_progress)');
    } finally {
      await drainJobsQueue();
    }
  });

  it('says a row is stuck in_progress when nothing is left to finish it (exit 2)', async () => {
    await putRows('stuck', ['submitted', 'in_progress']);
    const run = await wait(['--batch', 'stuck', '--expect', '2']);
    expect(run.code).toBe(2);
    expect(run.stdout).toContain('1 of 2 records are not accounted for');
    expect(run.stdout).toContain('1 of them have a row still in_progress with no message left to finish it');
  });

  it('waits for a batch sent in parts with the counts file enqueue --counts added up', async () => {
    // Prepare: two enqueue runs of one batch into one counts file, then the worker's rows for all 3
    const counts = join(dir, 'parts.json');
    const job = (n: number) =>
      JSON.stringify({
        record_key: `parts-${n}`,
        batch_id: 'parts',
        sitekey: 'x',
        pageurl: 'https://a.example/',
        submit_url: 'https://a.example/',
      });
    const enqueue = (stdin: string) =>
      runCli(['enqueue', '-', '--counts', counts], { env: cliEnv(stack.moto), stdin });
    expect((await enqueue(`${job(0)}\n${job(1)}`)).code).toBe(0);
    expect((await enqueue(job(2))).code).toBe(0);
    await drainJobsQueue();
    await putRows('parts', ['submitted', 'submitted', 'in_progress']);
    // Act: with the third still in progress, then with it ended
    const early = await wait(['--batch', 'parts', '--counts', counts, '--timeout', '1', '--json']);
    await putRows('parts', ['submitted', 'submitted', 'submitted']);
    const late = await wait(['--batch', 'parts', '--counts', counts, '--json']);
    // Assess: 3 expected, not the 1 of the last part
    expect(JSON.parse(readFileSync(counts, 'utf8'))).toEqual({ parts: 3 });
    expect(early.code).not.toBe(0);
    expect(JSON.parse(early.stdout)).toMatchObject({ expected: 3, ended: 2, pending: 1 });
    expect(late.code).toBe(0);
    expect(JSON.parse(late.stdout)).toMatchObject({ expected: 3, ended: 3, end: 'done' });
  });

  it('reads the DLQ without hiding a message from another reader at any time', async () => {
    // Prepare: 3 messages in the DLQ (besides what earlier tests left there)
    for (const key of ['seen-0', 'seen-1', 'seen-2']) {
      await sqs.send(
        new SendMessageCommand({
          QueueUrl: stack.outputs.DlqUrl,
          MessageBody: JSON.stringify({ record_key: key, batch_id: 'seen' }),
        }),
      );
    }
    // After each receive of the reader, look at the DLQ as a redrive beside it would: nothing
    // more is hidden than before the read (an earlier test's receive still hides one message).
    const hidden = async () => {
      const a = await sqs.send(
        new GetQueueAttributesCommand({
          QueueUrl: stack.outputs.DlqUrl,
          AttributeNames: ['ApproximateNumberOfMessagesNotVisible'],
        }),
      );
      return Number(a.Attributes?.ApproximateNumberOfMessagesNotVisible);
    };
    const before = await hidden();
    const hiddenAfterReceive: number[] = [];
    const watched = {
      send: async (command: Parameters<DlqReaderSqs['send']>[0]) => {
        const out = await sqs.send(command as ReceiveMessageCommand);
        if (command instanceof ReceiveMessageCommand) hiddenAfterReceive.push(await hidden());
        return out;
      },
    };
    // Act
    const read = await readDlq(watched, stack.outputs.DlqUrl!);
    // Assess
    expect(read.hits.filter((h) => h.batchId === 'seen').map((h) => h.recordKey)).toEqual([
      'seen-0',
      'seen-1',
      'seen-2',
    ]);
    expect(read.read).toBe(read.messages - before);
    expect(hiddenAfterReceive.length).toBeGreaterThan(0);
    expect(hiddenAfterReceive.every((n) => n === before)).toBe(true);
  });

  it('refuses --batch without an expected count', async () => {
    const run = await wait(['--batch', 'x']);
    expect(run.code).toBe(64);
    expect(run.stderr).toContain(
      '--batch needs the number of records to wait for: --expect N, or --counts FILE',
    );
  });
});

describe('wait tally', () => {
  const row = (record_key: string, status: string): OutcomeRow =>
    ({ record_key, status, batch_id: 'b' }) as OutcomeRow;
  const batch = { kind: 'batch' as const, batchId: 'b' };

  it('counts stopped records as ended and a stopped record makes the exit code 3', () => {
    const t = tally(batch, 3, [row('a', 'submitted'), row('b', 'stopped'), row('c', 'failed')], []);
    expect(t).toEqual({
      counts: { submitted: 1, stopped: 1, failed: 1 },
      ended: 3,
      pending: 0,
      records: 3,
      open: 0,
    });
    expect(doneExitCode(t.counts)).toBe(3);
  });

  it("counts a batch's unkeyed DLQ message and a keyed one without a final row, but not another batch's", () => {
    const dlq: DlqHit[] = [
      { batchId: 'b' },
      { recordKey: 'c', batchId: 'b' },
      { recordKey: 'a', batchId: 'b' },
      { batchId: 'other' },
    ];
    const t = tally(batch, 4, [row('a', 'submitted'), row('c', 'in_progress')], dlq);
    expect(t).toEqual({ counts: { submitted: 1, dlq: 2 }, ended: 3, pending: 1, records: 3, open: 0 });
  });

  it('counts a row in_progress as open, and a DLQ message without a row as a record', () => {
    const t = tally(batch, 2, [row('a', 'in_progress')], [{ recordKey: 'z', batchId: 'b' }]);
    expect(t).toEqual({ counts: { in_progress: 1, dlq: 1 }, ended: 1, pending: 1, records: 2, open: 1 });
  });
});

describe('wait looks', () => {
  it('confirms an end a look that read only what changed found with a full look, and goes on when that one disagrees', async () => {
    // Prepare: the incremental look says both ended; the full look still finds one in progress
    const row = (key: string, status: string) => ({ record_key: key, batch_id: 'b', status }) as OutcomeRow;
    const answers = [
      { full: true, rows: [row('a', 'in_progress'), row('b', 'in_progress')] },
      { full: false, rows: [row('a', 'submitted'), row('b', 'submitted')] },
      { full: true, rows: [row('a', 'submitted'), row('b', 'in_progress')] },
      { full: false, rows: [row('a', 'submitted'), row('b', 'submitted')] },
      { full: true, rows: [row('a', 'submitted'), row('b', 'submitted')] },
    ];
    const asked: boolean[] = [];
    const deps: WaitDeps = {
      look: async ({ full }) => {
        asked.push(full);
        const answer = answers[asked.length - 1]!;
        return { rows: answer.rows, pipeline: { paused: false }, queueIdle: false };
      },
      dlq: async () => NO_DLQ_MESSAGES,
      now: () => 0,
      sleep: async () => {},
    };
    // Act
    const report = await waitForRecords(deps, {
      selection: { kind: 'batch', batchId: 'b' },
      expected: 2,
      intervalMs: 2_000,
    });
    // Assess
    expect(asked).toEqual(answers.map((a) => a.full));
    expect(report).toMatchObject({ end: 'done', exit_code: 0, ended: 2 });
  });
});

describe('threadgate wait on a cancelled batch', () => {
  it('exits 5 once none of the batch’s records is in progress, with the cancel in the report; cancelled rows count as ended', async () => {
    // Prepare: 2 of 4 ended (one cancelled), one still at CaptchaAI, one never reached yet
    const batch = 'cancelled-wait';
    const [, , working] = await putRows(batch, ['submitted', 'cancelled', 'in_progress']);
    // Cancelled a minute ago: past its bound (10 s here), so only the row in progress holds the wait.
    const cancels = new BatchCancels({
      client: new DynamoDBClient(stack.clientConfig),
      tableName: stack.outputs.TableName!,
      now: () => Date.now() - 60_000,
    });
    await cancels.cancel(batch, { reason: 'wrong form URL' });
    // The record in progress has its message in flight (a worker holds it), as on a real stack:
    // without one the wait would rightly end at once saying the record is not accounted for.
    const done = await heldMessage(working!);
    // Act: the wait goes on while a row is in progress, and ends once it has ended
    const running = wait(['--batch', batch, '--expect', '4', '--json']);
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    await putRow({
      record_key: working,
      batch_id: batch,
      status: 'submitted',
      reason: 'OK',
      created_at: now,
      updated_at: now,
    });
    await done();
    const run = await running;
    // Assess
    expect(run.code).toBe(5);
    const report = JSON.parse(run.stdout);
    expect(report).toMatchObject({
      end: 'cancelled',
      exit_code: 5,
      ended: 3,
      pending: 1,
      counts: { submitted: 2, cancelled: 1 },
      cancel: { batchId: batch, reason: 'wrong form URL', by: 'operator' },
    });
    expect(report.message).toContain('the batch was cancelled at');
    expect(report.message).toContain('the other 1 end `cancelled`');
  });

  it('does not end before cancelledAt + the bound: a record a stale worker claims and posts after the cancel is waited for', async () => {
    // Prepare: 1 of 2 ended `cancelled`, none in progress, the cancel just made (bound 10 s: the
    // CLI stack's worker has no TIME_SCALE). The other record's message is in flight at a worker
    // whose cache still says "not cancelled".
    const batch = 'cancel-bound';
    await putRows(batch, ['cancelled']);
    const late = `${batch}-late`;
    await new BatchCancels({
      client: new DynamoDBClient(stack.clientConfig),
      tableName: stack.outputs.TableName!,
    }).cancel(batch);
    const done = await heldMessage(late);
    // Act: the wait starts; 2 s later the stale worker claims the record, and posts it 2 s after that.
    const running = wait(['--batch', batch, '--expect', '2', '--json']);
    const put = (status: string) =>
      // status_at (the batch index's sort key) follows updated_at here: the claim, then the final write.
      putRow({
        record_key: late,
        batch_id: batch,
        status,
        created_at: now,
        updated_at: new Date().toISOString(),
      });
    await new Promise((resolve) => setTimeout(resolve, 2_000));
    await put('in_progress');
    await new Promise((resolve) => setTimeout(resolve, 2_000));
    await put('submitted');
    await done();
    const run = await running;
    // Assess: the posted record is in the report; the wait did not say "cancelled" with it pending.
    expect(run.code).toBe(5);
    const report = JSON.parse(run.stdout);
    expect([report.end, report.ended, report.pending]).toEqual(['done', 2, 0]);
    expect(report.counts).toEqual({ cancelled: 1, submitted: 1 });
  }, 30_000);

  it('ends a cancelled batch with nothing in progress only on a look that started after cancelledAt + the bound, never as missing', async () => {
    // Prepare: a fake clock; each look takes no time, each sleep moves the clock by the interval.
    const cancelledAt = 1_000_000;
    let now = cancelledAt + 500;
    const looks: number[] = [];
    const deps: WaitDeps = {
      look: async () => {
        looks.push(now);
        return {
          rows: [{ record_key: 'a', batch_id: 'b', status: 'cancelled' } as OutcomeRow],
          pipeline: { paused: false },
          queueIdle: true,
          cancel: { batchId: 'b', cancelledAt: new Date(cancelledAt).toISOString() },
        };
      },
      dlq: async () => NO_DLQ_MESSAGES,
      now: () => now,
      sleep: async (ms) => {
        now += ms;
      },
    };
    // Act
    const report = await waitForRecords(deps, {
      selection: { kind: 'batch', batchId: 'b' },
      expected: 3,
      intervalMs: 2_000,
      cancelBoundMs: 10_000,
    });
    // Assess
    expect(report).toMatchObject({ end: 'cancelled', exit_code: 5, pending: 2 });
    // The look that found the end and the full look that confirmed it at once
    expect(looks.at(-2)).toBeGreaterThanOrEqual(cancelledAt + 10_000);
    expect(looks.at(-1)).toBe(looks.at(-2));
    expect(looks.slice(0, -2).every((t) => t < cancelledAt + 10_000)).toBe(true);
  });

  it('ends a --keys wait whose records all ended, one cancelled, with exit 5', () => {
    const t = tally(
      { kind: 'keys', keys: ['a', 'b'], file: 'keys.txt' },
      2,
      [
        { record_key: 'a', status: 'submitted' } as OutcomeRow,
        { record_key: 'b', status: 'cancelled' } as OutcomeRow,
      ],
      [],
    );
    expect(t).toMatchObject({ ended: 2, pending: 0, open: 0 });
    expect(doneExitCode(t.counts)).toBe(5);
    expect(doneExitCode({ cancelled: 1, stopped: 1 })).toBe(3);
    expect(doneExitCode({ cancelled: 1, failed: 1 })).toBe(5);
  });
});

/**
 * What a look of `threadgate wait --batch` reads, in the read units the moto launcher bills for
 * it (local/emulator/usage.py) and in index entries: a later look reads what changed since the
 * last, not the whole batch.
 */
describe('threadgate wait --batch look reads', () => {
  it('reads only the rows that ended since its last look: 3 of 3,000 cost a small part of a full look', async () => {
    // Prepare: 3,000 records of one batch in progress since a minute ago; a first (full) look
    const batch = 'big-batch';
    const claimedAt = new Date(Date.now() - 60_000).toISOString();
    const rows = Array.from({ length: 3_000 }, (_, i) => ({
      record_key: `${batch}-${i}`,
      batch_id: batch,
      status: 'in_progress',
      created_at: claimedAt,
      updated_at: claimedAt,
    }));
    for (let i = 0; i < rows.length; i += 25) {
      await documents.send(
        new BatchWriteCommand({
          RequestItems: {
            [stack.outputs.TableName!]: rows
              .slice(i, i + 25)
              .map((r) => ({ PutRequest: { Item: asStored(r) } })),
          },
        }),
      );
    }
    const index = `${stack.outputs.TableName}/${BATCH_INDEX_NAME}`;
    let entries = 0;
    // Counts the index entries the looks read (what each look pays for, item by item)
    class CountingStore extends OutcomesStore {
      override async *batchRows(batchId: string, since?: string) {
        for await (const row of super.batchRows(batchId, since)) {
          entries += 1;
          yield row;
        }
      }
    }
    const store = new CountingStore({
      client: new DynamoDBClient(stack.clientConfig),
      tableName: stack.outputs.TableName!,
    });
    const looks = new SelectionLooks(store, { kind: 'batch', batchId: batch });
    const readUnits = async () =>
      (await awsUsage(stack.moto.endpoint)).calls
        .filter((c) => c.operation === 'Query' && c.resource === index)
        .reduce((sum, c) => sum + c.read_units, 0);
    await resetAwsUsage(stack.moto.endpoint);
    expect(await looks.look(true)).toHaveLength(3_000);
    const full = { units: await readUnits(), entries };
    // Act: 3 records end; the next look
    const endedAt = new Date().toISOString();
    for (const r of rows.slice(0, 3)) {
      await putRow({ ...r, status: 'submitted', reason: 'OK', updated_at: endedAt });
    }
    await resetAwsUsage(stack.moto.endpoint);
    entries = 0;
    const seen = await looks.look(false);
    const later = { units: await readUnits(), entries };
    // Assess: the look sees the 3 ended and the 2,997 in progress, reading 3 entries and one
    // page per shard (16 × 0.5 units), where the full look read every entry (47 units measured)
    expect(seen.filter((r) => r.status === 'submitted')).toHaveLength(3);
    expect(seen.filter((r) => r.status === 'in_progress')).toHaveLength(2_997);
    expect(later.entries).toBe(3);
    expect(later.units).toBe(8);
    expect(full.entries).toBe(3_000);
    expect(later.units).toBeLessThan(full.units / 4);
  }, 120_000);
});
