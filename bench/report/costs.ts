import { type EnvironmentMemory, environmentPeakBytes } from '../../local/runtime/types.js';
import { type Bill, buildBill } from '../bill/bill.js';
import { priceOfCall } from '../bill/prices.js';
import {
  AWS_PRICES,
  awsCostPer1000,
  captchaCostPer1000,
  gbSeconds,
  MONTH_SECONDS,
  planPrice,
} from '../cost.js';
import { round } from '../stats.js';
import { type LoggedInvocation, submittedIn, unscaledInvocationMs } from '../worker-log.js';
import { defined, type RunFacts } from './measures.js';
import type { BenchReport, BuildInput } from './types.js';

/** The report's Lambda, AWS cost and CaptchaAI cost sections (prices in bench/cost.ts). */

const MB = 1048576;

/**
 * The smallest Lambda memory size with `factor` × headroom over `peakMb`: at least 128 MB, in
 * steps of 8 MB (Lambda takes any whole MB from 128 up; every MB is billed by every slot).
 */
export function lambdaMemoryFor(peakMb: number, factor = 2): number {
  return Math.max(128, Math.ceil((factor * peakMb) / 8) * 8);
}

/**
 * Headroom over a peak RSS measured the way Lambda runs an environment (a process of its own
 * under the runtime's heap flags): the peak must stay within 3/4 of the size, for what the
 * measurement does not see (Node 22 on Lambda against this machine's Node 20, a longer run,
 * larger answers from a real form).
 */
export const MEASURED_RSS_HEADROOM = 4 / 3;

/**
 * Lambda GB-s at time scale 1, billed per invocation as Lambda bills it: each invocation's
 * duration once, however many records and lanes it carried, the tail where some lanes sat idle
 * included (bench/worker-log.ts unscaledInvocationMs). For the cost, every invocation per solve:
 * Lambda bills an environment's start (its init) too, and with lanes an environment's first
 * invocation carries most of its records (a take window of about 7 minutes), so leaving first
 * invocations out priced a 1,200-record run by the three that started at its end to drain the
 * queue (1.25 GB-s per solve against 0.74 over all ten). The figure over warm invocations only
 * (all but each environment's first) is shown beside; with one lane the two differ by under 1 %.
 */
export function gbSecondsPerSolve(
  i: Pick<BuildInput, 'timeScale' | 'lanes' | 'loggedInvocations' | 'memoryMb'>,
  solved: number,
) {
  const s = i.timeScale;
  const L = i.lanes.L;
  const unscaled = (list: LoggedInvocation[]) =>
    list.map((inv) => unscaledInvocationMs(inv, s, L)).filter(defined);
  const warmAll = i.loggedInvocations.filter((inv) => !inv.firstInEnvironment);
  const warmSolved = warmAll.reduce((a, inv) => a + submittedIn(inv), 0);
  return {
    warm: warmSolved ? gbSeconds(unscaled(warmAll), i.memoryMb) / warmSolved : Number.NaN,
    all: solved ? gbSeconds(unscaled(i.loggedInvocations), i.memoryMb) / solved : Number.NaN,
    wall: solved
      ? gbSeconds(i.loggedInvocations.map((inv) => inv.durationMs).filter(defined), i.memoryMb) / solved
      : Number.NaN,
  };
}

/**
 * Each execution environment as it ran: its records, its process's peak RSS, CPU seconds per
 * record submitted and event-loop delay (process isolation), and the CPU share it ran under.
 */
function environmentSection(i: BuildInput): BenchReport['lambda']['environments'] {
  const submittedBy = new Map<string, number>();
  for (const inv of i.loggedInvocations)
    submittedBy.set(inv.environment, (submittedBy.get(inv.environment) ?? 0) + submittedIn(inv));
  const limit = (3 / 4) * i.memoryMb;
  return i.memory.environments.map((e) => {
    const submitted = submittedBy.get(e.id) ?? 0;
    const peak = e.peakRss !== undefined ? e.peakRss / MB : undefined;
    return {
      id: e.id,
      invocations: e.invocations ?? 0,
      submitted,
      peak_rss_mb: peak === undefined ? null : round(peak, 1),
      within_three_quarters: peak === undefined ? null : peak <= limit,
      cpu_s_per_solve:
        e.cpuSeconds !== undefined && submitted > 0 ? round(e.cpuSeconds / submitted, 4) : null,
      cpu_s: e.cpuSeconds === undefined ? null : round(e.cpuSeconds, 2),
      event_loop_delay_ms: e.loopDelay
        ? { p50: e.loopDelay.p50Ms, p99: e.loopDelay.p99Ms, max: e.loopDelay.maxMs }
        : null,
      cpu_share: e.cpuShare ?? null,
    };
  });
}

