import { randomUUID } from 'node:crypto';
import type { Logger } from '@aws-lambda-powertools/logger';
import { type Metrics, MetricUnit } from '@aws-lambda-powertools/metrics';
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import {
  createPollSchedule,
  LearnedPollSchedule,
  type LearnedSchedule,
  type PollSchedule,
} from '../captchaai/poll-schedule.js';
import { resolveTimings } from '../captchaai/timings.js';
import { exchangeEveryMs, SolveTimeExchange } from '../pipeline/solve-time-exchange.js';
import type { WorkerConfig } from './config.js';

/**
 * The execution environment's poll schedule and what it learns from: every solve this
 * environment makes and, through the solve-times table, the other environments' recent ones.
 */
export interface PollLearning {
  pollSchedule: PollSchedule;
  /** Exchanges solve times when due and logs a failure instead of throwing; absent without a table. */
  exchangeSolveTimes: (() => Promise<unknown>) | undefined;
}

export function pollLearning(
  config: WorkerConfig,
  ddb: DynamoDBClient,
  logger: Logger,
  metrics: Metrics,
  now: () => number,
): PollLearning {
  const pollSchedule = createPollSchedule(resolveTimings(config.captchaTimings), config.pollSchedule, (s) =>
    publishLearnedSchedule(s, logger, metrics),
  );
  return { pollSchedule, exchangeSolveTimes: solveTimeExchange(config, ddb, pollSchedule, logger, now) };
}

/**
 * The environment's solve-time exchange (a learned schedule with the stack's solve-times table),
 * as a function that exchanges when due and logs a failure instead of throwing.
 */
function solveTimeExchange(
  config: WorkerConfig,
  ddb: DynamoDBClient,
  pollSchedule: PollSchedule,
  logger: Logger,
  now: () => number,
): (() => Promise<unknown>) | undefined {
  if (!config.solveTimesTable || !(pollSchedule instanceof LearnedPollSchedule)) return undefined;
  const exchange = new SolveTimeExchange({
    client: ddb,
    tableName: config.solveTimesTable,
    environment: randomUUID(),
    schedule: pollSchedule,
    everyMs: exchangeEveryMs(config.timeScale),
    firstWithinMs: exchangeEveryMs(config.timeScale),
    now,
  });
  return () =>
    exchange.maybeExchange().catch((err: unknown) => {
      logger.warn('solve times not exchanged; this environment learns from its own until the next try', {
        error: err instanceof Error ? err.name : String(err),
      });
    });
}

/** A recomputed poll schedule: one log line and three metrics per CAPTCHA type (unscaled ms). */
function publishLearnedSchedule(s: LearnedSchedule, logger: Logger, metrics: Metrics): void {
  logger.info('poll schedule learned', {
    captchaType: s.captchaType,
    observations: s.observations,
    sharedObservations: s.sharedObservations,
    pollsMs: s.pollsMs.map(Math.round),
    expectedCalls: Math.round(s.expectedCalls * 100) / 100,
    expectedWaitMs: Math.round(s.expectedWaitMs),
  });
  const single = metrics.singleMetric();
  single.addDimension('captchaType', s.captchaType);
  single.addMetric('PollScheduleFirstPoll', MetricUnit.Milliseconds, s.firstPollMs);
  single.addMetric('PollScheduleExpectedCalls', MetricUnit.Count, s.expectedCalls);
  single.addMetric('PollScheduleExpectedWait', MetricUnit.Milliseconds, s.expectedWaitMs);
}
