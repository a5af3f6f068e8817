import type { BaselineResult } from '../baseline.js';
import { billLines } from '../bill/table.js';
import type { BenchReport } from './build.js';

/**
 * The stdout table of a benchmark run: figure, value, how to read it, section by section
 * (the same order as the report's JSON).
 */

type Row = [string, string, string];

const n = (v: number | null | undefined, digits = 3) =>
  v === null || v === undefined || !Number.isFinite(v) ? 'n/a' : v.toFixed(digits);
const ms = (v: number | null | undefined) => (v === null || v === undefined ? 'n/a' : `${Math.round(v)} ms`);
const usd = (v: number | null | undefined) =>
  v === null || v === undefined || !Number.isFinite(v) ? 'n/a' : `$${v.toFixed(4)}`;

export function formatReport(r: BenchReport): string {
  const rows: Row[] = [
    ...outcomeRows(r),
    ...callRows(r),
    ...timeRows(r),
    ...slotRows(r),
    ...costRows(r),
    ...(r.baseline ? baselineRows(r.baseline) : []),
  ];
  rows.push([
    'phases',
    `${r.phases_s.total} s total`,
    `startup ${r.phases_s.startup} s, capped run ${r.phases_s.capped_run} s, baseline ${r.phases_s.baseline ?? '-'} s; load avg ${r.machine.loadavg_1m_start} → ${r.machine.loadavg_1m_end} on ${r.machine.cpus} CPUs`,
  ]);
  const w0 = Math.max(...rows.map((x) => x[0].length));
  const w1 = Math.max(...rows.map((x) => x[1].length));
  const lines = rows.map(([a, v, note]) => `${a.padEnd(w0)}  ${v.padEnd(w1)}  ${note}`);
  if (r.bill) lines.push(...billLines(r.bill));
  lines.push('', `report: ${r.files.json}`, `chart:  ${r.files.svg}`);
  return `${lines.join('\n')}\n`;
}

function fmtCounts(c: Record<string, number>): string {
  const e = Object.entries(c);
  return e.length ? e.map(([k, v]) => `${k} ${v}`).join(', ') : 'none';
}

/** Outcomes, the cap and the efficiencies. */
function outcomeRows(r: BenchReport): Row[] {
  return [
    [
      'records / outcomes',
      `${r.config.records} / ${fmtCounts(r.outcomes)}`,
      r.complete ? 'every record has a final outcome' : 'INCOMPLETE',
    ],
    [
      'plan threads / reserve / cap',
      `${r.plan_threads} / ${r.config.reserve} / ${r.cap}`,
      'cap = plan threads − reserve',
    ],
    ['max_in_flight', String(r.max_in_flight), r.max_in_flight <= r.cap ? '≤ cap' : 'ABOVE THE CAP'],
    [
      'ZERO_BALANCE answers',
      String(r.zero_balance),
      r.zero_balance === 0 ? 'none: the cap held' : 'the plan refused submits',
    ],
    [
      'efficiency, steady state',
      n(r.efficiency.steady_state),
      `busy plan-thread-s ÷ (plan threads × wall s); ${n(r.efficiency.throughput_steady_state)} by throughput ÷ (cap ÷ modelled mean solve)`,
    ],
    [
      'efficiency, whole run',
      n(r.efficiency.whole_run),
      `first submit to last answer, incl. ramp-up and drain; ${n(r.efficiency.throughput_whole_run)} by throughput`,
    ],
    [
      '  whole-run loss by phase',
      `${n(r.efficiency.whole_run_loss.ramp_up, 4)} / ${n(r.efficiency.whole_run_loss.between_ramp_and_drain, 4)} / ${n(r.efficiency.whole_run_loss.drain, 4)}`,
      `ramp-up (${n(r.efficiency.whole_run_loss.ramp_up_s, 1)} s to cap in flight) / between / drain (last ${n(r.efficiency.whole_run_loss.drain_s, 1)} s, no new task), shares of the whole run`,
    ],
    [
      'limit on these draws / share',
      `${n(r.efficiency.limit)} / ${n(r.efficiency.share_of_limit)}`,
      'ideal client on the same solve times (same slots, arrival order, no overhead, answers seen at once); share = whole run ÷ limit',
    ],
    [
      `  ${r.efficiency.simulated.schedule} schedule, simulated`,
      `${n(r.efficiency.simulated.whole_run)} (${n(r.efficiency.simulated.share_of_limit)} of it)`,
      `same draws, no pipeline: ${n(r.efficiency.simulated.res_php_per_solve, 2)} res.php per solve, max ${r.efficiency.simulated.res_php_max_per_task}, wait ${n(r.efficiency.simulated.mean_wait_ms_unscaled, 0)} ms; lost to polling ${n(r.efficiency.simulated.loss_to_polling)}, to the pipeline ${n(r.efficiency.simulated.loss_to_pipeline)}`,
    ],
    [
      `  ${r.efficiency.simulated.other.schedule} schedule, simulated`,
      `${n(r.efficiency.simulated.other.whole_run)} (${n(r.efficiency.simulated.other.share_of_limit)} of it)`,
      `the other schedule on the same draws, ${n(r.efficiency.simulated.other.res_php_per_solve, 2)} res.php per solve`,
    ],
  ];
}

