import seedrandom from 'seedrandom';
import {
  LearnedPollSchedule,
  type PollSchedule,
  type PollScheduleMode,
  type PollScheduleSettings,
  type ScheduleTimings,
  staticPollSchedule,
} from '../functions/captchaai/poll-schedule.js';
import type { SolveTimeInterval } from '../functions/captchaai/solve-time-summary.js';
import type { CaptchaType } from '../functions/captchaai/types.js';
import { evenShare, SOLVE_TIME_EXCHANGE_DEFAULTS } from '../functions/pipeline/solve-time-exchange.js';
import { type LatencyDistribution, sampleLatencyMs } from '../local/standins/captchaai/latency.js';

/**
 * The benchmark's model runs on the stand-in's own draws, with no pipeline: what a client could
 * reach on exactly those solve times with the same slots, records taken in arrival order.
 * - `simulateLimit`: the ideal client, which sees every answer the moment it is ready and has no
 *   overhead (the "limit"); its whole-run efficiency includes the ramp-up and the drain
 *   any client of the plan has on a finite run.
 * - `simulateSchedule`: the same, but each slot reads its answer at a poll of a schedule (one
 *   schedule per slot, as each execution environment keeps its own), so the loss to polling is
 *   told apart from the loss to the pipeline.
 * Times are unscaled milliseconds.
 */

export interface SimTask {
  type: CaptchaType;
  /** Time the task holds a CaptchaAI thread (the stand-in's latency). */
  solveMs: number;
}

export interface SimResult {
  /** Busy thread-time ÷ (plan threads × first submit to last answer). */
  efficiency: number;
  spanMs: number;
  /** res.php calls per solve (the answering call included). */
  resPhpPerSolve: number;
  resPhpMaxPerTask: number;
  /** Mean time from ready to read. */
  meanWaitMs: number;
  /** Tasks whose answer no poll read before the deadline. */
  timedOut: number;
}

/**
 * The stand-in's solve times for tasks of these types in this order: one draw of
 * `seedrandom(String(seed))` per task, as the stand-in makes them (latency.ts).
 */
export function drawSolveTimes(
  types: readonly CaptchaType[],
  latency: Readonly<Record<CaptchaType, LatencyDistribution>>,
  seed: number,
): SimTask[] {
  const random = seedrandom(String(seed));
  return types.map((type) => ({ type, solveMs: sampleLatencyMs(latency[type], random()) }));
}

/** When one task's answer is read on `schedule`, and with how many calls; undefined: never. */
function readAt(
  schedule: PollSchedule,
  task: SimTask,
): { atMs: number; calls: number } | { timedOutAtMs: number; calls: number } {
  const plan = schedule.planFor(task.type);
  let since = 0;
  let calls = 0;
  let notReadyAt = 0;
  for (;;) {
    const wait = plan.waitMs(calls, since, false);
    if (wait === undefined) return { timedOutAtMs: since, calls };
    since += wait;
    calls += 1;
    if (since >= task.solveMs) {
      schedule.observe(task.type, notReadyAt, since, calls);
      return { atMs: since, calls };
    }
    notReadyAt = since;
  }
}

function run(
  tasks: readonly SimTask[],
  slots: number,
  threads: number,
  read: (
    slot: number,
    task: SimTask,
    startMs: number,
  ) => { heldMs: number; calls: number; timedOut: boolean },
): SimResult {
  if (!(slots >= 1 && threads >= 1)) throw new RangeError('slots and threads must be >= 1');
  const freeAt = new Array<number>(Math.min(slots, Math.max(1, tasks.length))).fill(0);
  let busy = 0;
  let end = 0;
  let calls = 0;
  let maxCalls = 0;
  let wait = 0;
  let timedOut = 0;
  for (const task of tasks) {
    let slot = 0;
    for (let s = 1; s < freeAt.length; s++) if ((freeAt[s] as number) < (freeAt[slot] as number)) slot = s;
    const start = freeAt[slot] as number;
    const r = read(slot, task, start);
    busy += task.solveMs;
    calls += r.calls;
    maxCalls = Math.max(maxCalls, r.calls);
    if (r.timedOut) timedOut += 1;
    else wait += r.heldMs - task.solveMs;
    freeAt[slot] = start + r.heldMs;
    end = Math.max(end, start + r.heldMs);
  }
  const n = tasks.length;
  return {
    efficiency: end > 0 ? busy / (threads * end) : Number.NaN,
    spanMs: end,
    resPhpPerSolve: n ? calls / n : Number.NaN,
    resPhpMaxPerTask: maxCalls,
    meanWaitMs: n - timedOut > 0 ? wait / (n - timedOut) : Number.NaN,
    timedOut,
  };
}

/** The ideal client: answers seen at once, no overhead. */
export function simulateLimit(tasks: readonly SimTask[], slots: number, threads = slots): SimResult {
  return run(tasks, slots, threads, (_slot, task) => ({ heldMs: task.solveMs, calls: 0, timedOut: false }));
}

/** How environments share solve times (functions/pipeline/solve-time-exchange.ts). */
export interface SimSharing {
  /** Shortest time between two exchanges of one slot. */
  everyMs: number;
  /** Items per type in the shared table (slots pick one at random, seeded). */
  items: number;
  /** Own answers written per exchange. */
  share: number;
  /** Others' answers kept. */
  keep: number;
  seed: number;
}

/** The worker's exchange settings (functions/worker.ts, functions/pipeline/solve-time-exchange.ts). */
export const DEFAULT_SIM_SHARING: SimSharing = {
  everyMs: SOLVE_TIME_EXCHANGE_DEFAULTS.everyMs,
  items: SOLVE_TIME_EXCHANGE_DEFAULTS.slots,
  share: SOLVE_TIME_EXCHANGE_DEFAULTS.share,
  keep: SOLVE_TIME_EXCHANGE_DEFAULTS.keep,
  seed: 0,
};

