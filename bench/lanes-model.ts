import { laneShape } from '../functions/pipeline/lanes.js';
import { takeWindowMs } from '../functions/worker/chain-window.js';
import { resolveConfig } from '../infra/config.js';
import { type SimTask, simulateLimit } from './simulate.js';

/**
 * The lanes' invocation tail, modelled on the bench's draws: what a plan can reach when the cap
 * is carried by r invocations of L lanes (functions/pipeline/lanes.ts) and each invocation ends
 * only when its last lane does. A lane takes the next record (arrival order, one queue for all)
 * while its invocation's take window is open (functions/worker/chain-window.ts); after it, each
 * lane finishes its record and stops, and finished lanes wait for the slowest one: the tail.
 * Only once the last lane has ended can the mapping start a new invocation in its place (the
 * reserved concurrency counts invocations), so a lane cannot restart on its own. With L = 1
 * there is no tail. Times are unscaled milliseconds, like ./simulate.ts.
 */

/**
 * The lanes-1 time-scale-1 bench (bench/results/lanes1-t20-n400-ts1-rerun.json,
 * `time_per_record_per_slot_ms`, steady state): a slot's cycle per record and the CaptchaAI thread
 * held in it. Their difference is what a lane holds a record beyond the thread (the wait for the
 * poll that reads the answer, the target's HTTP, the invocation's own work, the hand-over).
 */
export const LANES1_BENCH_CYCLE_MS = 39_535;
export const LANES1_BENCH_THREAD_HELD_MS = 38_157;
/** A lane holds each record this long beyond its solve (1,378 ms; see {@link LANES1_BENCH_CYCLE_MS}). */
export const LANE_OVERHEAD_MS = LANES1_BENCH_CYCLE_MS - LANES1_BENCH_THREAD_HELD_MS;

/**
 * The same run's time between invocations: `time_per_record_per_slot_ms.between_invocations`
 * (5 ms per record, steady state) over its 400 records, spread over the invocations that followed
 * another (`lambda.invocations` 118 − `lambda.first_invocations` 20): about 20 ms from one
 * invocation's end to the next one's start on the local stack.
 */
export const LANES1_BENCH_BETWEEN_MS_PER_RECORD = 5;
export const LANES1_BENCH_RECORDS = 400;
export const LANES1_BENCH_LATER_INVOCATIONS = 118 - 20;
export const RESTART_GAP_MS = Math.round(
  (LANES1_BENCH_BETWEEN_MS_PER_RECORD * LANES1_BENCH_RECORDS) / LANES1_BENCH_LATER_INVOCATIONS,
);

export interface LanesInput {
  /** The bench's draws in arrival order (./simulate.ts drawSolveTimes). */
  tasks: readonly SimTask[];
  /** r: invocations at once (the reserved concurrency). */
  invocations: number;
  /** L: lanes per invocation. */
  lanes: number;
  /** How long after its start an invocation's lanes may take a record. */
  windowMs: number;
  /** @default LANE_OVERHEAD_MS */
  laneOverheadMs?: number;
  /** From an invocation's end to the start of the one in its place. @default RESTART_GAP_MS */
  restartGapMs?: number;
  /** Plan threads the efficiency is over. @default invocations × lanes */
  threads?: number;
}

export interface LanesResult {
  invocations: number;
  lanes: number;
  windowMs: number;
  /** Busy thread-time ÷ (threads × first submit to last answer), as simulateLimit counts it. */
  efficiency: number;
  /** efficiency ÷ the ideal client's on the same draws with r × L slots. */
  shareOfLimit: number;
  spanMs: number;
  /** Lane time in invocations not holding a CaptchaAI thread, per record: the overhead and the tail. */
  idleLaneMsPerRecord: number;
  /** The tail alone: lane time from a lane's stop to its invocation's end, per record. */
  tailLaneMsPerRecord: number;
  /** Invocations started over the run. */
  invocationsRun: number;
  /** Most records holding a thread at once. */
  maxInFlight: number;
}

interface Invocation {
  startMs: number;
  /** Whether a lane has taken the record the mapping handed the invocation. */
  eventTaken: boolean;
  /** Lanes not yet stopped. */
  running: number;
  /** When each lane stopped (its last record ended). */
  stoppedAt: number[];
}

/**
 * The lanes' run on `tasks`: event-driven, the lane free earliest acts first (ties: the lower
 * lane), so the result is a function of the draws alone.
 */
