import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import {
  GetFunctionConfigurationCommand,
  LambdaClient,
  UpdateEventSourceMappingCommand,
  UpdateFunctionConfigurationCommand,
} from '@aws-sdk/client-lambda';
import { ReceiveMessageCommand, SendMessageBatchCommand, SQSClient } from '@aws-sdk/client-sqs';
import { DynamoDBDocumentClient, PutCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { renderChart } from '../../../cli/commands/status.js';
import { writeStateItem } from '../../../functions/pipeline/state-item.js';
import { type CaptchaStandin, startCaptchaStandin } from '../../../local/standins/captchaai/standin.js';
import { recordState } from '../../fixtures/aws.js';
import { type CliStack, cliEnv, cliRuns, runCli, runCliPiped, startCliStack } from '../../fixtures/cli.js';

const API_KEY = 'status-suite-key-5f3a9c0e7d21b4a8';

let stack: CliStack;
let standin: CaptchaStandin;
let documents: DynamoDBDocumentClient;
let dynamodb: DynamoDBClient;

async function send(sqs: SQSClient, queueUrl: string, count: number, prefix: string): Promise<void> {
  await sqs.send(
    new SendMessageBatchCommand({
      QueueUrl: queueUrl,
      Entries: Array.from({ length: count }, (_, i) => ({
        Id: String(i),
        MessageBody: JSON.stringify({ record_key: `${prefix}-${i}` }),
      })),
    }),
  );
}

beforeAll(async () => {
  standin = await startCaptchaStandin({ port: 0, threads: 10, apiKey: API_KEY });
  stack = await startCliStack({
    captchaAiUrl: standin.url,
    reservedConcurrency: 6,
    maximumConcurrency: 6,
    reserve: 2,
  });
  const secret = await runCli(['secret', 'set'], { env: cliEnv(stack.moto), stdin: `${API_KEY}\n` });
  expect(secret.code).toBe(0);

  // What the emulator will hold: 3 jobs of which 1 received (in flight), 2 DLQ messages,
  // outcome rows 2 submitted + 1 failed.
  const sqs = new SQSClient({ ...stack.clientConfig, useQueueUrlAsEndpoint: false });
  await send(sqs, stack.outputs.QueueUrl!, 3, 'job');
  await sqs.send(
    new ReceiveMessageCommand({
      QueueUrl: stack.outputs.QueueUrl,
      MaxNumberOfMessages: 1,
      VisibilityTimeout: 900,
    }),
  );
  await send(sqs, stack.outputs.DlqUrl!, 2, 'dead');
  documents = DynamoDBDocumentClient.from(new DynamoDBClient(stack.clientConfig));
  dynamodb = new DynamoDBClient(stack.clientConfig);
  for (const [key, status] of [
    ['a', 'submitted'],
    ['b', 'submitted'],
    ['c', 'failed'],
  ]) {
    await documents.send(
      new PutCommand({ TableName: stack.outputs.TableName, Item: { record_key: key, status } }),
    );
  }
});

afterAll(async () => {
  await stack?.stop();
  await standin?.close();
});

describe('threadgate status', () => {
  it('reports with --json what the emulator and the CaptchaAI stand-in hold', async () => {
    // Act
    const run = await runCli(['status', '--json'], { env: cliEnv(stack.moto) });

    // Assess
    expect(run.code).toBe(0);
    const report = JSON.parse(run.stdout);
    expect(report).toMatchObject({
      stack: 'ThreadgateCliTest',
      resources: {
        queueUrl: stack.outputs.QueueUrl,
        dlqUrl: stack.outputs.DlqUrl,
        tableName: stack.outputs.TableName,
      },
      pipeline: { enabled: true, mappingState: 'Enabled', paused: false },
      cap: 6,
      reservedConcurrency: 6,
      mappingMaximumConcurrency: 6,
      batchSize: 1,
      plan: { threads: 10, workingThreads: 0, reserve: 2, minCap: 1, maxCap: 1000, targetCap: 8 },
      queue: { depth: 2, inFlight: 1 },
      dlq: { depth: 2 },
      outcomes: { submitted: 2, failed: 1, in_progress: 0, rejected: 0, stopped: 0 },
    });
  });

  it("with lanes (the worker's LANES) shows the first shape until the adjuster publishes one, then the published one", async () => {
    // Prepare: the worker deployed with lanes 4 and initial cap 8 (first shape 2 × 4); no shape published
    const lambda = new LambdaClient(stack.clientConfig);
    const worker = stack.outputs.WorkerFunctionName!;
    const deployed = (await lambda.send(new GetFunctionConfigurationCommand({ FunctionName: worker })))
      .Environment?.Variables;
    const withEnv = (Variables: Record<string, string>) =>
      lambda.send(
        new UpdateFunctionConfigurationCommand({ FunctionName: worker, Environment: { Variables } }),
      );
    await withEnv({ ...deployed, LANES: '4', INITIAL_CAP: '8' });
    try {
      // Act
      const first = JSON.parse(
        (await runCli(['status', '--json', '--no-outcomes'], { env: cliEnv(stack.moto) })).stdout,
      );
      await writeStateItem(
        dynamodb,
        stack.outputs.LedgerTableName!,
        'shape',
        JSON.stringify({ cap: 6, r: 2, L: 3, since: 1 }),
      );
      const published = JSON.parse(
        (await runCli(['status', '--json', '--no-outcomes'], { env: cliEnv(stack.moto) })).stdout,
      );
      // Assess: the knobs allow 6 invocations; the cap in force is r × L, never above the shape's cap
      expect(first).toMatchObject({ cap: 8, lanes: { invocations: 6, lanesPerInvocation: 4 } });
      expect(published).toMatchObject({ cap: 6, lanes: { invocations: 6, lanesPerInvocation: 3 } });
    } finally {
      await withEnv({ ...deployed });
    }
    // One lane again: the shape left in the item is not read.
    const one = JSON.parse(
      (await runCli(['status', '--json', '--no-outcomes'], { env: cliEnv(stack.moto) })).stdout,
    );
    expect(one).toMatchObject({ cap: 6, lanes: null });
  });

  it('says "clamped by maxCap" with the threads left idle when the plan is above the adjuster\'s MAX_CAP', async () => {
    // Prepare: a 1,500-thread plan; the adjuster runs with RESERVE 2 and MAX_CAP 1000
    standin.setThreads(1500);
    try {
      // Act
      const text = await runCli(['status', '--no-outcomes'], { env: cliEnv(stack.moto) });
      const json = await runCli(['status', '--no-outcomes', '--json'], { env: cliEnv(stack.moto) });

      // Assess
      expect(text.code).toBe(0);
      expect(text.stdout).toMatch(
        /\n {2}clamped by maxCap: plan 1500 threads − reserve 2 = 1498 is above maxCap 1000: 498 threads idle; to use them raise maxCap to 1498/,
      );
      expect(JSON.parse(json.stdout).plan).toMatchObject({
        targetCap: 1000,
        clampedByMaxCap: { planThreads: 1500, reserve: 2, maxCap: 1000, idleThreads: 498 },
      });
    } finally {
      standin.setThreads(10);
    }
  });

  it('says nothing of a clamp when the plan fits under maxCap', async () => {
    // Act
    const text = await runCli(['status', '--no-outcomes'], { env: cliEnv(stack.moto) });
    const json = await runCli(['status', '--no-outcomes', '--json'], { env: cliEnv(stack.moto) });

    // Assess
    expect(text.stdout).not.toContain('clamped');
    expect(JSON.parse(json.stdout).plan).toMatchObject({ targetCap: 8, clampedByMaxCap: null });
  });

  it('exits 0 without a stack trace when the reader takes only the first bytes (--json | head -c 10)', async () => {
    // Act
    const run = await runCliPiped(['status', '--json'], 'head -c 10', cliEnv(stack.moto));

    // Assess
    expect(run.code).toBe(0);
    expect(run.stdout).toHaveLength(10);
    expect(run.stderr).not.toMatch(/EPIPE|Error|at /);
  });

  it('prints the same facts as text, and a pause with its reason', async () => {
    // Prepare
    const pause = await runCli(['pause', '--reason', 'target maintenance'], { env: cliEnv(stack.moto) });
    expect(pause.code).toBe(0);

    // Act
    const run = await runCli(['status'], { env: cliEnv(stack.moto) });
    await runCli(['resume'], { env: cliEnv(stack.moto) });

    // Assess
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(/pipeline\s+PAUSED \(mapping Disabled\)/);
    expect(run.stdout).toMatch(/reason\s+target maintenance \[by operator/);
    expect(run.stdout).toMatch(
      /cap\s+0 while paused \(reserved concurrency 6, mapping maximum 6, batch size 1\)/,
    );
    expect(run.stdout).toMatch(
      /plan\s+10 threads, 0 working; target cap 8 \(10 − reserve 2, within 1–1000\)/,
    );
    expect(run.stdout).toMatch(/queue\s+2 waiting, 1 in flight/);
    expect(run.stdout).toMatch(/dlq\s+2 waiting/);
    expect(run.stdout).toMatch(
      /outcomes\s+3 rows: in_progress 0, submitted 2, failed 1, rejected 0, cancelled 0, stopped 0/,
    );
  });

  it('cancel --batch records the cancel once (a second says so and changes nothing); status lists it, and its rows are not counted as outcomes', async () => {
    // Act
    const first = await runCli(['cancel', '--batch', 'nightly-7', '--reason', 'wrong form URL'], {
      env: cliEnv(stack.moto),
    });
    const again = await runCli(['cancel', '--batch', 'nightly-7', '--reason', 'other', '--json'], {
      env: cliEnv(stack.moto),
    });
    const bad = await runCli(['cancel', '--batch', 'has space'], { env: cliEnv(stack.moto) });
    const missing = await runCli(['cancel'], { env: cliEnv(stack.moto) });
    const text = await runCli(['status'], { env: cliEnv(stack.moto) });
    const json = JSON.parse((await runCli(['status', '--json'], { env: cliEnv(stack.moto) })).stdout);

    // Assess
    expect(first.code).toBe(0);
    expect(first.stdout).toMatch(/cancelled batch nightly-7 on \S+ at \S+; reason: wrong form URL\./);
    expect(first.stdout).toContain('exit code 5');
    expect(again.code).toBe(0);
    expect(JSON.parse(again.stdout)).toMatchObject({
      batchId: 'nightly-7',
      reason: 'wrong form URL',
      already: true,
    });
    expect(bad.code).toBe(64);
    expect(bad.stderr).toContain('--batch: must be printable ASCII without spaces');
    expect(missing.code).toBe(64);
    expect(text.stdout).toMatch(/cancelled\s+1 batch:\n\s+nightly-7\s+at \S+ by operator: wrong form URL/);
    expect(text.stdout).toMatch(/outcomes\s+3 rows:/);
    expect(json.cancelledBatches).toEqual([
      expect.objectContaining({ batchId: 'nightly-7', reason: 'wrong form URL', by: 'operator' }),
    ]);
  });

  it('says the plan is unavailable, without failing, when CaptchaAI rejects the key', async () => {
    // Prepare
    standin.setKeyRevoked(true);

    // Act
    const run = await runCli(['status', '--json', '--no-outcomes'], { env: cliEnv(stack.moto) });
    standin.setKeyRevoked(false);

    // Assess
    expect(run.code).toBe(0);
    const report = JSON.parse(run.stdout);
    expect(report.plan.error).toContain('ERROR_KEY_DOES_NOT_EXIST');
    expect(report.outcomes).toBeNull();
  });

  it('refreshes under --watch and charts in flight against the cap', async () => {
    // Act
    const run = await runCli(['status', '--watch', '--count', '2', '--interval', '0.2', '--no-outcomes'], {
      env: cliEnv(stack.moto),
    });

    // Assess
    expect(run.code).toBe(0);
    expect(run.stdout.match(/in flight vs cap, last 10 min/g)).toHaveLength(2);
    expect(run.stdout).toMatch(/^ *6 ┤/m);
    expect(run.stdout).toContain('█');
  });

  it('prints one JSON object per refresh under --watch --json', async () => {
    // Act
    const run = await runCli(
      ['status', '--watch', '--json', '--count', '2', '--interval', '0.1', '--no-outcomes'],
      {
        env: cliEnv(stack.moto),
      },
    );

    // Assess
    expect(run.code).toBe(0);
    const reports = run.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(reports.map((r) => r.cap)).toEqual([6, 6]);
  });

  it('shows when the recorded pipeline state and the mapping disagree, and what to run; that command clears it', async () => {
    // Prepare: a pause recorded but the mapping left enabled (a pause whose mapping update failed)
    await recordState(dynamodb, stack.outputs.LedgerTableName!, {
      paused: true,
      reason: 'key revoked',
      code: 'ERROR_KEY_DOES_NOT_EXIST',
      by: 'worker',
    });
    // Act
    const json = JSON.parse((await runCli(['status', '--json'], { env: cliEnv(stack.moto) })).stdout);
    const text = (await runCli(['status'], { env: cliEnv(stack.moto) })).stdout;
    const fixed = await runCli(['pause', '--reason', 'key revoked'], { env: cliEnv(stack.moto) });
    const after = JSON.parse((await runCli(['status', '--json'], { env: cliEnv(stack.moto) })).stdout);
    // Assess
    expect(json.pipeline).toMatchObject({
      paused: true,
      enabled: true,
      mismatch: { kind: 'paused_but_mapping_enabled' },
    });
    expect(json.pipeline.mismatch.fix).toContain('`threadgate pause --reason "key revoked"`');
    expect(text).toMatch(/MISMATCH\s+the recorded pipeline state says paused but the mapping is Enabled/);
    expect(text).toMatch(/to fix\s+`threadgate pause --reason "key revoked"` disables the mapping/);
    expect(fixed.code).toBe(0);
    expect(after.pipeline).toMatchObject({ paused: true, enabled: false, mismatch: null });
  });

  it('shows a disabled mapping with no pause recorded, and `threadgate resume` clears it', async () => {
    // Prepare: no pause recorded, the mapping disabled (a resume whose mapping update failed)
    await recordState(dynamodb, stack.outputs.LedgerTableName!, { paused: false });
    const lambda = new LambdaClient(stack.clientConfig);
    await lambda.send(
      new UpdateEventSourceMappingCommand({ UUID: stack.outputs.MappingUuid, Enabled: false }),
    );
    // Act
    const before = JSON.parse((await runCli(['status', '--json'], { env: cliEnv(stack.moto) })).stdout);
    const resume = await runCli(['resume'], { env: cliEnv(stack.moto) });
    const after = JSON.parse((await runCli(['status', '--json'], { env: cliEnv(stack.moto) })).stdout);
    // Assess
    expect(before.pipeline).toMatchObject({
      paused: false,
      enabled: false,
      mismatch: { kind: 'mapping_disabled_but_not_paused' },
    });
    expect(before.pipeline.mismatch.fix).toContain('`threadgate resume` enables it');
    expect(resume.code).toBe(0);
    expect(after.pipeline).toMatchObject({ paused: false, enabled: true, mismatch: null });
  });

  it('counts OUTCOME_UNKNOWN rows apart from the other failures, and outcomes --reason lists them', async () => {
    // Prepare: two records whose POST answer was lost, as the worker ends them
    for (const key of ['u-1', 'u-2']) {
      await documents.send(
        new PutCommand({
          TableName: stack.outputs.TableName,
          Item: { record_key: key, status: 'failed', reason: 'OUTCOME_UNKNOWN' },
        }),
      );
    }
    // Act
    const json = JSON.parse((await runCli(['status', '--json'], { env: cliEnv(stack.moto) })).stdout);
    const text = (await runCli(['status'], { env: cliEnv(stack.moto) })).stdout;
    const listed = await runCli(['outcomes', '--reason', 'OUTCOME_UNKNOWN'], { env: cliEnv(stack.moto) });
    // Assess
    expect(json.outcomes).toMatchObject({ failed: 3 });
    expect(json.outcomes).not.toHaveProperty('OUTCOME_UNKNOWN');
    expect(json.outcomeUnknown).toBe(2);
    expect(json.warnings.join('\n')).toContain(
      '2 records failed OUTCOME_UNKNOWN: the form may have taken them',
    );
    expect(text).toMatch(/outcomes\s+5 rows: .*failed 3 \(OUTCOME_UNKNOWN 2\)/);
    expect(text).toContain('reconcile by hand');
    expect(listed.code).toBe(0);
    expect(
      listed.stdout
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l).record_key)
        .sort(),
    ).toEqual(['u-1', 'u-2']);
    expect(listed.stderr).toContain('2 of them failed OUTCOME_UNKNOWN');
  });

  it('never prints the API key', async () => {
    // Prepare: runs that read the key (on top of every earlier run of this file).
    await runCli(['secret', 'set', '--json'], { env: cliEnv(stack.moto), stdin: API_KEY });
    await runCli(['status', '--json'], { env: cliEnv(stack.moto) });
    await runCli(['status'], { env: cliEnv(stack.moto) });

    // Assess: every CLI run of this file.
    for (const run of cliRuns) {
      expect(run.stdout).not.toContain(API_KEY);
      expect(run.stderr).not.toContain(API_KEY);
    }
  });
});

