import { type Env, optionalNumber } from '../common/env.js';
import { ConfigError } from '../common/errors.js';
import { optimizeSchedule } from './schedule-optimizer.js';
import { type SolveTimeInterval, SolveTimeSummary, smoothDistribution } from './solve-time-summary.js';
import { pollWaitMs, type SolveTimings } from './timings.js';
import type { CaptchaType } from './types.js';

/**
 * The poll schedule of the CaptchaAI client: when each res.php call of a task is made.
 *
 * - `static`: CaptchaAI's published schedule (first poll `firstPollMs`, then every
 *   `pollIntervalMs`, at most `pollBudget` calls, the last at the deadline; timings.ts).
 * - `learned` (the default): per CAPTCHA type, the environment keeps the solve times it has seen
 *   (./solve-time-summary.ts: the last few hundred as censored intervals) and places the polls
 *   where answers are likely (./schedule-optimizer.ts), within a mean budget of res.php calls per
 *   solve, a per-task ceiling (`maxPollsPerTask`) and the same deadline. Until it has seen
 *   `minObservations` answers of a type (its own and shared ones) it polls on the static
 *   schedule. Other environments' recent answers (`setPeerObservations`, fed by
 *   ../pipeline/solve-time-exchange.ts) count beside its own: one environment sees only its
 *   share of the records, a few dozen in a run. Every `probeEvery`-th task polls once at half
 *   the learned first poll, so a schedule never stays blind to answers that became faster than
 *   its first poll. The schedule plans with the mean budget less BUDGET_MARGIN_CALLS.
 * All times here are unscaled milliseconds (the client applies its time scale around them).
 */

export type PollScheduleMode = 'learned' | 'static';

export interface PollScheduleSettings {
  mode: PollScheduleMode;
  /** Mean res.php `get` calls per solve the learned schedule may spend (the answering call included). */
  meanBudget: number;
  /**
   * Most res.php calls of one task on the learned schedule, the deadline's included (a guard: the
   * limits that block keys count requests per task on average, which `meanBudget` bounds).
   */
  maxPollsPerTask: number;
  /** Answers of a type seen before the learned schedule replaces the static one. */
  minObservations: number;
  /** Every this many learned tasks, one probes early (0: never). */
  probeEvery: number;
  /** Observations between two recomputations of a type's schedule. */
  recomputeEvery: number;
  /** Observations kept per type (the oldest go first). */
  capacity: number;
  /** Shortest time between two polls of one task. */
  minGapMs: number;
  /** Grid of the schedule (poll times are multiples of it). */
  stepMs: number;
}

/**
 * 12 calls per solve on average: 2captcha-compatible services block a key whose requests pass
 * about 20 × tasks + 1,200 (docs/benchmark-notes.md), so 12 leaves room for retries and the in.php call.
 * A task may take up to 120, one a second over the 120 s deadline on average, the pace of the
 * fastest peer client (Capsolver polls every second): the mean budget is what the services count,
 * and a tighter ceiling only takes polls from where answers are dense (at 40 the schedule used 9–10
 * of its 11 calls and waited longer, docs/benchmark-notes.md). Two polls of one task may be 0.5 s apart
 * where answers are dense; 3 answers are enough to start from.
 */
export const DEFAULT_POLL_SCHEDULE: PollScheduleSettings = {
  mode: 'learned',
  meanBudget: 12,
  maxPollsPerTask: 120,
  minObservations: 3,
  probeEvery: 10,
  recomputeEvery: 2,
  capacity: 256,
  minGapMs: 500,
  stepMs: 500,
};

/** Learned tasks per type whose calls the overspend estimate rests on. */
const SPENT_WINDOW = 64;
/**
 * Tasks on budget the overspend estimate starts from: it counts from the first learned task
 * (a schedule built on bad shared answers overspends from its first task on), and a few
 * assumed-on-budget tasks keep one slow answer from halving the next schedule's budget alone.
 */
const SPENT_PRIOR_TASKS = 4;

/** Calls of the mean budget the learned schedule does not plan with (see LearnedPollSchedule). */
export const BUDGET_MARGIN_CALLS = 1;

export const POLL_SCHEDULE_ENV = {
  mode: 'CAPTCHAAI_POLL_SCHEDULE',
  meanBudget: 'CAPTCHAAI_POLL_MEAN_BUDGET',
  maxPollsPerTask: 'CAPTCHAAI_POLL_CEILING',
} as const;

