import type { Logger } from '@aws-lambda-powertools/logger';
import { MetricUnit } from '@aws-lambda-powertools/metrics';
import { DeleteMessageCommand, SendMessageCommand } from '@aws-sdk/client-sqs';
import type { SQSRecord } from 'aws-lambda';
import { PAUSE_TRIES, pauseBackoffMs, stopReason } from '../pipeline/control.js';
import {
  decideCrash,
  decidePauseFailed,
  decideRejectConflict,
  decideStopMetElsewhere,
  REASON,
  type RecordDecision,
} from '../records/decisions.js';
import { batchIdOf } from '../records/job-schema.js';
import { type OutcomeRow, type OutcomeStatus, writeBackoffMs } from '../records/store.js';
import { taskDeadlineMs } from './config.js';
import { errorSummary, type RecordResult, type WorkerDeps } from './types.js';
import { STOP_SQS_TRIES } from './worst-case.js';

/**
 * The side effects of each decision of functions/records/decisions.ts: the outcome row,
 * the DLQ copy, the pause, the cool-down, the metrics and the log line. This file decides
 * nothing; it carries out what the mapping decided. An effect that throws (its AWS call failed on
 * every try) is a crash like any other: applyCrash reads the row and carries out decideCrash's
 * decision, so no failed effect leaves a claim that a redelivery could only meet and wait out.
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
  /** Set once the record is claimed (or a claim was tried: the owner it tried with). */
  owner?: string;
  recordKey?: string;
  attempts?: number;
  /** The record's one resubmission after UNSOLVABLE is spent or due (a release keeps that on the row). */
  resubmitted?: boolean;
  /** The claim's lease end (epoch ms), set once the record is claimed. */
  leaseExpiresAt?: number;
  signal?: AbortSignal;
}

/** Carries the decision out. An effect that throws goes to applyCrash, so this never throws. */
export async function applyDecision(decision: RecordDecision, c: ApplyContext): Promise<RecordResult> {
  try {
    return await carryOut(decision, c);
  } catch (err) {
    return applyCrash(err, c, decision);
  }
}

/** The message's ApproximateReceiveCount (this delivery included). */
function receiveCountOf(record: SQSRecord): number {
  const n = Number(record.attributes?.ApproximateReceiveCount);
  return Number.isFinite(n) && n > 0 ? n : 1;
}

/**
 * The record's handling threw (the claim, an effect above, or anything the batch loop caught):
 * reads the row once (consistent) and carries out decideCrash's decision. When that throws too
 * on the last allowed receive, a DLQ copy carries the reason; only when that also fails on every
 * try is the message left to SQS, and the log says so. Never throws.
 */
export async function applyCrash(
  err: unknown,
  c: ApplyContext,
  /** The decision whose effect threw, if one did. */
  intended?: RecordDecision,
): Promise<RecordResult> {
  const { deps, log, record } = c;
  const receiveCount = receiveCountOf(record);
  const last = receiveCount >= deps.config.transientReceiveLimit;
  log.error('the record handling failed', { receiveCount, ...errorSummary(err) });
  let row: OutcomeRow | undefined;
  let rowUnknown = c.recordKey === undefined;
  if (c.recordKey !== undefined) {
    try {
      row = await deps.store.get(c.recordKey);
    } catch (readErr) {
      rowUnknown = true;
      log.warn('could not read the row after the failure', errorSummary(readErr));
    }
  }
  const crash = decideCrash({
    receiveCount,
    transientReceiveLimit: deps.config.transientReceiveLimit,
    ...(c.owner === undefined ? {} : { owner: c.owner }),
    ...(row === undefined ? {} : { row }),
    rowUnknown,
    now: deps.now(),
    retryDelayMs: deps.config.retryDelaySeconds * 1000,
  });
  // Ending the record after a final write that threw: with that write's own outcome and reason
  // (its cool-down, if any, was held already), not a generic INTERNAL_ERROR.
  const decision =
    crash.action === 'fail' &&
    crash.reason === REASON.INTERNAL_ERROR &&
    (intended?.action === 'fail' || intended?.action === 'cancel')
      ? { ...intended, ...(intended.action === 'fail' ? { cooldownMs: 0 } : {}) }
      : crash;
  try {
    return await carryOut(decision, c);
  } catch (again) {
    log.error('the effect decided after the failure failed too', {
      action: decision.action,
      ...errorSummary(again),
    });
  }
  if (last && decision.action !== 'dlq') {
    try {
      await sendToDlq(deps, record, log, {
        error_code:
          decision.action === 'fail' || decision.action === 'cancel'
            ? decision.reason
            : REASON.INTERNAL_ERROR,
        reason: `the record's handling failed on its last allowed receive (${receiveCount}) and so did its final write`,
        ...(c.recordKey ? { record_key: c.recordKey } : {}),
      });
      countOutcome(deps, 'dlq');
      return { kind: 'done', status: 'dlq' };
    } catch (dlqErr) {
      log.error('the DLQ copy failed on every try', errorSummary(dlqErr));
    }
  }
  if (last) {
    log.error('nothing could record why this record ends; SQS will move its message without a reason', {
      receiveCount,
    });
  }
  return { kind: 'retry', reason: REASON.INTERNAL_ERROR };
}

