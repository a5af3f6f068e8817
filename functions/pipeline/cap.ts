import type { LambdaClient } from '@aws-sdk/client-lambda';
import type { ThreadsInfo } from '../captchaai/types.js';
import { type Env, optionalNumber, requireString } from '../common/env.js';
import { ConfigError, StopClassError } from '../common/errors.js';
import { DEFAULTS } from '../common/settings.js';
import {
  type CapKnobs,
  type CapSettings,
  capCeiling,
  capInForce,
  computeCap,
  describeClamp,
  MAX_MAPPING_MAX_CONCURRENCY,
  maxCapClamp,
  readCap,
} from './cap-policy.js';
import { type PipelineControl, type PipelineState, stopReason } from './control.js';
import { describeError as describe, KnobWriter } from './knobs.js';
import {
  type LaneSettings,
  type LaneShape,
  laneShape,
  nextShapeStep,
  type PublishedShape,
  readLaneCount,
  readLaneSettings,
  sameShape,
  solvesInForce,
} from './lanes.js';
import type { SlotLedger } from './ledger.js';

/**
 * One run of the cap adjuster: threadsinfo → cap → the two knobs. The policy it applies (the
 * cap a plan allows, the cap in force, the mapping maximum for a cap) is in ./cap-policy.ts.
 */

/** Who the adjuster says it is in the pipeline state. */
export const ADJUSTER_ACTOR = 'cap-adjuster';
/** Our code for "threadsinfo reports a plan of 0 threads". */
export const NO_ACTIVE_PLAN = 'NO_ACTIVE_PLAN';

/** Reads the adjuster's configuration from its environment (see infra/constructs/cap-adjuster.ts). */
export interface CapAdjusterConfig extends CapSettings, LaneSettings {
  workerFunctionName: string;
  queueArn: string;
  ledgerTable: string; // LEDGER_TABLE: the cap, the expired leases and the state item
  captchaaiUrl: string;
  secretName: string;
  /** The worker's function timeout (WORKER_TIMEOUT_SECONDS), ms: how long an old invocation may run on. */
  workerTimeoutMs: number;
}

/**
 * The cap settings in the adjuster's environment (`threadgate status` reads them back the same
 * way). MAX_CAP defaults to, and may not exceed, the ceiling of the environment's LANES.
 */
export function readCapSettings(env: Env): CapSettings {
  const ceiling = capCeiling(readLaneCount(env));
  const minCap = optionalNumber(env, 'MIN_CAP', DEFAULTS.minCap, {
    min: 1,
    max: MAX_MAPPING_MAX_CONCURRENCY,
    integer: true,
  });
  const maxCap = optionalNumber(env, 'MAX_CAP', ceiling, { min: 1, max: ceiling, integer: true });
  if (minCap > maxCap) throw new ConfigError('MIN_CAP', `must be <= MAX_CAP (${maxCap}), got ${minCap}`);
  return {
    reserve: optionalNumber(env, 'RESERVE', DEFAULTS.reserve, { min: 0, integer: true }),
    minCap,
    maxCap,
  };
}

export function readCapAdjusterConfig(env: Env): CapAdjusterConfig {
  return {
    workerFunctionName: requireString(env, 'WORKER_FUNCTION_NAME'),
    queueArn: requireString(env, 'QUEUE_ARN'),
    ledgerTable: requireString(env, 'LEDGER_TABLE'),
    captchaaiUrl: requireString(env, 'CAPTCHAAI_URL'),
    secretName: requireString(env, 'CAPTCHAAI_SECRET_NAME'),
    ...readCapSettings(env),
    ...readLaneSettings(env),
    workerTimeoutMs: optionalNumber(env, 'WORKER_TIMEOUT_SECONDS', 900, { min: 1, max: 900 }) * 1000,
  };
}

/** The subset of Powertools Metrics the adjuster uses (Count metrics, flushed by the handler). */
export interface MetricSink {
  addMetric(name: CapMetricName, unit: 'Count', value: number): unknown;
}
/** The subset of Powertools Logger the adjuster uses. */
export interface LogSink {
  info(message: string, extra?: Record<string, unknown>): void;
  warn(message: string, extra?: Record<string, unknown>): void;
}