export function simulateLanes(i: LanesInput): LanesResult {
  const { tasks, invocations: r, lanes: L, windowMs } = i;
  if (!(Number.isInteger(r) && Number.isInteger(L) && r >= 1 && L >= 1)) {
    throw new RangeError(`invocations and lanes must be integers >= 1, got r ${r}, L ${L}`);
  }
  const overhead = i.laneOverheadMs ?? LANE_OVERHEAD_MS;
  const gap = i.restartGapMs ?? RESTART_GAP_MS;
  const threads = i.threads ?? r * L;
  const invs: Invocation[] = Array.from({ length: r }, () => ({
    startMs: 0,
    eventTaken: false,
    running: L,
    stoppedAt: new Array<number>(L).fill(0),
  }));
  // When each lane acts next; undefined: stopped, waiting for its invocation's end.
  const freeAt: (number | undefined)[] = new Array(r * L).fill(0);
  const solving: { fromMs: number; toMs: number }[] = [];
  let next = 0;
  let busy = 0;
  let invocationLaneMs = 0;
  let tailMs = 0;
  let invocationsRun = r;
  for (;;) {
    let lane = -1;
    for (let l = 0; l < freeAt.length; l++) {
      const t = freeAt[l];
      if (t !== undefined && (lane < 0 || t < (freeAt[lane] as number))) lane = l;
    }
    if (lane < 0) break;
    const now = freeAt[lane] as number;
    const inv = invs[Math.floor(lane / L)] as Invocation;
    const own = lane % L;
    // The mapping hands each invocation one record (its event) whatever the window; the other
    // records are taken by the lanes' own receives while the window is open (chain-window.ts).
    if (next < tasks.length && (!inv.eventTaken || now - inv.startMs < windowMs)) {
      inv.eventTaken = true;
      const task = tasks[next++] as SimTask;
      busy += task.solveMs;
      solving.push({ fromMs: now, toMs: now + task.solveMs });
      freeAt[lane] = now + task.solveMs + overhead;
      continue;
    }
    freeAt[lane] = undefined;
    inv.stoppedAt[own] = now;
    inv.running -= 1;
    if (inv.running > 0) continue;
    // The last lane has ended (events come in time order, so `now` is the latest stop).
    invocationLaneMs += L * (now - inv.startMs);
    for (const stopped of inv.stoppedAt) tailMs += now - stopped;
    if (next >= tasks.length) continue;
    inv.startMs = now + gap;
    inv.eventTaken = false;
    inv.running = L;
    invocationsRun += 1;
    const first = Math.floor(lane / L) * L;
    for (let l = first; l < first + L; l++) freeAt[l] = inv.startMs;
  }
  const spanMs = solving.reduce((end, s) => Math.max(end, s.toMs), 0);
  const n = tasks.length;
  const efficiency = spanMs > 0 ? busy / (threads * spanMs) : Number.NaN;
  return {
    invocations: r,
    lanes: L,
    windowMs,
    efficiency,
    shareOfLimit: efficiency / simulateLimit(tasks, r * L, threads).efficiency,
    spanMs,
    idleLaneMsPerRecord: n ? (invocationLaneMs - busy) / n : Number.NaN,
    tailLaneMsPerRecord: n ? tailMs / n : Number.NaN,
    invocationsRun,
    maxInFlight: maxOverlap(solving),
  };
}

/** Most intervals open at once (an end and a start at the same instant do not overlap). */
function maxOverlap(intervals: readonly { fromMs: number; toMs: number }[]): number {
  const edges = intervals.flatMap((s) => [
    { t: s.fromMs, d: 1 },
    { t: s.toMs, d: -1 },
  ]);
  edges.sort((a, b) => a.t - b.t || a.d - b.d);
  let open = 0;
  let most = 0;
  for (const e of edges) {
    open += e.d;
    most = Math.max(most, open);
  }
  return most;
}

/**
 * The worker's take window at the stack's defaults (time scale 1) for `lanes`
 * (functions/worker/chain-window.ts, infra/config.ts), taking the whole default function timeout
 * as the time left at the start.
 */
export function defaultTakeWindowMs(lanes: number): number {
  const c = resolveConfig({});
  return takeWindowMs(
    {
      lanes,
      chainMs: c.chainSeconds * 1000,
      captchaTimings: {},
      timeScale: c.timeScale,
      targetTimeoutMs: c.targetTimeoutMs,
      cooldownMs: c.cooldownMs,
    },
    c.workerTimeoutSeconds * 1000,
  );
}