async function carryOut(decision: RecordDecision, c: ApplyContext): Promise<RecordResult> {
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
        return conflict.action === 'drop' ? { kind: 'done', status: 'duplicate' } : carryOut(conflict, c);
      }
      return finished(true, 'rejected', deps, log, { reason: decision.reason });
    }
    case 'dlq': {
      if (decision.cooldownMs) await deps.sleep(decision.cooldownMs, c.signal);
      if (decision.release && c.owner && c.recordKey) {
        await deps.store.release(c.recordKey, c.owner, c.attempts ?? 0, c.resubmitted === true);
      }
      await sendToDlq(deps, record, log, {
        error_code: decision.errorCode,
        reason: decision.reason,
        ...(c.recordKey ? { record_key: c.recordKey } : {}),
      });
      countOutcome(deps, 'dlq');
      log.warn(
        decision.errorCode === REASON.INVALID_JOB
          ? 'invalid message without a usable record_key; sent to the DLQ'
          : 'the message ends in the DLQ with its reason',
        { errorCode: decision.errorCode, reason: decision.reason },
      );
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
        await deps.store.release(c.recordKey, c.owner, c.attempts ?? 0, c.resubmitted === true);
      }
      // A retry that keeps this claim's lease comes back once the lease ends: earlier, the
      // redelivery would only meet it and spend a receive on the refusal.
      const notBefore =
        decision.notBefore ?? (!decision.release && c.owner !== undefined ? c.leaseExpiresAt : undefined);
      log.info('will retry', { reason: decision.reason, released: decision.release, notBefore });
      return notBefore === undefined
        ? { kind: 'retry', reason: decision.reason }
        : { kind: 'retry', reason: decision.reason, notBefore };
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

/** The retry reason of a stop whose DLQ copy failed on every try (the message is kept). */
export const STOP_NOT_COPIED = 'STOP_NOT_COPIED';

/**
 * A stop-class error: stop new work everywhere first, then record, keep the message in the DLQ,
 * delete it. The row and the DLQ copy each carry the reason, and each has tries of its own: the
 * copy is sent even when the row could not be written, and without a copy the message is kept.
 */
async function applyStop(
  decision: Extract<RecordDecision, { action: 'stop' }>,
  c: ApplyContext,
): Promise<RecordResult> {
  const { deps, log, record } = c;
  if (deps.stops && !deps.stops.claim()) {
    // Another lane of this invocation met the stop first and records it.
    const elsewhere = decideStopMetElsewhere(decision, taskDeadlineMs(deps.config) + deps.config.cooldownMs);
    return applyDecision(elsewhere, c);
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
      return carryOut(next, c);
    }
    log.error(
      'could not pause the pipeline on the last receive; the stop is recorded and the message kept in the DLQ',
    );
  }
  let recorded = false;
  try {
    await deps.store.finish(c.recordKey!, c.owner!, {
      status: 'stopped',
      reason: decision.code,
      attempts: c.attempts,
    });
    recorded = true;
    countOutcome(deps, 'stopped');
  } catch (err) {
    log.error('could not write the stopped row; the DLQ copy carries the reason', errorSummary(err));
  }
  try {
    await sendToDlq(deps, record, log, {
      error_code: decision.code,
      reason: decision.reason,
      ...(c.recordKey ? { record_key: c.recordKey } : {}),
    });
  } catch (err) {
    // Kept, not deleted: the message comes back (to a paused pipeline: after the resume) and meets
    // the stop again, rather than SQS moving it without a reason.
    log.error(
      recorded
        ? 'the DLQ copy failed on every try; the stopped row keeps the reason and the message is kept'
        : 'neither the stopped row nor the DLQ copy could be written; the message is kept',
      errorSummary(err),
    );
    return { kind: 'retry', reason: STOP_NOT_COPIED };
  }
  await deleteCopied(deps, log, record);
  return paused ? { kind: 'stopped', code: decision.code } : { kind: 'done', status: 'stopped' };
}