function lambdaSection(i: BuildInput, gbs: ReturnType<typeof gbSecondsPerSolve>): BenchReport['lambda'] {
  const envs = i.memory.environments;
  const worst = (f: (e: EnvironmentMemory) => number) =>
    envs.length ? Math.max(...envs.map(f)) / MB : Number.NaN;
  const envPeakMb = worst(environmentPeakBytes) + i.bareNodeRss / MB;
  const processes = envs.filter((e) => e.peakRss !== undefined);
  const peakRssMb = processes.length ? Math.max(...processes.map((e) => e.peakRss ?? 0)) / MB : Number.NaN;
  const memoryNeededMb = Number.isFinite(peakRssMb)
    ? lambdaMemoryFor(peakRssMb, MEASURED_RSS_HEADROOM)
    : Number.isFinite(envPeakMb)
      ? lambdaMemoryFor(envPeakMb)
      : Number.NaN;
  return {
    memory_mb: i.memoryMb,
    lanes: i.lanes,
    invocations: i.workerInvocations,
    first_invocations: i.loggedInvocations.filter((inv) => inv.firstInEnvironment).length,
    environments: environmentSection(i),
    timeouts: i.timeouts,
    gb_s_per_solve: round(gbs.all, 3),
    gb_s_per_solve_warm: round(gbs.warm, 3),
    gb_s_per_solve_wall: round(gbs.wall, 3),
    measured_memory_mb: {
      environments: envs.length,
      isolation: processes.length ? 'process' : 'thread',
      environment_peak_rss: round(peakRssMb, 1),
      most_invocations_per_environment: envs.length ? Math.max(...envs.map((e) => e.invocations ?? 0)) : 0,
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
      smallest_size_with_headroom: Number.isFinite(memoryNeededMb) ? memoryNeededMb : null,
      note: 'isolation process (THREADGATE_LOCAL_ENVIRONMENTS=process): each environment is a Node process of its own started with the heap flags of Lambda’s Node.js runtime at the deployed memory size, and environment_peak_rss is its peak RSS (the OS’s maxRSS); smallest_size_with_headroom = the smallest Lambda size (at least 128 MB, 8 MB steps) at least 4/3 of it. isolation thread: environments are worker threads of one process, so their own RSS cannot be read: estimated_environment_peak = a bare Node process’s RSS + the peak V8 heap (total) + peak external memory, and the size needs 2× that',
    },
    note: 'billed per invocation, each duration once however many records and lanes it carried (idle lanes and the tail included), at time scale 1: the records’ solve time shared among the lanes that worked (min(L, records)) divided by the time scale, the rest (AWS calls, target HTTP, start-up, idle) as measured; exact at time scale 1. gb_s_per_solve: every invocation (used for the cost), per record submitted; _warm leaves out each environment’s first invocation; _wall is what this run used at its time scale',
  };
}

/**
 * AWS usage per solve of the worker's path, from the emulator's counts (local/emulator/usage.py)
 * when there are any: every SQS request of the functions, of Lambda's pollers and of the
 * producer; the DynamoDB units the functions' calls cost (table, indexes, reads). The scheduled
 * adjuster is a fixed monthly charge and sits in the bill, not here. Without counts (LocalStack),
 * the older estimate: one ReceiveMessage and one DeleteMessage per message, two write units per record.
 */
function usagePerSolve(i: BuildInput, f: RunFacts, gbsPerSolve: number) {
  const { solved } = f;
  const per = (n: number) => (solved ? n / solved : Number.NaN);
  // A function's caller may carry more after its name (Powertools appends to the app id).
  const scheduled = (i.template?.schedules ?? []).map((s) => `function:${s.functionName}`);
  const rows = i.usage.filter((r) => !scheduled.some((c) => r.caller === c || r.caller.startsWith(`${c}-`)));
  const sqsRows = rows.filter(
    (r) => r.service === 'sqs' && (r.caller !== 'harness' || r.operation.startsWith('SendMessage')),
  );
  const dynamodbRows = rows.filter(
    (r) => r.service === 'dynamodb' && priceOfCall(r)?.kind === 'dynamodb-units',
  );
  const counted = i.usage.length > 0;
  return {
    counted,
    usage: {
      gbSeconds: gbsPerSolve,
      invocations: per(i.workerInvocations),
      sqsRequests: counted
        ? per(sqsRows.reduce((a, r) => a + r.billed_requests, 0))
        : per(i.sqs.sendCalls + i.sqs.received + i.sqs.deleted + i.runSummary.dlq),
      dynamodbWriteUnits: counted
        ? per(dynamodbRows.reduce((a, r) => a + r.write_units + r.index_write_units, 0))
        : per(2 * f.withOutcome.length),
      dynamodbReadUnits: counted ? per(dynamodbRows.reduce((a, r) => a + r.read_units, 0)) : 0,
    },
  };
}

