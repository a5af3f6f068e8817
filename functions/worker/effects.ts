import type { Logger } from '@aws-lambda-powertools/logger';
import { MetricUnit } from '@aws-lambda-powertools/metrics';
import { DeleteMessageCommand, SendMessageCommand } from '@aws-sdk/client-sqs';
import type { SQSRecord } from 'aws-lambda';
import { PAUSE_TRIES, pauseBackoffMs, stopReason } from '../pipeline/control.js';
import {
  decidePauseFailed,
  decideRejectConflict,
  decideStopMetElsewhere,
  type RecordDecision,
} from '../records/decisions.js';
import { batchIdOf } from '../records/job-schema.js';
import type { OutcomeStatus } from '../records/store.js';
import { errorSummary, type RecordResult, type WorkerDeps } from './types.js';

/**
 * The side effects of each decision of functions/records/decisions.ts: the outcome row,
 * the DLQ copy, the pause, the cool-down, the metrics and the log line. This file decides
 * nothing; it carries out what the mapping decided.
 */

export function countOutcome(deps: WorkerDeps, status: string): void {
  const single = deps.metrics.singleMetric();
  single.addDimension('status', status);
  single.addMetric('Outcomes', MetricUnit.Count, 1);
}

/** Accounts for a final write: a lost claim means another invocation's outcome stands. */
export function finished(
  written: boolean,
  status: OutcomeStatus,
  deps: WorkerDeps,
  log: Logger,
  extra: Record<string, unknown> = {},
): RecordResult {
  if (!written) {
    // The lease expired and another invocation claimed the record: its outcome stands.
    log.warn('lost the claim before the final write; outcome not recorded', { status });
    countOutcome(deps, 'lost_claim');
    return { kind: 'done', status: 'duplicate' };
  }
  countOutcome(deps, status);
  log.info('outcome', { status, ...extra });
  return { kind: 'done', status };
}

export interface ApplyContext {
  record: SQSRecord;
  deps: WorkerDeps;
  log: Logger;
  /** Set once the record is claimed. */
  owner?: string;
  recordKey?: string;
  attempts?: number;
  /** The claim's lease end (epoch ms), set once the record is claimed. */
  leaseExpiresAt?: number;
  signal?: AbortSignal;
}

export async function applyDecision(decision: RecordDecision, c: ApplyContext): Promise<RecordResult> {
  const { deps, log, record } = c;
  switch (decision.action) {
    case 'reject': {
      // The row keeps the message's batch (when it has a usable one) so the batch's waiters see it.
      const written = await deps.store.reject(decision.recordKey, decision.reason, batchIdOf(record.body));
      if (!written.written) {
        const conflict = decideRejectConflict(written.row);
        log.warn(
          conflict.action === 'drop'
            ? 'invalid message for a record that already has an outcome; dropped'
            : 'invalid message for a record that has no final outcome yet; it will be retried',
          { reason: decision.reason, existingStatus: written.row?.status },
        );
        return conflict.action === 'drop'
          ? { kind: 'done', status: 'duplicate' }
          : applyDecision(conflict, c);
      }
      return finished(true, 'rejected', deps, log, { reason: decision.reason });
    }
    case 'dlq': {
      await sendToDlq(deps, record, { error_code: decision.errorCode, reason: decision.reason });
      countOutcome(deps, 'dlq');
      log.warn('invalid message without a usable record_key; sent to the DLQ', { reason: decision.reason });
      return { kind: 'done', status: 'dlq' };
    }
    case 'fail': {
      try {
        const written = await deps.store.finish(c.recordKey!, c.owner!, {
          status: 'failed',
          reason: decision.reason,
          attempts: c.attempts,
        });
        return finished(written.written, 'failed', deps, log, { reason: decision.reason });
      } finally {
        // The abandoned CaptchaAI task may still hold a thread: keep this invocation's slot, also
        // when the final write threw (the record is then retried, but only after the cool-down).
        if (decision.cooldownMs) {
          log.info('holding the slot for the cool-down', { cooldownMs: decision.cooldownMs });
          await deps.sleep(decision.cooldownMs, c.signal);
        }
      }
    }
    case 'retry': {
      if (decision.cooldownMs) {
        // A CaptchaAI task may still hold a thread: keep the slot, and the claim, until it must be done.
        log.info('holding the slot for the cool-down before the retry', { cooldownMs: decision.cooldownMs });
        await deps.sleep(decision.cooldownMs, c.signal);
      }
      if (decision.release && c.owner && c.recordKey) {
        await deps.store.release(c.recordKey, c.owner, c.attempts ?? 0);
      }
      log.info('will retry', { reason: decision.reason, released: decision.release });
      return decision.notBefore === undefined
        ? { kind: 'retry', reason: decision.reason }
        : { kind: 'retry', reason: decision.reason, notBefore: decision.notBefore };
    }
    case 'drop':
      return { kind: 'done', status: 'duplicate' };
    case 'cancel': {
      // Its batch is cancelled: the record ends here, before a new task or before its POST.
      const written = await deps.store.finish(c.recordKey!, c.owner!, {
        status: 'cancelled',
        reason: decision.reason,
        attempts: c.attempts,
      });
      if (written.written && decision.wasted) deps.metrics.addMetric('WastedSolves', MetricUnit.Count, 1);
      return finished(written.written, 'cancelled', deps, log, {
        reason: decision.reason,
        wasted: decision.wasted,
      });
    }
    case 'stop':
      return applyStop(decision, c);
  }
}

