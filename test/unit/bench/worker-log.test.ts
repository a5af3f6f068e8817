import { describe, expect, it } from 'vitest';
import {
  parseLearnedSchedules as learned,
  overheadMs,
  parseFunctionLog,
  parseInvocations,
  unscaledDurationMs,
  unscaledInvocationMs,
} from '../../../bench/worker-log.js';

function outcomeLine(requestId: string, extra: Record<string, unknown>): string {
  return JSON.stringify({
    level: 'INFO',
    message: 'outcome',
    timestamp: '2026-11-30T10:00:05.000Z',
    function_request_id: requestId,
    recordKey: `key-${requestId}`,
    captchaType: 'turnstile',
    ...extra,
  });
}

const LOG = [
  '2026-11-30T10:00:00.000Z envA START RequestId: r1',
  '2026-11-30T10:00:00.010Z envB START RequestId: r2',
  `2026-11-30T10:00:05.001Z envA ${outcomeLine('r1', { status: 'submitted', total_ms: 4900, claim_ms: 40, target_ms: 60, solve_ms: 4500, finish_ms: 30 })}`,
  '2026-11-30T10:00:05.050Z envA END RequestId: r1 Duration: 5050 ms',
  '2026-11-30T10:00:06.000Z envA START RequestId: r3',
  '2026-11-30T10:00:07.000Z envA {"level":"INFO","message":"solved","function_request_id":"r3"}',
  '2026-11-30T10:00:08.000Z envA not json at all',
  `2026-11-30T10:00:09.000Z envA ${outcomeLine('r3', { status: 'submitted', solve_ms: 2000, target_ms: 100 })}`,
  '2026-11-30T10:00:09.200Z envA END RequestId: r3 Duration: 3200 ms',
  '2026-11-30T10:00:40.010Z envB ERROR Sandbox.Timedout: Task timed out after 40 seconds',
  '2026-11-30T10:00:40.011Z envB END RequestId: r2 Duration: 40001 ms',
  '',
].join('\n');

describe('parseFunctionLog', () => {
  it('joins START, END and the worker’s outcome line per request id', () => {
    // Act
    const invocations = parseFunctionLog(LOG);

    // Assess
    expect(invocations.map((i) => i.requestId)).toEqual(['r1', 'r2', 'r3']);
    const r1 = invocations[0];
    expect(r1).toMatchObject({
      environment: 'envA',
      startedAt: Date.parse('2026-11-30T10:00:00.000Z'),
      durationMs: 5050,
      outcome: {
        status: 'submitted',
        recordKey: 'key-r1',
        captchaType: 'turnstile',
        at: Date.parse('2026-11-30T10:00:05.000Z'),
        totalMs: 4900,
        claimMs: 40,
        targetMs: 60,
        solveMs: 4500,
        finishMs: 30,
      },
    });
  });

  it('splits an invocation that worked a chain into one entry per record whose durations add up to it', () => {
    // Prepare: one invocation, three records (functions/worker/chain.ts), outcome lines at 5 s, 9 s, 12 s.
    const at = (s: number) => `2026-11-30T10:00:${String(s).padStart(2, '0')}.000Z`;
    const line = (s: number, key: string) =>
      `${at(s)} envC ${JSON.stringify({ message: 'outcome', timestamp: at(s), function_request_id: 'c1', recordKey: key, status: 'submitted', solve_ms: 3000, target_ms: 200 })}`;
    const log = [
      `${at(0)} envC START RequestId: c1`,
      line(5, 'k1'),
      line(9, 'k2'),
      line(12, 'k3'),
      `${at(13)} envC END RequestId: c1 Duration: 13000 ms`,
    ].join('\n');

    // Act
    const entries = parseFunctionLog(log);

    // Assess
    expect(entries.map((e) => e.outcome?.recordKey)).toEqual(['k1', 'k2', 'k3']);
    expect(entries.map((e) => e.durationMs)).toEqual([5000, 4000, 4000]);
    expect(entries.map((e) => e.firstInEnvironment)).toEqual([true, false, false]);
    expect(new Set(entries.map((e) => e.requestId)).size).toBe(3);
  });

  it('marks the first invocation of each execution environment', () => {
    // Act
    const invocations = parseFunctionLog(LOG);

    // Assess
    expect(Object.fromEntries(invocations.map((i) => [i.requestId, i.firstInEnvironment]))).toEqual({
      r1: true,
      r2: true,
      r3: false,
    });
  });

  it('gives the runtime’s ERROR line to the invocation open in that environment', () => {
    // Act
    const r2 = parseFunctionLog(LOG).find((i) => i.requestId === 'r2');

    // Assess
    expect(r2?.error).toBe('Sandbox.Timedout: Task timed out after 40 seconds');
    expect(r2?.outcome).toBeUndefined();
    expect(r2?.durationMs).toBe(40001);
  });
});

