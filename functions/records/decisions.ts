import {
  BadTaskError,
  CaptchaError,
  DnsUnavailableError,
  InvalidJobError,
  InvocationEndingError,
  LaneStoppedError,
  PollTimeoutError,
  StopClassError,
  TargetError,
  TaskMayExistError,
  TransientError,
  UnsolvableError,
} from '../common/errors.js';
import {
  type BatchCancel,
  BatchCancelledError,
  CancelUnknownError,
  cancelledReason,
} from './cancellations.js';
import { ownerMessageId } from './claim-owner.js';
import { type FormAnswer, type FormExpectation, judgeFormAnswer } from './form-verdict.js';
import { type ClaimResult, isFinalStatus, type OutcomeRow } from './store.js';

/** Why a claim was refused. */
type ClaimConflict = Extract<ClaimResult, { claimed: false }>['why'];

/**
 * THE place where an error or a result becomes what happens to a record. The worker's
 * effects (functions/worker/effects.ts) carry the decision out; nothing else inspects error
 * classes or picks an outcome.
 *
 * decideOutcome — an error met while working a record:
 * | error                                   | decision                                                     |
 * |-----------------------------------------|--------------------------------------------------------------|
 * | any error once the invocation is ending | retry ABORTED, lease kept (as a killed invocation leaves it)  |
 * | InvalidJobError from DnsUnavailableError, receives < limit | retry DNS_UNAVAILABLE (checked before the claim) |
 * | BatchCancelledError (asked before an in.php) | `cancelled` with the cancel's reason            |
 * | LaneStoppedError (asked before an in.php), receives < limit | retry STOPPED_BY_ANOTHER_LANE, claim released, given back untouched |
 * | InvocationEndingError (asked before an in.php), receives < limit | retry INVOCATION_ENDING, claim released, visible again at once |
 * | either of them, receives >= limit       | DLQ copy with its code and reason, claim released (nothing was sent) |
 * | CancelUnknownError, receives < limit    | retry CANCEL_UNKNOWN, claim released (nothing sent to in.php or the form) |
 * | CancelUnknownError, receives >= limit   | `failed` CANCEL_UNKNOWN                                      |
 * | InvalidJobError with a record key       | `rejected` row, reason naming the field (a non-final row: see decideRejectConflict) |
 * | InvalidJobError without a record key    | DLQ copy (error_code INVALID_JOB, reason), deleted from queue |
 * | StopClassError                          | stop: pause pipeline, row `stopped`, DLQ copy, delete, batch rest untouched |
 * | TaskMayExistError, receives < limit     | hold the slot for the cool-down, then retry, claim released  |
 * | TaskMayExistError, receives >= limit    | `failed` with its code (SUBMIT_ANSWER_LOST, SUBMIT_ANSWER_UNREADABLE), then the cool-down |
 * | PollTimeoutError                        | `failed` POLL_TIMEOUT, then hold the slot for the cool-down  |
 * | TransientError, receives < limit        | retry: batch item failure, claim released                    |
 * | TransientError, receives >= limit       | `failed` TRANSIENT_EXHAUSTED                                 |
 * | UnsolvableError (after its resubmission)| `failed` ERROR_CAPTCHA_UNSOLVABLE                            |
 * | BadTaskError / other CaptchaError       | `failed` with CaptchaAI's code                               |
 * | DnsUnavailableError before the posting marker, receives < limit | retry DNS_UNAVAILABLE, claim released (the page load met a resolver hiccup, not a verdict) |
 * | TargetError                             | `failed` with its code (TARGET_TIMEOUT, PAGE_HTTP_404, TOKEN_EXPIRED, …) |
 * | anything else (AWS SDK, bugs)           | retry keeping the lease while receives < limit, then `failed` INTERNAL_ERROR |
 *
 * decideClaimConflict — the claim was refused: `finished` → drop (a duplicate, delete it);
 * `leased` → retry LEASED_ELSEWHERE keeping the other owner's lease, not before it expires; a copy
 * of a record another message holds, on its receive limit → drop HELD_BY_ANOTHER_MESSAGE.
 * decideTargetResponse — the form POST answered: 2xx/3xx → `submitted` OK, else `failed`
 * TARGET_HTTP_<status>. With an `expect` block a 2xx/3xx answer is read by it first: a failure
 * marker, a status or a redirect it does not accept → `failed` FORM_REJECTED; a success marker
 * (or the redirect) it requires and does not find → `failed` FORM_UNCONFIRMED; `rule` names
 * the check. Final, never retried: the POST was made (at most one per record).
 * decideCrash — the record's own handling threw (an AWS call outside the mapping: claim, final
 * write, release, DLQ, delete): the row read after the crash decides (see decideCrash): a claim
 * without markers is released, one with a task marker kept until its lease ends, one with a
 * posting marker ends OUTCOME_UNKNOWN; on the last allowed receive the record ends `failed`
 * INTERNAL_ERROR, or without a claim of its own a DLQ copy carries the reason.
 * decidePriorPhase — a claim took a row an earlier claim left behind: its `posting_at` without a
 * final status → `failed` OUTCOME_UNKNOWN, never posted again; its task before the deadline →
 * resume it (poll, no submit); after the deadline but within the cool-down → hold the slot until
 * then, then submit; else start afresh.
 * decideRejectConflict — a `rejected` write met an existing row: final → drop (a duplicate);
 * not final (`in_progress`, `stopped`) → retry REJECT_CONFLICT, not before a live lease expires,
 * so the message is never deleted while its record has no final row.
 * decidePauseFailed — a stop-class error whose pause (mapping disabled, state written) failed on
 * every try: below the receive limit nothing is recorded as stopped; retry PAUSE_FAILED, so the
 * next delivery meets the stop and tries the pause again: the claim released when no task
 * exists (a stop at in.php), kept with its task marker until the lease expires when one does (a
 * stop at res.php: that task may be within its deadline). On the last allowed receive the stop
 * is recorded anyway (row `stopped`, DLQ copy with its reason), so SQS never redrives the
 * message without a reason while its row stays `in_progress`.
 * decideFinalWriteLost — the final write threw on every try: retry FINAL_WRITE_FAILED with the
 * lease kept, not before it expires (the posting marker then ends the record OUTCOME_UNKNOWN).
 */
