import type { AwsUsageRow } from '../../local/emulator/usage.js';
import type { LogUsage } from './log-usage.js';
import type { LIST_PRICES, ListPrice, OperationPrice } from './prices.js';
import type { TemplateFacts } from './template-facts.js';

/** The shapes of the monthly bill (bill.ts) and of what it is built from. */

/** One function as the run saw it (its log, read over the capped run). */
export interface FunctionRun {
  invocations: number;
  /** Σ ceil(duration ms) of its invocations (for the worker: unscaled, at time scale 1). */
  billedMs: number;
  log: LogUsage;
}

export interface BillInput {
  /** The emulator's counts over the capped run (local/emulator/usage.ts). */
  usage: AwsUsageRow[];
  template: TemplateFacts;
  functions: Record<string, FunctionRun>;
  workerName: string;
  /** The worker's GB-s per solve at time scale 1 (bench/report/costs.ts, every invocation). */
  workerGbSecondsPerSolve: number;
  workerInvocationsPerSolve: number;
  /** Records solved (submitted) in the capped run. */
  solved: number;
  /** The modelled mean solve time at time scale 1: how long a solve holds a plan thread. */
  meanSolveS: number;
  /** The run's `lanes` setting and its L (lanes per invocation); absent: one lane. */
  lanes?: { setting: number; L: number };
}

export interface BillItem {
  item: string;
  /** Per 1,000 solves (variable) or per month (fixed). */
  quantity: number;
  unit: string;
  usd: number;
  /** The list price applied; null for a free item (then `free` says why). */
  price: ListPrice | null;
  free?: string;
  /** The setting that moves this item, if one does. */
  moved_by?: string;
}

export interface CountedCall {
  caller: string;
  service: string;
  operation: string;
  resource: string;
  requests: number;
  billed_requests: number;
  write_units: number;
  index_write_units: number;
  read_units: number;
  conditional_failures: number;
  /** How it is priced: `per-request`, `dynamodb-units`, `free` (with `why`), or `unpriced`. */
  priced: OperationPrice['kind'] | 'unpriced';
  why?: string;
}

export interface Bill {
  /** The submitted records the variable charges are divided by. */
  solved: number;
  variable_per_1000_solves: { items: BillItem[]; total: number };
  fixed_per_month: { items: BillItem[]; total: number };
  /** Units and requests per solve (counted over the run ÷ records submitted). */
  per_solve: {
    dynamodb_write_units: number | null;
    dynamodb_write_units_table: number | null;
    dynamodb_write_units_indexes: number | null;
    /** Every AWS request of the stack per solve (functions, Lambda's pollers, the producer; not the scheduled adjuster). */
    aws_requests: number | null;
    worker_requests: number | null;
    worker_requests_by_operation: Record<string, number | null>;
  };
  monthly: {
    threads: number;
    /** The `lanes` setting, and the shape of this plan's cap: r invocations of L lanes. */
    lanes: number;
    r: number;
    L: number;
    /** r + 100: the account's Lambda concurrency the reservation needs. */
    lambda_quota_needed: number;
    use: number;
    solves_per_month: number;
    variable: number;
    fixed: number;
    aws_total: number;
    captchaai_plan: number;
    aws_to_plan: number;
  }[];
  /** The three largest items of the 20-thread bill at full use. */
  dominant_at_20_threads: { item: string; usd_per_month: number }[];
  counted: CountedCall[];
  /** Calls the run counted that no price in bench/prices.ts covers: the bill misses a charge. */
  unpriced: { caller: string; service: string; operation: string; requests: number }[];
  /** Calls the bench itself made (its feeder's depth checks, probes, progress scans): no part of the bill. */
  excluded: { caller: string; service: string; operation: string; requests: number }[];
  logs: Record<string, { lines: number; bytes: number; bytes_by_kind: Record<string, number> }>;
  metric_identities: string[];
  prices: typeof LIST_PRICES;
  notes: string[];
}
