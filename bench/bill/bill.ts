import { laneShape } from '../../functions/pipeline/lanes.js';
import type { AwsUsageRow } from '../../local/emulator/usage.js';
import { MONTH_SECONDS, planPrice } from '../cost.js';
import { round } from '../stats.js';
import { callItems, lambdaItems, logItems, templateItems } from './items.js';
import { LIST_PRICES, type OperationPrice, PRODUCER_OPERATIONS, priceOfCall } from './prices.js';
import type { Bill, BillInput, BillItem, CountedCall } from './types.js';

export type { Bill, BillInput, BillItem, CountedCall, FunctionRun } from './types.js';

/**
 * The report's monthly bill: every AWS charge the stack makes, priced from what the run did
 * (the emulator's request counts with DynamoDB's units, the functions' invocations, durations,
 * log bytes and EMF metrics) and from the synthesized template (alarms, dashboards, secrets,
 * schedules, log retention). Variable charges per 1,000 solves, fixed charges per month, and
 * both at 20, 100 and 1,000 threads at full and 10 % use next to the CaptchaAI plan.
 */

export const BILL_THREADS = [20, 100, 1000] as const;
export const BILL_USE = [1, 0.1] as const;

/** A harness call that is part of the bill: the producer's sends. */
function isProducerCall(row: AwsUsageRow): boolean {
  return row.caller === 'harness' && row.service === 'sqs' && PRODUCER_OPERATIONS.has(row.operation);
}

function countedCalls(i: BillInput) {
  const counted: CountedCall[] = [];
  const unpriced: Bill['unpriced'] = [];
  const excluded: Bill['excluded'] = [];
  const billable: { row: AwsUsageRow; price: OperationPrice }[] = [];
  for (const row of i.usage) {
    const price = isProducerCall(row)
      ? ({ kind: 'per-request', price: LIST_PRICES.sqsRequest } as const)
      : priceOfCall(row);
    const brief = {
      caller: row.caller,
      service: row.service,
      operation: row.operation,
      requests: row.requests,
    };
    if (row.caller === 'harness' && !price) {
      excluded.push(brief);
      continue;
    }
    const { errors: _e, items_written: _w, ...rest } = row;
    counted.push({
      ...rest,
      priced: price?.kind ?? 'unpriced',
      ...(price?.kind === 'free' ? { why: price.why } : {}),
    });
    if (!price) unpriced.push(brief);
    else billable.push({ row, price });
  }
  return { counted, unpriced, excluded, billable };
}

const total = (items: BillItem[]) => items.reduce((a, b) => a + b.usd, 0);

function roundItems(items: BillItem[]): BillItem[] {
  return items.map((it) => ({ ...it, quantity: round(it.quantity, 6) ?? 0, usd: round(it.usd, 8) ?? 0 }));
}

/**
 * `function:<name>` of a template function for a caller whose app id starts with its name: the
 * SDK's user agent may carry more after it (Powertools appends its own marks to the app id).
 */
function canonicalCaller(caller: string, names: string[]): string {
  if (!caller.startsWith('function:')) return caller;
  const id = caller.slice('function:'.length);
  const name = names.filter((n) => id === n || id.startsWith(`${n}-`)).sort((a, b) => b.length - a.length)[0];
  return name ? `function:${name}` : caller;
}

/** The counts with one row per caller, service, operation and resource, callers named as the template names them. */
function canonicalUsage(rows: AwsUsageRow[], names: string[]): AwsUsageRow[] {
  const merged = new Map<string, AwsUsageRow>();
  for (const row of rows) {
    const caller = canonicalCaller(row.caller, names) as AwsUsageRow['caller'];
    const key = [caller, row.service, row.operation, row.resource].join('\u0000');
    const m = merged.get(key);
    if (!m) {
      merged.set(key, { ...row, caller });
      continue;
    }
    for (const k of [
      'requests',
      'errors',
      'billed_requests',
      'write_units',
      'index_write_units',
      'read_units',
      'conditional_failures',
      'items_written',
    ] as const) {
      m[k] += row[k];
    }
  }
  return [...merged.values()];
}

/**
 * The month at 20, 100 and 1,000 threads, full and 10 % use, next to the plan. With lanes, each
 * plan size has its own shape (laneShape of its threads as the cap): the worker's duration per
 * solve is the run's × the run's L ÷ that plan's L (an invocation's duration is shared by its L
 * lanes); the rest per solve is the run's. `lambda_quota_needed`: r + 100, the account's Lambda
 * concurrency the reservation needs (Lambda keeps 100 unreserved).
 */
