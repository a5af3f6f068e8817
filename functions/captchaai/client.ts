import {
  CaptchaError,
  ConfigError,
  PollTimeoutError,
  RateLimitError,
  StopClassError,
  TaskMayExistError,
  TransientError,
  UnsolvableError,
} from '../common/errors.js';
import { DEFAULTS } from '../common/settings.js';
import {
  AnswerUnreadableError,
  classify,
  type HttpReply,
  NO_SLOT_CODES,
  NOT_READY_CODES,
  parseAnswer,
  RATE_LIMIT_BACKOFF_MAX_FACTOR,
  RequestNotSentError,
  readThreadsInfo,
  taskParams,
} from './answers.js';
import { postForm, sleep } from './http.js';
import { type PollSchedule, staticPollSchedule } from './poll-schedule.js';
import { resolveTimings, type SolveTimings, type SolveTimingsOverrides } from './timings.js';
import {
  type CaptchaTask,
  type CaptchaType,
  type ClientEvent,
  freshSolveBudget,
  type SolveOptions,
  type SolveResult,
  type ThreadsInfo,
} from './types.js';

export { classify } from './answers.js';
export { readTimingsFromEnv, type SolveTimingsOverrides } from './timings.js';
export type { CaptchaTask, CaptchaType, ClientEvent, SolveResult, ThreadsInfo } from './types.js';
export { CAPTCHA_TYPES, freshSolveBudget, type SolveBudget, type SolveOptions } from './types.js';

/** The `res.php` action that reports plan capacity (the seed article documents it, CaptchaAI's reference does not). */
export const THREADSINFO_ACTION = 'threadsinfo';

export interface CaptchaAiClientOptions {
  apiKey: string;
  /** @default https://ocr.captchaai.com */
  baseUrl?: string;
  /** Overrides of CaptchaAI's default waits (see DEFAULT_TIMINGS); firstPollMs may name only some types. */
  timings?: SolveTimingsOverrides;
  /** Multiplies every wait, including the deadline and the HTTP timeout. @default 1 */
  timeScale?: number;
  /** @default globalThis.fetch */
  fetch?: typeof fetch;
  /** Waits `ms`, rejecting with `signal.reason` when the signal aborts. */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  /** Epoch milliseconds. @default Date.now */
  now?: () => number;
  /** Progress for metrics and tests; never contains the key or a token. Exceptions it throws are ignored. */
  onEvent?: (e: ClientEvent) => void;
  /** When each res.php call is made (poll-schedule.ts). @default the static schedule of `timings` */
  pollSchedule?: PollSchedule;
}

export { MAX_ANSWER_BYTES, sleep } from './http.js';

/** Per-solve bookkeeping; one object per `solve()` call, so concurrent solves share nothing. */
interface SolveState {
  readonly captchaType: CaptchaType;
  readonly signal: AbortSignal | undefined;
  submits: number;
  retriesUsed: number;
  resubmitted: boolean;
  /** A no-slot answer with idle threads was already re-checked once (see classifyNoSlot). */
  idleRechecked: boolean;
  taskId: string | undefined;
  /** res.php `get` calls for the current task (the budget is per task). */
  polls: number;
  /** res.php `get` calls over every task of this solve. */
  pollsTotal: number;
  /** Rate-limit answers in a row (the back-off doubles with each). */
  rateLimitsInARow: number;
  readonly onSubmitted: ((taskId: string, submits: number) => void) | undefined;
  readonly beforeSubmit: (() => Promise<void>) | undefined;
}