export type RecordDecision =
  | { action: 'reject'; recordKey: string; reason: string }
  /**
   * `release`: a claim of this delivery is released first; `cooldownMs`: the slot is held that
   * long before (a CaptchaAI task of it may still hold a thread).
   */
  | { action: 'dlq'; errorCode: string; reason: string; release?: boolean; cooldownMs?: number }
  /**
   * Stop-class: pause, then record. `taskId`: the task the stop came at (res.php), if any;
   * `lastReceive`: the message will not be received again before SQS redrives it.
   */
  | { action: 'stop'; code: string; reason: string; taskId?: string; lastReceive?: boolean }
  | { action: 'fail'; reason: string; cooldownMs?: number }
  /**
   * Batch item failure: the message comes back after its visibility timeout. `release` ends
   * the lease so that redelivery can claim at once; without it the lease must expire first.
   * `notBefore` (epoch ms): no retry can succeed earlier (another owner's lease), so the
   * message stays invisible until then instead of spending its receive count on refusals.
   * `cooldownMs`: the slot is held that long first (a CaptchaAI task may still hold a thread).
   */
  | { action: 'retry'; release: boolean; reason: string; notBefore?: number; cooldownMs?: number }
  /** Nothing to write: the message is a duplicate of a finished record; delete it. */
  | { action: 'drop'; reason: string }
  /** The record's batch is cancelled: `cancelled` row. `wasted`: a solve was made and not posted. */
  | { action: 'cancel'; reason: string; wasted: boolean };

export interface DecisionContext {
  /** The message's ApproximateReceiveCount (this delivery included). */
  receiveCount: number;
  /** Transient failures are retried while receiveCount is below this. */
  transientReceiveLimit: number;
  /** How long a record that hit the client deadline keeps its slot. */
  cooldownMs: number;
  /** The invocation is ending (its deadline signal fired) while the record was being worked. */
  aborted?: boolean;
  /** The posting marker is written: the form may have the record, so it is never worked again. */
  posting?: boolean;
}

