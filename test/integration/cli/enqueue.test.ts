import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  GetQueueAttributesCommand,
  PurgeQueueCommand,
  ReceiveMessageCommand,
  SQSClient,
} from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type CliStack, cliEnv, runCli, startCliStack } from '../../fixtures/cli.js';

let stack: CliStack;
let sqs: SQSClient;
let dir: string;

function job(n: number): string {
  return JSON.stringify({
    record_key: `rec-${n}`,
    sitekey: '6LeIxAcTAAAAAJcZVRqyHh71UMIEGNQ_MXjiZKhI',
    pageurl: 'https://forms.example.com/apply',
    submit_url: 'https://forms.example.com/apply/submit',
  });
}

/** Three kinds of bad line, so the reasons differ: not JSON, a missing field, a bad URL. */
function badLine(n: number): string {
  if (n % 3 === 0) return `{"record_key": "rec-${n}", "sitekey": `;
  if (n % 3 === 1)
    return JSON.stringify({ record_key: `rec-${n}`, sitekey: 'k', submit_url: 'https://x.example/s' });
  return JSON.stringify({
    record_key: `rec-${n}`,
    sitekey: 'k',
    pageurl: 'not a url',
    submit_url: 'https://x.example/s',
  });
}

async function queueDepth(): Promise<number> {
  const out = await sqs.send(
    new GetQueueAttributesCommand({
      QueueUrl: stack.outputs.QueueUrl,
      AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'],
    }),
  );
  return (
    Number(out.Attributes?.ApproximateNumberOfMessages) +
    Number(out.Attributes?.ApproximateNumberOfMessagesNotVisible)
  );
}

beforeAll(async () => {
  // The jobs queue takes at most 4 KiB, so a valid but large job can be refused by SQS.
  stack = await startCliStack({ jobsMaximumMessageSize: 4096 });
  sqs = new SQSClient({ ...stack.clientConfig, useQueueUrlAsEndpoint: false });
  dir = await mkdtemp(join(tmpdir(), 'threadgate-cli-enqueue-'));
});

