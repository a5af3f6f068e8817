import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { DEFAULT_TIMINGS } from '../../functions/captchaai/timings.js';
import type { CaptchaType } from '../../functions/captchaai/types.js';
import { formatLatency } from '../../local/standins/captchaai/latency.js';
import type { BaselineResult } from '../baseline.js';
import { round } from '../stats.js';
import { writeChart } from './chart.js';
import { costSections } from './costs.js';
import { pollWhatIf, recordTimings, runFacts, slotCycle } from './measures.js';
import {
  captchaaiCallsSection,
  efficiencySection,
  emulatorSection,
  overheadSection,
  perSecond,
  slotSection,
  solveTimeSection,
  throughputSection,
} from './sections.js';
import type { BenchReport, BuildInput } from './types.js';

export { lambdaMemoryFor } from './costs.js';
export type { BenchReport, BuildInput } from './types.js';

/**
 * The builder that turns one run's measurements into the benchmark's report (its shape is in
 * types.ts), section by section. This folder: build.ts (this file) → measures.ts (derived
 * figures), sections.ts and costs.ts (the report's sections), chart.ts (the SVG); format.ts
 * prints a report. Its files import bench/'s helpers (stats, cost, svg, worker-log) and
 * local/'s types, never bench/run.ts.
 */

/** Turns the measurements of one run into the report (and writes the chart). */
export function buildReport(i: BuildInput): BenchReport {
  const f = runFacts(i);
  const timings = recordTimings(f.withOutcome);
  const slot = slotCycle(i, f);
  const files = { json: join(i.outDir, `${i.name}.json`), svg: join(i.outDir, `${i.name}.svg`) };
  writeChart(i, f, files.svg);
  const { log_dir: _logDir, ...runSummary } = i.runSummary;
  return {
    name: i.name,
    started_at: i.started.toISOString(),
    machine: machineSection(i),
    config: configSection(i),
    complete: i.runSummary.complete,
    outcomes: i.runSummary.outcomes,
    efficiency: efficiencySection(i, f, slot),
    poll_schedule_learned: learnedSection(i),
    captchaai_calls: captchaaiCallsSection(i, f),
    utilization: { steady_state: round(f.util), worker_invocations_steady_state: round(f.invUtil) },
    max_in_flight: i.standin.maxInFlight,
    cap: i.cap,
    plan_threads: i.standin.threads,
    zero_balance: i.standin.zeroBalance,
    throughput: throughputSection(i, f),
    solve_time_ms: solveTimeSection(i, slot, timings.solve),
    overhead_ms: overheadSection(i, timings),
    emulator_latency_ms: emulatorSection(i, timings),
    timeline: perSecond(i.series, f.completions, i.probeRounds),
    time_per_record_per_slot_ms: slotSection(i, slot, pollWhatIf(i)),
    ...costSections(i, f),
    baseline: baselineSection(i.baseline),
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

function machineSection(i: BuildInput): BenchReport['machine'] {
  return {
    cpus: cpus().length,
    node: process.version,
    loadavg_1m_start: round(i.loadStart, 2) ?? 0,
    loadavg_1m_end: round(loadavg()[0] ?? 0, 2) ?? 0,
  };
}

function configSection(i: BuildInput): BenchReport['config'] {
  return {
    threads: i.threads,
    reserve: i.reserve,
    cap: i.cap,
    records: i.records,
    time_scale: i.timeScale,
    seed: i.seed,
    max_queued: i.maxQueued,
    mix: i.mix,
    worker_memory_mb: i.memoryMb,
    lanes: i.lanes,
    target_delays_ms_unscaled: { page: i.targetDelays.pageMs, post: i.targetDelays.postMs },
    latency: Object.fromEntries(
      Object.keys(i.mix).map((type) => [type, formatLatency(i.latency[type as CaptchaType])]),
    ),
    poll: {
      schedule: i.pollSchedule.mode,
      mean_budget: i.pollSchedule.meanBudget,
      ceiling_learned: i.pollSchedule.maxPollsPerTask,
      first_poll_ms: { ...DEFAULT_TIMINGS.firstPollMs },
      interval_ms: { ...DEFAULT_TIMINGS.pollIntervalMs },
      budget: DEFAULT_TIMINGS.pollBudget,
      note: 'static: the client waits first_poll_ms after a submit, then interval_ms between polls (unscaled), at most budget polls per task (the last one at the deadline); learned: each environment starts on that schedule and, after 3 answers of a type, places its polls from the answers it read, within mean_budget calls per solve and ceiling_learned per task',
    },
  };
}

/** Each environment's last learned schedule per type. */
function learnedSection(i: BuildInput): BenchReport['poll_schedule_learned'] {
  const last = new Map<string, (typeof i.learnedSchedules)[number]>();
  for (const l of i.learnedSchedules) last.set(`${l.environment} ${l.captchaType}`, l);
  return {
    recomputed: i.learnedSchedules.length,
    last_per_environment: [...last.values()].map((l) => ({
      environment: l.environment,
      captcha_type: l.captchaType,
      observations: l.observations,
      first_poll_ms: l.pollsMs[0] ?? null,
      polls: l.pollsMs.length,
      expected_calls: round(l.expectedCalls, 2),
      expected_wait_ms: round(l.expectedWaitMs, 0),
    })),
  };
}

/** The uncapped baseline's figures, numbers rounded to 3 places. */
function baselineSection(b: BaselineResult | null): BaselineResult | null {
  if (!b) return null;
  return Object.fromEntries(
    Object.entries(b).map(([k, v]) => [k, typeof v === 'number' ? round(v, 3) : v]),
  ) as unknown as BaselineResult;
}
