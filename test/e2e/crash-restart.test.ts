import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RuntimeProcess, spawnRuntimeProcess } from '../../local/runtime/child-process.js';
import type { LocalStack } from '../../local/stack/local-stack.js';
import { localRuntimeOptions } from '../../local/stack/local-stack.js';
import { queueDepth } from '../../local/stack/observation.js';
import { generatedRecords } from '../../local/stack/records.js';
import { feedQueue } from '../../local/stack/run.js';
import {
  allFinished,
  CAP,
  dlqCount,
  isFinal,
  logText,
  outcomesOf,
  startE2eStack,
  TOKEN_PATTERN,
  uniquePrefix,
  waitFor,
} from './harness.js';

/**
 * The whole fleet crashes: the local runtime runs in a child process (local/runtime/child-process.ts)
 * and is SIGKILLed with records in flight, so no execution environment gets to write, release
 * or clean up anything. A new runtime process then starts against the same emulator and stack,
 * while the producers (at-least-once, as upstream jobs are after a failure) send every record
 * again. What must hold: every record ends with one final outcome row and nothing in the DLQ; a
 * record whose claim was live at the crash reaches in.php again only after that lease expired,
 * and is then taken again and finished; in flight at CaptchaAI never exceeds the cap; no key
 * or token in any log.
 */
let stack: LocalStack;
const runtimes: RuntimeProcess[] = [];

beforeAll(async () => {
  // A slow form page (0.8 s, POST 0.4 s at this time scale) keeps each record in flight for over
  // a second after its solve, so the crash reliably lands while records are being worked.
  stack = await startE2eStack('crash-restart', {
    runtime: false,
    targetDelays: { pageMs: 80_000, postMs: 40_000 },
  });
}, 600_000);
afterAll(async () => {
  await Promise.all(runtimes.map((r) => r.stop()));
  await stack?.stop();
});

function startRuntime(): Promise<RuntimeProcess> {
  return spawnRuntimeProcess(localRuntimeOptions(stack)).then((r) => {
    runtimes.push(r);
    return r;
  });
}

describe('crash and restart of the whole fleet (local stack)', () => {
  it('after a SIGKILL of every environment and a fresh runtime: one final outcome per record, no solve while a lease is live, leased records taken again after expiry, cap kept', async () => {
    // Prepare: a run under way in the first runtime.
    const bodies = generatedRecords(stack.site.url, stack.site.sitekey, 30, uniquePrefix('crash'));
    const records = bodies.map((b) => JSON.parse(b) as { record_key: string; pageurl: string });
    const keys = records.map((r) => r.record_key);
    stack.captcha.resetStats();
    const first = await startRuntime();
    await feedQueue(stack, stack.outputs.QueueUrl, bodies, { maxQueued: 60 });
    await waitFor(
      'records in flight beside finished ones',
      async () => {
        const rows = [...(await outcomesOf(stack, keys)).values()];
        return (
          rows.filter((r) => r.status === 'in_progress').length >= 3 &&
          rows.filter((r) => isFinal(r)).length >= 1
        );
      },
      { intervalMs: 20 },
    );

    // Act 1: the crash. Nothing in the first runtime runs after this.
    await first.kill();
    const killedAt = Date.now();
    let atCrash = await outcomesOf(stack, keys);
    if ([...atCrash.values()].some((r) => typeof r.status !== 'string')) {
      // moto shows a claim's bare row between its two steps (local/stack/run.ts progressOf).
      await new Promise((resolve) => setTimeout(resolve, 200));
      atCrash = await outcomesOf(stack, keys);
    }
    const leased = [...atCrash.values()].filter(
      (r) => r.status === 'in_progress' && Number(r.lease_expires_at) > killedAt,
    );
    const finishedBefore = [...atCrash.values()].filter((r) => isFinal(r)).map((r) => r.record_key);

    // Act 2: a new runtime on the same emulator and stack; the producers send everything again.
    await startRuntime();
    await feedQueue(stack, stack.outputs.QueueUrl, bodies, { maxQueued: 60 });
    await waitFor('every record', () => allFinished(stack, bodies), { timeoutMs: 240_000 });
    // The messages the dead runtime held come back after the queue's visibility timeout and
    // must end too (as duplicates of finished records), not in the DLQ.
    await waitFor(
      'the jobs queue to empty',
      async () => {
        const depth = await queueDepth(stack, stack.outputs.QueueUrl);
        return depth.visible + depth.inFlight === 0;
      },
      { timeoutMs: 300_000, intervalMs: 2000 },
    );

    // Assess: the crash hit records in flight.
    expect(leased.length).toBeGreaterThan(0);
    // Every record ended with one final outcome; nothing went to the DLQ.
    const rows = await outcomesOf(stack, keys);
    expect(keys.filter((k) => !isFinal(rows.get(k)))).toEqual([]);
    expect(await dlqCount(stack)).toBe(0);
    const pageurlOf = new Map(records.map((r) => [r.record_key, r.pageurl]));
    const submits = (key: string) => stack.captcha.submitTimes(pageurlOf.get(key) ?? '');
    // A record whose lease was live at the crash: no in.php from the crash until the lease
    // expired, and at least one after (taken again and finished).
    for (const row of leased) {
      const expiry = Number(row.lease_expires_at);
      const after = submits(row.record_key).filter((t) => t > killedAt);
      expect(
        after.filter((t) => t < expiry),
        `${row.record_key} solved while its lease was live`,
      ).toEqual([]);
      expect(after.length, `${row.record_key} not solved again after its lease`).toBeGreaterThanOrEqual(1);
      expect(rows.get(row.record_key)?.lease_owner).not.toBe(row.lease_owner);
    }
    // ... and that had work to do: copies of leased records came while the leases were live and
    // the worker refused them (its log says so).
    const logs = logText(stack.logDir);
    const refusals = logs
      .split('\n')
      .filter(
        (line) =>
          line.includes('"claimConflict":"leased"') &&
          leased.some((r) => line.includes(`"recordKey":"${r.record_key}"`)),
      );
    expect(refusals.length).toBeGreaterThan(0);
    // Records finished before the crash, and records nobody had claimed: exactly one in.php,
    // although every message was sent twice.
    const leasedKeys = new Set(leased.map((r) => r.record_key));
    for (const key of keys.filter((k) => !leasedKeys.has(k))) {
      expect(submits(key).length, `in.php requests for ${key}`).toBe(1);
    }
    expect(finishedBefore.length).toBeGreaterThan(0);
    // The cap held across the crash and the restart.
    const stats = stack.captcha.stats();
    expect(stats.maxInFlight).toBeLessThanOrEqual(CAP);
    expect(stats.zeroBalance).toBe(0);
    // No key or token reached a log.
    expect(logs).not.toContain(stack.apiKey);
    expect(logs).not.toMatch(TOKEN_PATTERN);
  }, 600_000);
});