describe('overheadMs', () => {
  it('is the duration minus the solve and the target HTTP', () => {
    // Prepare
    const [r1, r2, r3] = parseFunctionLog(LOG);

    // Act / Assess
    expect(overheadMs(r1!)).toBe(5050 - 4500 - 60);
    expect(overheadMs(r3!)).toBe(3200 - 2000 - 100);
    expect(overheadMs(r2!)).toBeUndefined();
  });
});

describe('unscaledDurationMs', () => {
  it('divides only the solve by the time scale and keeps the rest as measured', () => {
    // Prepare
    const [r1, r2] = parseFunctionLog(LOG);

    // Act
    const solvedOne = unscaledDurationMs(r1!, 0.1);
    const timedOut = unscaledDurationMs(r2!, 0.1);

    // Assess
    expect(solvedOne).toBeCloseTo(5050 - 4500 + 45_000, 6);
    // Without timings the whole duration counts as scaled (an overstatement, documented).
    expect(timedOut).toBeCloseTo(400_010, 6);
  });
});

describe('learned schedule lines', () => {
  it("reads the worker's `poll schedule learned` lines with their environment and time", () => {
    const text = [
      '2026-12-01T22:00:00.000Z env1 {"message":"poll schedule learned","captchaType":"turnstile","observations":3,"pollsMs":[5000,7000,120000],"expectedCalls":2.5,"expectedWaitMs":800}',
      '2026-12-01T22:00:01.000Z env1 {"message":"solved","polls":3}',
      '2026-12-01T22:00:02.000Z env2 START RequestId: r1',
    ].join('\n');
    expect(learned(text)).toEqual([
      {
        environment: 'env1',
        at: Date.parse('2026-12-01T22:00:00.000Z'),
        captchaType: 'turnstile',
        observations: 3,
        sharedObservations: 0,
        pollsMs: [5000, 7000, 120000],
        expectedCalls: 2.5,
        expectedWaitMs: 800,
      },
    ]);
  });
});

describe('unscaledInvocationMs', () => {
  // One invocation of two lanes: four records of 1 s solves, two at a time, in 3 s of wall time.
  const lanesLog = [
    '2026-11-30T10:00:00.000Z envA START RequestId: r1',
    ...[1, 2, 3, 4].map(
      (k) =>
        `2026-11-30T10:00:0${k < 3 ? 1 : 2}.500Z envA ${outcomeLine('r1', { status: 'submitted', recordKey: `k${k}`, solve_ms: 1000, target_ms: 10 })}`,
    ),
    '2026-11-30T10:00:03.000Z envA END RequestId: r1 Duration: 3000 ms',
  ].join('\n');

  it('bills an invocation once, however many records and lanes it carried, its idle tail included', () => {
    const [inv] = parseInvocations(lanesLog);
    expect(inv?.outcomes).toHaveLength(4);
    // Time scale 1: the duration as measured, not four records' slices.
    expect(unscaledInvocationMs(inv as never, 1, 2)).toBe(3000);
    // Time scale 0.5: 4 s of solves shared by 2 lanes = 2 s scaled (4 s at scale 1), 1 s kept.
    expect(unscaledInvocationMs(inv as never, 0.5, 2)).toBe(5000);
    // One lane would have waited through all four solves one after another.
    expect(unscaledInvocationMs(inv as never, 0.5, 1)).toBe(3000 - 3000 + 6000);
  });
});
