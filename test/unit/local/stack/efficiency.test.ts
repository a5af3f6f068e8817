import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Invocation } from '../../../../bench/worker-log.js';
import { runEfficiency, solveSpans, workerInvocations } from '../../../../local/stack/efficiency.js';

const T0 = Date.parse('2026-12-01T10:00:00.000Z');

/** An invocation whose final line came at T0 + `atMs` with these timings. */
function inv(atMs: number, timings: { solveMs?: number; targetMs?: number; finishMs?: number }): Invocation {
  return {
    requestId: `r${atMs}`,
    environment: 'env',
    firstInEnvironment: false,
    outcome: { status: 'submitted', at: T0 + atMs, ...timings },
  };
}

describe('plan efficiency of a local run', () => {
  it('places each solve before the POST and the outcome write of its final line', () => {
    expect(solveSpans([inv(10_000, { solveMs: 4_000, targetMs: 300, finishMs: 200 })])).toEqual([
      { from: T0 + 5_500, to: T0 + 9_500 },
    ]);
  });

  it("uses the worker's solve times over first submit to last answer when there is no stand-in", () => {
    // Prepare: 2 plan threads; solves 0–4 s and 1–5 s (finish/target 0): 8 busy s over 5 s.
    const invocations = [
      inv(4_000, { solveMs: 4_000, targetMs: 0, finishMs: 0 }),
      inv(5_000, { solveMs: 4_000 }),
      // No solve (a rejected record): not part of the window.
      { ...inv(9_000, {}), outcome: { status: 'rejected', at: T0 + 9_000 } },
    ];

    // Act
    const e = runEfficiency(invocations, 2);

    // Assess
    expect(e).toEqual({ value: 0.8, source: 'worker_timings', plan_threads: 2, window_s: 5, solves: 2 });
  });

  it("uses the stand-in's busy thread time when there is one", () => {
    const e = runEfficiency([inv(4_000, { solveMs: 4_000 }), inv(5_000, { solveMs: 4_000 })], 2, 6_000);
    expect(e).toMatchObject({ value: 0.6, source: 'standin', window_s: 5, solves: 2 });
  });

  it('has no figure when no record reached a solve', () => {
    expect(runEfficiency([], 4)).toEqual({
      value: null,
      source: 'worker_timings',
      plan_threads: 4,
      window_s: null,
      solves: 0,
    });
  });

  it("reads the run's invocations from the runtime's function log, leaving out earlier ones", async () => {
    // Prepare
    const dir = mkdtempSync(join(tmpdir(), 'tg-eff-'));
    const line = (at: string, id: string) =>
      `${at} envA ${JSON.stringify({ message: 'outcome', timestamp: at, function_request_id: id, status: 'submitted', solve_ms: 100 })}`;
    writeFileSync(
      join(dir, 'Threadgate-worker.log'),
      [
        '2026-12-01T09:00:00.000Z envA START RequestId: old',
        line('2026-12-01T09:00:01.000Z', 'old'),
        '2026-12-01T10:00:00.500Z envA START RequestId: new',
        line('2026-12-01T10:00:01.000Z', 'new'),
        '',
      ].join('\n'),
    );
    try {
      // Act
      const invocations = await workerInvocations(dir, 'Threadgate-worker', T0, 1);

      // Assess
      expect(invocations.map((i) => i.requestId)).toEqual(['new']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
