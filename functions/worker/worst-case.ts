import { RATE_LIMIT_BACKOFF_MAX_FACTOR } from '../captchaai/answers.js';
import { resolveTimings, type SolveTimingsOverrides } from '../captchaai/timings.js';
import { AWS_REQUEST_TIMEOUT_MS, awsCallMs } from '../common/aws-clients.js';
import {
  MAPPING_UPDATE_TRIES,
  mappingUpdateWaitMs,
  PAUSE_TRIES,
  pauseBackoffTotalMs,
} from '../pipeline/control.js';
import { WRITE_TRIES, writeBackoffMs, writeBackoffTotalMs } from '../records/store.js';
import { MIN_CAPTCHAAI_HTTP_TIMEOUT_MS } from './config.js';

/**
 * THE worst case of one record, in one place: the longest the worker can spend on a record at
 * the configured timings, which the stack makes the function timeout (and the lease outlasts).
 * Only then does a claim expire after every task it submitted is finished, and only then can the
 * invocation not be cut off while a task may still hold a thread.
 */

/** Kept back before the function timeout to leave the record cleanly (functions/worker.ts). */
export const DEADLINE_MARGIN_MS = 3_000;
/**
 * Cold start, the secret read, the pipeline-state read (with no young snapshot to answer a failed
 * one, its tries for up to 1 s and then one call: ../pipeline/state-view.ts), DNS of the target:
 * not time-scaled.
 */
export const SETUP_MS = 10_000;
/**
 * One AWS call (a DynamoDB write, a mapping update, an SQS send), its SDK retries included: what
 * the clients' request timeout and attempts allow (../common/aws-clients.ts), at every time scale.
 */
export const AWS_CALL_MS = awsCallMs();
/** Phase-marker writes of one record: a task marker per task (2) and the posting marker. */
const MARKER_WRITES = 3;
/**
 * The stop path: PAUSE_TRIES tries of the pause and the waits between them, then the DLQ copy and
 * the delete, STOP_SQS_TRIES tries each. The mapping's UUID is looked up once (ListEventSourceMappings, cached once it
 * answered). Each try: the mapping update, answered ResourceInUse up to MAPPING_UPDATE_TRIES - 1
 * times (an answer, one attempt each, no SDK retry) with its waits, then its last call; the
 * state write. The waits follow the time scale (awsWaitMs, floored); the calls do not.
 */
export function stopPathMs(timeScale = 1): number {
  const call = AWS_CALL_MS;
  let mappingWaits = 0;
  for (let attempt = 1; attempt < MAPPING_UPDATE_TRIES; attempt++) {
    mappingWaits += mappingUpdateWaitMs(attempt, timeScale);
  }
  const perTry = (MAPPING_UPDATE_TRIES - 1) * AWS_REQUEST_TIMEOUT_MS + mappingWaits + 2 * call;
  let sqsWaits = 0;
  for (let attempt = 1; attempt < STOP_SQS_TRIES; attempt++) sqsWaits += writeBackoffMs(attempt, timeScale);
  return (
    call + PAUSE_TRIES * perTry + pauseBackoffTotalMs(timeScale) + 2 * (STOP_SQS_TRIES * call + sqsWaits)
  );
}
/**
 * Tries of each SQS call of the stop path (the DLQ copy, the delete: ./effects.ts), with the
 * outcome store's back-off between them. Three, so the stop path stays within the default
 * ending (the target timeout plus the cool-down).
 */
export const STOP_SQS_TRIES = 3;
/** The stop path at time scale 1 (AWS). */
export const STOP_PATH_MS = stopPathMs();

export interface WorstCaseSettings {
  /** The CaptchaAI timing overrides the worker reads (CAPTCHAAI_* variables); defaults otherwise. */
  timings?: SolveTimingsOverrides;
  timeScale: number;
  /** Each HTTP exchange with the target (real time). */
  targetTimeoutMs: number;
  /** Slot kept after a CaptchaAI deadline (real time). */
  cooldownMs: number;
  /**
   * Tasks one record may submit: 2 (the original and its one resubmission after UNSOLVABLE), or 1
   * for a record that may start only the shortest work ({@link shortestRecordMs}). @default 2
   */
  tasks?: 1 | 2;
}

/** The parts of the worst case, in ms, for the tests and for operators who ask why. */
export interface WorstCaseParts {
  setup: number;
  /** Every in.php, res.php and threadsinfo call at its HTTP timeout, every wait at its longest. */
  captchaai: number;
  /** An earlier claim's task within its cool-down (the slot is held until it must be finished). */
  priorTask: number;
  /**
   * How the record ends, the longest of: the page load outlasting the solve plus the form POST
   * (each at the target timeout); the page load plus the cool-down after a deadline; the stop
   * path (the pause's tries, the DLQ copy, the delete). A record ends one way only.
   */
  ending: number;
  /** Claim, the phase markers and the final write, each with its tries and back-off. */
  aws: number;
  /**
   * The batch-cancel reads (one GetItem each, ./cancel-watch.ts): one may be made before every
   * in.php call of the solve and one before the POST ({@link cancelAsksPerRecord}). Cached for the
   * bound, so most asks read nothing, but in a DynamoDB brownout each may wait out its call.
   */
  cancelReads: number;
  margin: number;
}