export const REASON = {
  POLL_TIMEOUT: 'POLL_TIMEOUT',
  TRANSIENT_EXHAUSTED: 'TRANSIENT_EXHAUSTED',
  INTERNAL_ERROR: 'INTERNAL_ERROR',
  INVALID_JOB: 'INVALID_JOB',
  ABORTED: 'ABORTED',
  LEASED_ELSEWHERE: 'LEASED_ELSEWHERE',
  /** A copy of a record another message holds, met on its receive limit: deleted, that message works the record. */
  HELD_BY_ANOTHER_MESSAGE: 'HELD_BY_ANOTHER_MESSAGE',
  ALREADY_FINISHED: 'ALREADY_FINISHED',
  /** The form may or may not have taken the record: its POST was sent and its answer lost. */
  OUTCOME_UNKNOWN: 'OUTCOME_UNKNOWN',
  FINAL_WRITE_FAILED: 'FINAL_WRITE_FAILED',
  REJECT_CONFLICT: 'REJECT_CONFLICT',
  PAUSE_FAILED: 'PAUSE_FAILED',
  /** Another lane of the invocation met the stop first and records it; this record goes back untouched. */
  STOPPED_BY_ANOTHER_LANE: 'STOPPED_BY_ANOTHER_LANE',
  /**
   * Late in an invocation with lanes, a record's next in.php (a submit retry, the resubmission)
   * would no longer fit before the timeout: nothing was sent, the record goes back to the queue.
   */
  INVOCATION_ENDING: 'INVOCATION_ENDING',
  /** The form answered, and its answer says no: a failure marker, or a status or redirect `expect` does not accept. */
  FORM_REJECTED: 'FORM_REJECTED',
  /** The form answered without the success marker (or the redirect) `expect` requires. */
  FORM_UNCONFIRMED: 'FORM_UNCONFIRMED',
  /** The batch's cancel could not be read within the bound on every allowed receive. */
  CANCEL_UNKNOWN: 'CANCEL_UNKNOWN',
  OK: 'OK',
} as const;