describe('renderChart', () => {
  it('draws in flight as bars under a cap line and marks a column above the cap', () => {
    // Prepare: 4 minutes of samples, the last one above the cap.
    const now = 1_000_000;
    const samples = [
      { at: now - 240_000, inFlight: 2, cap: 4 },
      { at: now - 180_000, inFlight: 4, cap: 4 },
      { at: now - 60_000, inFlight: 3, cap: 4 },
      { at: now, inFlight: 6, cap: 4 },
    ];

    // Act
    const chart = renderChart(samples, { now, windowMs: 240_000, width: 12, height: 6 });

    // Assess
    expect(chart.trimEnd().split('\n')).toEqual([
      'in flight vs cap, last 4 min (█ in flight, ─ cap, ! above cap)',
      '6 ┤           !',
      '  ┤           !',
      '  ┤───█───────█',
      '3 ┤   █     █ █',
      '  ┤█  █     █ █',
      '  ┤█  █     █ █',
      '0 ┼────────────',
    ]);
  });

  it('draws an empty frame before any sample', () => {
    // Act
    const chart = renderChart([], { now: 0, windowMs: 600_000, width: 10, height: 3 });

    // Assess
    expect(
      chart
        .split('\n')
        .slice(1, 4)
        .every((row) => /┤ {10}$/.test(row)),
    ).toBe(true);
  });
});
