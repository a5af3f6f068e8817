import { CaptchaAiClient } from '../functions/captchaai/client.js';
import type { CaptchaTask, ClientEvent } from '../functions/captchaai/types.js';
import {
  CaptchaError,
  PollTimeoutError,
  StopClassError,
  TransientError,
} from '../functions/common/errors.js';
import type { CaptchaStandin } from '../local/standins/captchaai/standin.js';

/**
 * The uncapped baseline: what happens without the cap. Every record is handed to the CaptchaAI
 * client at once (unbounded concurrency, as a Lambda without reserved concurrency or a mapping
 * maximum would scale out on a full queue), against the same stand-in and plan. Each record
 * gets the worker's budget: the client's own submit retries (back-off 10 s, 20 s, scaled), and,
 * when those run out on a transient error such as ERROR_ZERO_BALANCE, up to `receives`
 * deliveries in all, the next one after `redeliveryMs` (standing in for the queue's
 * visibility timeout, which in the stack is much longer: 6 × the function timeout).
 */
export interface BaselineOptions {
  url: string;
  apiKey: string;
  timeScale: number;
  tasks: readonly CaptchaTask[];
  standin: Pick<CaptchaStandin, 'stats' | 'resetStats'>;
  /** Deliveries per record (the worker's TRANSIENT_RECEIVE_LIMIT). @default 3 */
  receives?: number;
  /** Wait before a redelivery, real ms at time scale 1 (scaled like the client's waits). @default 30000 */
  redeliveryMs?: number;
  /** Memory of the worker, to price the time records spend waiting inside an invocation. @default 256 */
  memoryMb?: number;
}

export interface BaselineResult {
  records: number;
  solved: number;
  failed: number;
  failed_by_code: Record<string, number>;
  /**
   * Records that ended in a stop-class error (e.g. NO_ACTIVE_PLAN: threadsinfo saw idle threads
   * twice right after a refusal, as threads free up and are taken again). In the pipeline the
   * first of them pauses everything until an operator resumes.
   */
  stop_class_failures: number;
  zero_balance: number;
  max_in_flight: number;
  plan_threads: number;
  submits: number;
  /** in.php calls beyond one per record. */
  extra_submits: number;
  /** The client's back-offs after a transient submit error. */
  submit_retries: number;
  /** threadsinfo calls made to classify ERROR_ZERO_BALANCE. */
  threadsinfo_calls: number;
  /** Deliveries after the first (records put back in the queue). */
  redeliveries: number;
  elapsed_s: number;
  elapsed_s_unscaled: number;
  /** Time records spent in back-offs inside invocations (billed Lambda time), wall and unscaled seconds. */
  backoff_s: number;
  backoff_s_unscaled: number;
  /** Time records spent waiting for a redelivery (in the queue), wall and unscaled seconds. */
  redelivery_wait_s: number;
  redelivery_wait_s_unscaled: number;
  /** Lambda GB-seconds billed for back-off waits alone, at time scale 1. */
  lambda_gb_s_in_backoff: number;
  time_scale: number;
}

export async function runUncappedBaseline(o: BaselineOptions): Promise<BaselineResult> {
  const receives = o.receives ?? 3;
  const redeliveryMs = (o.redeliveryMs ?? 30_000) * o.timeScale;
  let submitRetries = 0;
  let backoffMs = 0;
  let threadsinfoCalls = 0;
  const onEvent = (e: ClientEvent) => {
    if (e.kind === 'retry') {
      submitRetries += 1;
      backoffMs += e.delayMs;
    } else if (e.kind === 'threadsinfo') {
      threadsinfoCalls += 1;
    }
  };
  const client = new CaptchaAiClient({ apiKey: o.apiKey, baseUrl: o.url, timeScale: o.timeScale, onEvent });
  o.standin.resetStats();
  let redeliveries = 0;
  let stopClass = 0;
  let redeliveryWaitMs = 0;
  const failedByCode: Record<string, number> = {};
  const started = performance.now();

  const one = async (task: CaptchaTask): Promise<boolean> => {
    for (let delivery = 1; ; delivery++) {
      try {
        await client.solve(task);
        return true;
      } catch (err) {
        const code = err instanceof CaptchaError ? err.code : 'INTERNAL_ERROR';
        // The worker retries transient errors through the queue, but never a poll timeout.
        const retryable = err instanceof TransientError && !(err instanceof PollTimeoutError);
        if (err instanceof StopClassError) stopClass += 1;
        if (!retryable || delivery >= receives) {
          const key = retryable ? `TRANSIENT_EXHAUSTED (${code})` : code;
          failedByCode[key] = (failedByCode[key] ?? 0) + 1;
          return false;
        }
        redeliveries += 1;
        redeliveryWaitMs += redeliveryMs;
        await new Promise((resolve) => setTimeout(resolve, redeliveryMs));
      }
    }
  };

  const results = await Promise.all(o.tasks.map(one));
  const elapsedMs = performance.now() - started;
  const stats = o.standin.stats();
  const solved = results.filter(Boolean).length;
  const memoryGb = (o.memoryMb ?? 256) / 1024;
  return {
    records: o.tasks.length,
    solved,
    failed: o.tasks.length - solved,
    failed_by_code: failedByCode,
    stop_class_failures: stopClass,
    zero_balance: stats.zeroBalance,
    max_in_flight: stats.maxInFlight,
    plan_threads: stats.threads,
    submits: stats.submits,
    extra_submits: stats.submits - o.tasks.length,
    submit_retries: submitRetries,
    threadsinfo_calls: threadsinfoCalls,
    redeliveries,
    elapsed_s: elapsedMs / 1000,
    elapsed_s_unscaled: elapsedMs / 1000 / o.timeScale,
    backoff_s: backoffMs / 1000,
    backoff_s_unscaled: backoffMs / 1000 / o.timeScale,
    redelivery_wait_s: redeliveryWaitMs / 1000,
    redelivery_wait_s_unscaled: redeliveryWaitMs / 1000 / o.timeScale,
    lambda_gb_s_in_backoff: (backoffMs / 1000 / o.timeScale) * memoryGb,
    time_scale: o.timeScale,
  };
}
