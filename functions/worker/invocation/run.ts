import type { SQSBatchResponse, SQSEvent } from 'aws-lambda';
import { lanesAllowed } from '../../pipeline/lanes.js';
import { processBatch } from '../batch-loop.js';
import { retryVisibilitySeconds, setVisibility } from '../chain.js';
import { takeWindow, worstCaseSettingsOf } from '../chain-window.js';
import { errorSummary, type ProcessOptions, type WorkerDeps } from '../types.js';
import { DEADLINE_MARGIN_MS, worstCaseRecordMs } from '../worst-case.js';
import { InvocationLease, leaseOptionsFor } from './lease.js';

/**
 * One invocation, from its event to its partial batch response: the deadline's abort, the take
 * window, the lanes the published shape allows, and (with the slot ledger) the lease those lanes
 * run under. `startedAt` (epoch ms) is the handler's entry, before any wait: the drain counts an
 * invocation by it.
 */
export async function runInvocation(
  event: SQSEvent,
  deps: WorkerDeps,
  remainingMs: number | undefined,
  startedAt: number,
): Promise<SQSBatchResponse> {
  const controller = new AbortController();
  const timer =
    remainingMs !== undefined
      ? setTimeout(
          () => controller.abort(new Error('invocation deadline')),
          Math.max(0, remainingMs - DEADLINE_MARGIN_MS),
        )
      : undefined;
  const signal = controller.signal;
  const endsAt = remainingMs === undefined ? undefined : performance.now() + remainingMs;
  try {
    const receiveVisibility =
      endsAt === undefined
        ? undefined
        : () => Math.ceil(Math.max(0, endsAt - performance.now()) / 1000) + RECEIVE_VISIBILITY_MARGIN_S;
    const window = {
      ...takeWindow(deps.config, remainingMs),
      ...(receiveVisibility ? { receiveVisibility } : {}),
    };
    // The event's records too: the mapping received them with the queue's visibility timeout (6 ×
    // the function timeout by default), which a dead invocation's records would wait out. One call
    // an invocation, and only to shorten it: a queue whose own timeout is shorter (the local
    // stack's) keeps it. What the invocation accounts (a retry, a give-back) sets its own later.
    const eventVisibility = receiveVisibility?.();
    const queueVisibility = deps.config.queueVisibilitySeconds ?? Number.POSITIVE_INFINITY;
    if (eventVisibility !== undefined && eventVisibility < queueVisibility)
      await setVisibility(deps, event.Records, eventVisibility);
    const lanes = await invocationLanes(deps, startedAt);
    if (!deps.ledger) return await processBatch(event, deps, { signal, ...window, ...lanes });
    const lease = await InvocationLease.take(deps.ledger, lanes.lanes?.count ?? 1, {
      ...leaseOptionsFor(deps.config, deps),
      // The event's records must still fit once room comes: wait at most until their worst case would not.
      waitUntil:
        deps.now() +
        (remainingMs === undefined
          ? 0
          : remainingMs - DEADLINE_MARGIN_MS - worstCaseRecordMs(worstCaseSettingsOf(deps.config))),
      signal,
    });
    if (!(lease instanceof InvocationLease)) {
      deps.logger.warn('no room on the slot ledger: the cap is held, by lanes whose tasks may still run', {
        retryAt: lease.retryAt,
      });
      return await giveBackEvent(event, deps, lease.retryAt);
    }
    try {
      const windowFits = window.submitFits;
      const options: ProcessOptions = {
        signal,
        ...window,
        // No in.php once the lease may have expired: the ledger frees its lanes on that basis.
        submitFits: () => lease.live() && (windowFits?.() ?? true),
        ...(lanes.lanes ? { lanes: { ...lanes.lanes, count: lease.lanes, left: () => lease.shed() } } : {}),
      };
      return await processBatch(event, deps, options);
    } finally {
      await lease.end();
    }
  } finally {
    if (timer) clearTimeout(timer);
  }
}

/**
 * Beyond the invocation's remaining time, a message it holds (the event's, or one a lane took
 * itself) stays hidden this long: time for its accounting after the last lane (visibility
 * changes, deletes, Lambda's delete of the event's) before it could be seen.
 */
export const RECEIVE_VISIBILITY_MARGIN_S = 60;

/**
 * The lanes this invocation starts with, and the lanes it may keep as the published shape moves
 * (../pipeline/lanes.ts): none with one lane. When the shape cannot be read (the environment's
 * view answers a failed read with its last good one for a while, or tries again for a moment:
 * ../../pipeline/state-view.ts), one lane.
 */
async function invocationLanes(deps: WorkerDeps, startedAt: number): Promise<Pick<ProcessOptions, 'lanes'>> {
  const { config, pipeline } = deps;
  if (config.lanes <= 1 || !pipeline.readShape) return {};
  const readShape = pipeline.readShape;
  const allowed = async () => {
    const shape = await readShape();
    return shape ? Math.min(config.lanes, lanesAllowed(shape, startedAt, deps.now())) : 1;
  };
  let count = 1;
  try {
    count = await allowed();
  } catch (err) {
    deps.logger.warn('could not read the lane shape; one lane', errorSummary(err));
  }
  return { lanes: { count, allowed } };
}

/**
 * An event none of whose records is worked (no room on the slot ledger): each comes back when
 * the first held lease can be reclaimed (`retryAt`, epoch ms), or after the retry delay.
 */
async function giveBackEvent(
  event: SQSEvent,
  deps: WorkerDeps,
  retryAt: number | undefined,
): Promise<SQSBatchResponse> {
  await setVisibility(deps, event.Records, retryVisibilitySeconds(deps, retryAt));
  return { batchItemFailures: event.Records.map((r) => ({ itemIdentifier: r.messageId })) };
}