/** Reads the schedule's mode and mean budget; unset variables keep the defaults, bad ones are ConfigErrors. */
export function readPollScheduleFromEnv(env: Env): PollScheduleSettings {
  const raw = env[POLL_SCHEDULE_ENV.mode]?.trim() || DEFAULT_POLL_SCHEDULE.mode;
  if (raw !== 'learned' && raw !== 'static') {
    throw new ConfigError(POLL_SCHEDULE_ENV.mode, `must be "learned" or "static", got "${raw}"`);
  }
  return {
    ...DEFAULT_POLL_SCHEDULE,
    mode: raw,
    meanBudget: optionalNumber(env, POLL_SCHEDULE_ENV.meanBudget, DEFAULT_POLL_SCHEDULE.meanBudget, {
      min: 1,
      max: 19,
    }),
    maxPollsPerTask: optionalNumber(
      env,
      POLL_SCHEDULE_ENV.maxPollsPerTask,
      DEFAULT_POLL_SCHEDULE.maxPollsPerTask,
      {
        min: 2,
        max: 240,
        integer: true,
      },
    ),
  };
}

/** One task's schedule. */
export interface TaskPollPlan {
  /**
   * Unscaled ms to wait before the next res.php call, `polls` calls made so far, `sinceSubmitMs`
   * since the submit; `slow` while a rate limit asks for fewer calls. undefined: no more calls.
   */
  waitMs(polls: number, sinceSubmitMs: number, slow: boolean): number | undefined;
  /** The learned schedule made this plan (false: the static one). */
  readonly learned: boolean;
}

export interface PollSchedule {
  planFor(type: CaptchaType): TaskPollPlan;
  /**
   * A task of `type` was not ready at `lowMs` (0: the submit) and was read at `highMs`, unscaled,
   * by its `calls`-th res.php call (when known).
   */
  observe(type: CaptchaType, lowMs: number, highMs: number, calls?: number): void;
  /**
   * A task of `type` ended without an answer (its deadline, or the end of its calls) after
   * `calls` res.php calls: they count against the budget like an answered task's.
   */
  unanswered?(type: CaptchaType, calls: number): void;
}

export type ScheduleTimings = Pick<
  SolveTimings,
  'firstPollMs' | 'pollIntervalMs' | 'pollBudget' | 'deadlineMs'
>;

/** What a type's learned schedule is, for logs and metrics. */
export interface LearnedSchedule {
  captchaType: CaptchaType;
  /** Answers the schedule rests on (at most the summary's capacity). */
  observations: number;
  /** Of them, answers other environments shared. */
  sharedObservations: number;
  /** Poll times since the submit (the last is the deadline). */
  pollsMs: number[];
  firstPollMs: number;
  expectedCalls: number;
  expectedWaitMs: number;
}

function staticPlan(t: ScheduleTimings, type: CaptchaType): TaskPollPlan {
  return {
    learned: false,
    waitMs: (polls, since, slow) =>
      pollWaitMs(
        {
          pollBudget: t.pollBudget,
          deadlineMs: t.deadlineMs,
          firstPollMs: t.firstPollMs[type],
          intervalMs: t.pollIntervalMs[type] * (slow ? 2 : 1),
        },
        polls,
        since,
      ),
  };
}

/** CaptchaAI's published schedule for every task. */
export function staticPollSchedule(t: ScheduleTimings): PollSchedule {
  return { planFor: (type) => staticPlan(t, type), observe: () => undefined };
}

/**
 * A plan over fixed poll times (the last at the deadline). Poll times already passed (a server
 * error or a rate limit delayed a call) are skipped, not made in a burst; the last call the
 * ceiling allows is kept for the deadline.
 */
export function fixedPlan(
  pollsMs: readonly number[],
  t: Pick<ScheduleTimings, 'pollBudget' | 'deadlineMs'>,
): TaskPollPlan {
  return {
    learned: true,
    waitMs(polls, since, slow) {
      if (polls >= t.pollBudget) return undefined;
      const untilDeadline = Math.max(0, t.deadlineMs - since);
      if (polls === t.pollBudget - 1 && polls > 0) return untilDeadline;
      const j = pollsMs.findIndex((at) => at > since + 1e-6);
      if (j < 0) return untilDeadline;
      const at = pollsMs[j] as number;
      const gap = at - (j > 0 ? (pollsMs[j - 1] as number) : 0);
      return Math.min(untilDeadline, slow ? Math.max(at - since, 2 * gap) : at - since);
    },
  };
}

