import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_TIMINGS } from '../../functions/captchaai/timings.js';
import { CAPTCHA_TYPES } from '../../functions/captchaai/types.js';
import { laneShape } from '../../functions/pipeline/lanes.js';
import { stateCacheMs } from '../../functions/pipeline/state-view.js';
import { BatchCancels } from '../../functions/records/cancellations.js';
import { cancelRefreshMs } from '../../functions/worker/cancel-watch.js';
import { clientConfig } from '../../local/emulator/deploy.js';
import type { LocalStack } from '../../local/stack/local-stack.js';
import { queueDepth, readDlq, readOutcomes } from '../../local/stack/observation.js';
import { generatedRecords, goodRecord } from '../../local/stack/records.js';
import { feedQueue } from '../../local/stack/run.js';
import { DEFAULT_LATENCY } from '../../local/standins/captchaai/latency.js';
import {
  allFinished,
  deployedCap,
  dlqCount,
  E2E,
  isFinal,
  outcomesOf,
  redriveWithCli,
  uniquePrefix,
  waitFor,
} from './harness.js';
import { CAP, keysOf, LANES, LanesStack, PLAN, SHAPE } from './lanes-stack.js';
import { e2eTarget } from './target.js';

/**
 * Lanes on the deployed stack (./lanes-stack.ts: cap 12 as r = 3 invocations of L = 4 lanes;
 * the fleet kill waits out its lease beside the others in ./lease-expiry.test.ts). Every promise is counted where it lands: in.php and
 * in flight at the CaptchaAI stand-in, POSTs at the target, rows in the table, messages in the DLQ.
 */
/** A task's solve time (unscaled ms, × the time scale at the stand-in) for the grow: below the client's 120 s deadline. */
const LONG_TASKS = { minMs: 80_000, maxMs: 100_000 };

let lanes: LanesStack;
let stack: LocalStack;
const publishedShape = () => lanes.publishedShape();
const wireCounts = (keys: string[]) => lanes.wireCounts(keys);

