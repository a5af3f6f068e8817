import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  defaultTakeWindowMs,
  LANE_OVERHEAD_MS,
  LANES1_BENCH_BETWEEN_MS_PER_RECORD,
  LANES1_BENCH_CYCLE_MS,
  LANES1_BENCH_LATER_INVOCATIONS,
  LANES1_BENCH_RECORDS,
  LANES1_BENCH_THREAD_HELD_MS,
  lanesModel,
  simulateLanes,
} from '../../../bench/lanes-model.js';
import { benchModel } from '../../../bench/model-only.js';
import { drawSolveTimes } from '../../../bench/simulate.js';
import { laneShape } from '../../../functions/pipeline/lanes.js';
import {
  DEADLINE_MARGIN_MS,
  shortestRecordMs,
  worstCaseRecordMs,
} from '../../../functions/worker/worst-case.js';
import { resolveConfig, worstCaseAttemptMs } from '../../../infra/config.js';
import { DEFAULT_LATENCY } from '../../../local/standins/captchaai/latency.js';

const v2 = (solveMs: number) => ({ type: 'recaptcha_v2' as const, solveMs });
/** The bench's draws of the lanes runs: reCAPTCHA v2 at the stand-in's default latency, seed 1. */
const benchDraws = (records: number) =>
  drawSolveTimes(Array(records).fill('recaptcha_v2'), DEFAULT_LATENCY, 1);