export function decideOutcome(err: unknown, ctx: DecisionContext): RecordDecision {
  if (ctx.aborted) {
    // Left as a killed invocation would leave it: no final write, no release; the lease keeps
    // redeliveries from solving it again until it expires.
    return { action: 'retry', release: false, reason: REASON.ABORTED };
  }
  if (
    err instanceof InvalidJobError &&
    err.cause instanceof DnsUnavailableError &&
    ctx.receiveCount < ctx.transientReceiveLimit
  ) {
    // The host check met a resolver hiccup, not a bad host: try the message again (nothing claimed yet).
    return { action: 'retry', release: false, reason: err.cause.code };
  }
  if (err instanceof BatchCancelledError) return decideCancelled(err.cancel, false);
  if (err instanceof LaneStoppedError || err instanceof InvocationEndingError) {
    // Asked before an in.php: nothing was sent and no task of this claim holds a thread. The record
    // goes back (after a stop it waits in the queue for the resume); on the last allowed receive a
    // return would let SQS move it with no reason, so it ends in the DLQ with its own, for a redrive.
    const reason =
      err instanceof LaneStoppedError ? REASON.STOPPED_BY_ANOTHER_LANE : REASON.INVOCATION_ENDING;
    return ctx.receiveCount < ctx.transientReceiveLimit
      ? { action: 'retry', release: true, reason }
      : {
          action: 'dlq',
          errorCode: reason,
          reason: `${err.message} (receive ${ctx.receiveCount}): nothing was sent; redrive it`,
          release: true,
        };
  }
  if (err instanceof CancelUnknownError) {
    // Unknown is never "not cancelled": nothing was sent, so the claim goes and a later
    // delivery asks again; on the last allowed receive the record ends with the reason.
    return ctx.receiveCount < ctx.transientReceiveLimit
      ? { action: 'retry', release: true, reason: REASON.CANCEL_UNKNOWN }
      : { action: 'fail', reason: REASON.CANCEL_UNKNOWN };
  }
  if (err instanceof InvalidJobError) {
    return err.recordKey !== undefined
      ? { action: 'reject', recordKey: err.recordKey, reason: err.reason }
      : { action: 'dlq', errorCode: REASON.INVALID_JOB, reason: err.reason };
  }
  if (err instanceof StopClassError) {
    return {
      action: 'stop',
      code: err.code,
      reason: err.message,
      ...(err.taskId === undefined ? {} : { taskId: err.taskId }),
      lastReceive: ctx.receiveCount >= ctx.transientReceiveLimit,
    };
  }
  if (err instanceof TaskMayExistError && ctx.receiveCount < ctx.transientReceiveLimit) {
    // in.php's answer was lost and the client waited out the deadline such a task would have:
    // after the cool-down it must be finished, so only then is the record free to be tried again.
    return { action: 'retry', release: true, reason: err.code, cooldownMs: ctx.cooldownMs };
  }
  if (err instanceof PollTimeoutError) {
    // The abandoned task may still hold a CaptchaAI thread: never resubmit, keep the slot a while.
    // The code says which: POLL_TIMEOUT, or SUBMIT_ANSWER_LOST / _UNREADABLE (in.php's answer was lost).
    return { action: 'fail', reason: err.code || REASON.POLL_TIMEOUT, cooldownMs: ctx.cooldownMs };
  }
  if (err instanceof TransientError) {
    return ctx.receiveCount < ctx.transientReceiveLimit
      ? { action: 'retry', release: true, reason: err.code }
      : { action: 'fail', reason: REASON.TRANSIENT_EXHAUSTED };
  }
  if (err instanceof UnsolvableError || err instanceof BadTaskError || err instanceof CaptchaError) {
    return { action: 'fail', reason: err.code };
  }
  if (err instanceof DnsUnavailableError && !ctx.posting && ctx.receiveCount < ctx.transientReceiveLimit) {
    // The page load met a resolver hiccup, which says nothing about the record: the task is
    // answered (the solve ended first), nothing was posted, so the claim goes and it is tried again.
    return { action: 'retry', release: true, reason: err.code };
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

/** A refused claim's message, its receive, and the claim's owner as the row has it. */
export interface ConflictCopy {
  messageId: string;
  leaseOwner: string | undefined;
  receiveCount: number;
  transientReceiveLimit: number;
}

export function decideClaimConflict(
  why: ClaimConflict,
  leaseExpiresAt?: number,
  copy?: ConflictCopy,
): RecordDecision {
  // Finished: the message is a duplicate, delete it. Leased: someone is on it; retry once the
  // lease has expired. Retrying every few seconds instead would push a duplicate that arrives
  // early in a long lease (after a crash, the whole lease) past maxReceiveCount into the DLQ.
  if (why === 'finished') return { action: 'drop', reason: REASON.ALREADY_FINISHED };
  // A copy of a record another message holds, on its receive limit: that message works the record
  // to its end (or, if its own invocation dies, comes back and resumes it), so this copy is
  // deleted. Retried, a copy sent again after each crash of a long-held record spent its last
  // receive on the refusal and SQS moved it to the DLQ with no reason (a chaos run at lanes 4).
  // The same message's other receive (SQS may deliver one twice) is not another message: deleting
  // it would delete the holder's.
  const holder = ownerMessageId(copy?.leaseOwner);
  const heldByAnotherMessage = holder !== undefined && holder !== copy?.messageId;
  if (copy && heldByAnotherMessage && copy.receiveCount >= copy.transientReceiveLimit)
    return { action: 'drop', reason: REASON.HELD_BY_ANOTHER_MESSAGE };
  return {
    action: 'retry',
    release: false,
    reason: REASON.LEASED_ELSEWHERE,
    ...(leaseExpiresAt === undefined ? {} : { notBefore: leaseExpiresAt }),
  };
}

const HTTP_OK_MIN = 200;
const HTTP_OK_MAX = 399;

/** What a posted record ends as; `rule` (only with an `expect` verdict) is the check that decided. */
export interface TargetOutcome {
  status: 'submitted' | 'failed';
  reason: string;
  rule?: string;
}

/**
 * The final outcome of a record whose token was posted: the target's HTTP status decides, and
 * with an `expect` block (the job's, else the stack's) the form's answer as read by it.
 */
export function decideTargetResponse(
  httpStatus: number,
  form?: { expect: FormExpectation; answer: FormAnswer },
): TargetOutcome {
  if (httpStatus < HTTP_OK_MIN || httpStatus > HTTP_OK_MAX) {
    return { status: 'failed', reason: `TARGET_HTTP_${httpStatus}` };
  }
  if (form) {
    const verdict = judgeFormAnswer(form.expect, form.answer);
    if (!verdict.accepted) return { status: 'failed', reason: verdict.reason, rule: verdict.rule };
  }
  return { status: 'submitted', reason: REASON.OK };
}

/** What decideCrash knows about a record whose handling threw. */
export interface CrashContext {
  /** The message's ApproximateReceiveCount (this delivery included). */
  receiveCount: number;
  /** At this many receives the record is ended rather than retried (DecisionContext). */
  transientReceiveLimit: number;
  /** The owner of the claim this handling made or tried to make; unset: it crashed before claiming. */
  owner?: string;
  /** The record's row as read after the crash (consistent read); unset: no row, or not read. */
  row?: OutcomeRow;
  /** The row could not be read (the crash's own cause, e.g. an unanswering table, may persist). */
  rowUnknown?: boolean;
  /** Epoch ms now, and the configured retry delay (ms): a retry without a claim backs off from them. */
  now: number;
  retryDelayMs: number;
}

/**
 * The record's own handling threw (an AWS call outside the mapping: the claim, a final write, a
 * release, the DLQ copy, a delete): what its claim holds decides, as the row tells after the crash.
 * - a final row: drop (the write landed, its answer was lost).
 * - our claim with a posting marker: `failed` OUTCOME_UNKNOWN now (what the next claim would write,
 *   a whole lease later).
 * - our claim with a task marker: below the receive limit retry, lease and marker kept (the task
 *   may still hold a thread), not before the lease ends: an earlier redelivery would only meet it
 *   and spend a receive; on the last receive `failed` INTERNAL_ERROR.
 * - our claim without markers: below the receive limit retry with the claim released (no task, no
 *   POST: nothing to protect; kept, the redelivery would meet it and wait out the whole lease); on
 *   the last receive `failed` INTERNAL_ERROR.
 * - no claim of ours (it crashed before claiming, the claim did not land, another owner's lease,
 *   or the row could not be read): below the limit retry, not before another owner's lease ends,
 *   and not before the retry delay doubled per receive so far (a table that does not answer is
 *   given time to come back instead of each receive being spent the same way); on the last
 *   receive a DLQ copy with the reason INTERNAL_ERROR, so SQS never moves the message without one.
 */
export function decideCrash(c: CrashContext): RecordDecision {
  const last = c.receiveCount >= c.transientReceiveLimit;
  const row = c.row;
  if (row && isFinalStatus(row.status)) return { action: 'drop', reason: REASON.ALREADY_FINISHED };
  const ours =
    c.owner !== undefined &&
    row?.status === 'in_progress' &&
    row.lease_owner === c.owner &&
    (row.lease_expires_at ?? 0) > 0;
  if (ours && row.posting_at !== undefined) return { action: 'fail', reason: REASON.OUTCOME_UNKNOWN };
  if (ours && row.task_id !== undefined) {
    return last
      ? { action: 'fail', reason: REASON.INTERNAL_ERROR }
      : { action: 'retry', release: false, reason: REASON.INTERNAL_ERROR, notBefore: row.lease_expires_at };
  }
  if (ours) {
    return last
      ? { action: 'fail', reason: REASON.INTERNAL_ERROR }
      : { action: 'retry', release: true, reason: REASON.INTERNAL_ERROR };
  }
  if (last) return { action: 'dlq', errorCode: REASON.INTERNAL_ERROR, reason: crashReason(c) };
  const backoff = c.now + c.retryDelayMs * 2 ** c.receiveCount;
  const leased = row?.status === 'in_progress' ? (row.lease_expires_at ?? 0) : 0;
  return {
    action: 'retry',
    release: false,
    reason: REASON.INTERNAL_ERROR,
    notBefore: Math.max(backoff, leased),
  };
}

function crashReason(c: CrashContext): string {
  const why = c.rowUnknown
    ? 'its row could not be read'
    : c.row
      ? `its row is ${c.row.status}${c.row.lease_owner && c.row.lease_owner !== c.owner ? ' under another claim' : ''}`
      : 'it has no row';
  return `the record's handling failed on its last allowed receive (${c.receiveCount}) and ${why}`;
}

/** What a claim must do about the phase markers an earlier claim of the record left on its row. */
export type PriorPhase =
  | { kind: 'fresh' }
  /** The earlier claim was about to POST (or did): end the record OUTCOME_UNKNOWN without posting. */
  | { kind: 'posted'; decision: RecordDecision }
  /** The earlier claim's task is within its deadline: poll it instead of submitting another. */
  | { kind: 'resume'; taskId: string; submittedAt: number }
  /** The earlier claim's task may still hold a thread (cool-down): hold the slot until `until` (epoch ms). */
  | { kind: 'wait'; until: number };

export function decidePriorPhase(
  previous: OutcomeRow | undefined,
  t: { now: number; deadlineMs: number; cooldownMs: number },
): PriorPhase {
  if (!previous || (previous.status !== 'in_progress' && previous.status !== 'stopped')) {
    return { kind: 'fresh' };
  }
  if (previous.posting_at !== undefined) {
    return { kind: 'posted', decision: { action: 'fail', reason: REASON.OUTCOME_UNKNOWN } };
  }
  const { task_id: taskId, task_submitted_at: submittedAt } = previous;
  if (taskId === undefined || submittedAt === undefined) return { kind: 'fresh' };
  if (t.now < submittedAt + t.deadlineMs) return { kind: 'resume', taskId, submittedAt };
  const until = submittedAt + t.deadlineMs + t.cooldownMs;
  return t.now < until ? { kind: 'wait', until } : { kind: 'fresh' };
}

export function decideFinalWriteLost(leaseExpiresAt: number): RecordDecision {
  return { action: 'retry', release: false, reason: REASON.FINAL_WRITE_FAILED, notBefore: leaseExpiresAt };
}

export function decideRejectConflict(row: OutcomeRow | undefined): RecordDecision {
  if (!row || isFinalStatus(row.status)) return { action: 'drop', reason: REASON.ALREADY_FINISHED };
  const leased = row.status === 'in_progress' && row.lease_expires_at !== undefined;
  return {
    action: 'retry',
    release: false,
    reason: REASON.REJECT_CONFLICT,
    ...(leased ? { notBefore: row.lease_expires_at } : {}),
  };
}

export function decidePauseFailed(
  stop: Extract<RecordDecision, { action: 'stop' }>,
  leaseExpiresAt: number | undefined,
): Extract<RecordDecision, { action: 'retry' }> | { action: 'record-stop' } {
  if (stop.lastReceive) return { action: 'record-stop' };
  if (stop.taskId === undefined) return { action: 'retry', release: true, reason: REASON.PAUSE_FAILED };
  return {
    action: 'retry',
    release: false,
    reason: REASON.PAUSE_FAILED,
    ...(leaseExpiresAt === undefined ? {} : { notBefore: leaseExpiresAt }),
  };
}

/**
 * decideStopMetElsewhere — a stop-class error met by a lane after another lane of the same
 * invocation met one and records it (functions/worker/batch-loop.ts): the record goes back to the
 * queue untouched, its claim released. When no task exists (a stop at in.php creates none) at
 * once; when one does, the lane first keeps its slot for `taskMustEndMs` (the task's deadline
 * plus the cool-down: that task may still hold a thread until then), and the claim goes after,
 * so the redelivery (after the resume) is worked at once instead of waiting out the whole lease.
 * On the last allowed receive it ends in the DLQ with that reason (after the same hold), so SQS
 * never moves it without one; it is not recorded `stopped`: the stop was another record's.
 */
export function decideStopMetElsewhere(
  stop: Extract<RecordDecision, { action: 'stop' }>,
  taskMustEndMs: number,
): Extract<RecordDecision, { action: 'retry' | 'dlq' }> {
  const hold = stop.taskId === undefined ? {} : { cooldownMs: taskMustEndMs };
  if (stop.lastReceive) {
    const reason = `another lane of the invocation met ${stop.code}; nothing more was sent for this record: redrive it after the resume`;
    return { action: 'dlq', errorCode: REASON.STOPPED_BY_ANOTHER_LANE, reason, release: true, ...hold };
  }
  return { action: 'retry', release: true, reason: REASON.STOPPED_BY_ANOTHER_LANE, ...hold };
}

/**
 * decideCancelled — the record's batch is cancelled (checked before a new task is submitted and
 * before the POST): `cancelled` with the cancel's reason, never submitted or posted after that.
 * `solved`: the token was in hand, so its solve is wasted.
 */
export function decideCancelled(cancel: Pick<BatchCancel, 'reason'>, solved: boolean): RecordDecision {
  return { action: 'cancel', reason: cancelledReason(cancel), wasted: solved };
}