export type CapMetricName =
  | 'PlanThreads'
  | 'WorkingThreads'
  | 'Cap'
  | 'ExternalThreadsBusy'
  | 'ReservedConcurrencyFallback'
  | 'PipelinePaused'
  | 'StopEvents'
  /** Threads maxCap leaves idle: (plan threads − reserve) − maxCap, 0 when the plan fits. */
  | 'CapClampedByMax'
  /** With lanes: the L published (the dashboard's in flight is invocations × this). */
  | 'LanesPerInvocation';

export interface AdjustCapDeps {
  lambda: LambdaClient;
  control: PipelineControl;
  workerFunctionName: string;
  /** CaptchaAI's threadsinfo (e.g. `() => client.threadsInfo()`). */
  readThreads: () => Promise<ThreadsInfo>;
  settings: CapSettings;
  /**
   * Lanes per invocation (see ./lanes.ts): the knobs then hold r, and the shape is published
   * through `control`. Unset or lanes 1: the knobs hold the cap, as with one task per invocation.
   */
  lanes?: { lanes: number; workerTimeoutMs: number; settleMs: number; now?: () => number };
  /**
   * The slot ledger (./ledger.ts): it gets the plan's cap first, before any knob or the shape
   * (see {@link writeLedgerCap}).
   */
  ledger?: Pick<SlotLedger, 'setCap'>;
  metrics?: MetricSink;
  logger?: LogSink;
}

export type AdjustCapResult =
  | {
      /** `changed`: at least one knob was written; `unchanged`: both already matched. */
      outcome: 'changed' | 'unchanged';
      cap: number;
      before: CapKnobs;
      after: CapKnobs;
      planThreads: number;
      workingThreads: number;
      externalThreadsBusy: number;
      /** PutFunctionConcurrency hit the account's unreserved minimum: the mapping maximum alone limits the worker. */
      reservedFallback: boolean;
      /** The cap in force after the run (capInForce of `after`; 0 while paused). */
      inForce: number | undefined;
      paused: boolean;
      /** With lanes: the shape published after this run (r invocations of L lanes). */
      shape?: PublishedShape;
    }
  | {
      /** Nothing written: threadsinfo failed (network, server error) or a knob was busy (ResourceInUse). */
      outcome: 'kept';
      reason: string;
      before: CapKnobs;
      /** The cap in force, unchanged (capInForce of `before`; 0 while paused). */
      inForce: number | undefined;
      paused: boolean;
    }
  | {
      /** A stop-class answer (or a plan of 0 threads): the pipeline is paused (or already was). */
      outcome: 'paused';
      code: string;
      reason: string;
      before: CapKnobs;
      /** Always 0: nothing is polled while paused. */
      inForce: 0;
      alreadyPaused: boolean;
    };

/**
 * One run of the cap adjuster:
 * 1. read the pipeline state, the worker's reserved concurrency and its mapping;
 * 2. ask threadsinfo — a stop-class answer pauses the pipeline like the worker does, any other
 *    failure keeps the last cap (the knobs stay as they are);
 * 3. cap = clamp(threads − reserve, min, max) (a clamp by max is logged and counted, metric
 *    CapClampedByMax), written only where a knob differs: when lowering
 *    the mapping first, when raising the reservation first, so reserved >= mapping maximum;
 * 4. never touch the mapping's Enabled flag: a paused pipeline stays paused.
 */