describe('the lanes model (the invocations’ tail)', () => {
  it('an invocation ends with its last lane: finished lanes wait, none restarts alone', () => {
    // One invocation of two lanes, a window that closes at once: the lanes take 10 s and 100 s
    // at 0; the first lane stops at 10 s and waits 90 s for the second; the next invocation
    // starts 0.5 s after 100 s and its lanes take the last two records.
    const r = simulateLanes({
      tasks: [v2(10_000), v2(100_000), v2(10_000), v2(10_000)],
      invocations: 1,
      lanes: 2,
      windowMs: 1,
      laneOverheadMs: 0,
      restartGapMs: 500,
    });
    expect(r.spanMs).toBe(110_500);
    expect(r.tailLaneMsPerRecord).toBe(90_000 / 4);
    expect(r.idleLaneMsPerRecord).toBe(90_000 / 4);
    expect(r.invocationsRun).toBe(2);
    expect(r.efficiency).toBeCloseTo(130_000 / (2 * 110_500), 9);
  });

  it('takes the event record of an invocation even with no window, and no other', () => {
    const r = simulateLanes({
      tasks: [v2(10_000), v2(10_000), v2(10_000)],
      invocations: 1,
      lanes: 3,
      windowMs: 0,
      laneOverheadMs: 0,
      restartGapMs: 1_000,
    });
    expect(r.invocationsRun).toBe(3);
    expect(r.spanMs).toBe(32_000);
  });

  it('one lane has no tail: a lane idles only for its overhead per record', () => {
    const r = simulateLanes({
      tasks: benchDraws(400),
      invocations: 20,
      lanes: 1,
      windowMs: defaultTakeWindowMs(1),
    });
    expect(r.tailLaneMsPerRecord).toBe(0);
    expect(r.idleLaneMsPerRecord).toBeCloseTo(LANE_OVERHEAD_MS, 6);
  });

  it('with lanes the share rises with the window and stays below one lane’s', () => {
    const tasks = benchDraws(400);
    const { r, L } = laneShape(20, 8);
    const windows = [defaultTakeWindowMs(1), 300_000, 615_000];
    const lanesK = windows.map((windowMs) => simulateLanes({ tasks, invocations: r, lanes: L, windowMs }));
    const lanes1 = windows.map((windowMs) => simulateLanes({ tasks, invocations: 20, lanes: 1, windowMs }));
    for (let i = 1; i < windows.length; i++) {
      expect(lanesK[i]!.shareOfLimit).toBeGreaterThan(lanesK[i - 1]!.shareOfLimit);
      expect(lanesK[i]!.tailLaneMsPerRecord).toBeLessThan(lanesK[i - 1]!.tailLaneMsPerRecord);
    }
    for (let i = 0; i < windows.length; i++) {
      expect(lanesK[i]!.shareOfLimit).toBeLessThan(lanes1[i]!.shareOfLimit);
      expect(lanesK[i]!.tailLaneMsPerRecord).toBeGreaterThan(0);
    }
  });

  it('carries the cap as the stack does: r × L from laneShape, never more in flight than the cap', () => {
    const tasks = benchDraws(120);
    for (const cap of [2, 3, 7, 12, 20, 33, 50, 100]) {
      for (const lanes of [2, 8, 16]) {
        const m = lanesModel({ tasks, cap, threads: cap, lanes, askedWindowMs: 615_000 });
        const shape = laneShape(cap, lanes);
        expect({ r: m.r, L: m.L }).toEqual({ r: shape.r, L: shape.L });
        expect(m.r * m.L).toBeLessThanOrEqual(cap);
        for (const w of [m.today, m.asked!]) {
          expect(w.lanesK.maxInFlight).toBeLessThanOrEqual(cap);
          expect(w.lanes1.maxInFlight).toBeLessThanOrEqual(cap);
        }
      }
    }
  });

  it('is a function of the draws alone', () => {
    const tasks = benchDraws(200);
    const once = () => simulateLanes({ tasks, invocations: 4, lanes: 5, windowMs: 117_000 });
    expect(once()).toEqual(once());
  });

  it("the worker's take window: one lane's is the chain's within the default timeout above one worst case; lanes run on while the shortest work fits", () => {
    const c = resolveConfig({});
    const timeoutMs = c.workerTimeoutSeconds * 1000;
    expect(defaultTakeWindowMs(1)).toBe(
      Math.min(c.chainSeconds * 1000, timeoutMs - DEADLINE_MARGIN_MS - worstCaseAttemptMs(c)),
    );
    const worst = { timeScale: c.timeScale, targetTimeoutMs: c.targetTimeoutMs, cooldownMs: c.cooldownMs };
    const shortest = shortestRecordMs(worst);
    expect(defaultTakeWindowMs(5)).toBe(
      Math.min(
        c.chainSeconds * 1000 + worstCaseRecordMs(worst) - shortest,
        timeoutMs - DEADLINE_MARGIN_MS - shortest,
      ),
    );
    expect(defaultTakeWindowMs(5)).toBeGreaterThan(3 * defaultTakeWindowMs(1));
  });

  it('takes its overhead and restart gap from the lanes-1 time-scale-1 bench', () => {
    const run = JSON.parse(
      readFileSync(new URL('../../../bench/results/lanes1-t20-n400-ts1-rerun.json', import.meta.url), 'utf8'),
    );
    const slot = run.time_per_record_per_slot_ms;
    expect(run.config.lanes.L).toBe(1);
    expect(run.config.time_scale).toBe(1);
    expect(LANES1_BENCH_CYCLE_MS).toBe(slot.cycle);
    expect(LANES1_BENCH_THREAD_HELD_MS).toBe(slot.captcha_thread_held);
    expect(LANES1_BENCH_BETWEEN_MS_PER_RECORD).toBe(slot.between_invocations);
    expect(LANES1_BENCH_RECORDS).toBe(run.config.records);
    expect(LANES1_BENCH_LATER_INVOCATIONS).toBe(run.lambda.invocations - run.lambda.first_invocations);
  });

  it('bench --model-only carries the lanes figures only when lanes or a window are asked for', () => {
    const base = { threads: 20, cap: 20, records: 60, seed: 1, mix: { recaptcha_v2: 1 } };
    expect(benchModel(base).lanes).toBeUndefined();
    const m = benchModel({ ...base, lanes: 8, takeWindowSeconds: 420 });
    expect(m.lanes).toMatchObject({ setting: 8, r: 4, L: 5 });
    expect(m.lanes?.asked?.windowMs).toBe(420_000);
    expect(m.lanes?.today.windowMs).toBe(defaultTakeWindowMs(5));
    expect(m.lanes?.today.lanes1.windowMs).toBe(defaultTakeWindowMs(1));
    expect(m.lanes?.chainOnly.windowMs).toBe(defaultTakeWindowMs(1));
  });
});
