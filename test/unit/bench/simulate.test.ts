import seedrandom from 'seedrandom';
import { describe, expect, it } from 'vitest';
import {
  DEFAULT_SIM_SHARING,
  drawSolveTimes,
  simulateLimit,
  simulateSchedule,
} from '../../../bench/simulate.js';
import { LearnedPollSchedule, staticPollSchedule } from '../../../functions/captchaai/poll-schedule.js';
import { DEFAULT_TIMINGS } from '../../../functions/captchaai/timings.js';
import { DEFAULT_LATENCY, parseLatency, sampleLatencyMs } from '../../../local/standins/captchaai/latency.js';

const v2 = (solveMs: number) => ({ type: 'recaptcha_v2' as const, solveMs });

describe('bench simulation on the stand-in draws', () => {
  it('draws what the stand-in draws: one sample of the seeded source per task, in order', () => {
    const random = seedrandom('7');
    const expected = [0, 1, 2].map(() => sampleLatencyMs(DEFAULT_LATENCY.recaptcha_v2, random()));
    expect(
      drawSolveTimes(['recaptcha_v2', 'recaptcha_v2', 'recaptcha_v2'], DEFAULT_LATENCY, 7).map(
        (t) => t.solveMs,
      ),
    ).toEqual(expected);
  });

  it('the limit is list scheduling in arrival order with no overhead', () => {
    // Two slots: 10 and 20 run at once, 30 starts on the slot freed at 10 and ends at 40.
    const r = simulateLimit([v2(10_000), v2(20_000), v2(30_000)], 2);
    expect(r.spanMs).toBe(40_000);
    expect(r.efficiency).toBeCloseTo(60_000 / (2 * 40_000), 9);
  });

  it('is 1 when every slot is busy to the end', () => {
    expect(simulateLimit([v2(10_000), v2(10_000), v2(5_000), v2(5_000)], 2).efficiency).toBe(1);
  });

  it('a schedule reads each answer at its first poll at or after it is ready', () => {
    // The static reCAPTCHA schedule polls at 15, 18, 21 s…: 16 s is read at 18 s, 10 s at 15 s.
    const r = simulateSchedule([v2(16_000), v2(10_000)], 1, () => staticPollSchedule(DEFAULT_TIMINGS));
    expect(r.spanMs).toBe(33_000);
    expect(r.meanWaitMs).toBe(3_500);
    expect(r.resPhpPerSolve).toBe(1.5);
    expect(r.efficiency).toBeCloseTo(26_000 / 33_000, 9);
  });

  it('a task slower than every poll but the deadline is read at the deadline', () => {
    const r = simulateSchedule([v2(70_000)], 1, () => staticPollSchedule(DEFAULT_TIMINGS));
    expect(r.spanMs).toBe(120_000);
    expect(r.resPhpMaxPerTask).toBe(DEFAULT_TIMINGS.pollBudget);
  });

  it('gives each slot its own schedule', () => {
    const made: number[] = [];
    simulateSchedule([v2(1_000), v2(1_000), v2(1_000)], 2, (slot) => {
      made.push(slot);
      return staticPollSchedule(DEFAULT_TIMINGS);
    });
    expect(made.sort()).toEqual([0, 1]);
  });

  it('shares answers between slots only once the slot that read them has exchanged', () => {
    // Slot 0 reads a 4 s answer at 15 s and exchanges when its next task starts there; slot 1
    // reads its 20 s answer at 21 s and hears slot 0's answer when its next task starts.
    const schedules: LearnedPollSchedule[] = [];
    const tasks = [v2(4_000), v2(20_000), v2(30_000), v2(4_000)];
    simulateSchedule(
      tasks,
      2,
      () => {
        const s = new LearnedPollSchedule(DEFAULT_TIMINGS, { minObservations: 1 });
        schedules.push(s);
        return s;
      },
      2,
      { ...DEFAULT_SIM_SHARING, everyMs: 0, items: 1_000 },
    );
    expect(schedules[1]!.scheduleOf('recaptcha_v2')?.sharedObservations).toBe(1);
    // Slot 0 exchanged before slot 1 had written anything: it heard nothing.
    expect(schedules[0]!.scheduleOf('recaptcha_v2')?.sharedObservations).toBe(0);
  });

  it('sharing lets a plan faster than the static first poll be learned sooner', () => {
    const latency = { ...DEFAULT_LATENCY, recaptcha_v2: parseLatency('lognormal:12,0.4') };
    const tasks = drawSolveTimes(Array<'recaptcha_v2'>(400).fill('recaptcha_v2'), latency, 1);
    const learned = () => new LearnedPollSchedule(DEFAULT_TIMINGS);
    const alone = simulateSchedule(tasks, 20, learned, 20);
    const shared = simulateSchedule(tasks, 20, learned, 20, { ...DEFAULT_SIM_SHARING, seed: 1 });
    expect(shared.efficiency).toBeGreaterThan(alone.efficiency + 0.01);
    expect(shared.resPhpPerSolve).toBeLessThanOrEqual(12);
  });
});
