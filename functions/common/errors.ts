/**
 * The one error hierarchy of threadgate. Every failure a record can meet is sorted into
 * one of these classes, and `functions/records/decisions.ts` turns a class into an
 * outcome in one place.
 *
 *   ThreadgateError
 *   ├── ConfigError                 missing or malformed configuration (names the variable)
 *   ├── InvalidJobError             the job message is unusable (names the field)
 *   ├── TargetError                 the target form could not be loaded or posted
 *   │   └── DnsUnavailableError     the resolver failed for now (EAI_AGAIN, ESERVFAIL, …): not "no such host"
 *   └── CaptchaError                anything CaptchaAI answered or failed to answer
 *       ├── StopClassError          bad key, IP ban, no active plan: halt every worker
 *       ├── BadTaskError            the task itself is wrong: never resend it unchanged
 *       │   └── UnsolvableError     ERROR_CAPTCHA_UNSOLVABLE (after its one resubmission)
 *       └── TransientError          server errors, network errors, all threads busy
 *           ├── RateLimitError      HTTP 429, ERROR_TOO_MUCH_REQUESTS: back off, ask the same id again
 *           └── PollTimeoutError    no answer by the client deadline: never resubmit at once
 *               └── TaskMayExistError  in.php's answer was lost: a task may exist, the slot waited out its deadline
 */
export class ThreadgateError extends Error {
  override name = 'ThreadgateError';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

export class ConfigError extends ThreadgateError {
  override name = 'ConfigError';
  constructor(
    /** The environment variable, context key or option that is wrong. */
    readonly setting: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(`${setting}: ${message}`, options);
  }
}

/**
 * Asked before an in.php: another lane of the invocation met a stop-class error, or the pipeline
 * state says paused. Nothing is submitted; the record goes back to the queue untouched.
 */
export class LaneStoppedError extends ThreadgateError {
  override name = 'LaneStoppedError';
  readonly code = 'STOPPED_BY_ANOTHER_LANE';
}

/**
 * Asked before an in.php in an invocation with lanes: the shortest work of a record no longer fits
 * before the function timeout (a submit retry or the resubmission after UNSOLVABLE, late in the
 * invocation). Nothing is submitted and no task of the claim holds a thread; the claim is released
 * and the record goes back to the queue for a lane with time for it.
 */
export class InvocationEndingError extends ThreadgateError {
  override name = 'InvocationEndingError';
  readonly code = 'INVOCATION_ENDING';
}

export class InvalidJobError extends ThreadgateError {
  override name = 'InvalidJobError';
  constructor(
    /** A short reason, naming the offending field, e.g. `captcha.type: unknown type "x"`. */
    readonly reason: string,
    /** The record key when the message carried a usable one. */
    readonly recordKey?: string,
    options?: { cause?: unknown },
  ) {
    super(reason, options);
  }
}

export class TargetError extends ThreadgateError {
  override name = 'TargetError';
  constructor(
    /** Machine-readable reason, e.g. `TARGET_TIMEOUT`, `HOST_NOT_ALLOWED`, `TOKEN_EXPIRED`. */
    readonly code: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/**
 * The resolver could not answer for now (EAI_AGAIN, ESERVFAIL, ETIMEOUT, ECONNREFUSED): unlike
 * ENOTFOUND this says nothing about the host, so a host check that meets it is retried, never
 * turned into a `rejected` row.
 */
export class DnsUnavailableError extends TargetError {
  override name = 'DnsUnavailableError';
}

export class CaptchaError extends ThreadgateError {
  override name = 'CaptchaError';
  constructor(
    /** CaptchaAI's error code (`ERROR_…`, `IP_BANNED`) or one of ours (`NO_ACTIVE_PLAN`, `HTTP_502`, …). */
    readonly code: string,
    message?: string,
    options?: { cause?: unknown; taskId?: string; submits?: number },
  ) {
    super(message ?? code, options);
    this.taskId = options?.taskId;
    this.submits = options?.submits;
  }
  /** res.php `get` calls the failed solve made (set by the CaptchaAI client like `submits`). */
  polls: number | undefined;
  /** The CaptchaAI task id the error belongs to, when there was one. */
  readonly taskId: string | undefined;
  /**
   * How many `in.php` submissions the failed solve made before giving up (set by the
   * CaptchaAI client on every error `solve()` throws), so callers can record attempts.
   */
  submits: number | undefined;
}

export class StopClassError extends CaptchaError {
  override name = 'StopClassError';
}

export class BadTaskError extends CaptchaError {
  override name = 'BadTaskError';
}

export class UnsolvableError extends BadTaskError {
  override name = 'UnsolvableError';
}

export class TransientError extends CaptchaError {
  override name = 'TransientError';
}

export class RateLimitError extends TransientError {
  override name = 'RateLimitError';
}

export class PollTimeoutError extends TransientError {
  override name = 'PollTimeoutError';
}

/**
 * in.php may have created a task, but its answer was lost (timeout after sending, 5xx or HTML
 * page, reset, unreadable body). The client has already held the slot for the task's deadline
 * and submitted nothing in its place; after the cool-down such a task must be finished, and
 * only then may the record be tried again.
 */
export class TaskMayExistError extends PollTimeoutError {
  override name = 'TaskMayExistError';
}