/** CaptchaAI calls, utilization and throughput. */
function callRows(r: BenchReport): Row[] {
  return [
    [
      'res.php calls per solve',
      n(r.captchaai_calls.res_php_per_solve, 2),
      `max ${r.captchaai_calls.res_php_max_per_solve ?? 'n/a'} (${r.config.poll.schedule} schedule: mean budget ${r.config.poll.mean_budget}, ceiling ${r.config.poll.schedule === 'learned' ? r.config.poll.ceiling_learned : r.config.poll.budget} per task); in.php per record ${n(r.captchaai_calls.in_php_per_record, 3)}; rate-limited answers ${r.captchaai_calls.rate_limited}`,
    ],
    learnedRow(r),
    [
      'efficiency, projected at scale 1',
      n(r.efficiency.projected_time_scale_1),
      'same slot cycle with CaptchaAI waits unscaled',
    ],
    ['utilization, steady state', n(r.utilization.steady_state), 'mean CaptchaAI tasks in flight ÷ cap'],
    [
      '  worker invocations in flight',
      n(r.utilization.worker_invocations_steady_state),
      'mean invocations running ÷ cap',
    ],
    [
      'throughput, steady state',
      `${n(r.throughput.steady_state_per_s_wall, 2)}/s wall`,
      `${n(r.throughput.steady_state_per_hour_unscaled, 0)} solves/h at scale 1; limit ${n(r.throughput.limit_per_s_wall, 2)}/s wall`,
    ],
  ];
}

/** Solve times, the overhead and the emulator's latencies. */
function timeRows(r: BenchReport): Row[] {
  const s = r.config.time_scale;
  return [
    [
      'mean solve, modelled',
      `${ms(r.solve_time_ms.modelled_mean_unscaled)} unscaled`,
      `${ms(r.solve_time_ms.modelled_mean_wall)} wall at scale ${s}`,
    ],
    [
      'solve seen by worker, p50/p95',
      `${ms(r.solve_time_ms.measured_by_worker_unscaled.p50)} / ${ms(r.solve_time_ms.measured_by_worker_unscaled.p95)} unscaled`,
      `${ms(r.solve_time_ms.measured_by_worker_wall.p50)} / ${ms(r.solve_time_ms.measured_by_worker_wall.p95)} wall (incl. the wait for the next poll)`,
    ],
    [
      'overhead per record p50/p95/p99',
      `${ms(r.overhead_ms.p50)} / ${ms(r.overhead_ms.p95)} / ${ms(r.overhead_ms.p99)}`,
      `real ms outside solve and target HTTP (not scaled), ${r.overhead_ms.count} invocations`,
    ],
    [
      '  first invocation per environment',
      `${ms(r.overhead_ms.first_invocations.p50)} p50 / ${ms(r.overhead_ms.first_invocations.max)} max`,
      `${r.overhead_ms.first_invocations.count} environments; first CaptchaAI submit ${n(r.overhead_ms.first_submit_after_s, 1)} s after the first send`,
    ],
    [
      '  of which DynamoDB claim + finish',
      `${ms(r.overhead_ms.parts_mean.dynamodb_claim)} + ${ms(r.overhead_ms.parts_mean.dynamodb_finish)} mean`,
      'two conditional UpdateItem calls to the emulator',
    ],
    ...Object.entries(r.emulator_latency_ms).map(([name, v]): [string, string, string] => [
      `emulator ${name} p50/p95/p99`,
      `${ms(v.p50)} / ${ms(v.p95)} / ${ms(v.p99)}`,
      `${v.count} calls, ${v.over_1s} over 1 s`,
    ]),
  ];
}

