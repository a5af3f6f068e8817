import { describe, expect, it } from 'vitest';
import {
  AWS_PRICES,
  awsCostPer1000,
  CAPTCHAAI_PLANS,
  captchaCostPer1000,
  gbSeconds,
  MONTH_SECONDS,
  planPrice,
} from '../../../bench/cost.js';
import { gbSecondsPerSolve, lambdaMemoryFor, MEASURED_RSS_HEADROOM } from '../../../bench/report/costs.js';
import type { LoggedInvocation } from '../../../bench/worker-log.js';

describe('planPrice', () => {
  it.each(CAPTCHAAI_PLANS.map((p) => [p.threads, p.usdPerMonth]))(
    'uses the listed %d-thread plan as is ($%d)',
    (threads, usd) => {
      // Act
      const price = planPrice(threads);

      // Assess
      expect(price).toMatchObject({ usdPerMonth: usd, basis: 'listed' });
    },
  );

  it('interpolates linearly between the neighbouring plans and says which', () => {
    // Act: 20 threads lies between 15 ($30) and 50 ($90).
    const price = planPrice(20);

    // Assess
    expect(price.basis).toBe('interpolated');
    expect(price.usdPerMonth).toBeCloseTo(30 + (5 / 35) * 60, 10);
    expect(price.note).toMatch(/15-thread.*50-thread/);
  });

  it('charges the smallest plan below it and the largest plan’s price per thread above it', () => {
    // Act
    const small = planPrice(2);
    const large = planPrice(200);

    // Assess
    expect(small).toMatchObject({ usdPerMonth: 15, basis: 'smallest plan' });
    expect(large.basis).toBe('extrapolated');
    expect(large.usdPerMonth).toBeCloseTo(340, 10);
  });

  it('rejects zero threads', () => {
    // Act / Assess
    expect(() => planPrice(0)).toThrow(RangeError);
  });
});

describe('captchaCostPer1000', () => {
  it('spreads the monthly price over the solves the threads finish when always busy', () => {
    // Prepare: 15 threads, 30 s per solve → 15 × 86,400 solves in a 30-day month.
    const plan = { threads: 15, usdPerMonth: 30 };

    // Act
    const full = captchaCostPer1000(plan, 30);
    const half = captchaCostPer1000(plan, 30, 0.5);

    // Assess
    const solves = (15 * MONTH_SECONDS) / 30;
    expect(full).toBeCloseTo((30 / solves) * 1000, 12);
    expect(half).toBeCloseTo(2 * full, 12);
  });

  it('is NaN without a solve time', () => {
    // Act / Assess
    expect(captchaCostPer1000({ threads: 5, usdPerMonth: 15 }, 0)).toBeNaN();
  });
});

describe('gbSeconds', () => {
  it('rounds each duration up to the millisecond and multiplies by memory in GB', () => {
    // Prepare: 1000.2 ms → 1001 ms, 999 ms; 512 MB = 0.5 GB.
    // Act
    const gbs = gbSeconds([1000.2, 999], 512);

    // Assess
    expect(gbs).toBeCloseTo(2 * 0.5, 10);
  });
});

describe('awsCostPer1000', () => {
  it('itemizes Lambda compute, requests, SQS and DynamoDB at list prices and totals them', () => {
    // Prepare: a 30 s solve in a 128 MB function = 3.75 GB-s.
    const usage = {
      gbSeconds: 3.75,
      invocations: 1,
      sqsRequests: 2.1,
      dynamodbWriteUnits: 2,
      dynamodbReadUnits: 0,
    };

    // Act
    const cost = awsCostPer1000(usage);

    // Assess
    expect(cost.lambda_compute).toBeCloseTo(3.75 * AWS_PRICES.lambdaArmPerGbSecond * 1000, 12);
    expect(cost.lambda_compute).toBeCloseTo(0.05, 2);
    expect(cost.lambda_requests).toBeCloseTo(0.0002, 12);
    expect(cost.sqs).toBeCloseTo(2.1 * 0.4e-3, 12);
    expect(cost.dynamodb_writes).toBeCloseTo(2 * 0.625e-3, 12);
    expect(cost.dynamodb_reads).toBe(0);
    expect(cost.total).toBeCloseTo(
      cost.lambda_compute + cost.lambda_requests + cost.sqs + cost.dynamodb_writes,
      12,
    );
  });
});

describe('lambdaMemoryFor', () => {
  it('is the smallest size of at least 128 MB, in 8 MB steps, that keeps the peak within 3/4', () => {
    expect(lambdaMemoryFor(90, MEASURED_RSS_HEADROOM)).toBe(128);
    expect(lambdaMemoryFor(96, MEASURED_RSS_HEADROOM)).toBe(128);
    expect(lambdaMemoryFor(96.1, MEASURED_RSS_HEADROOM)).toBe(136);
    expect(lambdaMemoryFor(120, MEASURED_RSS_HEADROOM)).toBe(160);
  });
});

describe('gbSecondsPerSolve', () => {
  // At time scale 1 an invocation is billed as measured; 1,024 MB makes a GB-s a second.
  const submitted = (n: number) => Array.from({ length: n }, (_, k) => ({ status: 'submitted', at: k }));
  const invocation = (environment: string, first: boolean, seconds: number, records: number) =>
    ({
      requestId: `${environment}-${first}`,
      environment,
      firstInEnvironment: first,
      durationMs: seconds * 1000,
      outcomes: submitted(records),
    }) as unknown as LoggedInvocation;
  const lanes = { setting: 8, r: 2, L: 4, lambda_quota_needed: 102 };

  it('prices every invocation, first ones included: with lanes they carry most of the records', () => {
    // Two environments' first invocations worked 40 records each over 400 s; two late ones, started
    // to drain the queue's end, worked 1 record each over 50 s.
    const loggedInvocations = [
      invocation('a', true, 400, 40),
      invocation('b', true, 400, 40),
      invocation('a', false, 50, 1),
      invocation('b', false, 50, 1),
    ];
    const gbs = gbSecondsPerSolve({ timeScale: 1, lanes, loggedInvocations, memoryMb: 1024 }, 82);
    expect(gbs.all).toBeCloseTo(900 / 82, 6);
    // The warm ones alone would price the run by its two drain invocations.
    expect(gbs.warm).toBeCloseTo(100 / 2, 6);
  });
});