/**
 * Client for CaptchaAI's 2captcha-compatible API. It sorts every failure into the error
 * hierarchy of `errors.ts` and applies the retry budget of one record:
 * - a submit refused before it reached CaptchaAI, or a well-formed transient answer:
 *   `submitRetries` more tries with doubling back-off;
 * - a submit whose answer was lost (timeout, 5xx/HTML, reset, unreadable): no second task; the
 *   slot waits out the deadline and the solve ends TaskMayExistError;
 * - ERROR_CAPTCHA_UNSOLVABLE: exactly one fresh resubmission;
 * - before every in.php call, `beforeSubmit` (SolveOptions) may end the solve;
 * - transient errors while polling: ask about the same id again after `serverErrorWaitMs`;
 * - rate limits (HTTP 429, ERROR_TOO_MUCH_REQUESTS) at submit or poll: back off and ask again (the
 *   same id at poll), and for a while every task of this client polls at twice its interval;
 * - no answer by the deadline, or the task's res.php budget spent: PollTimeoutError, never a
 *   replacement task.
 * The instance holds only configuration, so one client can run any number of solves at once.
 */
export class CaptchaAiClient {
  readonly #apiKey: string;
  readonly #baseUrl: string;
  readonly #timings: SolveTimings;
  readonly #timeScale: number;
  readonly #fetch: typeof fetch;
  readonly #sleep: (ms: number, signal?: AbortSignal) => Promise<void>;
  readonly #now: () => number;
  readonly #onEvent: ((e: ClientEvent) => void) | undefined;
  readonly #schedule: PollSchedule;
  /** Epoch ms until which polls run at twice their interval (after a rate-limit answer). */
  #slowUntil = 0;

  constructor(o: CaptchaAiClientOptions) {
    if (typeof o.apiKey !== 'string' || o.apiKey.trim() === '') {
      throw new ConfigError('apiKey', 'a CaptchaAI API key is required');
    }
    const timeScale = o.timeScale ?? 1;
    if (!Number.isFinite(timeScale) || timeScale <= 0) {
      throw new ConfigError('timeScale', `must be a positive number, got ${timeScale}`);
    }
    const timings = resolveTimings(o.timings);
    if (!Number.isInteger(timings.submitRetries) || timings.submitRetries < 0) {
      throw new ConfigError(
        'timings.submitRetries',
        `must be a non-negative integer, got ${timings.submitRetries}`,
      );
    }
    if (!Number.isInteger(timings.pollBudget) || timings.pollBudget < 1) {
      throw new ConfigError('timings.pollBudget', `must be an integer >= 1, got ${timings.pollBudget}`);
    }
    this.#apiKey = o.apiKey.trim();
    this.#baseUrl = (o.baseUrl ?? DEFAULTS.captchaaiUrl).replace(/\/+$/, '');
    this.#timings = timings;
    this.#timeScale = timeScale;
    this.#fetch = o.fetch ?? globalThis.fetch;
    this.#sleep = o.sleep ?? sleep;
    this.#now = o.now ?? Date.now;
    this.#onEvent = o.onEvent;
    this.#schedule = o.pollSchedule ?? staticPollSchedule(timings);
  }