/**
 * An SQS call of the stop or crash path (the DLQ copy, the delete): STOP_SQS_TRIES tries with the
 * outcome store's doubling back-off (./worst-case.ts counts them). A try whose answer was lost may
 * have landed: a second copy carries the same reason, a second delete of one receipt is harmless.
 */
function withSqsTries<T>(deps: WorkerDeps, log: Logger, what: string, call: () => Promise<T>): Promise<T> {
  return withTries(
    deps,
    log,
    what,
    STOP_SQS_TRIES,
    (attempt) => writeBackoffMs(attempt, deps.config.timeScale),
    call,
  );
}

/** `call`, tried `tries` times while it throws, waiting `backoffMs(attempt)` between tries; the last error is thrown. */
async function withTries<T>(
  deps: WorkerDeps,
  log: Logger,
  what: string,
  tries: number,
  backoffMs: (attempt: number) => number,
  call: () => Promise<T>,
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await call();
    } catch (err) {
      log.warn(`the ${what} failed`, { attempt, ...errorSummary(err) });
      if (attempt >= tries) throw err;
      await deps.sleep(backoffMs(attempt));
    }
  }
}

/** The DLQ copy with its reason attributes (tried: withSqsTries); an invalid job's message is then deleted. */
async function sendToDlq(
  deps: WorkerDeps,
  record: SQSRecord,
  log: Logger,
  attributes: Record<string, string>,
): Promise<void> {
  const MessageAttributes = Object.fromEntries(
    Object.entries(attributes).map(([k, v]) => [k, { DataType: 'String', StringValue: v.slice(0, 1024) }]),
  );
  await withSqsTries(deps, log, 'DLQ copy', () =>
    deps.sqs.send(
      new SendMessageCommand({
        QueueUrl: deps.config.dlqUrl,
        MessageBody: record.body || '(empty)',
        MessageAttributes,
      }),
    ),
  );
  if (attributes.error_code !== REASON.INVALID_JOB) return;
  // Deleted now rather than by the poller, so the copy and the original never both stay.
  await deleteCopied(deps, log, record);
}

/** Deletes a message whose DLQ copy was sent; not fatal: it is done, so Lambda (or the chain) deletes it once more. */
async function deleteCopied(deps: WorkerDeps, log: Logger, record: SQSRecord): Promise<void> {
  try {
    await withSqsTries(deps, log, 'delete', () =>
      deps.sqs.send(
        new DeleteMessageCommand({ QueueUrl: deps.config.queueUrl, ReceiptHandle: record.receiptHandle }),
      ),
    );
  } catch (err) {
    log.warn('could not delete the message after its DLQ copy', errorSummary(err));
  }
}

/**
 * The pause (mapping disabled, then the state written), tried PAUSE_TRIES times with a doubling
 * back-off. Both steps are idempotent, so a try that half-landed is simply made again.
 */
async function pauseWithTries(deps: WorkerDeps, log: Logger, code: string, reason: string): Promise<boolean> {
  try {
    await withTries(
      deps,
      log,
      'pause',
      PAUSE_TRIES,
      (attempt) => pauseBackoffMs(attempt, deps.config.timeScale),
      () => deps.pipeline.pause(stopReason(code, reason), 'worker', code),
    );
    return true;
  } catch {
    return false;
  }
}
