/**
 * List prices (us-east-1, listed in docs/benchmark.md) and the cost model of the benchmark: AWS per
 * 1,000 solves, itemized, next to CaptchaAI's plan price per 1,000 solves at full plan use.
 */

export const AWS_PRICES = {
  /** Lambda arm64 compute, USD per GB-second. */
  lambdaArmPerGbSecond: 0.0000133334,
  /** Lambda requests, USD per invocation ($0.20 per million). */
  lambdaPerRequest: 0.2 / 1_000_000,
  /** SQS standard queue, USD per API request ($0.40 per million). */
  sqsPerRequest: 0.4 / 1_000_000,
  /** DynamoDB on demand, USD per write request unit ($0.625 per million). */
  dynamodbPerWriteUnit: 0.625 / 1_000_000,
  /** DynamoDB on demand, USD per read request unit ($0.125 per million). */
  dynamodbPerReadUnit: 0.125 / 1_000_000,
} as const;

/** CaptchaAI plans: concurrent threads, unlimited solves, USD per month (CaptchaAI's published plans). */
export const CAPTCHAAI_PLANS: readonly { threads: number; usdPerMonth: number }[] = [
  { threads: 5, usdPerMonth: 15 },
  { threads: 15, usdPerMonth: 30 },
  { threads: 50, usdPerMonth: 90 },
  { threads: 100, usdPerMonth: 170 },
];

/** A 30-day month, the period plan prices are quoted for. */
export const MONTH_SECONDS = 30 * 24 * 3600;

export interface PlanPrice {
  usdPerMonth: number;
  /** How the price was found: a listed plan, or a straight line between two, or beyond the table. */
  basis: 'listed' | 'interpolated' | 'smallest plan' | 'extrapolated';
  note: string;
}

/**
 * The monthly price of a plan with `threads` threads. A listed plan is used as is; between two
 * listed plans the price is interpolated linearly (CaptchaAI sells fixed plans, so this is the
 * price per thread the neighbouring plans imply, not an offer); below the smallest plan it is
 * the smallest plan; above the largest, the largest plan's price per thread.
 */
export function planPrice(threads: number, plans = CAPTCHAAI_PLANS): PlanPrice {
  if (!(threads > 0)) throw new RangeError(`threads must be > 0, got ${threads}`);
  const sorted = [...plans].sort((a, b) => a.threads - b.threads);
  const exact = sorted.find((p) => p.threads === threads);
  if (exact) {
    return { usdPerMonth: exact.usdPerMonth, basis: 'listed', note: `the ${threads}-thread plan` };
  }
  const first = sorted[0];
  const last = sorted[sorted.length - 1];
  if (!first || !last) throw new RangeError('no plans');
  if (threads < first.threads) {
    return {
      usdPerMonth: first.usdPerMonth,
      basis: 'smallest plan',
      note: `the smallest plan (${first.threads} threads); ${threads} threads cannot be bought alone`,
    };
  }
  if (threads > last.threads) {
    const usd = (last.usdPerMonth / last.threads) * threads;
    return {
      usdPerMonth: usd,
      basis: 'extrapolated',
      note: `the ${last.threads}-thread plan's price per thread × ${threads}`,
    };
  }
  const upper = sorted.find((p) => p.threads > threads) as { threads: number; usdPerMonth: number };
  const lower = [...sorted].reverse().find((p) => p.threads < threads) as typeof upper;
  const usd =
    lower.usdPerMonth +
    ((threads - lower.threads) / (upper.threads - lower.threads)) * (upper.usdPerMonth - lower.usdPerMonth);
  return {
    usdPerMonth: usd,
    basis: 'interpolated',
    note: `interpolated between the ${lower.threads}-thread ($${lower.usdPerMonth}) and ${upper.threads}-thread ($${upper.usdPerMonth}) plans; the smallest plan with ${threads} threads is the ${upper.threads}-thread one`,
  };
}

/**
 * CaptchaAI's cost per 1,000 solves when every thread of the plan is busy all month: each
 * thread finishes one solve per mean solve time (real, unscaled seconds). `efficiency` < 1
 * spreads the same price over fewer solves.
 */
export function captchaCostPer1000(
  plan: { threads: number; usdPerMonth: number },
  meanSolveSeconds: number,
  efficiency = 1,
): number {
  if (!(meanSolveSeconds > 0 && efficiency > 0)) return Number.NaN;
  const solvesPerMonth = ((plan.threads * MONTH_SECONDS) / meanSolveSeconds) * efficiency;
  return (plan.usdPerMonth / solvesPerMonth) * 1000;
}

/** Lambda GB-seconds of invocations: each duration rounded up to the millisecond, as Lambda bills. */
export function gbSeconds(durationsMs: readonly number[], memoryMb: number): number {
  let ms = 0;
  for (const d of durationsMs) ms += Math.ceil(Math.max(0, d));
  return (ms / 1000) * (memoryMb / 1024);
}

/** AWS usage per solve, measured or modelled (see bench/run.ts for where each count comes from). */
export interface UsagePerSolve {
  gbSeconds: number;
  invocations: number;
  sqsRequests: number;
  dynamodbWriteUnits: number;
  dynamodbReadUnits: number;
}

export interface AwsCost {
  lambda_compute: number;
  lambda_requests: number;
  sqs: number;
  dynamodb_writes: number;
  dynamodb_reads: number;
  total: number;
}

/** USD per 1,000 solves, itemized, at list prices. */
export function awsCostPer1000(u: UsagePerSolve, prices = AWS_PRICES): AwsCost {
  const k = 1000;
  const c = {
    lambda_compute: u.gbSeconds * prices.lambdaArmPerGbSecond * k,
    lambda_requests: u.invocations * prices.lambdaPerRequest * k,
    sqs: u.sqsRequests * prices.sqsPerRequest * k,
    dynamodb_writes: u.dynamodbWriteUnits * prices.dynamodbPerWriteUnit * k,
    dynamodb_reads: u.dynamodbReadUnits * prices.dynamodbPerReadUnit * k,
  };
  return { ...c, total: Object.values(c).reduce((a, b) => a + b, 0) };
}
