import { GetFunctionConcurrencyCommand, type LambdaClient } from '@aws-sdk/client-lambda';
import type { MappingInfo, PipelineControl, PipelineState } from './control.js';

/**
 * The cap policy, in one place: the cap a plan allows, the cap in force on a deployment and
 * the mapping maximum that carries a cap. The cap adjuster (pipeline/cap.ts), the stack
 * (infra/constructs/worker.ts), `threadgate status`, the local runtime's poller, the local
 * stack and the end-to-end harness all use these functions rather than their own arithmetic.
 *
 * The cap is applied through two knobs on the worker (see docs/design.md "Cap mechanics"):
 * reserved concurrency, the hard ceiling of the function, and the SQS mapping's
 * MaximumConcurrency, which keeps the poller from taking batches it could not run.
 */
export interface CapSettings {
  /** Plan threads left for anything else using the key. */
  reserve: number;
  /** Lowest cap (>= 1; a cap of 0 would be a pause, which only PipelineControl does). */
  minCap: number;
  /** Highest cap (at most {@link capCeiling} of the lanes; by default that ceiling). */
  maxCap: number;
}

/** The mapping's MaximumConcurrency cannot be set below 2 … */
export const MIN_MAPPING_MAX_CONCURRENCY = 2;
/** … nor above 1000. */
export const MAX_MAPPING_MAX_CONCURRENCY = 1000;

/**
 * Returns the highest cap `lanes` lanes per invocation can carry, and maxCap's default: the knobs
 * hold r ≤ the mapping's limit and r invocations of L ≤ `lanes` lanes carry the cap (./lanes.ts
 * laneShape keeps r within the limit for every cap up to this), so a plan runs in full unless the
 * operator sets a lower maxCap. With one lane it is the mapping's limit itself (r = cap).
 */
export function capCeiling(lanes: number): number {
  return MAX_MAPPING_MAX_CONCURRENCY * Math.max(1, lanes);
}

/** A plan that maxCap holds below plan threads − reserve, and the threads it leaves idle. */
export interface MaxCapClamp {
  planThreads: number;
  reserve: number;
  maxCap: number;
  /** (plan threads − reserve) − maxCap: threads paid for that no solve may use. */
  idleThreads: number;
}

/** Decides whether maxCap clamps the cap a plan allows; undefined when the plan fits under it. */
export function maxCapClamp(planThreads: number, settings: CapSettings): MaxCapClamp | undefined {
  const idleThreads = planThreads - settings.reserve - settings.maxCap;
  if (idleThreads <= 0) return undefined;
  return { planThreads, reserve: settings.reserve, maxCap: settings.maxCap, idleThreads };
}

/** Says what a clamp costs and what to change (the adjuster's warning and `threadgate status`). */
export function describeClamp(c: MaxCapClamp): string {
  const wanted = c.planThreads - c.reserve;
  return (
    `plan ${c.planThreads} threads − reserve ${c.reserve} = ${wanted} is above maxCap ${c.maxCap}: ` +
    `${c.idleThreads} threads idle; to use them raise maxCap to ${wanted} or unset it ` +
    `(default and ceiling: ${MAX_MAPPING_MAX_CONCURRENCY} × lanes)`
  );
}

/** The cap a plan allows: clamp(plan threads − reserve, minCap, maxCap). */
export function computeCap(planThreads: number, settings: CapSettings): number {
  return Math.min(settings.maxCap, Math.max(settings.minCap, planThreads - settings.reserve));
}

/** The worker's concurrency knobs as deployed; `undefined` = not set. */
export interface CapKnobs {
  reservedConcurrency: number | undefined;
  mappingMaximum: number | undefined;
}

/**
 * The cap in force: how many worker invocations (= solves) can run at once.
 * - paused (pipeline state paused or mapping disabled): 0, nothing is polled;
 * - otherwise the lower of the knobs that are set: reserved concurrency caps the function,
 *   the mapping maximum caps the poller, and each holds alone when the other is unset
 *   (a cap of 1 is reserved concurrency 1 with no mapping maximum);
 * - neither set: `undefined`, no limit but the account's unreserved concurrency.
 */
export function capInForce(knobs: CapKnobs, paused = false): number | undefined {
  if (paused) return 0;
  const set = [knobs.reservedConcurrency, knobs.mappingMaximum].filter((n): n is number => n !== undefined);
  return set.length > 0 ? Math.min(...set) : undefined;
}

/**
 * The mapping maximum that goes with `cap`: the cap itself when the mapping can hold it; for a
 * cap below the mapping's minimum none when a reservation holds the cap, else the minimum (the
 * mapping is then the only limit and cannot be dropped).
 */
export function mappingMaximumFor(cap: number, reservationHolds: boolean): number | undefined {
  if (cap >= MIN_MAPPING_MAX_CONCURRENCY) return cap;
  return reservationHolds ? undefined : MIN_MAPPING_MAX_CONCURRENCY;
}

/** A paused pipeline: its state says so or its mapping is disabled (either stops new solves). */
export function isPaused(state: PipelineState, mapping: MappingInfo): boolean {
  return state.paused || !mapping.enabled;
}

export interface CapReading {
  state: PipelineState;
  mapping: MappingInfo;
  knobs: CapKnobs;
  paused: boolean;
  /** capInForce(knobs, paused). */
  cap: number | undefined;
}

/** Reads the pipeline state, the mapping and the worker's reservation, and the cap they put in force. */
export async function readCap(deps: {
  lambda: LambdaClient;
  control: Pick<PipelineControl, 'readState' | 'readMapping'>;
  workerFunctionName: string;
}): Promise<CapReading> {
  const [state, mapping, reserved] = await Promise.all([
    deps.control.readState(),
    deps.control.readMapping(),
    deps.lambda.send(new GetFunctionConcurrencyCommand({ FunctionName: deps.workerFunctionName })),
  ]);
  const value = reserved.ReservedConcurrentExecutions;
  const knobs: CapKnobs = {
    reservedConcurrency: value === undefined || value === null ? undefined : Number(value),
    mappingMaximum: mapping.maximumConcurrency,
  };
  const paused = isPaused(state, mapping);
  return { state, mapping, knobs, paused, cap: capInForce(knobs, paused) };
}
