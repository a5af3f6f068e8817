import { DEFAULT_TIMINGS } from '../../functions/captchaai/timings.js';
import type { CaptchaType } from '../../functions/captchaai/types.js';
import {
  busyShare,
  efficiency,
  expectedPollWaitMs,
  mean,
  round,
  type Sample,
  type Summary,
  steadyWindow,
  summarize,
  timeWeightedMean,
  wholeRunLoss,
} from '../stats.js';
import { type Invocation, overheadMs } from '../worker-log.js';
import type { BuildInput } from './types.js';

/**
 * The figures derived from one run's measurements, before they take the report's shape: the
 * run's completions, steady-state window and efficiencies (runFacts), the worker's per-record
 * timings (recordTimings) and where a slot's time goes (slotCycle). Sections (sections.ts,
 * costs.ts) read these; nothing here knows the report's field names.
 */

export const defined = (v: number | undefined): v is number => v !== undefined;

export type RunFacts = ReturnType<typeof runFacts>;

/** Completions, the steady-state window, efficiencies and utilization of the capped run. */
export function runFacts(i: BuildInput) {
  const tRel = (epochMs: number) => (epochMs - i.runStartedAt) / 1000;
  const withOutcome = i.invocations.filter((inv) => inv.outcome);
  const solvedInv = withOutcome.filter((inv) => inv.outcome?.status === 'submitted');
  const solved = solvedInv.length;
  const completions = solvedInv.map((inv) => tRel(inv.outcome?.at ?? 0));
  const lastCompletion = completions.length ? Math.max(...completions) : Number.NaN;
  const window = steadyWindow(completions);
  const meanSolveWallS = (i.modelledMeanMs * i.timeScale) / 1000;

  const throughputWhole = efficiency(solved, lastCompletion, i.cap, meanSolveWallS);
  const ssSeconds = window ? window.to - window.from : Number.NaN;
  const throughputSs = window ? efficiency(window.completed, ssSeconds, i.cap, meanSolveWallS) : Number.NaN;
  const firstSubmitAt = i.series.find((p) => p.inFlight > 0)?.t ?? Number.NaN;
  const wholeEff = busyShare(i.busy, firstSubmitAt, lastCompletion, i.threads);
  const ssEff = window ? busyShare(i.busy, window.from, window.to, i.threads) : Number.NaN;
  // The whole run's loss by phase: idle plan-thread-time in each ÷ threads × whole-run time.
  const rampEnd = i.series.find((p) => p.t >= firstSubmitAt && p.inFlight >= i.cap)?.t ?? Number.NaN;
  const lastStart = Math.max(
    ...i.invocations.map((inv) => (inv.startedAt ? tRel(inv.startedAt) : Number.NaN)),
  );
  const loss = wholeRunLoss(i.busy, i.threads, {
    firstSubmit: firstSubmitAt,
    rampEnd,
    drainFrom: Math.max(rampEnd, lastStart),
    lastAnswer: lastCompletion,
  });
  const inFlight: Sample[] = i.series.map((p) => ({ t: p.t, v: p.inFlight }));
  const invocationsInFlight: Sample[] = i.series.map((p) => ({ t: p.t, v: p.invocations ?? 0 }));
  const util = window ? timeWeightedMean(inFlight, window.from, window.to) / i.cap : Number.NaN;
  // With lanes each invocation holds L lane slots of the cap (an upper bound: a lane may end early).
  const invUtil = window
    ? (timeWeightedMean(invocationsInFlight, window.from, window.to) * i.lanes.L) / i.cap
    : Number.NaN;
  return {
    tRel,
    withOutcome,
    solvedInv,
    solved,
    completions,
    lastCompletion,
    window,
    ssSeconds,
    meanSolveWallS,
    throughputWhole,
    throughputSs,
    wholeEff,
    ssEff,
    loss,
    util,
    invUtil,
  };
}

export interface RecordTimings {
  overhead: Summary;
  cold: Summary;
  solve: Summary;
  claims: number[];
  finishes: number[];
}

