import { ChangeMessageVisibilityBatchCommand } from '@aws-sdk/client-sqs';
import type { SQSBatchResponse, SQSEvent, SQSRecord } from 'aws-lambda';
import type { PipelineState } from '../pipeline/control.js';
import { decideCrash } from '../records/decisions.js';
import { applyDecision } from './effects.js';
import { processRecord } from './record-flow.js';
import { errorSummary, type ProcessOptions, type RecordResult, type WorkerDeps } from './types.js';

/**
 * Works a batch strictly in order and returns the partial batch response.
 *
 * Pause semantics (the stop-class invariant). Before each record the pipeline state is read;
 * once it says paused, or a record of this batch hit a stop-class error, every later record
 * is returned as a batch item failure without any work (no claim, no page load, no solve).
 * When THIS invocation paused the pipeline, those records' visibility is also reset to 0 so
 * they sit visible in the queue, ready for the resume; the mapping is disabled, so nothing
 * receives them meanwhile.
 *
 * About "receive counts unchanged": records already handed to this invocation were received
 * once by the poller, and that receive is already in their ApproximateReceiveCount; the
 * worker adds none, and after the pause no poller receives them again. With batch size 1
 * (the deployed setting) the other messages were never received at all, so their counts are
 * exactly as they were. test/integration/functions/worker.test.ts asserts both cases.
 */
export async function processBatch(
  event: SQSEvent,
  deps: WorkerDeps,
  options: ProcessOptions = {},
): Promise<SQSBatchResponse> {
  const failures: string[] = [];
  const untouched: SQSRecord[] = [];
  const retried: { record: SQSRecord; notBefore?: number }[] = [];
  let paused: 'none' | 'observed' | 'by-us' = 'none';
  try {
    for (const record of event.Records) {
      if (paused === 'none' && !options.signal?.aborted) {
        const state = await readStateSafely(deps);
        if (state.paused) {
          paused = 'observed';
          deps.logger.info('pipeline is paused; leaving the rest of the batch in the queue', {
            pauseReason: state.reason,
          });
        }
      }
      if (paused !== 'none' || options.signal?.aborted) {
        failures.push(record.messageId);
        untouched.push(record);
        continue;
      }
      let result: RecordResult;
      try {
        result = await processRecord(record, deps, options);
      } catch (err) {
        // An AWS call failed outside the mapping (claim, DLQ, delete): retry the message later.
        deps.logger.error('record crashed; it will be retried', {
          messageId: record.messageId,
          ...errorSummary(err),
        });
        result = await applyDecision(decideCrash(), { record, deps, log: deps.logger });
      }
      if (result.kind === 'retry') {
        failures.push(record.messageId);
        retried.push({ record, notBefore: result.notBefore });
      }
      if (result.kind === 'stopped') paused = 'by-us';
    }
    if (paused === 'by-us' && untouched.length > 0) await setVisibility(deps, untouched, 0);
    // Without this a retried message would wait out the queue's whole visibility timeout
    // (6 x the function timeout, 43 min at the defaults) before its next try.
    for (const [seconds, records] of retryDelays(retried, deps)) await setVisibility(deps, records, seconds);
  } finally {
    // Per-record metrics (outcomes, conflicts) are single metrics, already published.
    if (deps.metrics.hasStoredMetrics()) deps.metrics.publishStoredMetrics();
  }
  return { batchItemFailures: failures.map((itemIdentifier) => ({ itemIdentifier })) };
}

/** SQS's longest visibility timeout. */
const MAX_VISIBILITY_SECONDS = 43_200;

/**
 * Retried records grouped by their visibility delay: the configured retry delay, or until
 * `notBefore` has passed (plus a second, so the next claim sees the lease expired).
 */
function retryDelays(
  retried: { record: SQSRecord; notBefore?: number }[],
  deps: WorkerDeps,
): Map<number, SQSRecord[]> {
  const now = deps.now();
  const groups = new Map<number, SQSRecord[]>();
  for (const { record, notBefore } of retried) {
    const untilThen = notBefore === undefined ? 0 : Math.ceil((notBefore - now) / 1000) + 1;
    const seconds = Math.min(MAX_VISIBILITY_SECONDS, Math.max(deps.config.retryDelaySeconds, untilThen));
    groups.set(seconds, [...(groups.get(seconds) ?? []), record]);
  }
  return groups;
}

async function readStateSafely(deps: WorkerDeps): Promise<PipelineState> {
  try {
    return await deps.pipeline.readState();
  } catch (err) {
    // The disabled mapping is what really stops work; an unreadable state must not stop it alone.
    deps.logger.warn('could not read the pipeline state; continuing', errorSummary(err));
    return { paused: false };
  }
}

async function setVisibility(deps: WorkerDeps, records: SQSRecord[], seconds: number): Promise<void> {
  for (let i = 0; i < records.length; i += 10) {
    const chunk = records.slice(i, i + 10);
    try {
      await deps.sqs.send(
        new ChangeMessageVisibilityBatchCommand({
          QueueUrl: deps.config.queueUrl,
          Entries: chunk.map((r, j) => ({
            Id: String(j),
            ReceiptHandle: r.receiptHandle,
            VisibilityTimeout: seconds,
          })),
        }),
      );
    } catch (err) {
      // Not fatal: they come back after their visibility timeout instead.
      deps.logger.warn('could not change the visibility of records to retry', errorSummary(err));
    }
  }
}
