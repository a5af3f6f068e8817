import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { DEFAULT_TIMINGS } from '../../functions/captchaai/timings.js';
import { type EnvironmentMemory, environmentPeakBytes } from '../../local/runtime/types.js';
import type { RunSummary } from '../../local/stack/run.js';
import { DEFAULT_LATENCY } from '../../local/standins/captchaai/standin.js';
import type { BaselineResult } from '../baseline.js';
import {
  AWS_PRICES,
  awsCostPer1000,
  captchaCostPer1000,
  gbSeconds,
  MONTH_SECONDS,
  planPrice,
} from '../cost.js';
import {
  bucketCounts,
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
import { type ChartPoint, renderChart } from '../svg.js';
import { type Invocation, overheadMs, unscaledDurationMs } from '../worker-log.js';
import type { BenchReport, Pct } from './types.js';

export type { BenchReport } from './types.js';

/** The builder that turns one run's measurements into the benchmark's report (its shape is in types.ts). */

function pct(s: Summary, digits = 1): Pct {
  return { p50: round(s.p50, digits), p95: round(s.p95, digits), p99: round(s.p99, digits) };
}

export interface BuildInput {
  name: string;
  started: Date;
  loadStart: number;
  threads: number;
  reserve: number;
  cap: number;
  records: number;
  timeScale: number;
  seed: number;
  maxQueued: number;
  mix: Record<string, number>;
  memoryMb: number;
  modelledMeanMs: number;
  predictedPollMs: number;
  runStartedAt: number;
  series: ChartPoint[];
  /** The stand-in's cumulative busy thread-ms, sampled with the series. */
  busy: { t: number; ms: number }[];
  targetDelays: { pageMs: number; postMs: number };
  invocations: Invocation[];
  probe: Record<string, number[]>;
  probeRounds: { t: number; slowestMs: number; queued: number | undefined }[];
  standin: {
    maxInFlight: number;
    zeroBalance: number;
    threads: number;
    submits: number;
    polls: number;
    solved: number;
    rateLimited: number;
  };
  runSummary: RunSummary;
  sqs: { sendCalls: number; received: number; deleted: number };
  workerInvocations: number;
  memory: { environments: EnvironmentMemory[]; processPeakRss: number };
  bareNodeRss: number;
  timeouts: number;
  baseline: BaselineResult | null;
  phases: { startup: number; capped_run: number; baseline: number | null; total: number };
  logDir: string;
  outDir: string;
}

/** Turns the measurements of one run into the report (and writes the chart). */
export function buildReport(i: BuildInput): BenchReport {
  const s = i.timeScale;
  const tRel = (epochMs: number) => (epochMs - i.runStartedAt) / 1000;
  const withOutcome = i.invocations.filter((inv) => inv.outcome);
  const solvedInv = withOutcome.filter((inv) => inv.outcome?.status === 'submitted');
  const solved = solvedInv.length;
  const completions = solvedInv.map((inv) => tRel(inv.outcome?.at ?? 0));
  const lastCompletion = completions.length ? Math.max(...completions) : Number.NaN;
  const window = steadyWindow(completions);
  const meanSolveWallS = (i.modelledMeanMs * s) / 1000;

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
  const pollsPerSolve = withOutcome
    .map((inv) => inv.outcome?.polls)
    .filter((v): v is number => v !== undefined);
  const inFlight: Sample[] = i.series.map((p) => ({ t: p.t, v: p.inFlight }));
  const invocationsInFlight: Sample[] = i.series.map((p) => ({ t: p.t, v: p.invocations ?? 0 }));
  const util = window ? timeWeightedMean(inFlight, window.from, window.to) / i.cap : Number.NaN;
  const invUtil = window ? timeWeightedMean(invocationsInFlight, window.from, window.to) / i.cap : Number.NaN;

  // Per-record timings: the worker's final line, joined with the runtime's invocation duration.
  // Each environment's first invocation is kept apart (SDK clients, the secret, first
  // connections, and the code itself where the environment was not prewarmed): a pipeline that
  // runs for hours pays it once per environment, not per record.
  const warm = withOutcome.filter((inv) => !inv.firstInEnvironment);
  const cold = withOutcome.filter((inv) => inv.firstInEnvironment);
  const defined = (v: number | undefined): v is number => v !== undefined;
  const overheadSummary = summarize(warm.map(overheadMs).filter(defined));
  const coldSummary = summarize(cold.map(overheadMs).filter(defined));
  const solveSummary = summarize(withOutcome.map((inv) => inv.outcome?.solveMs).filter(defined));
  const claims = warm.map((inv) => inv.outcome?.claimMs).filter(defined);
  const finishes = warm.map((inv) => inv.outcome?.finishMs).filter(defined);
  const firstSubmit = i.series.find((p) => p.inFlight > 0)?.t;

  // Where a slot's time goes in steady state, per record. Little's law: with `cap` slots,
  // cycle = cap ÷ throughput; the mean number of CaptchaAI tasks (invocations) in flight ÷ cap
  // is the share of the cycle a task holds a thread (an invocation runs). Inside the
  // invocation, the worker's own timings split the rest.
  const inWindow = window
    ? solvedInv.filter((inv) => {
        const t = tRel(inv.outcome?.at ?? 0);
        return t > window.from && t <= window.to;
      })
    : [];
  const cycleMs = window ? (i.cap / (window.completed / ssSeconds)) * 1000 : Number.NaN;
  const heldMs = util * cycleMs;
  const invocationMs = invUtil * cycleMs;
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
  const pollWhatIf = [5_000, 2_000, 1_000].map((interval) => {
    let wait = 0;
    for (const [type, count] of Object.entries(i.mix)) {
      const t = type as keyof typeof DEFAULT_LATENCY;
      wait += count * expectedPollWaitMs(DEFAULT_LATENCY[t], DEFAULT_TIMINGS.firstPollMs[t], interval);
    }
    wait /= i.records;
    return {
      interval_ms: interval,
      predicted_wait_ms_unscaled: round(wait, 0),
      efficiency_ceiling: round(i.modelledMeanMs / (i.modelledMeanMs + wait)),
    };
  });

  // Lambda GB-s at time scale 1. For the cost, warm invocations per solve (a pipeline that runs
  // for hours starts each environment once); the figure over every invocation is shown beside.
  const unscaled = (list: Invocation[]) => list.map((inv) => unscaledDurationMs(inv, s)).filter(defined);
  const warmAll = i.invocations.filter((inv) => !inv.firstInEnvironment);
  const warmSolved = warmAll.filter((inv) => inv.outcome?.status === 'submitted').length;
  const gbsPerSolve = warmSolved ? gbSeconds(unscaled(warmAll), i.memoryMb) / warmSolved : Number.NaN;
  const gbsPerSolveAll = solved ? gbSeconds(unscaled(i.invocations), i.memoryMb) / solved : Number.NaN;
  const gbsPerSolveWall = solved
    ? gbSeconds(i.invocations.map((inv) => inv.durationMs).filter(defined), i.memoryMb) / solved
    : Number.NaN;
  const firstInvocations = i.invocations.filter((inv) => inv.firstInEnvironment).length;
  const MB = 1048576;
  const envs = i.memory.environments;
  const worst = (f: (e: EnvironmentMemory) => number) =>
    envs.length ? Math.max(...envs.map(f)) / MB : Number.NaN;
  const envPeakMb = worst(environmentPeakBytes) + i.bareNodeRss / MB;
  const memoryNeededMb = Number.isFinite(envPeakMb) ? lambdaMemoryFor(envPeakMb) : Number.NaN;

  // AWS requests per solve. SQS: the producer's SendMessageBatch calls, one ReceiveMessage and
  // one DeleteMessage per message (batch size 1), DLQ copies. DynamoDB: each record's claim
  // and final write are one conditional UpdateItem each (outcome rows are far below 1 KB).
  const dlqSends = i.runSummary.dlq;
  const usage = {
    gbSeconds: gbsPerSolve,
    invocations: solved ? i.workerInvocations / solved : Number.NaN,
    sqsRequests: solved ? (i.sqs.sendCalls + i.sqs.received + i.sqs.deleted + dlqSends) / solved : Number.NaN,
    dynamodbWriteUnits: solved ? (2 * withOutcome.length) / solved : Number.NaN,
    dynamodbReadUnits: 0,
  };
  const aws = awsCostPer1000(usage);
  const plan = planPrice(i.threads);
  const meanSolveS = i.modelledMeanMs / 1000;
  const captchaFull = captchaCostPer1000({ threads: i.threads, usdPerMonth: plan.usdPerMonth }, meanSolveS);
  const captchaAtEff = Number.isFinite(ssEff)
    ? captchaCostPer1000(
        { threads: i.threads, usdPerMonth: plan.usdPerMonth },
        meanSolveS,
        ssEff * (i.cap / i.threads),
      )
    : Number.NaN;

  const emulator: Record<string, Pct & { count: number; over_1s: number }> = {};
  const latency = (values: number[]) => ({
    ...pct(summarize(values)),
    count: values.length,
    over_1s: values.filter((v) => v > 1000).length,
  });
  for (const [name, values] of Object.entries(i.probe)) emulator[name] = latency(values);
  emulator.dynamodb_update_item_in_worker = latency([...claims, ...finishes]);

  const files = { json: join(i.outDir, `${i.name}.json`), svg: join(i.outDir, `${i.name}.svg`) };
  const outcomeEvents = withOutcome.map((inv) => ({
    t: tRel(inv.outcome?.at ?? 0),
    kind: inv.outcome?.status ?? 'unknown',
  }));
  const tEnd = Math.max(
    i.series.length ? (i.series[i.series.length - 1] as ChartPoint).t : 0,
    lastCompletion || 0,
  );
  const bucket = Math.max(1, Math.round(tEnd / 120));
  mkdirSync(i.outDir, { recursive: true });
  writeFileSync(
    files.svg,
    renderChart({
      title: `threadgate bench: ${i.records} records, plan ${i.threads} threads, cap ${i.cap}, time scale ${s}`,
      subtitle: `efficiency ${fmtNum(ssEff)} steady state (${fmtNum(wholeEff)} whole run), utilization ${fmtNum(util)}, max in flight ${i.standin.maxInFlight}, ZERO_BALANCE ${i.standin.zeroBalance}`,
      series: i.series,
      outcomes: bucketCounts(outcomeEvents, 0, tEnd, bucket),
      bucketSeconds: bucket,
      window: window ? { from: window.from, to: window.to } : undefined,
    }),
  );

  const { log_dir: _logDir, ...runSummary } = i.runSummary;
  return {
    name: i.name,
    started_at: i.started.toISOString(),
    machine: {
      cpus: cpus().length,
      node: process.version,
      loadavg_1m_start: round(i.loadStart, 2) ?? 0,
      loadavg_1m_end: round(loadavg()[0] ?? 0, 2) ?? 0,
    },
    config: {
      threads: i.threads,
      reserve: i.reserve,
      cap: i.cap,
      records: i.records,
      time_scale: s,
      seed: i.seed,
      max_queued: i.maxQueued,
      mix: i.mix,
      worker_memory_mb: i.memoryMb,
      target_delays_ms_unscaled: { page: i.targetDelays.pageMs, post: i.targetDelays.postMs },
      poll: {
        first_poll_ms: { ...DEFAULT_TIMINGS.firstPollMs },
        interval_ms: { ...DEFAULT_TIMINGS.pollIntervalMs },
        budget: DEFAULT_TIMINGS.pollBudget,
        note: 'the client waits first_poll_ms after a submit, then interval_ms between polls (unscaled), at most budget polls per task (the last one at the deadline)',
      },
    },
    complete: i.runSummary.complete,
    outcomes: i.runSummary.outcomes,
    efficiency: {
      whole_run: round(wholeEff),
      steady_state: round(ssEff),
      throughput_whole_run: round(throughputWhole),
      throughput_steady_state: round(throughputSs),
      projected_time_scale_1: round(projected),
      whole_run_loss: {
        ramp_up: round(loss.rampUp, 4),
        between_ramp_and_drain: round(loss.between, 4),
        drain: round(loss.drain, 4),
        ramp_up_s: round(loss.rampUpS, 1),
        drain_s: round(loss.drainS, 1),
      },
    },
    captchaai_calls: {
      res_php_per_solve: round(i.standin.solved ? i.standin.polls / i.standin.solved : Number.NaN, 2),
      res_php_max_per_solve: pollsPerSolve.length ? Math.max(...pollsPerSolve) : null,
      in_php_per_record: round(i.standin.submits / i.records, 3),
      rate_limited: i.standin.rateLimited,
    },
    utilization: { steady_state: round(util), worker_invocations_steady_state: round(invUtil) },
    max_in_flight: i.standin.maxInFlight,
    cap: i.cap,
    plan_threads: i.standin.threads,
    zero_balance: i.standin.zeroBalance,
    throughput: {
      whole_run_per_s_wall: round(solved / lastCompletion),
      steady_state_per_s_wall: window ? round(window.completed / ssSeconds) : null,
      limit_per_s_wall: round(i.cap / meanSolveWallS),
      steady_state_per_hour_unscaled: window ? round((window.completed / ssSeconds) * s * 3600, 0) : null,
      steady_state_window_s: {
        from: window ? round(window.from, 1) : null,
        to: window ? round(window.to, 1) : null,
        records: window?.completed ?? 0,
      },
    },
    solve_time_ms: {
      modelled_mean_unscaled: round(i.modelledMeanMs, 0),
      modelled_mean_wall: round(modelledWallMs, 0),
      measured_by_worker_wall: { ...pct(solveSummary, 0), mean: round(solveSummary.mean, 0) },
      measured_by_worker_unscaled: {
        p50: round(solveSummary.p50 / s, 0),
        p95: round(solveSummary.p95 / s, 0),
        p99: round(solveSummary.p99 / s, 0),
        mean: round(solveSummary.mean / s, 0),
      },
      note: 'modelled = mean of the stand-in latency distributions over the record mix (the time a task holds a CaptchaAI thread); measured = the worker from submit to token in hand, i.e. the solve plus the wait for the next poll',
    },
    overhead_ms: {
      ...pct(overheadSummary),
      mean: round(overheadSummary.mean, 1),
      count: overheadSummary.count,
      parts_mean: {
        dynamodb_claim: round(mean(claims), 1),
        dynamodb_finish: round(mean(finishes), 1),
        rest: round(overheadSummary.mean - mean(claims) - mean(finishes), 1),
      },
      first_invocations: { ...pct(coldSummary), count: coldSummary.count, max: round(coldSummary.max, 1) },
      first_submit_after_s: firstSubmit === undefined ? null : round(firstSubmit, 1),
      note: 'per record, warm invocations: invocation duration − solve − target HTTP (page load + POST), in real milliseconds (AWS calls are not time-scaled): the pipeline-state read (SSM), validation, allowlist check, the DynamoDB claim and final write, metrics flush. first_invocations: the same for each execution environment’s first invocation (SDK clients, secret, first connections; the local stack prewarms environments, so code loading is not in it unless an environment was replaced)',
    },
    emulator_latency_ms: emulator,
    timeline: perSecond(i.series, completions, i.probeRounds),
    time_per_record_per_slot_ms: {
      cycle: round(cycleMs, 0),
      captcha_thread_held: round(heldMs, 0),
      captcha_thread_held_modelled: round(modelledWallMs, 0),
      poll_granularity: round(wPoll, 0),
      poll_granularity_predicted: round(i.predictedPollMs * s, 0),
      target_http: round(wTarget, 0),
      page_load_overlapped: round(wPage, 0),
      invocation_overhead: round(wOverhead, 0),
      between_invocations: round(wBetween, 0),
      cycle_unscaled: round(cycleUnscaledMs, 0),
      poll_interval_what_if: pollWhatIf,
      note: 'steady state, wall ms per record and slot: cycle (= cap ÷ throughput) = CaptchaAI thread held (utilization × cycle) + poll granularity (invocation time − thread held − target − overhead: the answer waits for the next poll) + target HTTP + invocation overhead (per record: invocation duration − solve − target, warm invocations) + between invocations (the local poller: receive, hand-over to an environment, waiting for a message). cycle_unscaled: the same cycle with CaptchaAI’s waits at time scale 1. poll_interval_what_if: the predicted wait for the poll and the efficiency ceiling it leaves, per poll interval',
    },
    lambda: {
      memory_mb: i.memoryMb,
      invocations: i.workerInvocations,
      first_invocations: firstInvocations,
      timeouts: i.timeouts,
      gb_s_per_solve: round(gbsPerSolve, 3),
      gb_s_per_solve_all_invocations: round(gbsPerSolveAll, 3),
      gb_s_per_solve_wall: round(gbsPerSolveWall, 3),
      measured_memory_mb: {
        environments: envs.length,
        peak_heap_used: round(
          worst((e) => e.peakHeapUsed),
          1,
        ),
        peak_heap_total: round(
          worst((e) => e.peakHeapTotal),
          1,
        ),
        peak_external: round(
          worst((e) => e.peakExternal),
          1,
        ),
        bare_node_rss: round(i.bareNodeRss / MB, 1),
        estimated_environment_peak: round(envPeakMb, 1),
        process_peak_rss_all_environments: round(i.memory.processPeakRss / MB, 1),
        smallest_size_with_2x_headroom: Number.isFinite(memoryNeededMb) ? memoryNeededMb : null,
        note: 'each environment is a worker thread of one process, so its own RSS cannot be read: estimated_environment_peak = a bare Node process’s RSS + the environment’s peak V8 heap (total) + peak external memory; smallest_size_with_2x_headroom = the smallest Lambda size (128 MB, then 64 MB steps) at least twice that',
      },
      note: 'at time scale 1: each invocation’s solve time divided by the time scale, the rest (AWS calls, target HTTP, start-up) as measured. gb_s_per_solve: all but each environment’s first invocation (used for the cost); _all_invocations includes them; _wall is what this run used at its time scale',
    },
    aws_cost_per_1000: {
      lambda_compute: round(aws.lambda_compute, 5) ?? 0,
      lambda_requests: round(aws.lambda_requests, 5) ?? 0,
      sqs: round(aws.sqs, 5) ?? 0,
      dynamodb_writes: round(aws.dynamodb_writes, 5) ?? 0,
      dynamodb_reads: round(aws.dynamodb_reads, 5) ?? 0,
      total: round(aws.total, 5) ?? 0,
      usage_per_solve: {
        gb_seconds: round(usage.gbSeconds, 3),
        invocations: round(usage.invocations, 3),
        sqs_requests: round(usage.sqsRequests, 3),
        dynamodb_write_units: round(usage.dynamodbWriteUnits, 3),
        dynamodb_read_units: usage.dynamodbReadUnits,
      },
      prices: AWS_PRICES,
      notes: [
        'USD at us-east-1 list prices (bench/cost.ts): Lambda arm64, SQS standard, DynamoDB on demand; free tiers ignored',
        'SQS counts the producer’s SendMessageBatch calls, one ReceiveMessage and one DeleteMessage per message (batch size 1) and DLQ copies; the event source mapping’s empty long polls on an idle queue are a fixed cost per hour, not per solve, and are left out',
        'not included: the cap adjuster (one small invocation a minute), SSM GetParameter (standard parameters, no charge), Secrets Manager (one read per execution environment), CloudWatch Logs and metrics',
      ],
    },
    captcha_cost_per_1000: {
      full_plan_use: round(captchaFull, 5),
      at_measured_efficiency: round(captchaAtEff, 5),
      plan: { ...plan, usdPerMonth: round(plan.usdPerMonth, 2) ?? plan.usdPerMonth, threads: i.threads },
      mean_solve_s_unscaled: round(meanSolveS, 2),
      month_s: MONTH_SECONDS,
    },
    baseline: i.baseline
      ? (Object.fromEntries(
          Object.entries(i.baseline).map(([k, v]) => [k, typeof v === 'number' ? round(v, 3) : v]),
        ) as unknown as BaselineResult)
      : null,
    run_summary: runSummary,
    phases_s: {
      startup: round(i.phases.startup, 1) ?? 0,
      capped_run: round(i.phases.capped_run, 1) ?? 0,
      baseline: i.phases.baseline === null ? null : round(i.phases.baseline, 1),
      total: round(i.phases.total, 1) ?? 0,
    },
    log_dir: i.logDir,
    files,
  };
}

/** The sampled series, completions and probe rounds per second of the run. */
function perSecond(
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

/** The smallest Lambda memory size (128 MB, then steps of 64 MB) with 2× headroom over `peakMb`. */
export function lambdaMemoryFor(peakMb: number): number {
  let mb = 128;
  while (mb < 2 * peakMb) mb += 64;
  return mb;
}

function fmtNum(v: number): string {
  return Number.isFinite(v) ? v.toFixed(3) : 'n/a';
}