interface TypeState {
  summary: SolveTimeSummary;
  /** Other environments' recent answers, as last shared. */
  peers: SolveTimeInterval[];
  peersChanged: boolean;
  schedule: LearnedSchedule | undefined;
  computedAt: number;
  tasks: number;
  /** Of the last answers read on a learned plan: the calls each took, and what its schedule expected. */
  spent: { calls: number; expected: number }[];
  /** Answers observed since the environment started (the solve-time exchange counts new ones by it). */
  answers: number;
}

/**
 * The learned schedule of one execution environment (one instance per worker module, shared by
 * its solves and kept across key rotations). `onLearned` hears each recomputed schedule.
 */
export class LearnedPollSchedule implements PollSchedule {
  readonly #timings: ScheduleTimings;
  readonly #settings: PollScheduleSettings;
  readonly #onLearned: ((s: LearnedSchedule) => void) | undefined;
  readonly #types = new Map<CaptchaType, TypeState>();

  constructor(
    timings: ScheduleTimings,
    settings: Partial<PollScheduleSettings> = {},
    onLearned?: (s: LearnedSchedule) => void,
  ) {
    this.#timings = timings;
    this.#settings = { ...DEFAULT_POLL_SCHEDULE, ...settings };
    this.#onLearned = onLearned;
    if (!(this.#settings.meanBudget >= 1)) {
      throw new ConfigError('meanBudget', `must be >= 1, got ${this.#settings.meanBudget}`);
    }
    if (!(Number.isInteger(this.#settings.maxPollsPerTask) && this.#settings.maxPollsPerTask >= 2)) {
      throw new ConfigError(
        'maxPollsPerTask',
        `must be an integer >= 2, got ${this.#settings.maxPollsPerTask}`,
      );
    }
  }

  #state(type: CaptchaType): TypeState {
    let s = this.#types.get(type);
    if (!s) {
      s = {
        summary: new SolveTimeSummary(this.#settings.capacity),
        peers: [],
        peersChanged: false,
        schedule: undefined,
        computedAt: 0,
        tasks: 0,
        spent: [],
        answers: 0,
      };
      this.#types.set(type, s);
    }
    return s;
  }

  observe(type: CaptchaType, lowMs: number, highMs: number, calls?: number): void {
    if (!(highMs >= 0) || !Number.isFinite(highMs)) return;
    const s = this.#state(type);
    s.summary.add({ lowMs: Math.min(lowMs, highMs), highMs });
    s.answers += 1;
    if (calls !== undefined) this.#spend(s, calls);
  }

  unanswered(type: CaptchaType, calls: number): void {
    this.#spend(this.#state(type), calls);
  }

  /** Counts a learned task's res.php calls against what its schedule expected. */
  #spend(s: TypeState, calls: number): void {
    if (!s.schedule || !(calls >= 1)) return;
    s.spent.push({ calls, expected: s.schedule.expectedCalls });
    if (s.spent.length > SPENT_WINDOW) s.spent.shift();
  }

  /**
   * How many times its schedule's expectation the type's recent learned tasks spent, answered or
   * not (never below 1; SPENT_PRIOR_TASKS on-budget tasks weigh in beside them). The estimate is
   * censored and smoothed, and real calls are late by their round trips, so a schedule can spend
   * more than it expects; the next one plans with the budget divided by this, and the mean budget
   * holds as measured, not only as planned.
   */
  overspend(type: CaptchaType): number {
    const spent = this.#types.get(type)?.spent ?? [];
    if (spent.length === 0) return 1;
    const calls = spent.reduce((sum, t) => sum + t.calls, 0);
    const expected = spent.reduce((sum, t) => sum + t.expected, 0);
    const prior = (SPENT_PRIOR_TASKS * expected) / spent.length;
    return expected > 0 ? Math.max(1, (calls + prior) / (expected + prior)) : 1;
  }

  /** The types this environment has planned or observed. */
  types(): CaptchaType[] {
    return [...this.#types.keys()];
  }

  /** Answers of a type this environment observed since it started (its own, not the peers'). */
  answers(type: CaptchaType): number {
    return this.#types.get(type)?.answers ?? 0;
  }

  /** This environment's last `max` answers of a type, oldest first (what it shares). */
  recentObservations(type: CaptchaType, max: number): SolveTimeInterval[] {
    return this.#types.get(type)?.summary.recent(max) ?? [];
  }

  /** Other environments' recent answers of a type, replacing the ones they shared before. */
  setPeerObservations(type: CaptchaType, intervals: readonly SolveTimeInterval[]): void {
    const s = this.#state(type);
    s.peers = intervals
      .filter((o) => Number.isFinite(o.lowMs) && Number.isFinite(o.highMs) && o.highMs >= 0)
      .slice(-this.#settings.capacity);
    s.peersChanged = true;
  }

  /**
   * The type's current learned schedule (recomputed when enough answers came in since the last,
   * or other environments shared theirs).
   */
  scheduleOf(type: CaptchaType): LearnedSchedule | undefined {
    const s = this.#state(type);
    const seen = s.summary.total;
    if (s.summary.size + s.peers.length < this.#settings.minObservations) return undefined;
    if (s.schedule && !s.peersChanged && seen - s.computedAt < this.#settings.recomputeEvery) {
      return s.schedule;
    }
    const merged = this.#merged(s);
    s.schedule = this.#compute(type, merged, merged.size - Math.min(s.summary.size, merged.size));
    s.computedAt = seen;
    s.peersChanged = false;
    try {
      this.#onLearned?.(s.schedule);
    } catch {
      // Logging and metrics must never break a solve.
    }
    return s.schedule;
  }

  planFor(type: CaptchaType): TaskPollPlan {
    const schedule = this.scheduleOf(type);
    if (!schedule) return staticPlan(this.#timings, type);
    const s = this.#state(type);
    s.tasks += 1;
    let polls = schedule.pollsMs;
    const first = polls[0] ?? 0;
    const probe = this.#settings.probeEvery > 0 && s.tasks % this.#settings.probeEvery === 0;
    if (probe && first >= 2 * this.#settings.minGapMs) {
      const early = Math.round(first / 2 / this.#settings.stepMs) * this.#settings.stepMs;
      polls = [early, ...polls];
      // The ceiling holds: the probe takes the place of the last call before the deadline's.
      if (polls.length > this.#settings.maxPollsPerTask) polls.splice(polls.length - 2, 1);
    }
    return fixedPlan(polls, {
      pollBudget: this.#settings.maxPollsPerTask,
      deadlineMs: this.#timings.deadlineMs,
    });
  }

  /** Own answers and the peers' in one summary; the own ones are kept when both overflow it. */
  #merged(s: TypeState): SolveTimeSummary {
    if (s.peers.length === 0) return s.summary;
    const merged = new SolveTimeSummary(this.#settings.capacity);
    for (const o of s.peers) merged.add(o);
    for (const o of s.summary.recent()) merged.add(o);
    return merged;
  }

  #compute(type: CaptchaType, summary: SolveTimeSummary, shared: number): LearnedSchedule {
    const { stepMs } = this.#settings;
    const bins = Math.max(1, Math.round(this.#timings.deadlineMs / stepMs));
    const step = this.#timings.deadlineMs / bins;
    const raw = summary.distribution(step, bins);
    // The fewer answers seen, the wider the kernel (a few dozen answers say little about the next one).
    const widen = Math.min(2, Math.sqrt(30 / Math.max(1, summary.size)));
    const mass = smoothDistribution(raw, step, { baseMs: 500 * widen, relative: 0.06 * widen });
    // 1 % of the mass spread over the whole deadline: answers slower than any seen so far still
    // get polls where they cost little, instead of waiting for the deadline's call.
    const floor = 0.01 / bins;
    for (let b = 0; b < bins; b++) mass[b] = (mass[b] ?? 0) * 0.99 + floor;
    const r = optimizeSchedule({
      mass,
      stepMs: step,
      maxPolls: this.#settings.maxPollsPerTask,
      // One call of the budget is kept back: the estimate, smoothed and censored, spreads answers
      // wider than they are, and every `probeEvery`-th task polls once more than planned. What the
      // recent tasks spent beyond their schedule's expectation is taken off too.
      meanBudget: Math.max(1, (this.#settings.meanBudget - BUDGET_MARGIN_CALLS) / this.overspend(type)),
      minGapMs: this.#settings.minGapMs,
    });
    return {
      captchaType: type,
      observations: summary.size,
      sharedObservations: shared,
      pollsMs: r.pollsMs,
      firstPollMs: r.pollsMs[0] ?? this.#timings.deadlineMs,
      expectedCalls: r.expectedCalls,
      expectedWaitMs: r.expectedWaitMs,
    };
  }
}

/** The schedule a configuration asks for. */
export function createPollSchedule(
  timings: ScheduleTimings,
  settings: PollScheduleSettings,
  onLearned?: (s: LearnedSchedule) => void,
): PollSchedule {
  return settings.mode === 'static'
    ? staticPollSchedule(timings)
    : new LearnedPollSchedule(timings, settings, onLearned);
}
