import type { Logger } from '@aws-lambda-powertools/logger';
import type { Metrics } from '@aws-lambda-powertools/metrics';
import type { SQSClient } from '@aws-sdk/client-sqs';
import type { Dispatcher } from 'undici';
import type { SolveOptions } from '../captchaai/client.js';
import type { CaptchaTask, SolveResult } from '../captchaai/types.js';
import type { PipelineControl } from '../pipeline/control.js';
import type { PublishedShape } from '../pipeline/lanes.js';
import type { SlotLedger } from '../pipeline/ledger.js';
import type { BatchCancel } from '../records/cancellations.js';
import type { OutcomeStatus, OutcomesStore } from '../records/store.js';
import type { Resolver } from '../target/allowlist.js';
import type { WorkerConfig } from './config.js';

/** What the worker needs from a CaptchaAI client. */
export interface Solver {
  /** `onSubmitted` lets the record flow load the page while CaptchaAI works. */
  solve(task: CaptchaTask, options?: SolveOptions): Promise<SolveResult>;
}

/** Everything the record flow and the batch loop use; functions/worker.ts builds the real ones. */
export interface WorkerDeps {
  config: WorkerConfig;
  store: OutcomesStore;
  sqs: SQSClient;
  /** `readShape`: the published lane shape, with lanes (../pipeline/lanes.ts). */
  pipeline: Pick<PipelineControl, 'readState' | 'pause'> & {
    readShape?: () => Promise<PublishedShape | undefined>;
  };
  /** The CaptchaAI client for the current key (the key is read lazily, on the first solve). */
  solver: () => Promise<Solver>;
  resolver: Resolver;
  /** Connection pool for target sites (allowlist-guarded). */
  dispatcher?: Dispatcher;
  /** Epoch ms; leases and token ages use it. */
  now: () => number;
  /**
   * A monotonic clock (ms) for the environment's view of the pipeline state (how long a read is
   * reused, how long the last good one answers for a failed read); unset: `performance.now()`.
   */
  monotonic?: () => number;
  /** Waits; resolves early when the signal aborts. */
  sleep: (ms: number, signal?: AbortSignal) => Promise<void>;
  logger: Logger;
  metrics: Metrics;
  /** Batch cancels as this environment last read them (./cancel-watch.ts); unset: none are read. */
  cancels?: { cancelOf(batchId: string): Promise<BatchCancel | undefined> };
  /**
   * With several lanes in one invocation: the first lane to meet a stop-class error claims the
   * stop (true) and records it; the others (false) give their records back untouched
   * (./batch-loop.ts sharedStop). Unset with one lane: every stop is recorded.
   */
  stops?: { claim(): boolean };
  /**
   * The environment's idle collector (./idle-wait.ts): with lanes, each lane says when it runs,
   * so a garbage collection waits until every lane is waiting. Unset: each wait decides alone.
   */
  idle?: { laneStarted(): () => void };
  /**
   * The slot ledger (../pipeline/ledger.ts): always in a deployed worker (LEDGER_TABLE); unset in tests
   * of the records alone, where reserved concurrency alone bounds the worker.
   */
  ledger?: SlotLedger;
  /** A unique lease owner per claim. */
  newOwner?: () => string;
  /** First calls of each client, made ahead of the first record (see functions/worker.ts); never throws. */
  warmUp?: () => Promise<void>;
  /**
   * Shares this environment's solve times with the others' when it is due (run beside each record,
   * awaited, at most 2 s, before the invocation ends; ../pipeline/solve-time-exchange.ts). Failures
   * are logged, never fatal.
   */
  exchangeSolveTimes?: () => Promise<unknown>;
}

export type RecordResult =
  /** The message is done (outcome written or already present, or sent to the DLQ): delete it. */
  | { kind: 'done'; status: OutcomeStatus | 'dlq' | 'duplicate' }
  /** Batch item failure: the message comes back later (not before `notBefore`, epoch ms, when set). */
  | { kind: 'retry'; reason: string; notBefore?: number }
  /** Stop-class error: the pipeline is paused; the rest of the batch must not be worked on. */
  | { kind: 'stopped'; code: string };

export interface ProcessOptions {
  /**
   * Aborted when the invocation must end (near the function timeout). An aborted record is
   * left exactly as a killed invocation would leave it: no final write, no release; its
   * lease keeps redeliveries from solving it again until the lease expires.
   */
  signal?: AbortSignal;
  /**
   * Called once the record's CaptchaAI task is answered (its thread is free, the token in hand):
   * the batch loop may then start the next record beside this one's POST (./chain.ts).
   */
  onAnswered?: () => void;
  /**
   * Asked before every in.php of a record: true once the invocation has stopped (a lane met a
   * stop-class error, or the pipeline state said paused); the record then goes back untouched.
   */
  stopping?: () => boolean;
  /**
   * The visibility (seconds) a message the invocation takes itself gets when received: its
   * remaining time plus a margin. Unset: the queue's visibility timeout.
   */
  receiveVisibility?: () => number;
  /** Until when (a `performance.now()` time) the invocation may take messages itself; unset: never. */
  chainUntil?: number;
  /**
   * With lanes (./chain-window.ts takeWindow), asked before every in.php call of a record: whether
   * the shortest work from that call on still fits before the timeout. False: the record goes
   * back to the queue before the call (InvocationEndingError). Unset: no such check.
   */
  submitFits?: () => boolean;
  /**
   * Lanes (../pipeline/lanes.ts): `count` one-task loops run side by side, and a lane whose index
   * is not below `allowed()` (the published shape, read through the environment's cache) ends
   * before it takes its next message. Unset: one lane.
   */
  lanes?: {
    count: number;
    allowed(): Promise<number>;
    /** Called when a lane ended because it is no longer allowed, once its last record has ended. */
    left?(): Promise<void>;
  };
}

/** The fields a log line carries about an error (never its whole object: it may hold a request). */
export function errorSummary(err: unknown): Record<string, unknown> {
  const e = err as { name?: string; message?: string; code?: unknown };
  return {
    errorName: e?.name ?? typeof err,
    errorCode: typeof e?.code === 'string' ? e.code : undefined,
    errorMessage: e?.message,
  };
}