/** A stop-class error: stop new work everywhere first, then record, keep the message in the DLQ, delete it. */
async function applyStop(
  decision: Extract<RecordDecision, { action: 'stop' }>,
  c: ApplyContext,
): Promise<RecordResult> {
  const { deps, log, record } = c;
  if (deps.stops && !deps.stops.claim()) {
    // Another lane of this invocation met the stop first and records it.
    const elsewhere = decideStopMetElsewhere(decision, c.leaseExpiresAt);
    if (elsewhere.action === 'retry') return applyDecision(elsewhere, c);
  }
  // 1. Stop new work everywhere first; 2. record; 3. keep the message in the DLQ; 4. delete it.
  deps.metrics.addMetric('StopEvents', MetricUnit.Count, 1);
  log.error('stop-class error: pausing the pipeline', {
    errorCode: decision.code,
    reason: decision.reason,
  });
  const paused = await pauseWithTries(deps, log, decision.code, decision.reason);
  if (!paused) {
    deps.metrics.addMetric('PauseFailures', MetricUnit.Count, 1);
    const next = decidePauseFailed(decision, c.leaseExpiresAt);
    if (next.action === 'retry') {
      log.error('could not pause the pipeline; the record will be retried and the pause tried again');
      return applyDecision(next, c);
    }
    log.error(
      'could not pause the pipeline on the last receive; the stop is recorded and the message kept in the DLQ',
    );
  }
  await deps.store.finish(c.recordKey!, c.owner!, {
    status: 'stopped',
    reason: decision.code,
    attempts: c.attempts,
  });
  countOutcome(deps, 'stopped');
  await sendToDlq(deps, record, {
    error_code: decision.code,
    reason: decision.reason,
    ...(c.recordKey ? { record_key: c.recordKey } : {}),
  });
  await deps.sqs.send(
    new DeleteMessageCommand({ QueueUrl: deps.config.queueUrl, ReceiptHandle: record.receiptHandle }),
  );
  return paused ? { kind: 'stopped', code: decision.code } : { kind: 'done', status: 'stopped' };
}

async function sendToDlq(
  deps: WorkerDeps,
  record: SQSRecord,
  attributes: Record<string, string>,
): Promise<void> {
  const MessageAttributes = Object.fromEntries(
    Object.entries(attributes).map(([k, v]) => [k, { DataType: 'String', StringValue: v.slice(0, 1024) }]),
  );
  await deps.sqs.send(
    new SendMessageCommand({
      QueueUrl: deps.config.dlqUrl,
      MessageBody: record.body || '(empty)',
      MessageAttributes,
    }),
  );
  if (attributes.error_code === 'INVALID_JOB') {
    // Deleted now rather than by the poller, so the copy and the original never both stay.
    await deps.sqs.send(
      new DeleteMessageCommand({ QueueUrl: deps.config.queueUrl, ReceiptHandle: record.receiptHandle }),
    );
  }
}

/**
 * The pause (mapping disabled, then the state written), tried PAUSE_TRIES times with a doubling
 * back-off. Both steps are idempotent, so a try that half-landed is simply made again.
 */
async function pauseWithTries(deps: WorkerDeps, log: Logger, code: string, reason: string): Promise<boolean> {
  for (let attempt = 1; ; attempt++) {
    try {
      await deps.pipeline.pause(stopReason(code, reason), 'worker', code);
      return true;
    } catch (err) {
      log.warn('the pause failed', { attempt, ...errorSummary(err) });
      if (attempt >= PAUSE_TRIES) return false;
      await deps.sleep(pauseBackoffMs(attempt, deps.config.timeScale));
    }
  }
}
