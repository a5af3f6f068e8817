import type { InvokeResult } from '../types.js';

/** Lambda's SQS contract on both sides of an invocation: the event's records and the partial batch response. */

/** Lambda's SQS record shape for one received message: the worker's own (its chain receives too). */
export { toSqsRecord } from '../../../functions/worker/chain.js';

/**
 * Which messages of a batch succeeded, by Lambda's rules for partial batch responses: with
 * ReportBatchItemFailures, every message not listed in `batchItemFailures`; a malformed
 * response or an identifier that is empty or not in the batch fails the whole batch.
 */
export function succeededMessageIds(
  messageIds: string[],
  result: InvokeResult,
  reportBatchItemFailures: boolean,
): string[] {
  if (!result.ok) return [];
  if (!reportBatchItemFailures) return messageIds;
  const payload = result.payload as { batchItemFailures?: unknown } | null | undefined;
  if (payload === null || payload === undefined || typeof payload !== 'object') return messageIds;
  const failures = payload.batchItemFailures;
  if (failures === undefined || failures === null) return messageIds;
  if (!Array.isArray(failures)) return [];
  const failed = new Set<string>();
  for (const item of failures) {
    const id = (item as { itemIdentifier?: unknown } | null)?.itemIdentifier;
    if (typeof id !== 'string' || id === '' || !messageIds.includes(id)) return [];
    failed.add(id);
  }
  return messageIds.filter((id) => !failed.has(id));
}
