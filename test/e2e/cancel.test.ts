import { spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cancelRefreshMs } from '../../functions/worker/cancel-watch.js';
import { REPO_ROOT } from '../../local/emulator/deploy.js';
import type { LocalStack } from '../../local/stack/local-stack.js';
import { readOutcomes } from '../../local/stack/observation.js';
import { goodRecord } from '../../local/stack/records.js';
import { feedQueue } from '../../local/stack/run.js';
import { type CliRun, cliEnv, runCli } from '../fixtures/cli.js';
import { CAP, E2E, isFinal, sharedE2eStack, uniquePrefix, waitFor } from './harness.js';
import { e2eTarget } from './target.js';

/**
 * Cancelling one batch on the deployed stack (moto, cap 6): two batches of 150 records sent
 * interleaved, batch A cancelled with `threadgate cancel` once 40 of its records have ended.
 * Counted at the stand-ins: in.php at the CaptchaAI stand-in, POSTs at the target stand-in, each
 * with its time and record. The bound is the worker's (functions/worker/cancel-watch.ts).
 */
const PER_BATCH = 150;
const CANCEL_AFTER = 40;
const BOUND_MS = cancelRefreshMs(E2E.timeScale);
/**
 * A POST whose check came just inside the bound still needs its posting marker (one DynamoDB
 * write on the emulator) and the request itself before it reaches the target.
 */
const POST_SLACK_MS = 1_000;

let stack: LocalStack;

const cli = (args: string[]): Promise<CliRun> =>
  runCli(args, {
    env: cliEnv(undefined, { ...stack.awsEnv, THREADGATE_STACK: stack.stackName }),
    timeoutMs: 240_000,
  });

