import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LocalStack } from '../../local/stack/local-stack.js';
import { generatedRecords } from '../../local/stack/records.js';
import { feedQueue } from '../../local/stack/run.js';
import {
  allFinished,
  CAP,
  dlqCount,
  isFinal,
  logText,
  outcomesOf,
  sharedE2eStack,
  TOKEN_PATTERN,
  uniquePrefix,
  waitFor,
} from './harness.js';

/**
 * Requests whose answer is lost, injected on the wire and counted where they land: in.php
 * answers lost after the CaptchaAI stand-in created the task. Final writes the emulator fails
 * after the form was posted are proven in lease-expiry.test.ts, whose records wait out their
 * lease beside the other proofs that must.
 */
let stack: LocalStack;

beforeAll(async () => {
  stack = await sharedE2eStack('lost-answers');
}, 600_000);
afterAll(async () => {
  await stack?.stop();
});

function recordsOf(n: number, name: string) {
  const bodies = generatedRecords(stack.site.url, stack.site.sitekey, n, uniquePrefix(name));
  return { bodies, keys: bodies.map((b) => (JSON.parse(b) as { record_key: string }).record_key) };
}

describe('lost answers (local stack)', () => {
  it('every 5th in.php answered by a 502 after its task was created: the stand-in never holds more tasks than the cap, and every record ends', async () => {
    // Prepare
    const { bodies, keys } = recordsOf(100, 'lost-502');
    stack.captcha.resetStats();
    const { next } = stack.captcha.events();
    stack.captcha.setLostAnswers({ html502: { every: 5 } });
    // Act
    await feedQueue(stack, stack.outputs.QueueUrl, bodies, { maxQueued: 2 * CAP });
    await waitFor('every record', () => allFinished(stack, bodies), { timeoutMs: 300_000, intervalMs: 1000 });
    stack.captcha.setLostAnswers({ html502: null });
    // Assess: the answers were lost on the wire, with their tasks holding threads.
    const stats = stack.captcha.stats();
    expect(stats.lostAnswers.html502).toBeGreaterThanOrEqual(20);
    // The stand-in's own count of tasks holding threads, at its peak and after every change.
    expect(stats.maxInFlight).toBeLessThanOrEqual(CAP);
    const log = stack.captcha.events(next).entries;
    expect(Math.max(...log.map((e) => e.inFlight))).toBeLessThanOrEqual(CAP);
    expect(stats.zeroBalance).toBe(0);
    // No record submitted while an earlier task of its own held a thread.
    for (const key of keys) {
      const mine = log.filter((e) => e.record === key);
      let live = 0;
      for (const e of mine) {
        if (e.kind === 'in.php' && e.taskId !== undefined) {
          expect(live, `${key} submitted beside its own task`).toBe(0);
          live += 1;
        }
        if (e.kind === 'task-end') live -= 1;
      }
    }
    // Every record ended: one final row each (DLQ empty).
    const rows = await outcomesOf(stack, keys);
    expect(keys.filter((k) => !isFinal(rows.get(k)))).toEqual([]);
    expect(await dlqCount(stack)).toBe(0);
    // No key or token reached a log.
    const logs = logText(stack.logDir);
    expect(logs).not.toContain(stack.apiKey);
    expect(logs).not.toMatch(TOKEN_PATTERN);
  }, 400_000);
});
