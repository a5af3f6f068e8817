import { describe, expect, it } from 'vitest';
import {
  createPollSchedule,
  DEFAULT_POLL_SCHEDULE,
  fixedPlan,
  LearnedPollSchedule,
  type LearnedSchedule,
  readPollScheduleFromEnv,
  staticPollSchedule,
  type TaskPollPlan,
} from '../../../../functions/captchaai/poll-schedule.js';
import { optimizeSchedule } from '../../../../functions/captchaai/schedule-optimizer.js';
import { SolveTimeSummary, smoothDistribution } from '../../../../functions/captchaai/solve-time-summary.js';
import { DEFAULT_TIMINGS, pollWaitMs } from '../../../../functions/captchaai/timings.js';
import { ConfigError } from '../../../../functions/common/errors.js';

/** The poll times (since the submit) a plan makes for a task that is never ready. */
function pollTimes(plan: TaskPollPlan, slow = false): number[] {
  const out: number[] = [];
  let since = 0;
  for (let polls = 0; ; polls++) {
    const w = plan.waitMs(polls, since, slow);
    if (w === undefined || polls > 100) return out;
    since += w;
    out.push(since);
    if (since >= DEFAULT_TIMINGS.deadlineMs) return out;
  }
}

/** Feeds a schedule the intervals a task ready at `readyMs` would give on its own plan. */
function solveOn(schedule: LearnedPollSchedule, readyMs: number): number {
  const plan = schedule.planFor('recaptcha_v2');
  let since = 0;
  let low = 0;
  for (let polls = 0; ; polls++) {
    const w = plan.waitMs(polls, since, false);
    if (w === undefined) return Number.NaN;
    since += w;
    if (since >= readyMs) {
      schedule.observe('recaptcha_v2', low, since);
      return since;
    }
    low = since;
  }
}

describe('solve-time summary (interval-censored)', () => {
  it('gives its most recent observations oldest first, also after the ring wrapped', () => {
    const s = new SolveTimeSummary(3);
    for (let i = 1; i <= 5; i++) s.add({ lowMs: 0, highMs: i * 1_000 });
    expect(s.recent().map((o) => o.highMs)).toEqual([3_000, 4_000, 5_000]);
    expect(s.recent(2).map((o) => o.highMs)).toEqual([4_000, 5_000]);
    expect(s.recent(0)).toEqual([]);
  });

  it('puts all mass inside the observed intervals and sums to 1', () => {
    // Prepare
    const s = new SolveTimeSummary(10);
    s.add({ lowMs: 15_000, highMs: 18_000 });
    s.add({ lowMs: 15_000, highMs: 18_000 });
    s.add({ lowMs: 0, highMs: 15_000 });

    // Act
    const p = s.distribution(1_000, 120);

    // Assess
    const total = p.reduce((a, b) => a + b, 0);
    expect(total).toBeCloseTo(1, 9);
    const inside = p.slice(15, 18).reduce((a, b) => a + b, 0);
    const before = p.slice(0, 15).reduce((a, b) => a + b, 0);
    // The (0, 15] answer is spread where nothing else is known: evenly.
    expect(before).toBeCloseTo(1 / 3, 6);
    expect(inside).toBeCloseTo(2 / 3, 6);
    expect(p[5]).toBeCloseTo(p[10] as number, 9);
  });

  it('moves the mass of a wide interval to where narrower observations say answers are', () => {
    // Prepare: ten answers known to be in (5, 6] s, one only known to be in (0, 15].
    const s = new SolveTimeSummary();
    for (let i = 0; i < 10; i++) s.add({ lowMs: 5_000, highMs: 6_000 });
    s.add({ lowMs: 0, highMs: 15_000 });

    // Act
    const p = s.distribution(1_000, 120);

    // Assess: the wide one sits in (5, 6] too, not evenly over (0, 15].
    expect(p[5]).toBeGreaterThan(0.99);
  });

  it('keeps only the last `capacity` observations', () => {
    const s = new SolveTimeSummary(2);
    s.add({ lowMs: 0, highMs: 1_000 });
    s.add({ lowMs: 10_000, highMs: 11_000 });
    s.add({ lowMs: 10_000, highMs: 11_000 });
    expect(s.size).toBe(2);
    expect(s.total).toBe(3);
    expect(s.distribution(1_000, 20)[0]).toBe(0);
  });

  it('smoothing keeps the mass and spreads it around each bin', () => {
    const p = new Float64Array(100);
    p[50] = 1;
    const q = smoothDistribution(p, 500, { baseMs: 500, relative: 0.05 });
    expect(q.reduce((a, b) => a + b, 0)).toBeCloseTo(1, 9);
    expect(q[50]).toBeLessThan(1);
    expect(q[48]).toBeGreaterThan(0);
    expect(q[52]).toBeCloseTo(q[48] as number, 2);
  });
});

