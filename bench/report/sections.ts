import { mean, round, type Summary, summarize } from '../stats.js';
import type { ChartPoint } from '../svg.js';
import type { RecordTimings, RunFacts, SlotCycle } from './measures.js';
import type { BenchReport, BuildInput, Pct } from './types.js';

/**
 * The report's measured sections, one function each, from the figures measures.ts derived:
 * efficiency, CaptchaAI calls, throughput, solve time, overhead, emulator latency, the slot
 * cycle and the per-second timeline. The cost sections are in costs.ts.
 */

export function pct(s: Summary, digits = 1): Pct {
  return { p50: round(s.p50, digits), p95: round(s.p95, digits), p99: round(s.p99, digits) };
}

export function efficiencySection(i: BuildInput, f: RunFacts, slot: SlotCycle): BenchReport['efficiency'] {
  const { limit, schedules } = i.model;
  const mode = i.pollSchedule.mode;
  const sim = schedules[mode];
  const other = mode === 'learned' ? 'static' : 'learned';
  return {
    whole_run: round(f.wholeEff),
    steady_state: round(f.ssEff),
    throughput_whole_run: round(f.throughputWhole),
    throughput_steady_state: round(f.throughputSs),
    projected_time_scale_1: round(slot.projected),
    whole_run_loss: {
      ramp_up: round(f.loss.rampUp, 4),
      between_ramp_and_drain: round(f.loss.between, 4),
      drain: round(f.loss.drain, 4),
      ramp_up_s: round(f.loss.rampUpS, 1),
      drain_s: round(f.loss.drainS, 1),
    },
    limit: round(limit),
    share_of_limit: round(f.wholeEff / limit),
    simulated: {
      schedule: mode,
      whole_run: round(sim.efficiency),
      share_of_limit: round(sim.efficiency / limit),
      res_php_per_solve: round(sim.resPhpPerSolve, 2),
      res_php_max_per_task: sim.resPhpMaxPerTask,
      mean_wait_ms_unscaled: round(sim.meanWaitMs, 0),
      loss_to_polling: round(limit - sim.efficiency),
      loss_to_pipeline: round(sim.efficiency - f.wholeEff),
      other: {
        schedule: other,
        whole_run: round(schedules[other].efficiency),
        share_of_limit: round(schedules[other].efficiency / limit),
        res_php_per_solve: round(schedules[other].resPhpPerSolve, 2),
      },
    },
  };
}

export function captchaaiCallsSection(i: BuildInput, f: RunFacts): BenchReport['captchaai_calls'] {
  const pollsPerSolve = f.withOutcome
    .map((inv) => inv.outcome?.polls)
    .filter((v): v is number => v !== undefined);
  return {
    res_php_per_solve: round(i.standin.solved ? i.standin.polls / i.standin.solved : Number.NaN, 2),
    res_php_max_per_solve: pollsPerSolve.length ? Math.max(...pollsPerSolve) : null,
    in_php_per_record: round(i.standin.submits / i.records, 3),
    rate_limited: i.standin.rateLimited,
  };
}

export function throughputSection(i: BuildInput, f: RunFacts): BenchReport['throughput'] {
  const { window, ssSeconds } = f;
  return {
    whole_run_per_s_wall: round(f.solved / f.lastCompletion),
    steady_state_per_s_wall: window ? round(window.completed / ssSeconds) : null,
    limit_per_s_wall: round(i.cap / f.meanSolveWallS),
    steady_state_per_hour_unscaled: window
      ? round((window.completed / ssSeconds) * i.timeScale * 3600, 0)
      : null,
    steady_state_window_s: {
      from: window ? round(window.from, 1) : null,
      to: window ? round(window.to, 1) : null,
      records: window?.completed ?? 0,
    },
  };
}

export function solveTimeSection(
  i: BuildInput,
  slot: SlotCycle,
  solve: Summary,
): BenchReport['solve_time_ms'] {
  const s = i.timeScale;
  return {
    modelled_mean_unscaled: round(i.modelledMeanMs, 0),
    modelled_mean_wall: round(slot.modelledWallMs, 0),
    measured_by_worker_wall: { ...pct(solve, 0), mean: round(solve.mean, 0) },
    measured_by_worker_unscaled: {
      p50: round(solve.p50 / s, 0),
      p95: round(solve.p95 / s, 0),
      p99: round(solve.p99 / s, 0),
      mean: round(solve.mean / s, 0),
    },
    note: 'modelled = mean of the stand-in latency distributions over the record mix (the time a task holds a CaptchaAI thread); measured = the worker from submit to token in hand, i.e. the solve plus the wait for the next poll',
  };
}