/** Where a slot's time goes per record. */
function slotRows(r: BenchReport): Row[] {
  const t = r.time_per_record_per_slot_ms;
  return [
    ['slot cycle per record (steady)', ms(t.cycle), 'wall; = the parts below'],
    [
      '  CaptchaAI thread held',
      ms(t.captcha_thread_held),
      `utilization × cycle (modelled mean solve: ${ms(t.captcha_thread_held_modelled)})`,
    ],
    [
      '  poll granularity',
      ms(t.poll_granularity),
      `answer ready, not yet polled; ${ms(t.poll_granularity_predicted)} predicted (first poll, then every ${Object.values(
        r.config.poll.interval_ms,
      )
        .map((v) => v / 1000)
        .join('/')} s, scaled)`,
    ],
    ['  target HTTP', ms(t.target_http), 'POST with token (+ page load past the answer), outside the solve'],
    [
      '  (page load, overlapped)',
      ms(t.page_load_overlapped),
      'runs while CaptchaAI solves: not in the cycle',
    ],
    ['  invocation overhead', ms(t.invocation_overhead), 'inside the invocation, outside solve and target'],
    ['  between invocations', ms(t.between_invocations), 'poller: receive, hand-over, waiting for a message'],
    [
      'poll interval what-if',
      t.poll_interval_what_if.map((w) => `${w.interval_ms / 1000} s → ${n(w.efficiency_ceiling)}`).join(', '),
      'predicted efficiency ceiling from the poll wait alone',
    ],
  ];
}

/** Lambda use and the costs. */
function costRows(r: BenchReport): Row[] {
  return [
    [
      'Lambda GB-s per solve',
      n(r.lambda.gb_s_per_solve, 2),
      `${r.lambda.memory_mb} MB arm64, every invocation, at time scale 1 (${n(r.lambda.gb_s_per_solve_warm, 2)} over warm invocations only)`,
    ],
    [
      'lanes',
      `${r.lambda.lanes.r} × ${r.lambda.lanes.L}`,
      `lanes ${r.lambda.lanes.setting}: r ${r.lambda.lanes.r} invocations of L ${r.lambda.lanes.L} lanes; Lambda quota needed ${r.lambda.lanes.lambda_quota_needed} (r + 100)`,
    ],
    memoryRow(r),
    ...environmentRows(r),
    [
      'AWS cost per 1,000 solves',
      usd(r.aws_cost_per_1000.total),
      `Lambda ${usd(r.aws_cost_per_1000.lambda_compute)} + requests ${usd(r.aws_cost_per_1000.lambda_requests)} + SQS ${usd(r.aws_cost_per_1000.sqs)} + DynamoDB ${usd(r.aws_cost_per_1000.dynamodb_writes + r.aws_cost_per_1000.dynamodb_reads)}`,
    ],
    [
      'CaptchaAI cost per 1,000 solves',
      usd(r.captcha_cost_per_1000.full_plan_use),
      `full plan use (AWS ${n(r.captcha_cost_per_1000.aws_to_plan_at_full_use ?? Number.NaN, 2)}× that); ${usd(r.captcha_cost_per_1000.at_measured_efficiency)} at the measured efficiency; $${r.captcha_cost_per_1000.plan.usdPerMonth}/month (${r.captcha_cost_per_1000.plan.basis})`,
    ],
  ];
}

