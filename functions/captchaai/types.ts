/** The CAPTCHA kinds threadgate solves through CaptchaAI. */
export type CaptchaType = 'recaptcha_v2' | 'recaptcha_v3' | 'recaptcha_enterprise' | 'turnstile' | 'image';

export const CAPTCHA_TYPES: readonly CaptchaType[] = [
  'recaptcha_v2',
  'recaptcha_v3',
  'recaptcha_enterprise',
  'turnstile',
  'image',
];

/** One task for CaptchaAI. `minScore` is reCAPTCHA's `min_score` (0.1 … 0.9). */
export type CaptchaTask =
  | { type: 'recaptcha_v2'; sitekey: string; pageurl: string; invisible?: boolean }
  | { type: 'recaptcha_v3'; sitekey: string; pageurl: string; action?: string; minScore?: number }
  | {
      type: 'recaptcha_enterprise';
      sitekey: string;
      pageurl: string;
      action?: string;
      minScore?: number;
      invisible?: boolean;
    }
  | { type: 'turnstile'; sitekey: string; pageurl: string; action?: string }
  | { type: 'image'; body: string };

export interface SolveResult {
  /** The answer. Use it once, in the session that loaded the page; never store or log it. */
  token: string;
  /** The CaptchaAI id of the task that produced the token. */
  taskId: string;
  /** `in.php` calls made for this solve, including failed ones and the UNSOLVABLE resubmission. */
  submits: number;
  /** `res.php` `get` calls made for this solve (every task of it). */
  polls: number;
  /** From the start of `solve()` to the answer. */
  solveMs: number;
  /** Epoch ms (from the client's clock) when the answer arrived; the token's lifetime starts here. */
  solvedAt: number;
}

/** The plan's capacity as `res.php?action=threadsinfo` reports it. */
export interface ThreadsInfo {
  /** Threads of the plan (0 when no plan is active). */
  threads: number;
  /** Threads busy right now (tasks of every client using the key). */
  workingThreads: number;
}

/**
 * What the client reports while it works, for metrics and tests. Events never carry the
 * API key or a token.
 */
export type ClientEvent =
  /** About to call in.php; `submit` counts in.php calls of this solve, starting at 1. */
  | { kind: 'submit'; captchaType: CaptchaType; submit: number }
  /** in.php accepted the task. */
  | { kind: 'submitted'; captchaType: CaptchaType; taskId: string; submit: number }
  /** in.php failed with a transient error; the client waits `delayMs`, then submits again. */
  | { kind: 'retry'; captchaType: CaptchaType; code: string; retry: number; delayMs: number }
  /**
   * in.php's answer was lost (`cause`: HTTP_502, HTTP_TIMEOUT, NETWORK_ERROR, ANSWER_CUT, …): a task
   * may exist, so the client waits `waitMs` (its deadline) and ends the solve `code`.
   */
  | { kind: 'answer_lost'; captchaType: CaptchaType; code: string; cause: string; waitMs: number }
  /** An earlier attempt's task is polled again instead of submitting another (SolveOptions.resume). */
  | { kind: 'resumed'; captchaType: CaptchaType; taskId: string }
  /** The task was UNSOLVABLE; the client submits it once more as a fresh task. */
  | { kind: 'resubmit'; captchaType: CaptchaType; previousTaskId: string; code: string }
  /** About to call res.php for the task. */
  | { kind: 'poll'; captchaType: CaptchaType; taskId: string }
  /** res.php said CAPCHA_NOT_READY. */
  | { kind: 'not_ready'; captchaType: CaptchaType; taskId: string }
  /** res.php failed transiently; the client asks about the same id again after `delayMs`. */
  | { kind: 'poll_error'; captchaType: CaptchaType; taskId: string; code: string; delayMs: number }
  /** A threadsinfo call made to classify ERROR_ZERO_BALANCE / ERROR_NO_SLOT_AVAILABLE. */
  | { kind: 'threadsinfo'; threads: number; workingThreads: number }
  /** A rate-limit answer (HTTP 429, ERROR_TOO_MUCH_REQUESTS); the client asks again after `delayMs`. */
  | {
      kind: 'rate_limited';
      captchaType: CaptchaType;
      endpoint: 'in.php' | 'res.php';
      code: string;
      delayMs: number;
      taskId?: string;
    }
  | {
      kind: 'solved';
      captchaType: CaptchaType;
      taskId: string;
      submits: number;
      polls: number;
      solveMs: number;
    }
  | {
      kind: 'failed';
      captchaType: CaptchaType;
      errorName: string;
      code: string;
      submits: number;
      taskId?: string;
    };

/** What one record's solve may spend, shared by every call of it (see SolveOptions.budget). */
export interface SolveBudget {
  submits: number;
  retriesUsed: number;
  resubmitted: boolean;
  idleRechecked: boolean;
}

/** A budget nothing has been spent of. */
export function freshSolveBudget(): SolveBudget {
  return { submits: 0, retriesUsed: 0, resubmitted: false, idleRechecked: false };
}

export interface SolveOptions {
  signal?: AbortSignal;
  /**
   * Called when in.php accepted a task (again after an UNSOLVABLE resubmission), so the caller can
   * work while CaptchaAI solves, e.g. load the page. `submits`: in.php calls of this solve so far,
   * this one included. Exceptions it throws are ignored.
   */
  onSubmitted?: (taskId: string, submits: number) => void;
  /**
   * Awaited before every in.php call of the solve (the first, each transient retry, the idle-threads
   * re-check, the UNSOLVABLE resubmission, the repeat after a key rotation), after any wait before
   * it. A rejection ends the solve with that error, without the call: the worker asks its batch's
   * cancel here, so no task is submitted for a cancelled batch, or while the cancel is unknown.
   */
  beforeSubmit?: () => Promise<void>;
  /**
   * A task an earlier attempt submitted (and recorded) at `submittedAt` (epoch ms): it is polled
   * until its deadline instead of submitting another. An UNSOLVABLE answer still gets its one
   * fresh resubmission.
   */
  resume?: { taskId: string; submittedAt: number };
  /**
   * The budget an earlier call for the same record already spent (in.php calls, transient
   * retries, the UNSOLVABLE resubmission, the idle-threads re-check): this call continues it and
   * leaves it spent as it ends, so a call repeated with a rotated key gets no fresh budget.
   */
  budget?: SolveBudget;
}