export async function adjustCap(deps: AdjustCapDeps): Promise<AdjustCapResult> {
  const { lambda, control, settings } = deps;
  const logger = deps.logger ?? silentLogger;
  const metric = (name: CapMetricName, value: number) => deps.metrics?.addMetric(name, 'Count', value);

  const {
    state,
    mapping,
    knobs: before,
    paused,
    cap: inForceBefore,
  } = await readCap({ lambda, control, workerFunctionName: deps.workerFunctionName });
  // What the knobs hold while running (the pause aside): the baseline for lowering or raising.
  const effectiveBefore = capInForce(before);
  /** Nothing written: the last cap stands. */
  const kept = (reason: string): AdjustCapResult => {
    if (effectiveBefore !== undefined) metric('Cap', effectiveBefore);
    metric('PipelinePaused', paused ? 1 : 0);
    return { outcome: 'kept', reason, before, inForce: inForceBefore, paused };
  };

  let info: ThreadsInfo;
  try {
    info = await deps.readThreads();
  } catch (err) {
    if (err instanceof StopClassError) {
      return pauseFor(deps, state, before, err.code, stopReason(err.code, err.message, 'threadsinfo'));
    }
    // Network errors, 5xx, ERROR_SERVER_ERROR, unreadable answers: the plan did not change as
    // far as we know, so the last cap stands.
    logger.warn('threadsinfo failed; keeping the last cap', {
      error: describe(err),
      cap: effectiveBefore,
    });
    return kept(`threadsinfo failed: ${describe(err)}`);
  }

  metric('PlanThreads', info.threads);
  metric('WorkingThreads', info.workingThreads);
  if (info.threads <= 0) {
    return pauseFor(
      deps,
      state,
      before,
      NO_ACTIVE_PLAN,
      'CaptchaAI reports a plan of 0 threads (no active plan)',
    );
  }

  const cap = computeCap(info.threads, settings);
  reportClamp(info.threads, settings, { logger, metric });
  const external = externalThreads(info, cap, effectiveBefore, { reserve: settings.reserve, logger, metric });
  await writeLedgerCap(deps, cap, logger);

  const lanes = deps.lanes && deps.lanes.lanes > 1 ? deps.lanes : undefined;
  let shape: PublishedShape | undefined;
  const writer = new KnobWriter(deps, logger, before, mapping.uuid, cap);
  try {
    if (lanes) shape = await applyShape(deps, lanes, laneShape(cap, lanes.lanes), writer, effectiveBefore);
    else await writer.apply(effectiveBefore);
  } catch (err) {
    if (!isBusyError(err)) throw err;
    logger.warn('a concurrency knob is busy being updated; trying again next run', {
      cap,
      error: describe(err),
      ...writer.after,
    });
    return kept(`busy: ${describe(err)}`);
  }

  const { after, changed, reservedFallback } = writer;
  metric('Cap', cap);
  if (shape) metric('LanesPerInvocation', shape.L);
  metric('ReservedConcurrencyFallback', reservedFallback ? 1 : 0);
  metric('PipelinePaused', paused ? 1 : 0);
  if (changed) {
    logger.info('cap changed', {
      cap,
      before,
      after,
      planThreads: info.threads,
      reserve: settings.reserve,
      paused,
    });
  }
  return {
    outcome: changed ? 'changed' : 'unchanged',
    cap,
    before,
    after,
    planThreads: info.threads,
    workingThreads: info.workingThreads,
    externalThreadsBusy: external,
    reservedFallback,
    inForce:
      lanes && shape ? solvesInForce(capInForce(after, paused) ?? 0, shape) : capInForce(after, paused),
    paused,
    ...(shape ? { shape } : {}),
  };
}

/**
 * With lanes: one step toward `target` (./lanes.ts nextShapeStep): knobs that fall are written
 * before the shape that needs them, a shape that lowers L is published before knobs that rise.
 * Returns the shape published after the step.
 */
async function applyShape(
  deps: AdjustCapDeps,
  lanes: NonNullable<AdjustCapDeps['lanes']>,
  target: LaneShape,
  writer: KnobWriter,
  effectiveBefore: number | undefined,
): Promise<PublishedShape> {
  const current = await deps.control.readShape();
  const step = nextShapeStep({
    current,
    target,
    rInForce: effectiveBefore,
    now: (lanes.now ?? Date.now)(),
    lifetimeMs: lanes.workerTimeoutMs,
    settleMs: lanes.settleMs,
  });
  const publish = async () => {
    if (sameShape(current, step.publish)) return;
    await deps.control.writeShape(step.publish);
    writer.changed = true;
  };
  if (step.kind === 'knobs-then-publish') {
    await writer.apply(effectiveBefore, target.r);
    await publish();
  } else {
    await publish();
    if (step.kind === 'publish-then-knobs') await writer.apply(effectiveBefore, target.r);
  }
  return sameShape(current, step.publish) && current ? current : step.publish;
}

