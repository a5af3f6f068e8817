import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { type Invocation, parseFunctionLog } from '../../bench/worker-log.js';

/**
 * Plan efficiency of a local run, as the benchmark defines it: busy plan-thread-time ÷ (plan
 * threads × the run's window), the window running from the first submit to the last answer.
 * Busy time comes from the CaptchaAI stand-in when the stack has one (it counts the time each
 * task holds a thread); with an external server it comes from the worker's own final log lines
 * (`solve_ms`, from submit to answer as the worker saw it, so it also counts the wait for the
 * next poll and reads a little higher than a server's own count).
 */
export interface RunEfficiency {
  /** null when no record reached a solve. */
  value: number | null;
  source: 'standin' | 'worker_timings';
  plan_threads: number;
  /** First submit to last answer, seconds (from the worker's timings). */
  window_s: number | null;
  /** Records whose final line carries a solve time. */
  solves: number;
}

interface SolveSpan {
  from: number;
  to: number;
}

/**
 * When each record's solve ran, from the worker's final line: the line is written after the
 * POST (target_ms) and the outcome write (finish_ms), which come after the solve (solve_ms).
 */
export function solveSpans(invocations: readonly Invocation[]): SolveSpan[] {
  const spans: SolveSpan[] = [];
  for (const inv of invocations) {
    const o = inv.outcome;
    if (o?.solveMs === undefined) continue;
    const to = o.at - (o.finishMs ?? 0) - (o.targetMs ?? 0);
    spans.push({ from: to - o.solveMs, to });
  }
  return spans;
}

/**
 * The run's efficiency. `standinBusyMs` is the stand-in's busy thread-time of the run when
 * the stack has a stand-in; without it the worker's solve times are the busy time.
 */
export function runEfficiency(
  invocations: readonly Invocation[],
  planThreads: number,
  standinBusyMs?: number,
): RunEfficiency {
  const spans = solveSpans(invocations);
  const source = standinBusyMs === undefined ? 'worker_timings' : 'standin';
  if (spans.length === 0 || planThreads <= 0)
    return { value: null, source, plan_threads: planThreads, window_s: null, solves: spans.length };
  const from = Math.min(...spans.map((s) => s.from));
  const to = Math.max(...spans.map((s) => s.to));
  const busyMs = standinBusyMs ?? spans.reduce((ms, s) => ms + (s.to - s.from), 0);
  const windowMs = Math.max(1, to - from);
  return {
    value: Math.round((busyMs / (planThreads * windowMs)) * 1000) / 1000,
    source,
    plan_threads: planThreads,
    window_s: Math.round(windowMs / 100) / 10,
    solves: spans.length,
  };
}

/**
 * The worker's invocations of a run from the local runtime's log (`<logDir>/<function>.log`),
 * started at `since` or later. The runtime writes that log through a stream: it waits (up to
 * about 2 s) until `expectedLines` final lines are there.
 */
export async function workerInvocations(
  logDir: string,
  functionName: string,
  since: number,
  expectedLines: number,
): Promise<Invocation[]> {
  const file = join(logDir, `${functionName}.log`);
  let invocations: Invocation[] = [];
  for (let attempt = 0; attempt < 9; attempt++) {
    if (existsSync(file)) {
      invocations = parseFunctionLog(readFileSync(file, 'utf8')).filter(
        (inv) => (inv.startedAt ?? 0) >= since - 1000,
      );
      if (invocations.filter((inv) => inv.outcome).length >= expectedLines) break;
    }
    await sleep(250);
  }
  return invocations;
}
