import { PurgeQueueCommand, ReceiveMessageCommand, SendMessageBatchCommand } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { LocalStack } from '../../local/stack/local-stack.js';
import { queueDepth, readDlq, readMessages } from '../../local/stack/observation.js';
import { generatedRecords } from '../../local/stack/records.js';
import { feedQueue } from '../../local/stack/run.js';
import { malformedJobs } from '../fixtures/job-catalog.js';
import {
  allFinished,
  CAP,
  deployedCap,
  dlqCount,
  drainTo,
  E2E,
  finalCount,
  isFinal,
  outcomesOf,
  redriveWithCli,
  sharedE2eStack,
  uniquePrefix,
  waitFor,
} from './harness.js';
import { e2eTarget, expectationsFor, expectedKnobs, readKnobs } from './target.js';

const NO_FAULTS = { html502: 0, unsolvable: 0, neverFinish: 0 };
// What this target can show (test/e2e/target.ts): LocalStack runs one invocation at a time.
const TARGET = expectationsFor(e2eTarget());
const CAP_RECORDS = TARGET.capRecords;

// The six invariants of docs/design.md, end to end: the real CDK app deployed to moto, run by the
// local runtime against the CaptchaAI and target-site stand-ins, or, with
// THREADGATE_E2E_TARGET=localstack, deployed to LocalStack, which runs the functions (what the
// suite can assert there is chosen in ./target.ts). The deployment is the worker's shared one
// (./harness.ts sharedE2eStack: on two cores, parallel deployments starve each other's
// time-scaled stand-ins); each test uses its own record keys and resets the stand-ins' counters. Order matters only in that the
// stop test runs last and leaves the pipeline resumed.
describe(`e2e: threadgate deployed to ${TARGET.target}`, () => {
  let stack: LocalStack;

  beforeAll(async () => {
    stack = await sharedE2eStack('invariants');
  });

  afterAll(async () => {
    await stack?.stop();
  });

  beforeEach(async () => {
    // Each test counts queue and DLQ messages and stand-in calls of its own: earlier tests already
    // checked theirs (a retried message can sit out a 2.5-minute visibility timeout).
    await stack.sqs.send(new PurgeQueueCommand({ QueueUrl: stack.outputs.QueueUrl }));
    await stack.sqs.send(new PurgeQueueCommand({ QueueUrl: stack.outputs.DlqUrl }));
    stack.captcha.setFaults(NO_FAULTS);
    // The plan test leaves a bigger plan behind: back to 8 threads, cap 6, before counting.
    stack.captcha.setThreads(E2E.threads);
    await waitFor('the deployed cap', async () => (await deployedCap(stack)) === CAP, {
      timeoutMs: TARGET.adjusterWaitMs,
    });
    await drainTo(stack, CAP);
    stack.captcha.resetStats();
    stack.site.resetStats();
  }, TARGET.adjusterWaitMs + 120_000);

  it(`never lets more than threads − reserve solves in flight, with no ZERO_BALANCE, over ${CAP_RECORDS} records`, async () => {
    // Prepare
    const prefix = uniquePrefix('cap');
    const bodies = generatedRecords(stack.site.url, stack.site.sitekey, CAP_RECORDS, prefix);
    const keys = bodies.map((b) => (JSON.parse(b) as { record_key: string }).record_key);
    stack.captcha.resetStats();
    // Act
    await feedQueue(stack, stack.outputs.QueueUrl, bodies);
    await waitFor(`${CAP_RECORDS} outcomes`, async () => allFinished(stack, bodies), {
      timeoutMs: 240_000,
    });
    // Assess (a record may fail, e.g. POLL_TIMEOUT on a starved machine, but each has one final outcome)
    const stats = stack.captcha.stats();
    const rows = await outcomesOf(stack, keys);
    expect(stats.maxInFlight).toBeLessThanOrEqual(CAP);
    expect(stats.zeroBalance).toBe(0);
    expect(keys.filter((k) => !isFinal(rows.get(k)))).toEqual([]);
    expect(stats.submits).toBe(CAP_RECORDS);
    expect(await dlqCount(stack)).toBe(0);
  }, 300_000);

  if (TARGET.capChange === 'in-flight-follows') {
    it('drops in flight to the new cap after the plan shrinks, and raises the cap when it grows', async () => {
      // Prepare: a steady backlog at the deployed cap.
      const prefix = uniquePrefix('plan');
      const bodies = generatedRecords(stack.site.url, stack.site.sitekey, 100, prefix);
      const keys = bodies.map((b) => (JSON.parse(b) as { record_key: string }).record_key);
      const feeding = feedQueue(stack, stack.outputs.QueueUrl, bodies, { maxQueued: 30 });
      await waitFor('15 outcomes at the first cap', async () => (await finalCount(stack, keys)) >= 15);

      // Act 1: the plan shrinks from 8 to 4 threads → cap 2.
      stack.captcha.setThreads(4);
      await waitFor(
        'the adjuster to lower the cap',
        async () => (await deployedCap(stack)) === 4 - E2E.reserve,
      );
      // Invocations started under the old cap finish their records (one worst-case solve at most).
      await drainTo(stack, 4 - E2E.reserve);
      await waitFor(
        'in flight at CaptchaAI to drain',
        () => stack.captcha.stats().inFlight <= 4 - E2E.reserve,
      );
      stack.captcha.resetStats();
      const before = await finalCount(stack, keys);
      await waitFor(
        '15 outcomes at the lower cap',
        async () => (await finalCount(stack, keys)) >= before + 15,
      );
      const whileShrunk = stack.captcha.stats();

      // Act 2: the plan grows to 12 threads → cap 10. A backlog of its own, sent once the cap is
      // raised: the first one may have drained at cap 2 while the adjuster's tick was awaited.
      stack.captcha.setThreads(12);
      await waitFor(
        'the adjuster to raise the cap',
        async () => (await deployedCap(stack)) === 12 - E2E.reserve,
      );
      await feeding;
      stack.captcha.resetStats();
      const grownBodies = generatedRecords(stack.site.url, stack.site.sitekey, 40, uniquePrefix('grow'));
      const grownFeeding = feedQueue(stack, stack.outputs.QueueUrl, grownBodies);
      await waitFor(
        'in flight to rise above the old cap',
        () => stack.captcha.stats().inFlight > 4 - E2E.reserve,
      );
      await grownFeeding;
      await waitFor('every record', async () => allFinished(stack, [...bodies, ...grownBodies]), {
        timeoutMs: 240_000,
      });
      const whileGrown = stack.captcha.stats();

      // Assess
      expect(whileShrunk.maxInFlight).toBeLessThanOrEqual(4 - E2E.reserve);
      expect(whileShrunk.zeroBalance).toBe(0);
      expect(whileGrown.maxInFlight).toBeGreaterThan(4 - E2E.reserve);
      expect(whileGrown.maxInFlight).toBeLessThanOrEqual(12 - E2E.reserve);
      expect(whileGrown.zeroBalance).toBe(0);
    }, 400_000);
  } else {
    // LocalStack's one poller cannot show in flight following the cap, so there this checks that
    // the adjuster's writes land: PutFunctionConcurrency and UpdateEventSourceMapping, read back,
    // driven by the real scheduled rule (about once a minute), and a run at the lower cap.
    it(
      "lands the cap adjuster's PutFunctionConcurrency and UpdateEventSourceMapping values when the plan shrinks and grows",
      async () => {
        // Prepare
        const prefix = uniquePrefix('knobs');
        const bodies = generatedRecords(stack.site.url, stack.site.sitekey, 10, prefix);
        const keys = bodies.map((b) => (JSON.parse(b) as { record_key: string }).record_key);
        const landed = (cap: number) => async () => {
          const knobs = await readKnobs(stack);
          const want = expectedKnobs(cap);
          return (
            knobs.reservedConcurrency === want.reservedConcurrency &&
            knobs.mappingMaximum === want.mappingMaximum
          );
        };
        const wait = { timeoutMs: TARGET.adjusterWaitMs, intervalMs: 1000 };
        // Act 1: the plan shrinks from 8 to 4 threads → cap 2; records still finish at that cap.
        stack.captcha.setThreads(4);
        await waitFor('the adjuster to write cap 2', landed(4 - E2E.reserve), wait);
        const shrunk = await readKnobs(stack);
        stack.captcha.resetStats();
        await feedQueue(stack, stack.outputs.QueueUrl, bodies);
        await waitFor('10 outcomes at cap 2', async () => (await finalCount(stack, keys)) === 10);
        const whileShrunk = stack.captcha.stats();
        // Act 2: the plan grows to 12 threads → cap 10.
        stack.captcha.setThreads(12);
        await waitFor('the adjuster to write cap 10', landed(12 - E2E.reserve), wait);
        const grown = await readKnobs(stack);
        // Assess
        expect(shrunk).toEqual({ ...expectedKnobs(4 - E2E.reserve), enabled: true });
        expect(grown).toEqual({ ...expectedKnobs(12 - E2E.reserve), enabled: true });
        expect(whileShrunk.maxInFlight).toBeLessThanOrEqual(4 - E2E.reserve);
        expect(whileShrunk.zeroBalance).toBe(0);
      },
      2 * TARGET.adjusterWaitMs + 120_000,
    );
  }

  it('submits each record_key to in.php once although every message is sent twice and some are redelivered', async () => {
    // Prepare
    const prefix = uniquePrefix('dup');
    const bodies = generatedRecords(stack.site.url, stack.site.sitekey, 40, prefix);
    const keys = bodies.map((b) => (JSON.parse(b) as { record_key: string }).record_key);
    stack.captcha.resetStats();
    stack.site.resetStats();
    // Act: every body twice, interleaved, ...
    await feedQueue(
      stack,
      stack.outputs.QueueUrl,
      bodies.flatMap((b) => [b, b]),
    );
    // ... a consumer that takes messages and lets their visibility time out (a crashed worker),
    // so SQS redelivers them while or after their twins are worked on ...
    for (let i = 0; i < 3; i++) {
      await stack.sqs.send(
        new ReceiveMessageCommand({
          QueueUrl: stack.outputs.QueueUrl,
          MaxNumberOfMessages: 5,
          VisibilityTimeout: 2,
        }),
      );
    }
    await waitFor('40 outcomes', async () => allFinished(stack, bodies));
    // ... and a third copy of ten records after they finished.
    await stack.sqs.send(
      new SendMessageBatchCommand({
        QueueUrl: stack.outputs.QueueUrl,
        Entries: bodies.slice(0, 10).map((b, i) => ({ Id: String(i), MessageBody: b })),
      }),
    );
    await waitFor('the queue to drain', async () => {
      const m = await stack.sqs.send(
        new ReceiveMessageCommand({
          QueueUrl: stack.outputs.QueueUrl,
          MaxNumberOfMessages: 1,
          VisibilityTimeout: 0,
        }),
      );
      return (
        (m.Messages ?? []).length === 0 &&
        (stack.runtime?.stats().functions[stack.outputs.WorkerFunctionName]?.inFlight ?? 0) === 0
      );
    });
    // Assess
    const stats = stack.captcha.stats();
    const perPage = keys.map((k) => stats.submitsByPageurl[`${stack.site.url}/form/${k}`] ?? 0);
    expect(perPage).toEqual(keys.map(() => 1));
    expect(stats.submits).toBe(40);
    const rows = await outcomesOf(stack, keys);
    expect(keys.filter((k) => !isFinal(rows.get(k)))).toEqual([]);
    const submitted = [...rows.values()].filter((r) => r.status === 'submitted').length;
    expect(stack.site.stats().acceptedTotal).toBe(submitted);
    expect(Object.values(stack.site.stats().accepted).every((n) => n === 1)).toBe(true);
    expect(await dlqCount(stack)).toBe(0);
  }, 240_000);

  it('gives every malformed message its reason and leaves the good records in the same run unaffected', async () => {
    // Prepare: the bad-input catalog, without the cases that need the unit tests' fake DNS.
    const prefix = uniquePrefix('bad');
    const catalog = malformedJobs(stack.site.url, stack.site.sitekey, prefix).filter(
      (c) => !c.body.includes('corp.test'),
    );
    const good = generatedRecords(stack.site.url, stack.site.sitekey, 20, `${prefix}-good`);
    const goodKeys = good.map((b) => (JSON.parse(b) as { record_key: string }).record_key);
    const mixed: string[] = [];
    catalog.forEach((c, i) => {
      mixed.push(c.body);
      if (good[i]) mixed.push(good[i]);
    });
    mixed.push(...good.slice(catalog.length));
    const rejectedCases = catalog.flatMap((c) => (c.expect.kind === 'rejected' ? [c.expect] : []));
    const dlqCases = catalog.flatMap((c) => (c.expect.kind === 'dlq' ? [c.expect] : []));
    // Act
    await feedQueue(stack, stack.outputs.QueueUrl, mixed);
    await waitFor('every good record and every rejection', async () => {
      const rows = await outcomesOf(stack, [...goodKeys, ...rejectedCases.map((c) => c.recordKey)]);
      return [...rows.values()].filter(isFinal).length === goodKeys.length + rejectedCases.length;
    });
    await waitFor('the unkeyed messages in the DLQ', async () => (await dlqCount(stack)) === dlqCases.length);
    // Assess
    const rows = await outcomesOf(stack, [...goodKeys, ...rejectedCases.map((c) => c.recordKey)]);
    for (const c of rejectedCases) {
      expect({
        key: c.recordKey,
        status: rows.get(c.recordKey)?.status,
        reason: rows.get(c.recordKey)?.reason,
      }).toEqual({
        key: c.recordKey,
        status: 'rejected',
        reason: c.reason,
      });
    }
    expect(goodKeys.filter((k) => !isFinal(rows.get(k)))).toEqual([]);
    expect(goodKeys.filter((k) => rows.get(k)?.status === 'rejected')).toEqual([]);
    const dlq = await readDlq(stack, 1);
    expect(dlq.map((d) => d.reason).sort()).toEqual(dlqCases.map((c) => c.reason).sort());
    expect(dlq.every((d) => d.errorCode !== undefined)).toBe(true);
  }, 240_000);

  it('ends every record with exactly one final outcome or one DLQ entry under 502s, UNSOLVABLE and tasks that never finish', async () => {
    // Prepare
    const prefix = uniquePrefix('faults');
    const bodies = generatedRecords(stack.site.url, stack.site.sitekey, 60, prefix);
    const keys = bodies.map((b) => (JSON.parse(b) as { record_key: string }).record_key);
    stack.captcha.setFaults({ html502: 0.1, unsolvable: 0.05, neverFinish: 0.02 });
    // Act
    await feedQueue(stack, stack.outputs.QueueUrl, bodies);
    // A record whose transient retries run out comes back after the queue's visibility timeout
    // (6 × the worker timeout), hence the long wait allowed here; most runs need far less.
    await waitFor('an outcome or a DLQ entry for every record', async () => allFinished(stack, bodies), {
      timeoutMs: 420_000,
      intervalMs: 500,
    });
    stack.captcha.setFaults(NO_FAULTS);
    // Assess
    const rows = await outcomesOf(stack, keys);
    const finals = keys.filter((k) => isFinal(rows.get(k)));
    const dlq = await readDlq(stack, 1);
    const dlqKeys = dlq.map((d) => d.recordKey);
    expect(finals.length + dlq.length).toBe(60);
    expect(finals.filter((k) => dlqKeys.includes(k))).toEqual([]);
    expect(new Set(dlqKeys).size).toBe(dlq.length);
    const failed = [...rows.values()].filter((r) => r.status === 'failed');
    expect(failed.every((r) => typeof r.reason === 'string' && r.reason !== '')).toBe(true);
    expect(stack.captcha.stats().maxInFlight).toBeLessThanOrEqual(stack.threads);
  }, 480_000);

  it('stops submitting when the key is revoked, keeps the rest queued, and finishes everything after resume and redrive', async () => {
    // Prepare
    const prefix = uniquePrefix('stop');
    const bodies = generatedRecords(stack.site.url, stack.site.sitekey, 40, prefix);
    const keys = bodies.map((b) => (JSON.parse(b) as { record_key: string }).record_key);
    stack.captcha.resetStats();
    await feedQueue(stack, stack.outputs.QueueUrl, bodies, { maxQueued: 60 });
    // Mid-run: a dozen tasks submitted and one at CaptchaAI now, whose next poll meets the revoked
    // key. Read from the stand-in's own counters, at once: a run of 40 records can end between
    // two reads of the outcome table.
    await waitFor(
      'a dozen submits and a task in flight',
      () => stack.captcha.stats().submits >= 12 && stack.captcha.stats().inFlight > 0,
      { intervalMs: 5 },
    );

    // Act 1: the key is revoked mid-run.
    const submitsBefore = stack.captcha.stats().submits;
    stack.captcha.setKeyRevoked(true);
    await waitFor('the pipeline to pause', async () => (await stack.control.readState()).paused);
    await waitFor('invocations to drain', () => {
      const worker = stack.runtime?.stats().functions[stack.outputs.WorkerFunctionName];
      return (worker?.inFlight ?? 0) === 0 && stack.captcha.stats().inFlight === 0;
    });
    const submitsAtStop = stack.captcha.stats().submits;
    // An observation window: a paused pipeline must stay quiet.
    await new Promise((resolve) => setTimeout(resolve, 3000));
    const submitsLater = stack.captcha.stats().submits;
    const state = await stack.control.readState();
    const mapping = await stack.control.readMapping();
    const rowsAtStop = await outcomesOf(stack, keys);
    const dlqAtStop = await readDlq(stack, 1);
    const queued = await queueDepth(stack, stack.outputs.QueueUrl);
    const finalAtStop = keys.filter((k) => isFinal(rowsAtStop.get(k))).length;

    // Act 2: the operator fixes the key, redrives (the pipeline stays paused) and resumes.
    stack.captcha.setKeyRevoked(false);
    await waitFor(
      'the DLQ to be visible again',
      async () => (await queueDepth(stack, stack.outputs.DlqUrl)).visible === dlqAtStop.length,
    );
    const redriven = await redriveWithCli(stack);
    const redrivenMessages = (await readMessages(stack, stack.outputs.QueueUrl, 1)).filter(
      (m) => m.errorCode !== undefined,
    );
    await stack.control.resume('operator');
    await waitFor('every record', async () => allFinished(stack, bodies), { timeoutMs: 240_000 });

    // Assess: the stop
    // Whichever sees the revoked key first pauses: a worker's in.php/res.php call, or the cap
    // adjuster's threadsinfo tick (every 0.6 s at this time scale). Either way it is a stop.
    expect(state.paused).toBe(true);
    expect(['worker', 'cap-adjuster']).toContain(state.by);
    expect(mapping.enabled).toBe(false);
    expect(submitsAtStop - submitsBefore).toBeLessThanOrEqual(CAP);
    expect(submitsLater).toBe(submitsAtStop);
    expect(dlqAtStop.length).toBeGreaterThan(0);
    for (const entry of dlqAtStop) {
      expect(entry.errorCode).toMatch(/^(ERROR_WRONG_USER_KEY|ERROR_KEY_DOES_NOT_EXIST)$/);
      expect(rowsAtStop.get(entry.recordKey ?? '')?.status).toBe('stopped');
    }
    expect(queued.visible + queued.inFlight).toBe(40 - finalAtStop - dlqAtStop.length);
    // Assess: nothing lost after resume + redrive
    expect(redriven).toMatchObject({ moved: dlqAtStop.length, failed: 0 });
    // The CLI's redrive keeps the reason attributes with each message.
    const attributes = (entries: typeof dlqAtStop) =>
      entries.map((e) => ({
        body: e.body,
        recordKey: e.recordKey,
        errorCode: e.errorCode,
        reason: e.reason,
      }));
    const byKey = (a: { recordKey?: string }, b: { recordKey?: string }) =>
      (a.recordKey ?? '').localeCompare(b.recordKey ?? '');
    expect(attributes(redrivenMessages).sort(byKey)).toEqual(attributes(dlqAtStop).sort(byKey));
    expect(dlqAtStop.every((e) => e.recordKey && e.errorCode && e.reason)).toBe(true);
    const rows = await outcomesOf(stack, keys);
    expect(keys.filter((k) => !isFinal(rows.get(k)))).toEqual([]);
    expect(await dlqCount(stack)).toBe(0);
    expect((await stack.control.readState()).paused).toBe(false);
  }, 360_000);
});