function monthlyRows(
  variablePer1000: number,
  workerDurationPer1000: number,
  fixedPerMonth: number,
  meanSolveS: number,
  lanes: BillInput['lanes'],
): Bill['monthly'] {
  return BILL_THREADS.flatMap((threads) =>
    BILL_USE.map((use) => {
      const shape = laneShape(threads, lanes?.setting ?? 1);
      const runL = lanes?.L ?? 1;
      const per1000 = variablePer1000 - workerDurationPer1000 + (workerDurationPer1000 * runL) / shape.L;
      const solves = (threads * use * MONTH_SECONDS) / meanSolveS;
      const v = (per1000 * solves) / 1000;
      const plan = planPrice(threads).usdPerMonth;
      return {
        threads,
        lanes: lanes?.setting ?? 1,
        r: shape.r,
        L: shape.L,
        lambda_quota_needed: shape.r + 100,
        use,
        solves_per_month: Math.round(solves),
        variable: round(v, 2) ?? 0,
        fixed: round(fixedPerMonth, 2) ?? 0,
        aws_total: round(v + fixedPerMonth, 2) ?? 0,
        captchaai_plan: round(plan, 2) ?? 0,
        aws_to_plan: round((v + fixedPerMonth) / plan, 2) ?? 0,
      };
    }),
  );
}

/** The three largest items of the 20-thread month at full use. */
function dominantItems(
  variable: BillItem[],
  fixed: BillItem[],
  meanSolveS: number,
): Bill['dominant_at_20_threads'] {
  const at20 = (20 * MONTH_SECONDS) / meanSolveS / 1000;
  return [
    ...variable.map((it) => ({ item: it.item, usd_per_month: it.usd * at20 })),
    ...fixed.map((it) => ({ item: it.item, usd_per_month: it.usd })),
  ]
    .sort((a, b) => b.usd_per_month - a.usd_per_month)
    .slice(0, 3)
    .map((d) => ({ item: d.item, usd_per_month: round(d.usd_per_month, 2) ?? 0 }));
}

/**
 * What one solve costs in units and calls (the emulator's counts over the run ÷ records
 * submitted): DynamoDB write units (table and secondary indexes), and every AWS request the stack
 * makes for it (the functions', Lambda's pollers' and the producer's; not the scheduled adjuster,
 * a fixed monthly charge, nor the bench's own calls), with the worker's by operation.
 */
function perSolveCounts(i: BillInput, scheduled: Set<string>): Bill['per_solve'] {
  const per = (n: number) => round(i.solved > 0 ? n / i.solved : Number.NaN, 3);
  const isScheduled = (caller: string) => scheduled.has(caller.replace(/^function:/, ''));
  const rows = i.usage.filter((r) => !isScheduled(r.caller) && (r.caller !== 'harness' || isProducerCall(r)));
  const sum = (list: AwsUsageRow[], f: (r: AwsUsageRow) => number) => list.reduce((a, r) => a + f(r), 0);
  const dynamodb = rows.filter((r) => r.service === 'dynamodb');
  const worker = rows.filter((r) => r.caller === `function:${i.workerName}`);
  const byOperation: Record<string, number | null> = {};
  for (const r of worker) {
    const key = `${r.service} ${r.operation}`;
    byOperation[key] = (byOperation[key] ?? 0) + r.requests;
  }
  for (const key of Object.keys(byOperation)) byOperation[key] = per(byOperation[key] ?? 0);
  return {
    dynamodb_write_units: per(sum(dynamodb, (r) => r.write_units + r.index_write_units)),
    dynamodb_write_units_table: per(sum(dynamodb, (r) => r.write_units)),
    dynamodb_write_units_indexes: per(sum(dynamodb, (r) => r.index_write_units)),
    aws_requests: per(sum(rows, (r) => r.requests)),
    worker_requests: per(sum(worker, (r) => r.requests)),
    worker_requests_by_operation: byOperation,
  };
}