/**
 * Per-record timings: the worker's final line, joined with the runtime's invocation duration.
 * Each environment's first invocation is kept apart (SDK clients, the secret, first
 * connections, and the code itself where the environment was not prewarmed): a pipeline that
 * runs for hours pays it once per environment, not per record.
 */
export function recordTimings(withOutcome: Invocation[]): RecordTimings {
  const warm = withOutcome.filter((inv) => !inv.firstInEnvironment);
  const cold = withOutcome.filter((inv) => inv.firstInEnvironment);
  return {
    overhead: summarize(warm.map(overheadMs).filter(defined)),
    cold: summarize(cold.map(overheadMs).filter(defined)),
    solve: summarize(withOutcome.map((inv) => inv.outcome?.solveMs).filter(defined)),
    claims: warm.map((inv) => inv.outcome?.claimMs).filter(defined),
    finishes: warm.map((inv) => inv.outcome?.finishMs).filter(defined),
  };
}

export type SlotCycle = ReturnType<typeof slotCycle>;

/**
 * Where a slot's time goes in steady state, per record. Little's law: with `cap` slots,
 * cycle = cap ÷ throughput; the mean number of CaptchaAI tasks (invocations) in flight ÷ cap
 * is the share of the cycle a task holds a thread (an invocation runs). Inside the
 * invocation, the worker's own timings split the rest.
 */
export function slotCycle(i: BuildInput, f: RunFacts) {
  const { window, tRel } = f;
  const s = i.timeScale;
  const inWindow = window
    ? f.solvedInv.filter((inv) => {
        const t = tRel(inv.outcome?.at ?? 0);
        return t > window.from && t <= window.to;
      })
    : [];
  const cycleMs = window ? (i.cap / (window.completed / f.ssSeconds)) * 1000 : Number.NaN;
  const heldMs = f.util * cycleMs;
  const invocationMs = f.invUtil * cycleMs;
  const wTarget = mean(inWindow.map((inv) => inv.outcome?.targetMs ?? Number.NaN));
  const wPage = mean(inWindow.map((inv) => inv.outcome?.pageMs ?? Number.NaN));
  // The overhead is measured per record (invocation − solve − target). The poll wait is what is
  // left of the invocation's time without a task: a per-record mean of solve times would not do
  // here, because the window's records are chosen by completion time and so are not a fair
  // sample of solve lengths (the first wave's short solves fall before it), and the mean of a few
  // hundred solves drawn from 15–60 s is itself uncertain by ±0.7 s.
  const wOverhead = mean(
    inWindow.filter((inv) => !inv.firstInEnvironment).map((inv) => overheadMs(inv) ?? Number.NaN),
  );
  const wPoll = invocationMs - heldMs - wOverhead - wTarget;
  const wSolve = heldMs + wPoll;
  const wBetween = cycleMs - invocationMs;
  const modelledWallMs = i.modelledMeanMs * s;
  // The same cycle at time scale 1: CaptchaAI's waits unscaled, everything else as measured.
  const cycleUnscaledMs = wSolve / s + wTarget + wOverhead + wBetween;
  const projected = i.modelledMeanMs / cycleUnscaledMs;
  return {
    cycleMs,
    heldMs,
    wTarget,
    wPage,
    wOverhead,
    wPoll,
    wBetween,
    modelledWallMs,
    cycleUnscaledMs,
    projected,
  };
}

/** The predicted wait for the next poll, and the efficiency ceiling it leaves, per poll interval. */
export function pollWhatIf(i: BuildInput) {
  return [5_000, 2_000, 1_000].map((interval) => {
    let wait = 0;
    for (const [type, count] of Object.entries(i.mix)) {
      const t = type as CaptchaType;
      wait += count * expectedPollWaitMs(i.latency[t], DEFAULT_TIMINGS.firstPollMs[t], interval);
    }
    wait /= i.records;
    return {
      interval_ms: interval,
      predicted_wait_ms_unscaled: round(wait, 0),
      efficiency_ceiling: round(i.modelledMeanMs / (i.modelledMeanMs + wait)),
    };
  });
}