/** The uncapped baseline, when it ran. */
function baselineRows(b: BaselineResult): Row[] {
  return [
    ['BASELINE (uncapped)', `${b.records} records at once`, 'same stand-in, CaptchaAI client, no limiter'],
    ['  solved / failed', `${b.solved} / ${b.failed}`, fmtCounts(b.failed_by_code)],
    [
      '  stop-class failures',
      String(b.stop_class_failures),
      b.stop_class_failures
        ? 'false NO_ACTIVE_PLAN: in the pipeline the first one pauses everything'
        : 'none',
    ],
    [
      '  ZERO_BALANCE answers',
      String(b.zero_balance),
      `max in flight ${b.max_in_flight} of ${b.plan_threads} threads`,
    ],
    [
      '  in.php submits / extra',
      `${b.submits} / ${b.extra_submits}`,
      `${b.submit_retries} back-offs, ${b.threadsinfo_calls} threadsinfo calls, ${b.redeliveries} redeliveries`,
    ],
    [
      '  time wasted waiting',
      `${n(b.backoff_s_unscaled, 0)} s in back-offs`,
      `+ ${n(b.redelivery_wait_s_unscaled, 0)} s awaiting redelivery (unscaled, summed over records); ${n(b.lambda_gb_s_in_backoff, 0)} GB-s billed for back-offs`,
    ],
    ['  elapsed', `${n(b.elapsed_s, 1)} s wall`, `${n(b.elapsed_s_unscaled, 0)} s unscaled`],
  ];
}

/** Each process-isolated environment: peak RSS, CPU seconds per solve, event-loop delay, CPU share. */
function environmentRows(r: BenchReport): Row[] {
  return r.lambda.environments
    .filter((e) => e.peak_rss_mb !== null)
    .map((e) => {
      const share = e.cpu_share;
      const cpu = share?.share
        ? `under ${share.share.toFixed(3)} of a core (throttled in ${share.throttledPeriods ?? '?'} of ${share.periods ?? '?'} periods)`
        : share?.error
          ? `no CPU share: ${share.error}`
          : 'no CPU share (THREADGATE_LOCAL_CPU=lambda sets it)';
      const delay = e.event_loop_delay_ms;
      return [
        `  environment ${e.id}`,
        `${e.peak_rss_mb} MB`,
        `${e.submitted} solves, ${e.cpu_s_per_solve ?? 'n/a'} CPU s per solve, event-loop delay p99 ${delay?.p99 ?? 'n/a'} / max ${delay?.max ?? 'n/a'} ms; ${cpu}; within 3/4 of ${r.lambda.memory_mb} MB: ${e.within_three_quarters ? 'yes' : 'NO'}`,
      ] as Row;
    });
}

/** The worker's measured memory: a process's own peak RSS, or the estimate from a thread's heap. */
function memoryRow(r: BenchReport): Row {
  const m = r.lambda.measured_memory_mb;
  const n = (v: number | null) => (v === null || !Number.isFinite(v) ? 'n/a' : v.toFixed(1));
  if (m.isolation === 'process') {
    return [
      'worker memory, peak RSS',
      `${n(m.environment_peak_rss)} MB`,
      `largest of ${m.environments} environments, each its own Node process under Lambda's heap flags for ${r.lambda.memory_mb} MB (up to ${m.most_invocations_per_environment} invocations each); 4/3 headroom needs ${m.smallest_size_with_headroom ?? 'n/a'} MB`,
    ];
  }
  return [
    'worker memory, estimated peak',
    `${n(m.estimated_environment_peak)} MB`,
    `per environment (heap ${n(m.peak_heap_total)} + external ${n(m.peak_external)} + bare Node ${n(m.bare_node_rss)} MB), worker threads; 2× headroom needs ${m.smallest_size_with_headroom ?? 'n/a'} MB; deployed ${r.lambda.memory_mb} MB`,
  ];
}

/** What the environments learned: their last schedules' first polls and expected calls. */
function learnedRow(r: BenchReport): Row {
  const last = r.poll_schedule_learned.last_per_environment;
  const firsts = last
    .map((l) => l.first_poll_ms)
    .filter((v): v is number => v !== null)
    .sort((a, b) => a - b);
  const calls = last.map((l) => l.expected_calls).filter((v): v is number => v !== null);
  const mid = firsts[Math.floor(firsts.length / 2)];
  return [
    '  learned schedules (logged)',
    `${r.poll_schedule_learned.recomputed} recomputed`,
    last.length
      ? `last per environment: first poll ${firsts[0]}–${firsts.at(-1)} ms (median ${mid}), ${(calls.reduce((a, b) => a + b, 0) / calls.length).toFixed(2)} expected res.php per solve`
      : 'none (static schedule, or too few answers per environment)',
  ];
}