/**
 * The times one record may ask its batch's cancel: before each in.php call (the failed submits
 * and the idle-threads re-check, the two tasks, the stopped start before a key rotation) and
 * before the POST.
 */
export function cancelAsksPerRecord(timings?: SolveTimingsOverrides): number {
  const t = resolveTimings(timings);
  const inPhpCalls = t.submitRetries + 1 + 2 + 1;
  return inPhpCalls + 1;
}

/**
 * The CaptchaAI part: per solve at most two tasks (the original and the one fresh resubmission
 * after UNSOLVABLE; a resumed task takes the first one's place). Each task: a successful in.php
 * call, then polls until its deadline and the last poll's HTTP call (or, when in.php's answer was
 * lost, the wait of its deadline). Before a task: `submitRetries` failed in.php calls, each with
 * a threadsinfo call (no free slot) and its back-off at the longest of the doubling back-off and
 * the longest rate-limit back-off, plus the one re-check of idle threads (in.php + threadsinfo).
 * A key rotated after a stop-class answer at in.php adds only that stopped start (in.php and its
 * threadsinfo) and the secret read: the call with the new key continues the same budget of
 * retries, submits and resubmission (../captchaai/rotating-client.ts), so a rotation never
 * brings a third task or a second set of retries. HTTP timeouts are floored like the worker's
 * (config.ts).
 */
export function worstCaseParts(s: WorstCaseSettings): WorstCaseParts {
  const t = resolveTimings(s.timings);
  const scaled = (ms: number) => ms * s.timeScale;
  const http = Math.max(scaled(t.httpTimeoutMs), MIN_CAPTCHAAI_HTTP_TIMEOUT_MS);
  const task = 2 * http + scaled(t.deadlineMs);
  const tasks = s.tasks ?? 2;
  let backoffs = 0;
  for (let retry = 0; retry < t.submitRetries; retry++) {
    backoffs += scaled(
      Math.max(t.submitBackoffMs * 2 ** retry, t.rateLimitBackoffMs * RATE_LIMIT_BACKOFF_MAX_FACTOR),
    );
  }
  const failedSubmits = (t.submitRetries + 1) * 2 * http + backoffs;
  const call = AWS_CALL_MS;
  const keyRotation = 2 * http + call;
  // The claim, the phase markers and the final write (or the release that takes its place when
  // the record is retried), each WRITE_TRIES tries with the back-off between them (../records/store.ts).
  const writes = (MARKER_WRITES + 2) * (WRITE_TRIES * call + writeBackoffTotalMs(s.timeScale));
  return {
    setup: SETUP_MS,
    captchaai: tasks * task + failedSubmits + keyRotation,
    priorTask: s.cooldownMs,
    ending: Math.max(2 * s.targetTimeoutMs, s.targetTimeoutMs + s.cooldownMs, stopPathMs(s.timeScale)),
    aws: writes,
    cancelReads: cancelAsksPerRecord(s.timings) * call,
    margin: DEADLINE_MARGIN_MS,
  };
}

/** The worst case of one record in ms: the sum of {@link worstCaseParts}. */
export function worstCaseRecordMs(s: WorstCaseSettings): number {
  return Object.values(worstCaseParts(s)).reduce((sum, ms) => sum + ms, 0);
}

/**
 * The shortest work a record may start: one task, no submit retry (the one re-check of idle threads
 * and a key rotation still counted), then its ending. An invocation with lanes keeps taking records
 * while this much is left before its timeout, not only while a whole {@link worstCaseRecordMs} is
 * (./chain-window.ts); such a record gives up a retry or a resubmission that would no longer fit
 * and goes back to the queue for another lane (./record-flow.ts, {@link submitFitsMs}).
 */
export function shortestRecordMs(s: WorstCaseSettings): number {
  return worstCaseRecordMs(shortest(s));
}

/**
 * What must be left before an in.php call of a record in an invocation with lanes: the shortest
 * work's worst case from that call on (its setup and an earlier claim's task are behind it). Less,
 * and the record goes back to the queue before the call instead (nothing of it holds a thread).
 */
export function submitFitsMs(s: WorstCaseSettings): number {
  const { setup, priorTask, ...rest } = worstCaseParts(shortest(s));
  return Object.values(rest).reduce((sum, ms) => sum + ms, 0);
}

function shortest(s: WorstCaseSettings): WorstCaseSettings {
  return { ...s, timings: { ...s.timings, submitRetries: 0 }, tasks: 1 };
}