export function overheadSection(i: BuildInput, t: RecordTimings): BenchReport['overhead_ms'] {
  const firstSubmit = i.series.find((p) => p.inFlight > 0)?.t;
  return {
    ...pct(t.overhead),
    mean: round(t.overhead.mean, 1),
    count: t.overhead.count,
    parts_mean: {
      dynamodb_claim: round(mean(t.claims), 1),
      dynamodb_finish: round(mean(t.finishes), 1),
      rest: round(t.overhead.mean - mean(t.claims) - mean(t.finishes), 1),
    },
    first_invocations: { ...pct(t.cold), count: t.cold.count, max: round(t.cold.max, 1) },
    first_submit_after_s: firstSubmit === undefined ? null : round(firstSubmit, 1),
    note: 'per record, warm invocations: invocation duration − solve − target HTTP (page load + POST), in real milliseconds (AWS calls are not time-scaled): the pipeline-state read (a DynamoDB GetItem), validation, allowlist check, the DynamoDB claim and final write, metrics flush. first_invocations: the same for each execution environment’s first invocation (SDK clients, secret, first connections; the local stack prewarms environments, so code loading is not in it unless an environment was replaced)',
  };
}

/** The probe's latencies per emulator call, and the worker's DynamoDB writes beside them. */
export function emulatorSection(i: BuildInput, t: RecordTimings): BenchReport['emulator_latency_ms'] {
  const emulator: BenchReport['emulator_latency_ms'] = {};
  const latency = (values: number[]) => ({
    ...pct(summarize(values)),
    count: values.length,
    over_1s: values.filter((v) => v > 1000).length,
  });
  for (const [name, values] of Object.entries(i.probe)) emulator[name] = latency(values);
  emulator.dynamodb_update_item_in_worker = latency([...t.claims, ...t.finishes]);
  return emulator;
}

export function slotSection(
  i: BuildInput,
  slot: SlotCycle,
  pollWhatIf: BenchReport['time_per_record_per_slot_ms']['poll_interval_what_if'],
): BenchReport['time_per_record_per_slot_ms'] {
  return {
    cycle: round(slot.cycleMs, 0),
    captcha_thread_held: round(slot.heldMs, 0),
    captcha_thread_held_modelled: round(slot.modelledWallMs, 0),
    poll_granularity: round(slot.wPoll, 0),
    poll_granularity_predicted: round(i.predictedPollMs * i.timeScale, 0),
    target_http: round(slot.wTarget, 0),
    page_load_overlapped: round(slot.wPage, 0),
    invocation_overhead: round(slot.wOverhead, 0),
    between_invocations: round(slot.wBetween, 0),
    cycle_unscaled: round(slot.cycleUnscaledMs, 0),
    poll_interval_what_if: pollWhatIf,
    note: 'steady state, wall ms per record and slot: cycle (= cap ÷ throughput) = CaptchaAI thread held (utilization × cycle) + poll granularity (invocation time − thread held − target − overhead: the answer waits for the next poll) + target HTTP + invocation overhead (per record: invocation duration − solve − target, warm invocations) + between invocations (the local poller: receive, hand-over to an environment, waiting for a message). cycle_unscaled: the same cycle with CaptchaAI’s waits at time scale 1. poll_interval_what_if: the predicted wait for the poll and the efficiency ceiling it leaves, per poll interval',
  };
}

/** The sampled series, completions and probe rounds per second of the run. */
export function perSecond(
  series: readonly ChartPoint[],
  completions: readonly number[],
  rounds: readonly { t: number; slowestMs: number; queued: number | undefined }[],
): BenchReport['timeline'] {
  const end = Math.ceil(Math.max(0, ...series.map((p) => p.t), ...completions));
  const rows: BenchReport['timeline'] = [];
  for (let t = 0; t < end; t++) {
    const inSecond = series.filter((p) => p.t >= t && p.t < t + 1);
    const round_ = rounds.filter((r) => r.t >= t && r.t < t + 1);
    const last = inSecond[inSecond.length - 1] ?? series.filter((p) => p.t < t).at(-1);
    rows.push({
      t,
      in_flight: inSecond.length ? round(mean(inSecond.map((p) => p.inFlight)), 1) : null,
      invocations: inSecond.length ? round(mean(inSecond.map((p) => p.invocations ?? 0)), 1) : null,
      cap: last?.cap ?? 0,
      plan_threads: last?.planThreads ?? 0,
      completed: completions.filter((c) => c >= t && c < t + 1).length,
      queued: round_.at(-1)?.queued ?? null,
      emulator_slowest_ms: round_.length ? round(Math.max(...round_.map((r) => r.slowestMs)), 0) : null,
    });
  }
  return rows;
}
