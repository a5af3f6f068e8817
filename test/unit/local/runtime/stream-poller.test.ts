import { describe, expect, it } from 'vitest';
import { retryFrom } from '../../../../local/runtime/pollers/stream.js';

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