describe('schedule optimizer', () => {
  it('with answers all ready in one bin, polls once at its end and once at the deadline', () => {
    // Prepare
    const mass = new Float64Array(120);
    mass[20] = 1;

    // Act
    const r = optimizeSchedule({ mass, stepMs: 1_000, maxPolls: 17, meanBudget: 12, minGapMs: 1_000 });

    // Assess
    expect(r.pollsMs[0]).toBe(21_000);
    expect(r.pollsMs.at(-1)).toBe(120_000);
    expect(r.expectedWaitMs).toBeCloseTo(500, 6);
    expect(r.expectedCalls).toBeCloseTo(1, 6);
  });

  it.each([4, 8, 12])('keeps the expected calls within a mean budget of %s', (meanBudget) => {
    // Prepare: uniform over 15–60 s.
    const mass = new Float64Array(240);
    for (let b = 30; b < 120; b++) mass[b] = 1 / 90;

    // Act
    const r = optimizeSchedule({ mass, stepMs: 500, maxPolls: 30, meanBudget, minGapMs: 1_000 });

    // Assess
    expect(r.expectedCalls).toBeLessThanOrEqual(meanBudget + 1e-9);
    expect(r.pollsMs.length).toBeLessThanOrEqual(30);
    expect(r.pollsMs.at(-1)).toBe(120_000);
    // Nothing is ready before 15 s: no call is spent there.
    expect(r.pollsMs[0]).toBeGreaterThan(15_000);
  });

  it('spends a larger budget on a shorter wait, and never polls closer than the minimum gap', () => {
    const mass = new Float64Array(240);
    for (let b = 30; b < 120; b++) mass[b] = 1 / 90;
    const small = optimizeSchedule({ mass, stepMs: 500, maxPolls: 30, meanBudget: 5, minGapMs: 1_000 });
    const large = optimizeSchedule({ mass, stepMs: 500, maxPolls: 30, meanBudget: 12, minGapMs: 1_000 });
    expect(large.expectedWaitMs).toBeLessThan(small.expectedWaitMs);
    const gaps = large.pollsMs.map((t, i) => t - (large.pollsMs[i - 1] ?? 0));
    expect(Math.min(...gaps)).toBeGreaterThanOrEqual(1_000);
  });

  it('holds the per-task ceiling', () => {
    const mass = new Float64Array(240);
    for (let b = 0; b < 240; b++) mass[b] = 1 / 240;
    const r = optimizeSchedule({ mass, stepMs: 500, maxPolls: 5, meanBudget: 19, minGapMs: 1_000 });
    expect(r.pollsMs).toHaveLength(5);
  });
});