/** One window's lanes-1 and lanes-K figures. */
export interface LanesAtWindow {
  windowMs: number;
  lanes1: LanesResult;
  lanesK: LanesResult;
  /**
   * Lanes K's efficiency ÷ the ideal client's with every thread of the cap: below its share of
   * the limit when r × L leaves some of the cap unused (what the bench's measured share counts).
   */
  lanesKShareOfCapLimit: number;
}

/** What `threadgate bench --model-only --lanes K` prints about the tail. */
export interface LanesModel {
  cap: number;
  threads: number;
  /** The lanes setting K and the shape the stack gives the cap with it. */
  setting: number;
  r: number;
  L: number;
  laneOverheadMs: number;
  restartGapMs: number;
  /** At the worker's take windows ({@link defaultTakeWindowMs}: lanes 1's chain, lanes K's longer one). */
  today: LanesAtWindow;
  /** Lanes K at the chain's window alone, as the worker took records before lanes ran on while the shortest work fits. */
  chainOnly: LanesAtWindow;
  /** At the window asked for (--take-window-seconds). */
  asked?: LanesAtWindow;
}

/** Lanes 1 and lanes K on the same draws, at today's window and at `askedWindowMs`. */
export function lanesModel(o: {
  tasks: readonly SimTask[];
  cap: number;
  threads: number;
  lanes: number;
  askedWindowMs?: number;
}): LanesModel {
  const one = laneShape(o.cap, 1);
  const k = laneShape(o.cap, o.lanes);
  const capLimit = simulateLimit(o.tasks, o.cap, o.threads).efficiency;
  // Lanes 1 at `lanes1WindowMs` (its own window unless asked otherwise), lanes K at `windowMs`.
  const at = (windowMs: number, lanes1WindowMs = windowMs): LanesAtWindow => {
    const lanesK = simulateLanes({
      tasks: o.tasks,
      invocations: k.r,
      lanes: k.L,
      windowMs,
      threads: o.threads,
    });
    return {
      windowMs,
      lanes1: simulateLanes({
        tasks: o.tasks,
        invocations: one.r,
        lanes: one.L,
        windowMs: lanes1WindowMs,
        threads: o.threads,
      }),
      lanesK,
      lanesKShareOfCapLimit: lanesK.efficiency / capLimit,
    };
  };
  return {
    cap: o.cap,
    threads: o.threads,
    setting: o.lanes,
    r: k.r,
    L: k.L,
    laneOverheadMs: LANE_OVERHEAD_MS,
    restartGapMs: RESTART_GAP_MS,
    today: at(defaultTakeWindowMs(k.L), defaultTakeWindowMs(1)),
    chainOnly: at(defaultTakeWindowMs(1)),
    ...(o.askedWindowMs === undefined ? {} : { asked: at(o.askedWindowMs) }),
  };
}

/** The lanes model as a few lines of text. */
export function formatLanesModel(m: LanesModel): string {
  const f = (v: number, d = 3) => (Number.isFinite(v) ? v.toFixed(d) : 'n/a');
  const s = (ms: number, d = 1) => f(ms / 1000, d);
  const line = (label: string, x: LanesResult) =>
    `  ${label.padEnd(17)} ${f(x.efficiency)} = ${f(x.shareOfLimit)} of the limit; idle ${s(x.idleLaneMsPerRecord)} lane-s per record (tail ${s(x.tailLaneMsPerRecord)}), ${x.invocationsRun} invocations`;
  const windows = [
    {
      name: `the worker's take window (lanes 1: ${s(m.today.lanes1.windowMs)} s); lanes ${m.setting}:`,
      w: m.today,
    },
    { name: "the chain's window alone (the worker before lanes ran on)", w: m.chainOnly },
    ...(m.asked ? [{ name: 'take window asked', w: m.asked }] : []),
  ];
  const lines = [
    `lanes ${m.setting} at cap ${m.cap}: r ${m.r} invocations × L ${m.L} lanes = ${m.r * m.L} (lane overhead ${s(m.laneOverheadMs, 2)} s per record, ${m.restartGapMs} ms between invocations)`,
  ];
  for (const { name, w } of windows) {
    lines.push(`${name} ${s(w.windowMs)} s:`);
    lines.push(line(`lanes 1 (r ${w.lanes1.invocations})`, w.lanes1));
    lines.push(line(`lanes ${m.setting} (${w.lanesK.invocations}×${w.lanesK.lanes})`, w.lanesK));
    if (m.r * m.L < m.cap) {
      lines.push(
        `  lanes ${m.setting} with the ${m.cap - m.r * m.L} unused thread(s) of the cap counted: ${f(w.lanesKShareOfCapLimit)} of the cap's limit`,
      );
    }
  }
  return `${lines.join('\n')}\n`;
}