describe.skipIf(e2eTarget() !== 'moto')(
  `lanes: cap ${CAP} as ${SHAPE.r} invocations of ${SHAPE.L} lanes`,
  () => {
    beforeAll(async () => {
      lanes = await LanesStack.start('lanes');
      stack = lanes.stack;
    }, 600_000);
    afterAll(async () => {
      await lanes?.stop();
    });

    it('deploys r to the knobs and publishes {cap, r, L}; in flight stays within the cap with tasks that never answer, above r', async () => {
      // Prepare
      expect(SHAPE).toEqual({ cap: 12, r: 3, L: 4 });
      await waitFor('the adjuster to publish the cap', async () => (await publishedShape())?.cap === CAP);
      const bodies = generatedRecords(stack.site.url, stack.site.sitekey, 80, uniquePrefix('cap'));
      const keys = keysOf(bodies);
      stack.captcha.setFaults({ neverFinish: 0.05 });
      stack.captcha.resetStats();
      // Act
      await feedQueue(stack, stack.outputs.QueueUrl, bodies, { maxQueued: 40 });
      await waitFor('every record', async () => allFinished(stack, bodies), {
        timeoutMs: 400_000,
        intervalMs: 500,
      });
      stack.captcha.setFaults({ neverFinish: 0 });
      // Assess
      const stats = stack.captcha.stats();
      expect(await deployedCap(stack)).toBe(SHAPE.r);
      expect(await publishedShape()).toMatchObject({ cap: 12, r: 3, L: 4 });
      expect(stats.maxInFlight).toBeLessThanOrEqual(CAP);
      // More solves at once than invocations: the lanes ran side by side.
      expect(stats.maxInFlight).toBeGreaterThan(SHAPE.r);
      expect(stats.zeroBalance).toBe(0);
      const rows = await outcomesOf(stack, keys);
      expect(keys.filter((k) => !isFinal(rows.get(k)))).toEqual([]);
      const { posts } = wireCounts(keys);
      expect([...posts.values()].filter((n) => n > 1)).toEqual([]);
      expect(await dlqCount(stack)).toBe(0);
    }, 600_000);

    it('solves and posts each record once when every message is sent twice, side by side', async () => {
      // Prepare: each message followed at once by its copy, so two lanes of one invocation take the pair.
      const bodies = generatedRecords(stack.site.url, stack.site.sitekey, 40, uniquePrefix('dup'));
      const keys = keysOf(bodies);
      const doubled = bodies.flatMap((b) => [b, b]);
      stack.captcha.resetStats();
      // Act
      await feedQueue(stack, stack.outputs.QueueUrl, doubled, { maxQueued: 40 });
      await waitFor('every record', async () => allFinished(stack, bodies), {
        timeoutMs: 300_000,
        intervalMs: 500,
      });
      // A copy taken by a lane of another invocation met a live lease: it comes back when that
      // lease ends (minutes here) and is dropped as ALREADY_FINISHED; the outcomes are all in now.
      // Assess: one in.php and at most one POST per record_key
      const { inPhp, posts } = wireCounts(keys);
      expect(keys.filter((k) => inPhp.get(k) !== 1)).toEqual([]);
      expect(keys.filter((k) => (posts.get(k) ?? 0) > 1)).toEqual([]);
      expect(stack.captcha.stats().maxInFlight).toBeLessThanOrEqual(CAP);
    }, 600_000);

    it('cancels one batch: no in.php of it claimed after the bound, no POST after it, the other batch all submitted', async () => {
      // Prepare: two batches interleaved
      const prefix = uniquePrefix('cancel');
      const [a, b] = [`${prefix}-a`, `${prefix}-b`];
      const record = (batch: string, i: number) =>
        JSON.stringify({
          ...JSON.parse(goodRecord(stack.site.url, stack.site.sitekey, `${batch}-${i}`, 0, 'recaptcha_v2')),
          batch_id: batch,
        });
      const perBatch = 40;
      const bodies: string[] = [];
      for (let i = 0; i < perBatch; i++) bodies.push(record(a, i), record(b, i));
      const rowsOf = async (batch: string) =>
        (await readOutcomes(stack)).filter(
          (r) => r.batch_id === batch && r.record_key.startsWith(`${batch}-`),
        );
      // Act: cancel A once 15 of its records ended
      const feeding = feedQueue(stack, stack.outputs.QueueUrl, bodies, { maxQueued: 40 });
      await waitFor('15 records of A', async () => (await rowsOf(a)).filter(isFinal).length >= 15, {
        timeoutMs: 300_000,
        intervalMs: 100,
      });
      await new BatchCancels({
        client: new DynamoDBClient(clientConfig(stack.awsEnv)),
        tableName: stack.outputs.TableName,
      }).cancel(a, { by: 'e2e', reason: 'lanes' });
      const cancelledAt = Date.now();
      await feeding;
      await waitFor('every record', async () => allFinished(stack, bodies), {
        timeoutMs: 300_000,
        intervalMs: 500,
      });
      // Assess
      const bound = cancelledAt + cancelRefreshMs(E2E.timeScale) + stateCacheMs(E2E.timeScale);
      const rowsA = await rowsOf(a);
      const rowsB = await rowsOf(b);
      const claimedAt = (key: string) =>
        Date.parse(String(rowsA.find((r) => r.record_key === key)?.created_at ?? ''));
      const inPhpOfA = stack.captcha
        .events(0)
        .entries.filter((e) => e.kind === 'in.php' && e.record.startsWith(`${a}-`));
      const postsOfA = stack.site
        .events(0)
        .entries.filter((e) => e.kind === 'post-received' && e.record.startsWith(`${a}-`));
      expect(inPhpOfA.filter((e) => claimedAt(e.record) > bound)).toEqual([]);
      expect(postsOfA.filter((e) => e.t > bound + 1_000)).toEqual([]);
      expect(rowsA.filter((r) => r.status === 'cancelled').length).toBeGreaterThan(0);
      expect(rowsA).toHaveLength(perBatch);
      expect(rowsB).toHaveLength(perBatch);
      expect(rowsB.every((r) => r.status === 'submitted')).toBe(true);
    }, 600_000);

    it('on a revoked key: one pause, at most one DLQ message per invocation, no in.php after the pause; all ends after redrive and resume', async () => {
      // Prepare
      const bodies = generatedRecords(stack.site.url, stack.site.sitekey, 60, uniquePrefix('stop'));
      const keys = keysOf(bodies);
      stack.captcha.resetStats();
      await feedQueue(stack, stack.outputs.QueueUrl, bodies, { maxQueued: 60 });
      await waitFor(
        'a dozen submits and lanes in flight',
        () => {
          const s = stack.captcha.stats();
          return s.submits >= 12 && s.inFlight > SHAPE.r;
        },
        { intervalMs: 5 },
      );
      // Act 1: the key is revoked mid-run
      stack.captcha.setKeyRevoked(true);
      await waitFor('the pipeline to pause', async () => (await stack.control.readState()).paused);
      await waitFor('in flight to drain', () => stack.captcha.stats().inFlight === 0, { timeoutMs: 120_000 });
      // Invocations still running give their messages back and end.
      await new Promise((resolve) => setTimeout(resolve, 3_000));
      const submitsAtStop = stack.captcha.stats().submits;
      await new Promise((resolve) => setTimeout(resolve, 3_000));
      const submitsLater = stack.captcha.stats().submits;
      const dlqAtStop = await readDlq(stack, 1);
      const rowsAtStop = await outcomesOf(stack, keys);
      // Act 2: the operator fixes the key, redrives and resumes
      stack.captcha.setKeyRevoked(false);
      await waitFor(
        'the DLQ to be visible',
        async () => (await queueDepth(stack, stack.outputs.DlqUrl)).visible === dlqAtStop.length,
      );
      await redriveWithCli(stack);
      await stack.control.resume('operator');
      await waitFor('every record', async () => allFinished(stack, bodies), {
        timeoutMs: 400_000,
        intervalMs: 500,
      });
      // Assess
      expect(submitsLater).toBe(submitsAtStop);
      expect(dlqAtStop.length).toBeGreaterThan(0);
      // One stop per invocation: never more DLQ copies than invocations can run at once.
      expect(dlqAtStop.length).toBeLessThanOrEqual(SHAPE.r);
      for (const entry of dlqAtStop) {
        expect(entry.errorCode).toMatch(/^(ERROR_WRONG_USER_KEY|ERROR_KEY_DOES_NOT_EXIST)$/);
        expect(entry.reason).toBeTruthy();
        expect(rowsAtStop.get(entry.recordKey ?? '')?.status).toBe('stopped');
      }
      const rows = await outcomesOf(stack, keys);
      expect(keys.filter((k) => !isFinal(rows.get(k)))).toEqual([]);
      expect(await dlqCount(stack)).toBe(0);
    }, 600_000);

    it('follows the plan: a shrink drains running lanes to the new cap, a grow raises it and stays within it', async () => {
      // Prepare: a steady backlog
      const bodies = generatedRecords(stack.site.url, stack.site.sitekey, 160, uniquePrefix('plan'));
      const feeding = feedQueue(stack, stack.outputs.QueueUrl, bodies, { maxQueued: 40 });
      await waitFor('lanes busy above r', () => stack.captcha.stats().inFlight > SHAPE.r, { intervalMs: 20 });
      // Act 1: the plan shrinks to 8 threads, cap 6 (r 2 of L 3; invocations started before may run 2 lanes)
      stack.captcha.setThreads(8);
      await waitFor('the adjuster to publish cap 6', async () => (await publishedShape())?.cap === 6);
      const shrunk = await publishedShape();
      // Lanes beyond the new shape end before their next in.php; tasks already at CaptchaAI finish.
      const worstTaskMs = (DEFAULT_TIMINGS.deadlineMs + 60_000) * E2E.timeScale + 5_000;
      await new Promise((resolve) => setTimeout(resolve, worstTaskMs));
      stack.captcha.resetStats();
      await new Promise((resolve) => setTimeout(resolve, 8_000));
      const whileShrunk = stack.captcha.stats();
      // Act 2: the plan grows to 20 threads, cap 18
      stack.captcha.setThreads(20);
      await waitFor('the adjuster to publish cap 18', async () => (await publishedShape())?.cap === 18, {
        timeoutMs: 120_000,
      });
      await waitFor('the knobs to rise', async () => (await deployedCap(stack)) === laneShape(18, LANES).r, {
        timeoutMs: 120_000,
      });
      await feeding;
      // A backlog of its own, sent once r has risen: the first one may have drained at cap 6.
      stack.captcha.resetStats();
      const grown = generatedRecords(stack.site.url, stack.site.sitekey, 60, uniquePrefix('grow'));
      // Tasks near the client's deadline (0.8-1.0 s of its 1.2 s here), so that lanes hold threads
      // side by side even when the machine is starved and each record's own work is slow.
      stack.captcha.setLatency(Object.fromEntries(CAPTCHA_TYPES.map((t) => [t, LONG_TASKS])));
      try {
        await feedQueue(stack, stack.outputs.QueueUrl, grown, { maxQueued: 40 });
        await waitFor('every record', async () => allFinished(stack, [...bodies, ...grown]), {
          timeoutMs: 400_000,
          intervalMs: 500,
        });
      } finally {
        stack.captcha.setLatency(DEFAULT_LATENCY);
      }
      const whileGrown = stack.captcha.stats();
      stack.captcha.setThreads(PLAN.threads);
      // Assess
      expect(shrunk).toMatchObject({ cap: 6, r: 2, L: 3 });
      expect(shrunk?.drain).toMatchObject({ L: 2, fromR: 3 });
      expect(whileShrunk.submits).toBeGreaterThan(0);
      expect(whileShrunk.maxInFlight).toBeLessThanOrEqual(6);
      expect(whileShrunk.zeroBalance).toBe(0);
      // Safety only: how far in flight rises once r has is the emulator's speed here (a starved
      // moto times out lease renewals and state reads, and a reclaimed lease stops its lanes). The
      // grow's lanes taken beside held tasks are proven at time scale 0.1 by plan-change.test.ts.
      expect(whileGrown.submits).toBeGreaterThan(0);
      expect(whileGrown.maxInFlight).toBeLessThanOrEqual(18);
      expect(whileGrown.zeroBalance).toBe(0);
    }, 900_000);
  },
);
