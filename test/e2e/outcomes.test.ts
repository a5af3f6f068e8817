import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  DeleteMessageBatchCommand,
  type Message,
  PurgeQueueCommand,
  ReceiveMessageCommand,
} from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../../local/emulator/deploy.js';
import type { LocalStack } from '../../local/stack/local-stack.js';
import { readOutcomes } from '../../local/stack/observation.js';
import { goodRecord } from '../../local/stack/records.js';
import { type CliRun, cliEnv, runCli } from '../fixtures/cli.js';
import { sharedE2eStack, uniquePrefix, waitFor } from './harness.js';
import { e2eTarget } from './target.js';

/**
 * Outcomes back to the producer, end to end on the deployed stack: batches through
 * `threadgate enqueue` and `threadgate wait`, `outcomes --batch`, the outcome stream (table
 * stream → publisher Lambda → outcomes queue, run by the local runtime), a crash right after
 * the final write, and the Python producer package (python/threadgate_producer).
 */
let stack: LocalStack;
const dir = mkdtempSync(join(tmpdir(), 'tg-e2e-outcomes-'));
/**
 * Records per batch of the batch test: what it proves (per-batch counts and exit codes, repeated
 * lines adding no solve, the export of exactly one batch) does not grow with the count; the
 * volume test of the cap is invariants.test.ts's 200 records.
 */
const PER_BATCH = 40;
/** Every outcomes-queue message received so far (the tests share the queue). */
const published: Message[] = [];
/**
 * The record-key prefixes of this file's records: the stack is shared with other files
 * (./harness.ts sharedE2eStack), whose rows and messages the table and the queue also hold.
 */
const ours: string[] = [];
const isOurs = (recordKey: string) => ours.some((prefix) => recordKey.startsWith(`${prefix}-`));

const cli = (args: string[], timeoutMs = 240_000): Promise<CliRun> =>
  runCli(args, {
    env: cliEnv(undefined, { ...stack.awsEnv, THREADGATE_STACK: stack.stackName }),
    timeoutMs,
  });

const waitBatch = (batch: string, expect: number, timeoutS = 120): Promise<CliRun> =>
  cli([
    'wait',
    '--batch',
    batch,
    '--expect',
    String(expect),
    '--interval',
    '1',
    '--timeout',
    String(timeoutS),
  ]);

function withBatch(body: string, batch: string): string {
  return JSON.stringify({ ...JSON.parse(body), batch_id: batch });
}

/** Receives (and deletes) what the outcomes queue holds now into `published`. */
async function drainOutcomes(): Promise<void> {
  for (;;) {
    const out = await stack.sqs.send(
      new ReceiveMessageCommand({
        QueueUrl: stack.outputs.OutcomesQueueUrl,
        MaxNumberOfMessages: 10,
        WaitTimeSeconds: 0,
        MessageAttributeNames: ['All'],
      }),
    );
    const messages = out.Messages ?? [];
    if (messages.length === 0) return;
    published.push(...messages);
    await stack.sqs.send(
      new DeleteMessageBatchCommand({
        QueueUrl: stack.outputs.OutcomesQueueUrl,
        Entries: messages.map((m, i) => ({ Id: String(i), ReceiptHandle: m.ReceiptHandle })),
      }),
    );
  }
}

const publishedPairs = () =>
  new Set(
    published.flatMap((m) => {
      const body = JSON.parse(m.Body ?? '{}') as { record_key: string; status: string };
      return isOurs(body.record_key) ? [`${body.record_key}|${body.status}`] : [];
    }),
  );