/**
 * The plan's cap to the slot ledger, before anything else of the run. threadsinfo has said it, so
 * it holds at CaptchaAI now; the knobs and the shape only follow it. Written first, a fall bounds
 * every lease taken after it: an invocation the drain counts as new (started after the shape's
 * `startedBefore`, taken from the clock after this write) takes its lanes under the new cap with
 * every lane still held counted, however long the knobs and the shape then take to land. Written
 * after them, a new invocation that took its lease before the write got its whole L under the
 * old cap beside the drain's lanes. A failed write is logged: the knobs still move, and the next
 * run writes again.
 */
async function writeLedgerCap(deps: AdjustCapDeps, cap: number, logger: LogSink): Promise<void> {
  if (!deps.ledger) return;
  try {
    await deps.ledger.setCap(cap);
  } catch (err) {
    logger.warn('could not write the cap to the slot ledger; the next run writes it again', {
      cap,
      error: describe(err),
    });
  }
}

/**
 * Says when maxCap holds the cap below what the plan allows: an idle thread is paid for, so a
 * clamp is the operator's deliberate act, never a silent one (metric and one warning a run).
 */
function reportClamp(
  planThreads: number,
  settings: CapSettings,
  o: { logger: LogSink; metric: (name: CapMetricName, value: number) => unknown },
): void {
  const clamp = maxCapClamp(planThreads, settings);
  o.metric('CapClampedByMax', clamp?.idleThreads ?? 0);
  if (clamp) o.logger.warn(`clamped by maxCap: ${describeClamp(clamp)}`, { ...clamp });
}

/**
 * The threads busy outside this pipeline, at least. Our own in-flight solves are at most the
 * cap that was in force (the worker's live concurrency is not known here without CloudWatch's
 * lagging metric), so this is a lower bound; above the reserve it is worth a warning.
 */
function externalThreads(
  info: ThreadsInfo,
  cap: number,
  effectiveBefore: number | undefined,
  o: { reserve: number; logger: LogSink; metric: (name: CapMetricName, value: number) => unknown },
): number {
  const { reserve, logger } = o;
  const ours = Math.min(info.workingThreads, effectiveBefore ?? cap);
  const external = Math.max(0, info.workingThreads - ours);
  o.metric('ExternalThreadsBusy', external);
  if (external > reserve) {
    logger.warn('more threads are busy outside this pipeline than the reserve allows for', {
      externalThreadsBusy: external,
      reserve,
      planThreads: info.threads,
      workingThreads: info.workingThreads,
    });
  }
  return external;
}

async function pauseFor(
  deps: AdjustCapDeps,
  state: PipelineState,
  before: CapKnobs,
  code: string,
  reason: string,
): Promise<AdjustCapResult> {
  const logger = deps.logger ?? silentLogger;
  deps.metrics?.addMetric('PipelinePaused', 'Count', 1);
  if (state.paused) {
    // Keep the first reason: it is the one the operator needs.
    logger.warn('stop-class answer while already paused', {
      code,
      pausedSince: state.since,
      pausedFor: state.code,
    });
    return { outcome: 'paused', code, reason, before, inForce: 0, alreadyPaused: true };
  }
  deps.metrics?.addMetric('StopEvents', 'Count', 1);
  logger.warn('pausing the pipeline', { code, reason });
  await deps.control.pause(reason, ADJUSTER_ACTOR, code);
  return { outcome: 'paused', code, reason, before, inForce: 0, alreadyPaused: false };
}

/** The mapping or function is mid-update; the same write succeeds a little later. */
function isBusyError(err: unknown): boolean {
  const name = (err as { name?: string }).name;
  return (
    name === 'ResourceInUseException' ||
    name === 'ResourceConflictException' ||
    name === 'TooManyRequestsException'
  );
}

const silentLogger: LogSink = { info() {}, warn() {} };
