import {
  BadTaskError,
  CaptchaError,
  InvalidJobError,
  PollTimeoutError,
  StopClassError,
  TargetError,
  TransientError,
  UnsolvableError,
} from './errors.js';

/**
 * THE place where an error becomes what happens to a record. The worker executes the
 * decision; nothing else inspects error classes.
 *
 * | error                                   | decision                                                     |
 * |-----------------------------------------|--------------------------------------------------------------|
 * | InvalidJobError with a record key       | `rejected` row, reason naming the field                      |
 * | InvalidJobError without a record key    | DLQ copy (error_code INVALID_JOB, reason), deleted from queue |
 * | StopClassError                          | stop: pause pipeline, row `stopped`, DLQ copy, delete, batch rest untouched |
 * | PollTimeoutError                        | `failed` POLL_TIMEOUT, then hold the slot for the cool-down  |
 * | TransientError, receives < limit        | retry: batch item failure, claim released                    |
 * | TransientError, receives >= limit       | `failed` TRANSIENT_EXHAUSTED                                 |
 * | UnsolvableError (after its resubmission)| `failed` ERROR_CAPTCHA_UNSOLVABLE                            |
 * | BadTaskError / other CaptchaError       | `failed` with CaptchaAI's code                               |
 * | TargetError                             | `failed` with its code (TARGET_TIMEOUT, PAGE_HTTP_404, TOKEN_EXPIRED, …) |
 * | anything else (AWS SDK, bugs)           | retry keeping the lease while receives < limit, then `failed` INTERNAL_ERROR |
 */
export type RecordDecision =
  | { action: 'reject'; recordKey: string; reason: string }
  | { action: 'dlq'; errorCode: string; reason: string }
  | { action: 'stop'; code: string; reason: string }
  | { action: 'fail'; reason: string; cooldownMs?: number }
  /**
   * Batch item failure: the message comes back after its visibility timeout. `release` ends
   * the lease so that redelivery can claim at once; without it the lease must expire first.
   */
  | { action: 'retry'; release: boolean; reason: string };

export interface DecisionContext {
  /** The message's ApproximateReceiveCount (this delivery included). */
  receiveCount: number;
  /** Transient failures are retried while receiveCount is below this. */
  transientReceiveLimit: number;
  /** How long a record that hit the client deadline keeps its slot. */
  cooldownMs: number;
}

export const REASON = {
  POLL_TIMEOUT: 'POLL_TIMEOUT',
  TRANSIENT_EXHAUSTED: 'TRANSIENT_EXHAUSTED',
  INTERNAL_ERROR: 'INTERNAL_ERROR',
  INVALID_JOB: 'INVALID_JOB',
} as const;

export function decideOutcome(err: unknown, ctx: DecisionContext): RecordDecision {
  if (err instanceof InvalidJobError) {
    return err.recordKey !== undefined
      ? { action: 'reject', recordKey: err.recordKey, reason: err.reason }
      : { action: 'dlq', errorCode: REASON.INVALID_JOB, reason: err.reason };
  }
  if (err instanceof StopClassError) {
    return { action: 'stop', code: err.code, reason: err.message };
  }
  if (err instanceof PollTimeoutError) {
    // The abandoned task may still hold a CaptchaAI thread: never resubmit, keep the slot a while.
    return { action: 'fail', reason: REASON.POLL_TIMEOUT, cooldownMs: ctx.cooldownMs };
  }
  if (err instanceof TransientError) {
    return ctx.receiveCount < ctx.transientReceiveLimit
      ? { action: 'retry', release: true, reason: err.code }
      : { action: 'fail', reason: REASON.TRANSIENT_EXHAUSTED };
  }
  if (err instanceof UnsolvableError || err instanceof BadTaskError || err instanceof CaptchaError) {
    return { action: 'fail', reason: err.code };
  }
  if (err instanceof TargetError) {
    return { action: 'fail', reason: err.code };
  }
  // Not a domain error: an AWS call or a bug. The lease stays, so a redelivery cannot start a
  // second solve before it expires (the failure may have happened after the post).
  return ctx.receiveCount < ctx.transientReceiveLimit
    ? { action: 'retry', release: false, reason: REASON.INTERNAL_ERROR }
    : { action: 'fail', reason: REASON.INTERNAL_ERROR };
}