type SharedItems = Map<string, { slot: number; intervals: SolveTimeInterval[] }>;

/**
 * One slot's exchange at `atMs`, as the worker makes it: write its last answers of each type to
 * its item (overwriting whoever wrote there before), then take every other slot's latest items.
 */
function exchangeAt(
  sharing: SimSharing,
  items: SharedItems,
  slot: number,
  item: number,
  schedule: LearnedPollSchedule,
): void {
  for (const type of schedule.types()) {
    const own = schedule.recentObservations(type, sharing.share);
    if (own.length > 0) items.set(`${type}#${item}`, { slot, intervals: own });
  }
  const peers = new Map<CaptchaType, SolveTimeInterval[][]>();
  for (const [key, v] of items) {
    if (v.slot === slot) continue;
    const type = key.split('#')[0] as CaptchaType;
    peers.set(type, [...(peers.get(type) ?? []), v.intervals]);
  }
  for (const [type, lists] of peers) schedule.setPeerObservations(type, evenShare(lists, sharing.keep));
}

/**
 * A client that reads answers on a poll schedule; `scheduleFor(slot)` is called once per slot.
 * With `sharing`, each slot's learned schedule exchanges solve times with the others' at most
 * every `everyMs` (at the start of a task, as the worker does beside a record), and an answer
 * counts in an exchange only once the slot that read it has exchanged since.
 */
export function simulateSchedule(
  tasks: readonly SimTask[],
  slots: number,
  scheduleFor: (slot: number) => PollSchedule,
  threads = slots,
  sharing?: SimSharing,
): SimResult {
  const schedules = new Map<number, PollSchedule>();
  const lastExchange = new Map<number, number>();
  const itemOf = new Map<number, number>();
  const items: SharedItems = new Map();
  const random = seedrandom(`share-${sharing?.seed ?? 0}`);
  return run(tasks, slots, threads, (slot, task, startMs) => {
    let schedule = schedules.get(slot);
    if (!schedule) {
      schedule = scheduleFor(slot);
      schedules.set(slot, schedule);
      itemOf.set(slot, Math.floor(random() * (sharing?.items ?? 1)));
    }
    if (sharing && schedule instanceof LearnedPollSchedule) {
      const last = lastExchange.get(slot) ?? Number.NEGATIVE_INFINITY;
      if (startMs - last >= sharing.everyMs) {
        lastExchange.set(slot, startMs);
        exchangeAt(sharing, items, slot, itemOf.get(slot) ?? 0, schedule);
      }
    }
    const r = readAt(schedule, task);
    // A task no poll read holds its slot to the deadline's call (the worker's cool-down aside).
    return 'atMs' in r
      ? { heldMs: r.atMs, calls: r.calls, timedOut: false }
      : { heldMs: Math.max(r.timedOutAtMs, task.solveMs), calls: r.calls, timedOut: true };
  });
}

/** Answers per type the informed schedule is told, and the seed offset of their draw. */
const INFORMED_ANSWERS = 256;
const INFORMED_SEED_OFFSET = 1_000_003;

/** What the bench's report says about its draws, beside the measured figures. */
export interface ModelFigures {
  /** The ideal client's whole-run efficiency on the draws. */
  limit: number;
  /** Each schedule, simulated on the same draws with no pipeline. */
  schedules: Record<PollScheduleMode, SimResult>;
  /**
   * The learned schedule told the true distribution before the first task (256 other draws of
   * it per type, as exact answers; no cold start, no censoring): what placing polls within the
   * same budget and ceiling can reach at best, so the loss to the learning is told apart from the
   * loss to polling itself.
   */
  informed: SimResult;
}

/**
 * The limit and the schedules simulated on a run's draws: the stand-in's solve times for the
 * records' types in arrival order (seeded like the stand-in), `slots` = the cap, one schedule
 * per slot as each execution environment keeps its own.
 */
export function modelFigures(i: {
  types: readonly CaptchaType[];
  latency: Readonly<Record<CaptchaType, LatencyDistribution>>;
  seed: number;
  slots: number;
  threads: number;
  timings: ScheduleTimings;
  settings: PollScheduleSettings;
  /** The environments share solve times (the stack has the solve-times table). @default DEFAULT_SIM_SHARING */
  sharing?: SimSharing | false;
}): ModelFigures {
  const tasks = drawSolveTimes(i.types, i.latency, i.seed);
  const used = [...new Set(i.types)];
  const truth = new Map(
    used.map((type) => [
      type,
      drawSolveTimes(Array(INFORMED_ANSWERS).fill(type), i.latency, i.seed + INFORMED_SEED_OFFSET).map(
        (t) => ({
          lowMs: t.solveMs,
          highMs: t.solveMs,
        }),
      ),
    ]),
  );
  const informed = () => {
    const schedule = new LearnedPollSchedule(i.timings, i.settings);
    for (const [type, answers] of truth) schedule.setPeerObservations(type, answers);
    return schedule;
  };
  return {
    informed: simulateSchedule(tasks, i.slots, informed, i.threads),
    limit: simulateLimit(tasks, i.slots, i.threads).efficiency,
    schedules: {
      static: simulateSchedule(tasks, i.slots, () => staticPollSchedule(i.timings), i.threads),
      learned: simulateSchedule(
        tasks,
        i.slots,
        () => new LearnedPollSchedule(i.timings, i.settings),
        i.threads,
        i.sharing === false ? undefined : (i.sharing ?? { ...DEFAULT_SIM_SHARING, seed: i.seed }),
      ),
    },
  };
}
