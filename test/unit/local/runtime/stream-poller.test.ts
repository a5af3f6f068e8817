import { describe, expect, it } from 'vitest';
import {
  expiredAtFront,
  nextStep,
  onFailureRecord,
  retryFrom,
  type StreamFailureRules,
} from '../../../../local/runtime/pollers/stream.js';

/** Lambda's retry rules for a DynamoDB stream batch, as the local runtime applies them. */
describe('stream poller retry rules', () => {
  const batch = [{ sequence: '100' }, { sequence: '101' }, { sequence: '102' }];

  it('is done with a batch the function answered without failures', () => {
    expect(retryFrom(batch, { ok: true, payload: { batchItemFailures: [] } }, true)).toBeUndefined();
    expect(retryFrom(batch, { ok: true, payload: null }, true)).toBeUndefined();
  });

  it('retries the whole batch when the function failed', () => {
    expect(retryFrom(batch, { ok: false, error: { errorType: 'Error', errorMessage: 'boom' } }, true)).toBe(
      '100',
    );
  });

  it('retries from the lowest reported sequence number with ReportBatchItemFailures', () => {
    const payload = { batchItemFailures: [{ itemIdentifier: '102' }, { itemIdentifier: '101' }] };
    expect(retryFrom(batch, { ok: true, payload }, true)).toBe('101');
  });

  it('ignores reported failures without ReportBatchItemFailures, and fails the batch on an unknown identifier', () => {
    const payload = { batchItemFailures: [{ itemIdentifier: '101' }] };
    expect(retryFrom(batch, { ok: true, payload }, false)).toBeUndefined();
    expect(
      retryFrom(batch, { ok: true, payload: { batchItemFailures: [{ itemIdentifier: 'x' }] } }, true),
    ).toBe('100');
  });
});

/** What happens to a part of a batch after an invocation, under the mapping's failure rules. */
describe('stream poller failure rules', () => {
  const items = ['1', '2', '3', '4', '5'].map((sequence) => ({ sequence }));
  const failed = { ok: false as const, error: { errorType: 'Error', errorMessage: 'boom' } };
  const rules: StreamFailureRules = { reportBatchItemFailures: true, bisect: true, maxRetries: 2 };

  it('splits a failed batch in two with bisect, each half with no retries used', () => {
    const step = nextStep({ items, retries: 1 }, failed, rules);
    expect(step).toEqual({
      kind: 'split',
      delivered: 0,
      parts: [
        { items: items.slice(0, 3), retries: 0 },
        { items: items.slice(3), retries: 0 },
      ],
    });
  });

  it('retries a single failing record until its retries are used, then gives it up', () => {
    const one = { items: [items[2]!], retries: 0 };
    const first = nextStep(one, failed, rules);
    expect(first).toEqual({ kind: 'retry', delivered: 0, part: { items: [items[2]], retries: 1 } });
    const last = nextStep({ items: [items[2]!], retries: 2 }, failed, rules);
    expect(last).toEqual({ kind: 'give-up', delivered: 0, items: [items[2]], retries: 2 });
  });

  it('does not split on reported item failures: the records before the first are done, the rest retried', () => {
    const payload = { batchItemFailures: [{ itemIdentifier: '4' }] };
    const step = nextStep({ items, retries: 0 }, { ok: true, payload }, rules);
    expect(step).toEqual({ kind: 'retry', delivered: 3, part: { items: items.slice(3), retries: 1 } });
  });

  it('retries without end when MaximumRetryAttempts is unbounded, and never splits without bisect', () => {
    const step = nextStep({ items, retries: 500 }, failed, { reportBatchItemFailures: false, bisect: false });
    expect(step).toMatchObject({ kind: 'retry', part: { items, retries: 501 } });
  });

  it('finds the records older than the maximum age at the front of a part', () => {
    const now = 1_000_000;
    const part = [{ createdMs: now - 90_000 }, { createdMs: now - 61_000 }, { createdMs: now - 1_000 }];
    expect(expiredAtFront(part, 60_000, now)).toBe(2);
    expect(expiredAtFront(part, undefined, now)).toBe(0);
  });

  it("writes Lambda's on-failure record: shard, first and last sequence numbers, batch size, no data", () => {
    const record = onFailureRecord({
      functionArn: 'arn:aws:lambda:us-east-1:123456789012:function:pub',
      condition: 'RetryAttemptsExhausted',
      invokeCount: 3,
      shardId: 'shardId-1',
      streamArn: 'arn:aws:dynamodb:us-east-1:123456789012:table/t/stream/x',
      items: [
        { sequence: '7', createdMs: Date.UTC(2026, 11, 1, 22, 0, 0, 500), event: { secret: 'data' } },
        { sequence: '9', createdMs: Date.UTC(2026, 11, 1, 22, 0, 1) },
      ] as { sequence: string; createdMs: number }[],
      now: new Date(Date.UTC(2026, 11, 1, 22, 5)),
    });
    expect(record).toMatchObject({
      requestContext: { condition: 'RetryAttemptsExhausted', approximateInvokeCount: 3 },
      version: '1.0',
      DDBStreamBatchInfo: {
        shardId: 'shardId-1',
        startSequenceNumber: '7',
        endSequenceNumber: '9',
        approximateArrivalOfFirstRecord: '2026-12-01T22:00:00Z',
        approximateArrivalOfLastRecord: '2026-12-01T22:00:01Z',
        batchSize: 2,
      },
    });
    expect(JSON.stringify(record)).not.toContain('data');
  });
});
