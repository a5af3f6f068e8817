import { ReceiveMessageCommand, SendMessageBatchCommand } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { feedQueue, generatedRecords, type LocalStack, readDlq } from '../../local/local-stack.js';
import { malformedJobs } from '../fixtures/job-catalog.js';
import {
  dlqCount,
  finalCount,
  isFinal,
  outcomesOf,
  startE2eStack,
  uniquePrefix,
  waitFor,
} from './harness.js';

// Invariants 2 and 3 end to end: one in.php submit per record however often its message is
// delivered, and bad input ends with a clear reason without disturbing good records.
describe('e2e: duplicates and bad input', () => {
  let stack: LocalStack;

  beforeAll(async () => {
    stack = await startE2eStack('input');
  });

  afterAll(async () => {
    await stack?.stop();
  });

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
    await waitFor('40 outcomes', async () => (await finalCount(stack, keys)) === 40);
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
    expect([...rows.values()].map((r) => r.status)).toEqual(keys.map(() => 'submitted'));
    expect(stack.site.stats().acceptedTotal).toBe(40);
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
    expect(goodKeys.map((k) => rows.get(k)?.status)).toEqual(goodKeys.map(() => 'submitted'));
    const dlq = await readDlq(stack, 1);
    expect(dlq.map((d) => d.reason).sort()).toEqual(dlqCases.map((c) => c.reason).sort());
    expect(dlq.every((d) => d.errorCode !== undefined)).toBe(true);
  }, 240_000);
});
