/** The shape of the benchmark's report (bench/results/*.json) and of the measurements build.ts fills it from. */

import type { PollScheduleSettings } from '../../functions/captchaai/poll-schedule.js';
import type { CaptchaType } from '../../functions/captchaai/types.js';
import type { AwsUsageRow } from '../../local/emulator/usage.js';
import type { EnvironmentMemory } from '../../local/runtime/types.js';
import type { RunSummary } from '../../local/stack/run.js';
import type { LatencyDistribution } from '../../local/standins/captchaai/latency.js';
import type { BaselineResult } from '../baseline.js';
import type { Bill, FunctionRun } from '../bill/bill.js';
import type { TemplateFacts } from '../bill/template-facts.js';
import type { AWS_PRICES, AwsCost, PlanPrice } from '../cost.js';
import type { ModelFigures } from '../simulate.js';
import type { ChartPoint } from '../svg.js';
import type { Invocation, LearnedScheduleLine, LoggedInvocation } from '../worker-log.js';

export type Pct = { p50: number | null; p95: number | null; p99: number | null };

export interface BenchReport {
  name: string;
  started_at: string;
  machine: { cpus: number; node: string; loadavg_1m_start: number; loadavg_1m_end: number };
  config: {
    threads: number;
    reserve: number;
    cap: number;
    records: number;
    time_scale: number;
    /** Seed of the stand-in's solve latencies (the same seed, the same sample). */
    seed: number;
    max_queued: number;
    mix: Record<string, number>;
    worker_memory_mb: number;
    /** The `lanes` setting and the shape of the cap (r invocations of L lanes). */
    lanes: LanesFacts;
    target_delays_ms_unscaled: { page: number; post: number };
    /** The stand-in's solve-time distribution of each type in the mix (seconds, `threadgate bench --latency`). */
    latency: Record<string, string>;
    poll: {
      /** learned or static (functions/captchaai/poll-schedule.ts), its mean budget and per-task ceiling. */
      schedule: string;
      mean_budget: number;
      ceiling_learned: number;
      first_poll_ms: Record<string, number>;
      interval_ms: Record<string, number>;
      budget: number;
      note: string;
    };
  };
  complete: boolean;
  outcomes: Record<string, number>;
  /**
   * Busy plan-thread-seconds (the stand-in's own count) ÷ (plan threads × wall time): whole run
   * from the first submit to the last answer, steady state over the window of completions
   * 10%–90%. throughput_*: throughput ÷ (cap ÷ modelled mean solve time), as before.
   */
  efficiency: {
    whole_run: number | null;
    steady_state: number | null;
    throughput_whole_run: number | null;
    throughput_steady_state: number | null;
    projected_time_scale_1: number | null;
    /**
     * The ideal client's whole-run efficiency on this run's draws (bench/simulate.ts: the same
     * slots, records in arrival order, no overhead, every answer seen the moment it is ready).
     */
    limit: number | null;
    /** whole_run ÷ limit: how much of what the draws allow the pipeline reached. */
    share_of_limit: number | null;
    /**
     * The run's poll schedule simulated on the same draws, no pipeline (one schedule per slot):
     * limit − whole_run splits into loss_to_polling (limit − simulated) and loss_to_pipeline
     * (simulated − whole_run). `other`: the other schedule on the same draws.
     */
    simulated: {
      schedule: string;
      whole_run: number | null;
      share_of_limit: number | null;
      res_php_per_solve: number | null;
      res_php_max_per_task: number;
      mean_wait_ms_unscaled: number | null;
      loss_to_polling: number | null;
      loss_to_pipeline: number | null;
      other: {
        schedule: string;
        whole_run: number | null;
        share_of_limit: number | null;
        res_php_per_solve: number | null;
      };
    };
    /**
     * Where the whole run's loss (1 − whole_run) falls, as shares of plan threads × whole-run
     * wall time: ramp_up from the first submit until cap tasks are first in flight together,
     * drain from the last record's invocation start (no task starts after it) to the last
     * answer, between_ramp_and_drain the rest. Seconds of each phase beside them.
     */
    whole_run_loss: {
      ramp_up: number | null;
      between_ramp_and_drain: number | null;
      drain: number | null;
      ramp_up_s: number | null;
      drain_s: number | null;
    };
  };
  /**
   * The learned schedules the environments logged during the run: how many, and each
   * environment's last one per type (first poll, calls, expected calls and wait, unscaled).
   */
  poll_schedule_learned: {
    recomputed: number;
    last_per_environment: {
      environment: string;
      captcha_type: string;
      observations: number;
      first_poll_ms: number | null;
      polls: number;
      expected_calls: number | null;
      expected_wait_ms: number | null;
    }[];
  };
  captchaai_calls: {
    res_php_per_solve: number | null;
    res_php_max_per_solve: number | null;
    in_php_per_record: number | null;
    rate_limited: number;
  };
  /** Mean in flight ÷ cap over the steady-state window. */
  utilization: { steady_state: number | null; worker_invocations_steady_state: number | null };
  max_in_flight: number;
  cap: number;
  plan_threads: number;
  zero_balance: number;
  throughput: {
    whole_run_per_s_wall: number | null;
    steady_state_per_s_wall: number | null;
    limit_per_s_wall: number | null;
    steady_state_per_hour_unscaled: number | null;
    steady_state_window_s: { from: number | null; to: number | null; records: number };
  };
  solve_time_ms: {
    modelled_mean_unscaled: number | null;
    modelled_mean_wall: number | null;
    measured_by_worker_wall: Pct & { mean: number | null };
    measured_by_worker_unscaled: Pct & { mean: number | null };
    note: string;
  };
  overhead_ms: Pct & {
    mean: number | null;
    count: number;
    parts_mean: { dynamodb_claim: number | null; dynamodb_finish: number | null; rest: number | null };
    first_invocations: Pct & { count: number; max: number | null };
    first_submit_after_s: number | null;
    note: string;
  };
  emulator_latency_ms: Record<string, Pct & { count: number; over_1s: number }>;
  /** One row per second of the capped run, for re-plotting and for finding stalls. */
  timeline: {
    t: number;
    in_flight: number | null;
    invocations: number | null;
    cap: number;
    plan_threads: number;
    completed: number;
    queued: number | null;
    emulator_slowest_ms: number | null;
  }[];
  time_per_record_per_slot_ms: {
    cycle: number | null;
    captcha_thread_held: number | null;
    captcha_thread_held_modelled: number | null;
    poll_granularity: number | null;
    poll_granularity_predicted: number | null;
    target_http: number | null;
    page_load_overlapped: number | null;
    invocation_overhead: number | null;
    between_invocations: number | null;
    cycle_unscaled: number | null;
    poll_interval_what_if: {
      interval_ms: number;
      predicted_wait_ms_unscaled: number | null;
      efficiency_ceiling: number | null;
    }[];
    note: string;
  };
  lambda: {
    memory_mb: number;
    /** The `lanes` setting and the cap's shape (r invocations of L lanes). */
    lanes: LanesFacts;
    invocations: number;
    first_invocations: number;
    /**
     * Each execution environment: records submitted, its own peak RSS and whether it stayed within
     * 3/4 of the memory, CPU seconds per record submitted, event-loop delay (ms) and the CPU
     * share it ran under (process isolation: THREADGATE_LOCAL_ENVIRONMENTS=process, and
     * THREADGATE_LOCAL_CPU=lambda for the share); null where the isolation cannot tell.
     */
    environments: {
      id: string;
      invocations: number;
      submitted: number;
      peak_rss_mb: number | null;
      within_three_quarters: boolean | null;
      cpu_s_per_solve: number | null;
      cpu_s: number | null;
      event_loop_delay_ms: { p50: number; p99: number; max: number } | null;
      cpu_share: EnvironmentMemory['cpuShare'] | null;
    }[];
    timeouts: number;
    gb_s_per_solve: number | null;
    gb_s_per_solve_warm: number | null;
    gb_s_per_solve_wall: number | null;
    note: string;
    /** Measured by the local runtime: the worst execution environment's peaks, MB. */
    measured_memory_mb: {
      environments: number;
      isolation: 'thread' | 'process';
      environment_peak_rss: number | null;
      most_invocations_per_environment: number;
      peak_heap_used: number | null;
      peak_heap_total: number | null;
      peak_external: number | null;
      bare_node_rss: number | null;
      estimated_environment_peak: number | null;
      process_peak_rss_all_environments: number | null;
      smallest_size_with_headroom: number | null;
      note: string;
    };
  };
  aws_cost_per_1000: AwsCost & {
    usage_per_solve: {
      gb_seconds: number | null;
      invocations: number | null;
      sqs_requests: number | null;
      dynamodb_write_units: number | null;
      dynamodb_read_units: number | null;
    };
    prices: typeof AWS_PRICES;
    notes: string[];
  };
  captcha_cost_per_1000: {
    full_plan_use: number | null;
    at_measured_efficiency: number | null;
    plan: PlanPrice & { threads: number };
    mean_solve_s_unscaled: number | null;
    month_s: number;
    /** aws_cost_per_1000.total ÷ full_plan_use: what AWS costs per solve against the plan. */
    aws_to_plan_at_full_use?: number | null;
  };
  /** The monthly bill: every AWS charge, counted from the run and the template (bench/report/bill.ts). */
  bill: Bill | null;
  baseline: BaselineResult | null;
  run_summary: Omit<RunSummary, 'log_dir'>;
  phases_s: { startup: number; capped_run: number; baseline: number | null; total: number };
  log_dir: string;
  files: { json: string; svg: string };
}

