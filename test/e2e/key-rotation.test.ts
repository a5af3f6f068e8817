import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LocalStack } from '../../local/stack/local-stack.js';
import { generatedRecords } from '../../local/stack/records.js';
import { feedQueue } from '../../local/stack/run.js';
import { keyFingerprint } from '../../local/standins/captchaai/standin.js';
import { cliEnv, runCli } from '../fixtures/cli.js';
import {
  dlqCount,
  finalCount,
  isFinal,
  logText,
  outcomesOf,
  redriveWithCli,
  startE2eStack,
  uniquePrefix,
  waitFor,
} from './harness.js';

/**
 * The documented recovery from a revoked key, end to end: key A stops working at CaptchaAI
 * mid-run → the pipeline pauses; the operator stores key B with `threadgate secret set` and runs
 * `threadgate resume` (real CLI processes) → warm workers and the cap adjuster switch to B
 * without a redeploy, nothing pauses again, every record finishes, and CaptchaAI sees no
 * request with key A after the resume.
 */
let stack: LocalStack;

beforeAll(async () => {
  stack = await startE2eStack('key-rotation');
}, 600_000);
afterAll(async () => {
  await stack?.stop();
});

describe('key rotation without a redeploy (local stack)', () => {
  it('revoked key A pauses; secret set B + resume: no second pause, every record finishes, no request with A after the resume', async () => {
    // Prepare: a run in progress with key A.
    const keyA = stack.apiKey;
    const keyB = randomBytes(16).toString('hex');
    const env = cliEnv(undefined, { ...stack.awsEnv, THREADGATE_STACK: stack.stackName });
    const bodies = generatedRecords(stack.site.url, stack.site.sitekey, 40, uniquePrefix('rotate'));
    const keys = bodies.map((b) => (JSON.parse(b) as { record_key: string }).record_key);
    await feedQueue(stack, stack.outputs.QueueUrl, bodies, { maxQueued: 60 });
    await waitFor('some outcomes with key A', async () => (await finalCount(stack, keys)) >= 8);

    // Act 1: CaptchaAI rotates to key B (over the stand-in's HTTP control); key A stops working.
    const switched = await fetch(`${stack.captcha.url}/control`, {
      method: 'POST',
      body: JSON.stringify({ apiKey: keyB }),
    });
    expect(switched.status).toBe(200);
    await waitFor('the pipeline to pause', async () => (await stack.control.readState()).paused);
    await waitFor('invocations to drain', () => {
      const worker = stack.runtime?.stats().functions[stack.outputs.WorkerFunctionName];
      return (worker?.inFlight ?? 0) === 0;
    });
    const paused = await stack.control.readState();

    // Act 2: the operator stores key B and resumes, then moves the stopped records back.
    const set = await runCli(['secret', 'set'], { env, stdin: `${keyB}\n` });
    expect(set.code, set.stderr).toBe(0);
    // While paused, the cap adjuster keeps asking threadsinfo once a tick: its first ask after
    // `secret set` still carries the cached key A, is refused, re-reads the secret and retries with
    // B. Count from when CaptchaAI has seen B, so every request counted is from the resume on.
    await waitFor(
      'the adjuster to pick up key B',
      () => (stack.captcha.stats().requestsByKey[keyFingerprint(keyB)] ?? 0) > 0,
    );
    stack.captcha.resetStats();
    const resumed = await runCli(['resume'], { env });
    expect(resumed.code, resumed.stderr).toBe(0);
    const afterResume = await stack.control.readState();
    await redriveWithCli(stack);
    await waitFor('every record', async () => (await finalCount(stack, keys)) === 40, { timeoutMs: 240_000 });

    // Assess: the pause was the old key's.
    expect(paused).toMatchObject({ paused: true });
    expect(paused.code).toMatch(/^(ERROR_KEY_DOES_NOT_EXIST|ERROR_WRONG_USER_KEY)$/);
    // No second pause: the state is still the operator's resume.
    expect(await stack.control.readState()).toEqual(afterResume);
    expect(afterResume).toMatchObject({ paused: false, by: 'operator' });
    expect((await stack.control.readMapping()).enabled).toBe(true);
    // Every record finished; nothing left in the DLQ.
    const rows = await outcomesOf(stack, keys);
    expect(keys.filter((k) => !isFinal(rows.get(k)))).toEqual([]);
    expect(await dlqCount(stack)).toBe(0);
    // CaptchaAI saw key B only, from the resume on (workers, adjuster and the CLI's check).
    const byKey = stack.captcha.stats().requestsByKey;
    expect(byKey[keyFingerprint(keyA)] ?? 0).toBe(0);
    expect(byKey[keyFingerprint(keyB)] ?? 0).toBeGreaterThan(0);
    // Neither key reached a log file or the CLI's output.
    const logs = logText(stack.logDir);
    expect(logs).not.toContain(keyA);
    expect(logs).not.toContain(keyB);
    expect(`${set.stdout}${set.stderr}${resumed.stdout}${resumed.stderr}`).not.toContain(keyB);
  }, 480_000);
});