describe.skipIf(e2eTarget() !== 'moto')('outcomes back to the producer (deployed local stack)', () => {
  beforeAll(async () => {
    stack = await sharedE2eStack('outcomes');
  }, 600_000);
  afterAll(async () => {
    await stack?.stop();
  });

  it(`enqueue + wait --batch: ${2 * PER_BATCH} records in two batches, 10% sent twice, right counts and exit codes; outcomes --batch reads exactly the batch`, async () => {
    // Prepare: batch A PER_BATCH good records; batch B PER_BATCH − 5 good and 5 with a page URL
    // off the allowlist (rejected); a tenth of the records of the two batches appear twice in the file.
    const prefix = uniquePrefix('batches');
    ours.push(prefix);
    const a = `${prefix}-a`;
    const b = `${prefix}-b`;
    const site = stack.site.url;
    const lines: string[] = [];
    for (let i = 0; i < PER_BATCH; i++)
      lines.push(withBatch(goodRecord(site, stack.site.sitekey, `${a}-${i}`, i), a));
    for (let i = 0; i < PER_BATCH; i++) {
      const body =
        i < 5
          ? JSON.stringify({
              record_key: `${b}-${i}`,
              sitekey: stack.site.sitekey,
              pageurl: 'https://not-allowed.example/form',
              submit_url: 'https://not-allowed.example/form',
            })
          : goodRecord(site, stack.site.sitekey, `${b}-${i}`, i);
      lines.push(withBatch(body, b));
    }
    for (let i = 0; i < (2 * PER_BATCH) / 10; i++) lines.push(lines[i * 10]!);
    const jobs = join(dir, 'jobs.jsonl');
    const counts = join(dir, 'counts.json');
    writeFileSync(jobs, `${lines.join('\n')}\n`);

    stack.captcha.resetStats();
    // Act
    const enqueued = await cli(['enqueue', jobs, '--counts', counts]);
    const [waitA, waitB] = await Promise.all([
      cli(['wait', '--batch', a, '--counts', counts, '--json', '--interval', '1', '--timeout', '200']),
      cli(['wait', '--batch', b, '--counts', counts, '--json', '--interval', '1', '--timeout', '200']),
    ]);
    const exported = await cli(['outcomes', '--batch', a]);

    // Assess
    expect(enqueued.code).toBe(0);
    expect(enqueued.stdout).toContain(`batch ${a}: ${PER_BATCH} records sent`);
    expect(enqueued.stdout).toContain(`batch ${b}: ${PER_BATCH} records sent`);
    const rows = await readOutcomes(stack);
    for (const [run, batch] of [
      [waitA, a],
      [waitB, b],
    ] as const) {
      const report = JSON.parse(run.stdout);
      const mine = rows.filter((r) => r.record_key.startsWith(`${batch}-`));
      const byStatus: Record<string, number> = {};
      for (const r of mine) byStatus[r.status] = (byStatus[r.status] ?? 0) + 1;
      expect(report).toMatchObject({
        end: 'done',
        expected: PER_BATCH,
        ended: PER_BATCH,
        pending: 0,
        counts: byStatus,
      });
      // Exit code by the rules, from the table itself.
      expect(run.code).toBe(byStatus.submitted === PER_BATCH ? 0 : 2);
    }
    expect(JSON.parse(waitB.stdout).counts.rejected).toBe(5);
    expect(waitB.code).toBe(2);
    const exportedKeys = exported.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l).record_key)
      .sort();
    expect(exportedKeys).toEqual(Array.from({ length: PER_BATCH }, (_, i) => `${a}-${i}`).sort());
    // One solve per record: the repeated lines add no submits (2 × PER_BATCH − 5 solvable records;
    // an UNSOLVABLE or transient answer may add a resubmission, the stand-in injects none here).
    expect(stack.captcha.stats().submits).toBe(2 * PER_BATCH - 5);
  }, 600_000);

  it('publishes every final row to the outcomes queue: deduplicated by record_key and status they equal the table, with no token or key', async () => {
    // Act: the stream is read asynchronously; wait until every final row has a message
    const rows = (await readOutcomes(stack)).filter(
      (r) => isOurs(r.record_key) && ['submitted', 'failed', 'rejected'].includes(r.status),
    );
    await waitFor(
      'a message for every final row',
      async () => {
        await drainOutcomes();
        const pairs = publishedPairs();
        return rows.every((r) => pairs.has(`${r.record_key}|${r.status}`));
      },
      { timeoutMs: 120_000, intervalMs: 1000 },
    );
    await drainOutcomes();
    // Assess
    const finalPairs = new Set(rows.map((r) => `${r.record_key}|${r.status}`));
    expect(publishedPairs()).toEqual(finalPairs);
    const byKey = new Map(rows.map((r) => [r.record_key, r]));
    for (const m of published) {
      const body = JSON.parse(m.Body ?? '{}');
      expect(m.Body).not.toContain(stack.apiKey);
      expect(Object.keys(body).some((k) => /token|key$/i.test(k) && k !== 'record_key')).toBe(false);
      for (const token of stack.site.receivedTokens()) expect(m.Body).not.toContain(token);
      // Messages of other files' records (the stack is shared) have no row read above.
      if (isOurs(body.record_key)) {
        expect(body).toMatchObject({
          status: byKey.get(body.record_key)?.status,
          batch_id: byKey.get(body.record_key)?.batch_id,
        });
      }
    }
  }, 200_000);

  it('still publishes an outcome whose writer was killed right after the final write', async () => {
    // Prepare: a process that claims a record and writes its final outcome through the worker's
    // store, then dies by SIGKILL before anything else runs (no return, no flush, no cleanup).
    const crash = uniquePrefix('crash');
    ours.push(crash);
    const key = `${crash}-0`;
    const script = [
      "import { DynamoDBClient } from '@aws-sdk/client-dynamodb';",
      "import { OutcomesStore } from './functions/records/store.ts';",
      'const store = new OutcomesStore({ client: new DynamoDBClient({}), tableName: process.env.TABLE_NAME });',
      "await store.claim(process.env.KEY, { owner: 'doomed', leaseMs: 60000, captchaType: 'recaptcha_v2', batchId: 'crash' });",
      "await store.finish(process.env.KEY, 'doomed', { status: 'submitted', reason: 'OK', targetStatus: 200, attempts: 1 });",
      "process.kill(process.pid, 'SIGKILL');",
    ].join('\n');
    // Act
    const signal = await new Promise<string | null>((resolve, reject) => {
      const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
        cwd: REPO_ROOT,
        env: { ...process.env, ...stack.awsEnv, TABLE_NAME: stack.outputs.TableName, KEY: key },
        stdio: ['ignore', 'ignore', 'inherit'],
      });
      child.on('error', reject);
      child.on('exit', (_code, sig) => resolve(sig));
    });
    // Assess
    expect(signal).toBe('SIGKILL');
    await waitFor(
      'the outcome of the killed writer on the outcomes queue',
      async () => {
        await drainOutcomes();
        return publishedPairs().has(`${key}|submitted`);
      },
      { timeoutMs: 60_000, intervalMs: 500 },
    );
  }, 120_000);

  it('runs the Python producer package from python/: send under a batch, wait and key_outcomes read it back', async () => {
    // Prepare
    const batch = uniquePrefix('python');
    const jobs = Array.from({ length: 6 }, (_, i) =>
      JSON.parse(withBatch(goodRecord(stack.site.url, stack.site.sitekey, `${batch}-${i}`, i), batch)),
    );
    const program = [
      'import json, sys',
      "sys.path.insert(0, 'python')",
      'import threadgate_producer as tg',
      'jobs = json.loads(sys.argv[1])',
      `out = tg.stack_outputs(${JSON.stringify(stack.stackName)})`,
      "sent = tg.send(out['QueueUrl'], jobs)",
      'assert sent.sent == len(jobs) and not sent.refused, sent',
      `done = tg.wait(out['TableName'], ${JSON.stringify(batch)}, expect=len(jobs), timeout_s=120, interval_s=1)`,
      "assert done.end == 'done' and done.exit_code in (0, 2), done",
      "again = tg.key_outcomes(out['TableName'], [j['record_key'] for j in jobs] + ['no-such-key'])",
      "print(json.dumps({'batch': sorted((r['record_key'], r['status']) for r in done.rows), 'keys': sorted(again)}))",
    ].join('\n');
    // Act
    const result = await new Promise<{ code: number | null; stdout: string; stderr: string }>(
      (resolve, reject) => {
        const child = spawn('python3', ['-c', program, JSON.stringify(jobs)], {
          cwd: REPO_ROOT,
          env: { ...process.env, ...stack.awsEnv },
        });
        let stdout = '';
        let stderr = '';
        child.stdout.on('data', (d) => {
          stdout += d;
        });
        child.stderr.on('data', (d) => {
          stderr += d;
        });
        child.on('error', reject);
        child.on('close', (code) => resolve({ code, stdout, stderr }));
      },
    );
    // Assess
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    const out = JSON.parse(result.stdout);
    const keys = jobs.map((j) => j.record_key as string).sort();
    expect(out.batch.map((pair: [string, string]) => pair[0])).toEqual(keys);
    expect(out.batch.every((pair: [string, string]) => ['submitted', 'failed'].includes(pair[1]))).toBe(true);
    expect(out.keys).toEqual(keys);
  }, 200_000);

  it('wait exits 3 with the reason while the pipeline is paused, and 2 for a batch that does not exist', async () => {
    // Prepare
    const batch = uniquePrefix('paused');
    const jobs = join(dir, 'paused.jsonl');
    writeFileSync(
      jobs,
      `${[0, 1, 2].map((i) => withBatch(goodRecord(stack.site.url, stack.site.sitekey, `${batch}-${i}`, i), batch)).join('\n')}\n`,
    );
    const paused = await cli(['pause', '--reason', 'partner portal maintenance']);
    expect(paused.code).toBe(0);
    try {
      await cli(['enqueue', jobs]);
      // Act
      const waited = await waitBatch(batch, 3, 60);
      const missing = await waitBatch(uniquePrefix('nobody'), 5);
      // Assess
      expect(waited.code).toBe(3);
      expect(waited.stdout).toContain('the pipeline is paused by operator');
      expect(waited.stdout).toContain('partner portal maintenance');
      expect(missing.code).toBe(3); // still paused: nothing will move, whatever the batch
    } finally {
      await cli(['resume', '--force']);
    }
    const done = await waitBatch(batch, 3, 120);
    // "No such records" needs an idle queue: the copies the first test sent twice may still wait
    // out a live lease (minutes here) before they are dropped as duplicates; their records ended.
    await stack.sqs.send(new PurgeQueueCommand({ QueueUrl: stack.outputs.QueueUrl }));
    const missing = await waitBatch(uniquePrefix('nobody'), 5, 60);
    expect([0, 2]).toContain(done.code);
    expect(missing.code).toBe(2);
    expect(missing.stdout).toContain('no such records');
  }, 400_000);
});