/** The lanes a run deployed: the setting, and r invocations of L lanes carrying its cap. */
export interface LanesFacts {
  /** The deploy setting `lanes` (the most lanes one invocation may run). */
  setting: number;
  /** Reserved concurrency and the mapping's maximum. */
  r: number;
  /** Lanes per invocation. */
  L: number;
  /** The account's Lambda concurrency the reservation needs: r + 100 (Lambda keeps 100 unreserved). */
  lambda_quota_needed: number;
}

/** One run's measurements, as bench/run.ts collected them. */
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
  /** The stand-in's solve-time distributions during the run. */
  latency: Record<CaptchaType, LatencyDistribution>;
  /** The schedule the worker ran. */
  pollSchedule: PollScheduleSettings;
  /** The limit and the schedules simulated on the run's draws. */
  model: ModelFigures;
  /** The schedules the worker's environments logged (`poll schedule learned`). */
  learnedSchedules: LearnedScheduleLine[];
  runStartedAt: number;
  series: ChartPoint[];
  /** The stand-in's cumulative busy thread-ms, sampled with the series. */
  busy: { t: number; ms: number }[];
  targetDelays: { pageMs: number; postMs: number };
  /** One entry per record (an invocation that carried several is split at its outcome lines). */
  invocations: Invocation[];
  /** One entry per invocation, as Lambda bills them. */
  loggedInvocations: LoggedInvocation[];
  /** The `lanes` setting deployed and the shape of the run's cap (functions/pipeline/lanes.ts). */
  lanes: LanesFacts;
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
  /** The emulator's request counts over the capped run (empty on LocalStack). */
  usage: AwsUsageRow[];
  /** Every function's invocations, billed ms and log usage over the capped run, by function name. */
  functionRuns: Record<string, FunctionRun>;
  /** The deployed template's fixed charges; null when it could not be read. */
  template: TemplateFacts | null;
  workerName: string;
  bareNodeRss: number;
  timeouts: number;
  baseline: BaselineResult | null;
  phases: { startup: number; capped_run: number; baseline: number | null; total: number };
  logDir: string;
  outDir: string;
}