  /** The effective timings at time scale 1 (for logs and the CLI; holds no secret). */
  get timings(): SolveTimings {
    return structuredClone(this.#timings);
  }

  get timeScale(): number {
    return this.#timeScale;
  }

  /**
   * Solves one task. Resolves with the token, or rejects with a CaptchaError subclass whose
   * `submits` says how many in.php calls were made; an aborted signal rejects with its reason.
   */
  async solve(task: CaptchaTask, o: SolveOptions = {}): Promise<SolveResult> {
    const started = this.#now();
    const spent = o.budget ?? freshSolveBudget();
    const state: SolveState = {
      captchaType: task.type,
      signal: o.signal,
      submits: spent.submits,
      retriesUsed: spent.retriesUsed,
      resubmitted: spent.resubmitted,
      idleRechecked: spent.idleRechecked,
      taskId: undefined,
      polls: 0,
      pollsTotal: 0,
      rateLimitsInARow: 0,
      onSubmitted: o.onSubmitted,
      beforeSubmit: o.beforeSubmit,
    };
    try {
      o.signal?.throwIfAborted();
      const params = taskParams(task);
      let resume = o.resume;
      for (;;) {
        const resumed = resume;
        resume = undefined;
        try {
          if (resumed) {
            state.taskId = resumed.taskId;
            this.#emit({ kind: 'resumed', captchaType: task.type, taskId: resumed.taskId });
          }
          const taskId = resumed ? resumed.taskId : await this.#submit(params, state);
          const token = await this.#poll(taskId, state, resumed?.submittedAt);
          const solvedAt = this.#now();
          const solveMs = solvedAt - started;
          const polls = state.pollsTotal;
          this.#emit({
            kind: 'solved',
            captchaType: task.type,
            taskId,
            submits: state.submits,
            polls,
            solveMs,
          });
          return { token, taskId, submits: state.submits, polls, solveMs, solvedAt };
        } catch (err) {
          if (err instanceof UnsolvableError && !state.resubmitted) {
            // One fresh task: a different worker at CaptchaAI may solve what this one could not.
            state.resubmitted = true;
            this.#emit({
              kind: 'resubmit',
              captchaType: task.type,
              previousTaskId: err.taskId ?? '',
              code: err.code,
            });
            continue;
          }
          throw err;
        }
      }
    } catch (err) {
      if (err instanceof CaptchaError) {
        err.submits = state.submits;
        err.polls = state.pollsTotal;
        this.#emit({
          kind: 'failed',
          captchaType: task.type,
          errorName: err.name,
          code: err.code,
          submits: state.submits,
          ...(err.taskId === undefined ? {} : { taskId: err.taskId }),
        });
      }
      throw err;
    } finally {
      Object.assign(spent, {
        submits: state.submits,
        retriesUsed: state.retriesUsed,
        resubmitted: state.resubmitted,
        idleRechecked: state.idleRechecked,
      });
    }
  }

  /** The plan's capacity (`res.php?action=threadsinfo`). Threads may come back as strings; both are accepted. */
  async threadsInfo(o: { signal?: AbortSignal } = {}): Promise<ThreadsInfo> {
    o.signal?.throwIfAborted();
    const reply = await this.#request('res.php', { action: THREADSINFO_ACTION }, o.signal);
    return readThreadsInfo(reply);
  }

  /** One submission with its transient-retry budget; returns the new task id. */
  async #submit(params: Record<string, string>, state: SolveState): Promise<string> {
    for (;;) {
      // The caller's last word before each in.php (its rejection is not a failed submit).
      await state.beforeSubmit?.();
      state.submits += 1;
      this.#emit({ kind: 'submit', captchaType: state.captchaType, submit: state.submits });
      let failure: CaptchaError;
      try {
        const answer = parseAnswer(await this.#request('in.php', params, state.signal), 'in.php');
        if (answer.ok) {
          state.taskId = answer.value;
          state.rateLimitsInARow = 0;
          this.#emit({
            kind: 'submitted',
            captchaType: state.captchaType,
            taskId: answer.value,
            submit: state.submits,
          });
          try {
            state.onSubmitted?.(answer.value, state.submits);
          } catch {
            // The caller's side work must never break the solve.
          }
          return answer.value;
        }
        if (NO_SLOT_CODES.has(answer.code)) {
          const decision = await this.#classifyNoSlot(answer.code, state);
          if (decision === 'recheck') continue;
          failure = decision;
        } else {
          failure = classify(answer.code, undefined);
        }
      } catch (err) {
        if (!(err instanceof TransientError)) throw err;
        // Only a refusal proves that no task exists: nothing sent (refused, DNS, TLS) or HTTP 429
        // (the gateway turned the call away). A timeout, a 5xx or HTML page, a reset or an
        // unreadable body may hide a task that holds a thread, so none is submitted in its place.
        if (!(err instanceof RequestNotSentError || err instanceof RateLimitError)) {
          throw await this.#unknownTask(err, state);
        }
        failure = err;
      }
      if (!(failure instanceof TransientError) || state.retriesUsed >= this.#timings.submitRetries) {
        throw failure;
      }
      const delayMs =
        failure instanceof RateLimitError
          ? this.#rateLimited('in.php', failure, state)
          : this.#scaled(this.#timings.submitBackoffMs * 2 ** state.retriesUsed);
      state.retriesUsed += 1;
      this.#emit({
        kind: 'retry',
        captchaType: state.captchaType,
        code: failure.code,
        retry: state.retriesUsed,
        delayMs,
      });
      await this.#sleep(delayMs, state.signal);
    }
  }

  /**
   * in.php's answer was lost (timeout after sending, 5xx or HTML page, reset, a body too large,
   * stalled or cut off): a task may exist that we cannot poll, holding a plan thread. Submitting
   * another would put two tasks on one slot, so the slot waits out the deadline such a task would
   * have, and the solve ends with TaskMayExistError (the worker adds the cool-down, and only then
   * may the record be tried again).
   */
  async #unknownTask(err: TransientError, state: SolveState): Promise<TaskMayExistError> {
    const waitMs = this.#scaled(this.#timings.deadlineMs);
    const code = err instanceof AnswerUnreadableError ? 'SUBMIT_ANSWER_UNREADABLE' : 'SUBMIT_ANSWER_LOST';
    this.#emit({ kind: 'answer_lost', captchaType: state.captchaType, code, cause: err.code, waitMs });
    await this.#sleep(waitMs, state.signal);
    return new TaskMayExistError(
      code,
      `${err.message}; a task may exist and hold a CaptchaAI thread, so none is submitted in its place`,
      { cause: err },
    );
  }

  /**
   * ERROR_ZERO_BALANCE / ERROR_NO_SLOT_AVAILABLE mean "no free thread for you". threadsinfo tells
   * why: every plan thread busy → transient (back off); no plan threads, or idle ones → the key
   * has no active plan, a stop-class condition. Idle threads are checked twice before stopping:
   * a thread that freed up between the submit and threadsinfo would otherwise halt the pipeline.
   */
  async #classifyNoSlot(code: string, state: SolveState): Promise<CaptchaError | 'recheck'> {
    let info: ThreadsInfo;
    try {
      info = await this.threadsInfo({ signal: state.signal });
    } catch (err) {
      if (err instanceof TransientError) {
        return new TransientError(code, `CaptchaAI answered ${code} and threadsinfo failed (${err.code})`, {
          cause: err,
        });
      }
      throw err;
    }
    this.#emit({ kind: 'threadsinfo', threads: info.threads, workingThreads: info.workingThreads });
    if (info.threads > 0 && info.workingThreads >= info.threads) {
      return new TransientError(
        code,
        `CaptchaAI answered ${code}: all ${info.threads} plan threads are busy (${info.workingThreads} working)`,
      );
    }
    if (info.threads > 0 && !state.idleRechecked) {
      state.idleRechecked = true;
      return 'recheck';
    }
    const seen =
      info.threads === 0
        ? 'threadsinfo shows no plan threads'
        : `threadsinfo shows idle threads twice (${info.workingThreads} of ${info.threads} working)`;
    return new StopClassError(
      'NO_ACTIVE_PLAN',
      `CaptchaAI answered ${code} and ${seen}: the key has no active plan`,
    );
  }

  /**
   * Polls one task until its answer, a final error, the deadline, or the end of its res.php
   * budget. The schedule is the poll schedule's (poll-schedule.ts); after a server error the next call waits at
   * least `serverErrorWaitMs`, after a rate limit the rate-limit back-off.
   */
  async #poll(taskId: string, state: SolveState, submittedAt = this.#now()): Promise<string> {
    const deadlineMs = this.#scaled(this.#timings.deadlineMs);
    const type = state.captchaType;
    const plan = this.#schedule.planFor(type);
    state.polls = 0;
    let minWaitMs = 0;
    // The schedule learns from each answer when it was last seen not ready and when it was read.
    let notReadyAt = 0;
    for (;;) {
      const since = this.#now() - submittedAt;
      const wait = plan.waitMs(state.polls, since / this.#timeScale, this.#now() < this.#slowUntil);
      const scheduled = wait === undefined ? undefined : this.#scaled(wait);
      if (scheduled === undefined || since >= deadlineMs) {
        const why =
          scheduled === undefined
            ? `after ${state.polls} res.php calls (the budget per task)`
            : `within ${deadlineMs} ms`;
        this.#schedule.unanswered?.(type, state.polls);
        throw new PollTimeoutError(
          'POLL_TIMEOUT',
          `no answer for task ${taskId} ${why}; the task may still hold a CaptchaAI thread`,
          { taskId },
        );
      }
      await this.#sleep(Math.min(Math.max(scheduled, minWaitMs), deadlineMs - since), state.signal);
      minWaitMs = 0;
      state.polls += 1;
      state.pollsTotal += 1;
      this.#emit({ kind: 'poll', captchaType: type, taskId });
      const askedAt = this.#now() - submittedAt;
      let failure: CaptchaError;
      try {
        const reply = await this.#request('res.php', { action: 'get', id: taskId, json: '1' }, state.signal);
        const answer = parseAnswer(reply, 'res.php');
        if (answer.ok) {
          this.#schedule.observe(type, notReadyAt / this.#timeScale, askedAt / this.#timeScale, state.polls);
          return answer.value;
        }
        if (NOT_READY_CODES.has(answer.code)) {
          notReadyAt = askedAt;
          state.rateLimitsInARow = 0;
          this.#emit({ kind: 'not_ready', captchaType: type, taskId });
          continue;
        }
        // "No free thread" cannot concern a task that already exists: ask again like a server error.
        failure = NO_SLOT_CODES.has(answer.code)
          ? new TransientError(answer.code, `res.php answered ${answer.code}`, { taskId })
          : classify(answer.code, taskId);
      } catch (err) {
        if (!(err instanceof TransientError)) throw err;
        failure = err;
      }
      if (!(failure instanceof TransientError)) throw failure;
      if (failure instanceof RateLimitError) {
        minWaitMs = this.#rateLimited('res.php', failure, state);
        continue;
      }
      minWaitMs = this.#scaled(this.#timings.serverErrorWaitMs);
      this.#emit({
        kind: 'poll_error',
        captchaType: type,
        taskId,
        code: failure.code,
        delayMs: minWaitMs,
      });
    }
  }

  /**
   * A rate-limit answer: every task of this client polls at twice its interval for
   * `rateLimitSlowdownMs`, and the caller waits the returned back-off (doubling per answer in a
   * row) before asking again.
   */
  #rateLimited(endpoint: 'in.php' | 'res.php', err: RateLimitError, state: SolveState): number {
    state.rateLimitsInARow += 1;
    const factor = Math.min(RATE_LIMIT_BACKOFF_MAX_FACTOR, 2 ** (state.rateLimitsInARow - 1));
    const delayMs = this.#scaled(this.#timings.rateLimitBackoffMs * factor);
    this.#slowUntil = Math.max(
      this.#slowUntil,
      this.#now() + this.#scaled(this.#timings.rateLimitSlowdownMs),
    );
    this.#emit({
      kind: 'rate_limited',
      captchaType: state.captchaType,
      endpoint,
      code: err.code,
      delayMs,
      ...(state.taskId === undefined || endpoint === 'in.php' ? {} : { taskId: state.taskId }),
    });
    return delayMs;
  }

  /** One HTTP call to CaptchaAI, bounded in bytes and time (see http.ts). */
  #request(
    path: 'in.php' | 'res.php',
    params: Record<string, string>,
    signal?: AbortSignal,
  ): Promise<HttpReply> {
    return postForm({
      fetch: this.#fetch,
      url: `${this.#baseUrl}/${path}`,
      path,
      form: { key: this.#apiKey, ...params },
      timeoutMs: this.#scaled(this.#timings.httpTimeoutMs),
      ...(signal ? { signal } : {}),
    });
  }

  #scaled(ms: number): number {
    return ms * this.#timeScale;
  }

  #emit(e: ClientEvent): void {
    if (!this.#onEvent) return;
    try {
      this.#onEvent(e);
    } catch {
      // Metrics must never break a solve.
    }
  }
}