/** The bill (see the file's comment). */
export function buildBill(input: BillInput): Bill {
  const names = input.template.functions.map((f) => f.name);
  const i: BillInput = {
    ...input,
    usage: canonicalUsage(input.usage, names),
    functions: Object.fromEntries(Object.entries(input.functions).filter(([name]) => names.includes(name))),
  };
  const t = i.template;
  const scheduled = new Set(t.schedules.map((s) => s.functionName));
  const memoryOf = (name: string) => t.functions.find((f) => f.name === name)?.memoryMb ?? 128;
  const retentionOf = (name: string) => t.functions.find((f) => f.name === name)?.logRetentionDays ?? null;
  const perSolve = i.solved > 0 ? 1000 / i.solved : Number.NaN;
  const invocationsOf = (role: string) => i.functions[role.replace(/^scheduled /, '')]?.invocations ?? 0;
  const { counted, unpriced, excluded, billable } = countedCalls(i);
  const calls = callItems(billable, i, scheduled, (role) =>
    role.startsWith('scheduled ') ? 1 / Math.max(1, invocationsOf(role)) : perSolve,
  );

  const variable: BillItem[] = [
    ...lambdaItems(
      'worker',
      i.workerGbSecondsPerSolve * 1000,
      i.workerInvocationsPerSolve * 1000,
      'workerMemoryMb',
    ),
  ];
  const fixed: BillItem[] = [];
  const identities = new Set<string>();
  for (const [name, fn] of Object.entries(i.functions)) {
    for (const id of fn.log.metricIdentities) identities.add(id);
    const movedBy = name === i.workerName ? undefined : 'outcomeStream';
    if (scheduled.has(name)) {
      const period = t.schedules.find((s) => s.functionName === name)?.periodS ?? 60;
      const perMonth = MONTH_SECONDS / period;
      const k = fn.invocations ? perMonth / fn.invocations : 0;
      const gbs = (fn.billedMs / 1000) * (memoryOf(name) / 1024) * k;
      const label = `${name} (${Math.round(perMonth).toLocaleString('en-US')} scheduled invocations)`;
      fixed.push(...lambdaItems(label, gbs, perMonth, 'its memory size'));
      for (const it of calls.perInvocation.get(`scheduled ${name}`) ?? []) {
        fixed.push({ ...it, quantity: it.quantity * perMonth, usd: it.usd * perMonth });
      }
      fixed.push(...logItems(name, fn.log, k, retentionOf(name)));
      continue;
    }
    if (name !== i.workerName) {
      const gbs = (fn.billedMs / 1000) * (memoryOf(name) / 1024) * perSolve;
      variable.push(...lambdaItems(name, gbs, fn.invocations * perSolve, 'outcomeStream; its memory size'));
    }
    variable.push(
      ...logItems(name, fn.log, perSolve, retentionOf(name), movedBy && `outcomeStream; log level`),
    );
  }
  variable.push(...calls.variable);
  fixed.push(...templateItems(t, identities.size));

  const variablePer1000 = total(variable);
  const fixedPerMonth = total(fixed);
  const workerDuration = total(variable.filter((it) => it.item.startsWith('Lambda duration — worker')));
  const monthly = monthlyRows(variablePer1000, workerDuration, fixedPerMonth, i.meanSolveS, i.lanes);
  const dominant = dominantItems(variable, fixed, i.meanSolveS);
  const logs = Object.fromEntries(
    Object.entries(i.functions).map(([name, fn]) => [
      name,
      { lines: fn.log.lines, bytes: fn.log.bytes, bytes_by_kind: fn.log.bytesByKind },
    ]),
  );
  return {
    solved: i.solved,
    per_solve: perSolveCounts(i, scheduled),
    variable_per_1000_solves: { items: roundItems(variable), total: round(variablePer1000, 5) ?? 0 },
    fixed_per_month: { items: roundItems(fixed), total: round(fixedPerMonth, 2) ?? 0 },
    monthly,
    dominant_at_20_threads: dominant,
    counted,
    unpriced,
    excluded,
    logs,
    metric_identities: [...identities].sort(),
    prices: LIST_PRICES,
    notes: [
      'USD at us-east-1 list prices (bench/prices.ts, each with its source page; docs/benchmark.md "What it costs a month"); free tiers ignored',
      'counted at the emulator over the capped run (local/emulator/usage.py): every request by caller and operation, DynamoDB request units from the items before and after each write (its size, each secondary index it changes, failed conditional writes) and from the items each read returned',
      'variable per 1,000 solves: divided by the run’s submitted records; the worker’s Lambda duration at time scale 1 over every invocation; a scheduled function’s calls, duration and logs are measured per invocation and multiplied by its schedule',
      'monthly: solves = threads × use × 30 days ÷ the modelled mean solve time; fixed charges do not depend on use',
      'not counted: data transfer out to CaptchaAI and the target form (a few KB per solve, $0.09 per GB after 100 GB a month), DynamoDB storage ($0.25 per GB-month; outcome rows are far below 1 KB), the free tiers',
    ],
  };
}