function awsCostSection(i: BuildInput, f: RunFacts, gbsPerSolve: number): BenchReport['aws_cost_per_1000'] {
  const { counted, usage } = usagePerSolve(i, f, gbsPerSolve);
  const aws = awsCostPer1000(usage);
  return {
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
      dynamodb_read_units: round(usage.dynamodbReadUnits, 3),
    },
    prices: AWS_PRICES,
    notes: [
      'USD at us-east-1 list prices (bench/cost.ts): Lambda arm64, SQS standard, DynamoDB on demand; free tiers ignored',
      `Lambda at the worker's deployed memory, ${i.memoryMb} MB (workerMemoryMb; its default rests on the peak RSS of an environment run as Lambda runs it, a Node process under the runtime's heap flags: bench/results/memory-*.json, docs/benchmark-notes.md "Worker memory")`,
      counted
        ? 'SQS and DynamoDB as the emulator counted them over the capped run (local/emulator/usage.py): every SQS request of the functions, of the event source mapping’s pollers and of the producer; the DynamoDB request units of the functions’ calls (item sizes, the batch index, failed conditional writes, reads)'
        : 'no emulator counts (LocalStack): SQS is the producer’s SendMessageBatch calls, one ReceiveMessage and one DeleteMessage per message and DLQ copies; DynamoDB two write units per record (an estimate that misses the markers and the batch index)',
      'the whole bill, with the outcome publisher, logs, metrics, alarms, the dashboard, secrets and the scheduled adjuster, is the `bill` section',
    ],
  };
}

/** The monthly bill, when the run has the emulator's counts and the template. */
function billSection(i: BuildInput, f: RunFacts, gbsPerSolve: number): Bill | null {
  if (!i.template || i.usage.length === 0) return null;
  return buildBill({
    usage: i.usage,
    template: i.template,
    functions: i.functionRuns,
    workerName: i.workerName,
    workerGbSecondsPerSolve: gbsPerSolve,
    workerInvocationsPerSolve: f.solved ? i.workerInvocations / f.solved : Number.NaN,
    solved: f.solved,
    meanSolveS: i.modelledMeanMs / 1000,
    lanes: { setting: i.lanes.setting, L: i.lanes.L },
  });
}

function captchaCostSection(i: BuildInput, ssEff: number): BenchReport['captcha_cost_per_1000'] {
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
  return {
    full_plan_use: round(captchaFull, 5),
    at_measured_efficiency: round(captchaAtEff, 5),
    plan: { ...plan, usdPerMonth: round(plan.usdPerMonth, 2) ?? plan.usdPerMonth, threads: i.threads },
    mean_solve_s_unscaled: round(meanSolveS, 2),
    month_s: MONTH_SECONDS,
  };
}

/** The report's `lambda`, `aws_cost_per_1000`, `captcha_cost_per_1000` and `bill` sections, in that order. */
export function costSections(
  i: BuildInput,
  f: RunFacts,
): Pick<BenchReport, 'lambda' | 'aws_cost_per_1000' | 'captcha_cost_per_1000' | 'bill'> {
  const gbs = gbSecondsPerSolve(i, f.solved);
  const aws = awsCostSection(i, f, gbs.all);
  const captcha = captchaCostSection(i, f.ssEff);
  // The yardstick of the worker's memory work: AWS per solve against the plan per solve at full use.
  const ratio = captcha.full_plan_use ? aws.total / captcha.full_plan_use : Number.NaN;
  return {
    lambda: lambdaSection(i, gbs),
    aws_cost_per_1000: aws,
    captcha_cost_per_1000: { ...captcha, aws_to_plan_at_full_use: round(ratio, 2) },
    bill: billSection(i, f, gbs.all),
  };
}