function pythonWait(
  batch: string,
  expect: number,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const program = [
    'import json, sys',
    "sys.path.insert(0, 'python')",
    'import threadgate_producer as tg',
    `out = tg.stack_outputs(${JSON.stringify(stack.stackName)})`,
    `done = tg.wait(out['TableName'], ${JSON.stringify(batch)}, expect=${expect}, timeout_s=120, interval_s=1)`,
    "print(json.dumps({'end': done.end, 'exit_code': done.exit_code, 'counts': done.counts}))",
  ].join('\n');
  return new Promise((resolve, reject) => {
    const child = spawn('python3', ['-c', program], {
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
  });
}

describe.skipIf(e2eTarget() !== 'moto')('cancel one batch (deployed local stack)', () => {
  beforeAll(async () => {
    stack = await sharedE2eStack('cancel');
  }, 600_000);
  afterAll(async () => {
    await stack?.stop();
  });

  it('cancels batch A mid-run: no in.php for A claimed after the bound, no POST of A after it, the rest of A cancelled, all of B submitted, in flight within the cap; wait ends 5', async () => {
    // Prepare: A and B interleaved, one message each in turn
    const prefix = uniquePrefix('cancel');
    const a = `${prefix}-a`;
    const b = `${prefix}-b`;
    const record = (batch: string, i: number) =>
      JSON.stringify({
        ...JSON.parse(goodRecord(stack.site.url, stack.site.sitekey, `${batch}-${i}`, 0, 'recaptcha_v2')),
        batch_id: batch,
      });
    const bodies: string[] = [];
    for (let i = 0; i < PER_BATCH; i++) bodies.push(record(a, i), record(b, i));
    stack.captcha.resetStats();
    const rowsOf = async (batch: string) =>
      (await readOutcomes(stack)).filter((r) => r.batch_id === batch && r.record_key.startsWith(`${batch}-`));

    // Act: feed, cancel A once 40 of its records ended, then wait for both batches to end
    const feeding = feedQueue(stack, stack.outputs.QueueUrl, bodies, { maxQueued: 60 });
    await waitFor(
      `${CANCEL_AFTER} records of A ended`,
      async () => (await rowsOf(a)).filter(isFinal).length >= CANCEL_AFTER,
      {
        timeoutMs: 300_000,
        intervalMs: 100,
      },
    );
    const cancelStarted = Date.now();
    const cancel = await cli(['cancel', '--batch', a, '--reason', 'sent by mistake']);
    const cancelReturned = Date.now();
    await feeding;
    await waitFor(
      'every record of A ended',
      async () => (await rowsOf(a)).filter(isFinal).length === PER_BATCH,
      {
        timeoutMs: 300_000,
        intervalMs: 200,
      },
    );
    const aDrained = Date.now();
    const [waitA, pyWait] = await Promise.all([
      cli([
        'wait',
        '--batch',
        a,
        '--expect',
        String(PER_BATCH),
        '--json',
        '--interval',
        '1',
        '--timeout',
        '200',
      ]),
      pythonWait(a, PER_BATCH),
    ]);
    await waitFor(
      'every record of B ended',
      async () => (await rowsOf(b)).filter(isFinal).length === PER_BATCH,
      {
        timeoutMs: 300_000,
        intervalMs: 500,
      },
    );

    // Assess
    expect(cancel.code).toBe(0);
    const bound = cancelReturned + BOUND_MS;
    const rowsA = await rowsOf(a);
    const rowsB = await rowsOf(b);
    const inPhp = stack.captcha.events().entries.filter((e) => e.kind === 'in.php');
    const posts = stack.site.events().entries.filter((e) => e.kind === 'post-received');
    const inPhpOfA = inPhp.filter((e) => e.record.startsWith(`${a}-`));
    const postsOfA = posts.filter((e) => e.record.startsWith(`${a}-`));
    const claimedAt = (key: string) =>
      Date.parse(String(rowsA.find((r) => r.record_key === key)?.created_at ?? ''));
    // No in.php for any of A's records claimed after the bound.
    const lateClaims = rowsA
      .filter((r) => Date.parse(String(r.created_at ?? '')) > bound)
      .map((r) => r.record_key);
    expect(lateClaims.length).toBeGreaterThan(0);
    expect(inPhpOfA.filter((e) => lateClaims.includes(e.record))).toEqual([]);
    expect(inPhpOfA.every((e) => claimedAt(e.record) <= bound)).toBe(true);
    // No POST of A after the cancel was seen (the bound, plus the marker write and the request).
    expect(postsOfA.filter((e) => e.t > bound + POST_SLACK_MS)).toEqual([]);
    // Every record of A ended; those not posted are cancelled, with the reason.
    const postedA = new Set(postsOfA.map((e) => e.record));
    for (const r of rowsA) {
      if (postedA.has(r.record_key)) expect(['submitted', 'failed']).toContain(r.status);
      else
        expect(r, r.record_key).toMatchObject({
          status: 'cancelled',
          reason: 'BATCH_CANCELLED: sent by mistake',
        });
    }
    expect(rowsA).toHaveLength(PER_BATCH);
    // Every record of B submitted, once.
    expect(rowsB).toHaveLength(PER_BATCH);
    expect(rowsB.every((r) => r.status === 'submitted')).toBe(true);
    expect(stack.captcha.stats().maxInFlight).toBeLessThanOrEqual(CAP);
    // wait --batch A and the Python wait end with 5 (cancelled).
    expect(waitA.code).toBe(5);
    expect(JSON.parse(waitA.stdout)).toMatchObject({ end: 'done', exit_code: 5 });
    expect(pyWait.stderr).toBe('');
    expect(JSON.parse(pyWait.stdout)).toMatchObject({ end: 'done', exit_code: 5 });

    // The figures the issue asks for (printed, not asserted).
    const lastInPhpOfA = Math.max(...inPhpOfA.map((e) => e.t));
    const cancelled = rowsA.filter((r) => r.status === 'cancelled');
    console.log(
      JSON.stringify({
        cancel_cli_ms: cancelReturned - cancelStarted,
        bound_ms: BOUND_MS,
        cancel_to_last_inphp_of_a_ms: lastInPhpOfA - cancelReturned,
        cancel_to_last_post_of_a_ms: Math.max(...postsOfA.map((e) => e.t)) - cancelReturned,
        cancel_to_a_drained_ms: aDrained - cancelReturned,
        a_ended_before_cancel: CANCEL_AFTER,
        a_inphp: inPhpOfA.length,
        a_posted: postedA.size,
        a_cancelled: cancelled.length,
        a_cancelled_after_solve: cancelled.filter((r) => (r.attempts ?? 0) > 0).length,
        max_in_flight: stack.captcha.stats().maxInFlight,
      }),
    );
  }, 900_000);
});