afterAll(async () => {
  await stack?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

beforeEach(async () => {
  await sqs.send(new PurgeQueueCommand({ QueueUrl: stack.outputs.QueueUrl }));
});

describe('threadgate enqueue', () => {
  it('sends the 980 valid lines of 1,000, reports the 20 bad ones by line number and exits non-zero', async () => {
    // Prepare: 1,000 lines, every 50th bad (lines 50, 100, …, 1000).
    const lines: string[] = [];
    const badLineNumbers: number[] = [];
    for (let n = 1; n <= 1000; n++) {
      if (n % 50 === 0) {
        lines.push(badLine(n));
        badLineNumbers.push(n);
      } else lines.push(job(n));
    }
    const file = join(dir, 'jobs.jsonl');
    const rejects = join(dir, 'rejects.jsonl');
    await writeFile(file, `${lines.join('\n')}\n`);

    // Act
    const run = await runCli(['enqueue', file, '--rejects', rejects], {
      env: cliEnv(stack.moto),
      timeoutMs: 170_000,
    });

    // Assess
    expect(run.code).toBe(2);
    expect(await queueDepth()).toBe(980);
    const reported = [...run.stderr.matchAll(/^line (\d+): rejected: (.+)$/gm)];
    expect(reported.map((m) => Number(m[1]))).toEqual(badLineNumbers);
    expect(reported.every((m) => (m[2] ?? '').length > 0)).toBe(true);
    expect(run.stderr).toContain('line 150: rejected: message: not valid JSON');
    expect(run.stdout).toContain('sent 980 of 1000 lines; 20 rejected');
    const kept = (await readFile(rejects, 'utf8')).trimEnd().split('\n');
    expect(kept).toEqual(badLineNumbers.map((n) => lines[n - 1]));
  }, 180_000); // moto's SQS slows as the queue grows: 40-60 s for 1,000 messages on a busy machine

  it('sends the bodies unchanged, one message per line', async () => {
    // Prepare
    const lines = [job(1), job(2), job(3)];
    const file = join(dir, 'three.jsonl');
    await writeFile(file, `${lines.join('\n')}\n`);

    // Act
    const run = await runCli(['enqueue', file], { env: cliEnv(stack.moto) });

    // Assess
    expect(run.code).toBe(0);
    const out = await sqs.send(
      new ReceiveMessageCommand({
        QueueUrl: stack.outputs.QueueUrl,
        MaxNumberOfMessages: 10,
        WaitTimeSeconds: 1,
      }),
    );
    expect((out.Messages ?? []).map((m) => m.Body).sort()).toEqual([...lines].sort());
  });

  it('sets MessageGroupId (the tenant of SQS fair queues): the line’s batch_id by default, --tenant over it, none without either (checked on receive)', async () => {
    // Prepare
    const withBatch = (n: number, batch: string) =>
      JSON.stringify({ ...JSON.parse(job(n)), batch_id: batch });
    const file = join(dir, 'tenants.jsonl');
    await writeFile(file, `${[withBatch(1, 'nightly-1'), withBatch(2, 'sync-9'), job(3)].join('\n')}\n`);
    const bad = await runCli(['enqueue', file, '--tenant', 'has space'], { env: cliEnv(stack.moto) });
    const groups = async () => {
      const got: Record<string, string | undefined> = {};
      for (let round = 0; round < 5 && Object.keys(got).length < 3; round++) {
        const out = await sqs.send(
          new ReceiveMessageCommand({
            QueueUrl: stack.outputs.QueueUrl,
            MaxNumberOfMessages: 10,
            MessageSystemAttributeNames: ['MessageGroupId'],
            VisibilityTimeout: 0,
          }),
        );
        for (const m of out.Messages ?? [])
          got[JSON.parse(m.Body ?? '{}').record_key] = m.Attributes?.MessageGroupId;
      }
      await sqs.send(new PurgeQueueCommand({ QueueUrl: stack.outputs.QueueUrl }));
      return got;
    };

    // Act
    const byDefault = await runCli(['enqueue', file], { env: cliEnv(stack.moto) });
    const defaultGroups = await groups();
    const named = await runCli(['enqueue', file, '--tenant', 'partner-sync'], { env: cliEnv(stack.moto) });
    const namedGroups = await groups();

    // Assess
    expect(bad.code).toBe(64);
    expect(bad.stderr).toContain('--tenant must be 1-128 printable ASCII characters without spaces');
    expect(byDefault.code).toBe(0);
    expect(defaultGroups).toEqual({ 'rec-1': 'nightly-1', 'rec-2': 'sync-9', 'rec-3': undefined });
    expect(named.code).toBe(0);
    expect(namedGroups).toEqual({
      'rec-1': 'partner-sync',
      'rec-2': 'partner-sync',
      'rec-3': 'partner-sync',
    });
  });

  it('reads standard input with -, warns about a repeated record_key and prints a JSON summary with --json', async () => {
    // Prepare: line 3 repeats line 1's record_key; line 2 is blank.
    const input = `${job(1)}\n\n${job(1)}\n${job(4)}\n`;

    // Act
    const run = await runCli(['enqueue', '-', '--json'], { env: cliEnv(stack.moto), stdin: input });

    // Assess
    expect(run.code).toBe(0);
    expect(run.stderr).toMatch(/line 3: warning: record_key "rec-1" repeats line 1/);
    const summary = JSON.parse(run.stdout);
    expect(summary).toMatchObject({
      lines: 3,
      sent: 3,
      rejected: [],
      failed: [],
      repeated: [{ line: 3, recordKey: 'rec-1', firstLine: 1 }],
      dryRun: false,
    });
    expect(await queueDepth()).toBe(3);
  });

  it('prints and writes the records sent per batch, each repeated record_key once, keeping other batches in the file', async () => {
    // Prepare: batch a has rec-1 twice and rec-2; batch b has rec-3; rec-4 has no batch; the
    // line too large for the queue (batch b) is not sent, so it is not counted.
    const inBatch = (n: number, batch: string) => JSON.stringify({ ...JSON.parse(job(n)), batch_id: batch });
    const large = JSON.stringify({ ...JSON.parse(inBatch(5, 'b')), form: { comment: 'x'.repeat(4000) } });
    const input = [inBatch(1, 'a'), inBatch(2, 'a'), inBatch(1, 'a'), inBatch(3, 'b'), job(4), large].join(
      '\n',
    );
    const counts = join(dir, 'counts.json');
    await writeFile(counts, JSON.stringify({ earlier: 7, b: 99 }));

    // Act
    const run = await runCli(['enqueue', '-', '--counts', counts], { env: cliEnv(stack.moto), stdin: input });

    // Assess
    expect(run.code).toBe(4);
    expect(run.stdout).toContain(`batch a: 2 records sent (wait with --counts ${counts})`);
    // b's 99 came from elsewhere (no keys file behind it): this run's record is added to it.
    expect(run.stdout).toContain(
      `batch b: 1 record sent (100 in ${counts} with the earlier parts: wait with --counts ${counts})`,
    );
    expect(JSON.parse(await readFile(counts, 'utf8'))).toEqual({ earlier: 7, a: 2, b: 100 });
  });

  it('adds up a batch sent in parts, and a part sent again does not count twice', async () => {
    // Prepare: batch p in two parts; the second repeats one key of the first
    const inBatch = (n: number) => JSON.stringify({ ...JSON.parse(job(n)), batch_id: 'p' });
    const first = [inBatch(1), inBatch(2)].join('\n');
    const second = [inBatch(2), inBatch(3), inBatch(4)].join('\n');
    const counts = join(dir, 'parts.json');
    const enqueue = (stdin: string) =>
      runCli(['enqueue', '-', '--counts', counts, '--json'], { env: cliEnv(stack.moto), stdin });

    // Act
    const one = await enqueue(first);
    const two = await enqueue(second);
    const again = await enqueue(first); // the first part once more, as after a run that failed half way

    // Assess: 4 distinct records in the batch; each run's own count is what it sent
    expect([one.code, two.code, again.code]).toEqual([0, 0, 0]);
    expect(JSON.parse(one.stdout)).toMatchObject({ batches: { p: 2 }, counted: { p: 2 } });
    expect(JSON.parse(two.stdout)).toMatchObject({ batches: { p: 3 }, counted: { p: 4 } });
    expect(JSON.parse(again.stdout)).toMatchObject({ batches: { p: 2 }, counted: { p: 4 } });
    expect(JSON.parse(await readFile(counts, 'utf8'))).toEqual({ p: 4 });
    const keys = (await readFile(`${counts}.keys`, 'utf8')).trimEnd().split('\n');
    expect(keys.map((l) => JSON.parse(l).record_key)).toEqual(['rec-1', 'rec-2', 'rec-3', 'rec-4']);
    expect(await queueDepth()).toBe(7);
  });

  it('reports a line SQS refuses by its line number, still sends the rest of its batch, and exits 4', async () => {
    // Prepare: line 2 is a valid job larger than the queue's 4 KiB limit.
    const large = JSON.stringify({ ...JSON.parse(job(2)), form: { comment: 'x'.repeat(4000) } });
    const input = `${job(1)}\n${large}\n${job(3)}\n`;

    // Act
    const run = await runCli(['enqueue', '-', '--json'], { env: cliEnv(stack.moto), stdin: input });

    // Assess
    expect(run.code).toBe(4);
    const summary = JSON.parse(run.stdout);
    expect(summary.sent).toBe(2);
    expect(summary.failed).toEqual([expect.objectContaining({ line: 2 })]);
    expect(run.stderr).toMatch(/^line 2: not sent: /m);
    expect(await queueDepth()).toBe(2);
  });

  it('checks without sending under --dry-run, with rejected lines in the JSON summary', async () => {
    // Prepare
    const input = `${job(1)}\n${badLine(3)}\n`;

    // Act
    const run = await runCli(['enqueue', '-', '--dry-run', '--json'], {
      env: cliEnv(stack.moto),
      stdin: input,
    });

    // Assess
    expect(run.code).toBe(2);
    const summary = JSON.parse(run.stdout);
    expect(summary.sent).toBe(0);
    expect(summary.rejected).toEqual([{ line: 2, reason: 'message: not valid JSON' }]);
    expect(await queueDepth()).toBe(0);
  });

  it('names the missing file and exits with the usage code', async () => {
    // Act
    const run = await runCli(['enqueue', join(dir, 'nope.jsonl')], { env: cliEnv(stack.moto) });

    // Assess
    expect(run.code).toBe(64);
    expect(run.stderr).toContain('nope.jsonl');
    expect(run.stderr).toContain('ENOENT');
  });

  it('shows an example in --help', async () => {
    // Act
    const run = await runCli(['enqueue', '--help'], { env: cliEnv(undefined) });

    // Assess
    expect(run.code).toBe(0);
    expect(run.stdout).toContain('$ threadgate enqueue jobs.jsonl');
  });
});