describe('poll schedules', () => {
  it("counts other environments' answers beside its own, its own kept when both overflow", () => {
    const learned = new LearnedPollSchedule(DEFAULT_TIMINGS, { capacity: 8, minObservations: 3 });
    learned.setPeerObservations('turnstile', [
      { lowMs: 0, highMs: 4_000 },
      { lowMs: 4_000, highMs: 5_000 },
    ]);
    expect(learned.scheduleOf('turnstile')).toBeUndefined();
    learned.observe('turnstile', 3_000, 4_500);
    expect(learned.scheduleOf('turnstile')).toMatchObject({ observations: 3, sharedObservations: 2 });
    learned.setPeerObservations(
      'turnstile',
      Array.from({ length: 20 }, () => ({ lowMs: 40_000, highMs: 41_000 })),
    );
    // 8 kept: the own answer and the 7 latest shared ones.
    expect(learned.scheduleOf('turnstile')).toMatchObject({ observations: 8, sharedObservations: 7 });
    learned.setPeerObservations('turnstile', [{ lowMs: 0, highMs: Number.NaN }]);
    // Malformed shared answers are dropped: one own answer is below the minimum again.
    expect(learned.scheduleOf('turnstile')).toBeUndefined();
    expect(learned.recentObservations('turnstile', 5)).toEqual([{ lowMs: 3_000, highMs: 4_500 }]);
  });

  it('the static schedule is pollWaitMs of the timings, doubled intervals while slow', () => {
    const plan = staticPollSchedule(DEFAULT_TIMINGS).planFor('recaptcha_v2');
    const t = { ...DEFAULT_TIMINGS, firstPollMs: 15_000, intervalMs: 3_000 };
    expect(plan.learned).toBe(false);
    for (const [polls, since] of [
      [0, 0],
      [1, 15_000],
      [16, 63_000],
      [17, 120_000],
    ] as const) {
      expect(plan.waitMs(polls, since, false)).toBe(pollWaitMs(t, polls, since));
    }
    expect(plan.waitMs(1, 15_000, true)).toBe(6_000);
  });

  it('a fixed plan skips poll times already passed and keeps the last call for the deadline', () => {
    const plan = fixedPlan([5_000, 6_000, 7_000, 20_000, 120_000], { pollBudget: 4, deadlineMs: 120_000 });
    // A server error delayed the second call to 9 s: 6 and 7 s are skipped, not made at once.
    expect(plan.waitMs(1, 9_000, false)).toBe(11_000);
    // The fourth call is the ceiling's last: it waits for the deadline.
    expect(plan.waitMs(3, 20_000, false)).toBe(100_000);
    expect(plan.waitMs(4, 120_000, false)).toBeUndefined();
    expect(pollTimes(fixedPlan([5_000, 120_000], { pollBudget: 4, deadlineMs: 120_000 }))).toEqual([
      5_000, 120_000,
    ]);
  });

  it('starts on the static schedule and learns to poll early when answers come early', () => {
    // Prepare
    const learned: LearnedSchedule[] = [];
    const schedule = new LearnedPollSchedule(DEFAULT_TIMINGS, { probeEvery: 0 }, (s) => learned.push(s));
    const cold = pollTimes(schedule.planFor('recaptcha_v2'));
    expect(cold.slice(0, 2)).toEqual([15_000, 18_000]);

    // Act: answers ready at 5–8 s, read on the schedule each task gets.
    const seen: number[] = [];
    for (let i = 0; i < 40; i++) seen.push(solveOn(schedule, 5_000 + (i % 4) * 1_000));

    // Assess
    expect(seen[0]).toBe(15_000);
    const plan = schedule.planFor('recaptcha_v2');
    expect(plan.learned).toBe(true);
    const first = pollTimes(plan)[0] as number;
    expect(first).toBeLessThan(8_000);
    expect(learned.at(-1)?.expectedCalls).toBeLessThanOrEqual(DEFAULT_POLL_SCHEDULE.meanBudget);
    // The last ten tasks were read within about a second of being ready.
    const waits = seen.slice(-10).map((s, i) => s - (5_000 + ((30 + i) % 4) * 1_000));
    expect(Math.max(...waits)).toBeLessThanOrEqual(1_500);
  });

  it('probes before the learned first poll every probeEvery-th task', () => {
    const schedule = new LearnedPollSchedule(DEFAULT_TIMINGS, { probeEvery: 2 });
    for (let i = 0; i < 20; i++) solveOn(schedule, 30_000 + (i % 5) * 500);
    const firsts = [0, 1, 2, 3].map(() => pollTimes(schedule.planFor('recaptcha_v2'))[0] as number);
    expect(Math.min(...firsts)).toBeLessThan(Math.max(...firsts) / 1.5);
  });

  it('plans with less of the budget once its tasks spend more calls than their schedule expected', () => {
    // Prepare: two environments that see the same answers; one is told each task took twice the
    // calls its schedule expected (late round trips, a wrong estimate), the other the truth.
    const honest = new LearnedPollSchedule(DEFAULT_TIMINGS);
    const over = new LearnedPollSchedule(DEFAULT_TIMINGS);
    const expectedOf = (s: LearnedPollSchedule) => s.scheduleOf('recaptcha_v2')?.expectedCalls ?? 0;
    for (let i = 0; i < 40; i++) {
      const ready = 8_000 + (i % 10) * 1_500;
      for (const s of [honest, over]) s.planFor('recaptcha_v2');
      honest.observe('recaptcha_v2', ready - 500, ready, Math.round(expectedOf(honest)) || 1);
      over.observe('recaptcha_v2', ready - 500, ready, 2 * (Math.round(expectedOf(over)) || 1));
    }

    // Assess: the first keeps planning near the budget less its margin; the second about half.
    expect(honest.overspend('recaptcha_v2')).toBeLessThan(1.2);
    expect(over.overspend('recaptcha_v2')).toBeGreaterThan(1.6);
    expect(expectedOf(over)).toBeLessThan(0.75 * expectedOf(honest));
  });

  it('checks the overspend from the first learned task on, and counts a task that ended unanswered', () => {
    // Prepare: a learned schedule; one task answered on its expectation, one that ended without an
    // answer after 30 calls (its deadline).
    const schedule = new LearnedPollSchedule(DEFAULT_TIMINGS);
    for (let i = 0; i < 5; i++) schedule.observe('recaptcha_v2', 9_000, 10_000);
    schedule.planFor('recaptcha_v2');
    const expected = schedule.scheduleOf('recaptcha_v2')?.expectedCalls ?? 0;
    // Act
    schedule.observe('recaptcha_v2', 9_000, 10_000, Math.round(expected));
    const afterOne = schedule.overspend('recaptcha_v2');
    schedule.unanswered('recaptcha_v2', 30);
    // Assess
    expect(afterOne).toBeLessThan(1.2);
    expect(schedule.overspend('recaptcha_v2')).toBeGreaterThan(afterOne + 0.25);
  });

  it('keeps types apart', () => {
    const schedule = new LearnedPollSchedule(DEFAULT_TIMINGS);
    for (let i = 0; i < 10; i++) schedule.observe('turnstile', 0, 2_000);
    expect(schedule.planFor('turnstile').learned).toBe(true);
    expect(schedule.planFor('recaptcha_v2').learned).toBe(false);
  });

  it('a pinned static schedule never learns', () => {
    const schedule = createPollSchedule(DEFAULT_TIMINGS, { ...DEFAULT_POLL_SCHEDULE, mode: 'static' });
    for (let i = 0; i < 10; i++) schedule.observe('recaptcha_v2', 0, 2_000);
    expect(schedule.planFor('recaptcha_v2').learned).toBe(false);
  });

  it('reads the mode, the mean budget and the ceiling from the environment, naming a bad variable', () => {
    expect(readPollScheduleFromEnv({})).toEqual(DEFAULT_POLL_SCHEDULE);
    expect(
      readPollScheduleFromEnv({
        CAPTCHAAI_POLL_SCHEDULE: 'static',
        CAPTCHAAI_POLL_MEAN_BUDGET: '8',
        CAPTCHAAI_POLL_CEILING: '20',
      }),
    ).toMatchObject({ mode: 'static', meanBudget: 8, maxPollsPerTask: 20 });
    for (const [name, value] of [
      ['CAPTCHAAI_POLL_SCHEDULE', 'fast'],
      ['CAPTCHAAI_POLL_MEAN_BUDGET', '0'],
      ['CAPTCHAAI_POLL_CEILING', '2.5'],
    ] as const) {
      expect(() => readPollScheduleFromEnv({ [name]: value })).toThrow(ConfigError);
      expect(() => readPollScheduleFromEnv({ [name]: value })).toThrow(name);
    }
  });
});
