import type { SQSBatchResponse, SQSEvent, SQSRecord } from 'aws-lambda';
import type { PipelineState } from '../pipeline/control.js';
import { REASON } from '../records/decisions.js';
import { deleteReceived, receiveNext, retryVisibilitySeconds, setVisibility } from './chain.js';
import { applyCrash } from './effects.js';
import { processRecord } from './record-flow.js';
import { errorSummary, type ProcessOptions, type RecordResult, type WorkerDeps } from './types.js';

/**
 * Works a batch in order, then (while the chain is open, ./chain.ts) the messages this invocation
 * takes from the queue itself, and returns the partial batch response for the batch's own.
 *
 * One task at a time: the next record starts once the previous one's answer is in hand (its
 * CaptchaAI thread is free) or the previous record has ended, whichever comes first; the previous
 * record's POST and final write run beside the next one's claim and submit. At most two records
 * are open at once.
 *
 * Pause semantics (the stop-class invariant). Before each record the pipeline state is read;
 * once it says paused, or a record of this batch hit a stop-class error, every later record
 * is returned as a batch item failure without any work (no claim, no page load, no solve), and
 * the chain takes no more messages; the same when a stop-class error could not pause the
 * pipeline (PAUSE_FAILED), and the chain also ends on a state it cannot read. A message the chain
 * received but does not work is made visible again, never reported: Lambda knows only the event's
 * ids. A stop-class error comes only from CaptchaAI, before an
 * answer, so the record that hit it has ended before any later record starts.
 * When THIS invocation paused the pipeline, those records' visibility is also reset to 0 so
 * they sit visible in the queue, ready for the resume; the mapping is disabled, so nothing
 * receives them meanwhile. When the state said paused (another invocation, the adjuster or an
 * operator paused, and the pause disables the mapping before it writes the state), they come
 * back after the retry delay: ready for the resume all the same, and a mapping that still
 * delivers meanwhile (a resume under way) costs them one receive per retry delay, not a loop.
 * Without it they waited out the queue's whole visibility timeout (6 × the function timeout)
 * however soon the resume came. After a stop that could not pause (PAUSE_FAILED) they do wait it
 * out: the mapping may still be delivering, into the same refused key.
 *
 * About "receive counts unchanged": records already handed to this invocation were received
 * once by the poller, and that receive is already in their ApproximateReceiveCount; the
 * worker adds none, and after the pause no poller receives them again. With batch size 1
 * (the deployed setting) the other messages were never received at all, so their counts are
 * exactly as they were. test/integration/functions/worker.test.ts asserts both cases.
 */
export async function processBatch(
  event: SQSEvent,
  deps: WorkerDeps,
  options: ProcessOptions = {},
): Promise<SQSBatchResponse> {
  const invocation = new Invocation(event, deps, options);
  try {
    await invocation.run();
    await invocation.settle();
  } finally {
    // Per-record metrics (outcomes, conflicts) are single metrics, already published.
    if (deps.metrics.hasStoredMetrics()) deps.metrics.publishStoredMetrics();
  }
  return invocation.response();
}

/**
 * What the lanes of one invocation share, with one owner (lanes: ../pipeline/lanes.ts): the
 * accounting of the event's ids and of the messages the chain took, the pause, the abort, the
 * chain's window, and one stop per invocation. A lane owns only its loop (take, work, account)
 * and asks through the methods below. With one lane (the default) this is the batch loop as it
 * always was: lane 0 works the event's records, then the chain's.
 */
class Invocation {
  readonly #failures: string[] = [];
  readonly #untouched: SQSRecord[] = [];
  /** Messages the chain received but did not work (the invocation is ending): visible again at once. */
  readonly #givenBack: SQSRecord[] = [];
  readonly #retried: { record: SQSRecord; notBefore?: number }[] = [];
  readonly #exchanges: Promise<unknown>[] = [];
  // 'state': the pipeline state says paused; 'unpaused-stop': a stop met here could not pause;
  // 'by-us': this invocation paused.
  #paused: Paused = 'none';
  #chained = 0;
  /** The deps the lanes use: with several lanes, one pause and one stop for all of them. */
  readonly #deps: WorkerDeps;

  constructor(
    private readonly event: SQSEvent,
    deps: WorkerDeps,
    private readonly options: ProcessOptions,
  ) {
    // A claimed stop stops every lane at once: none receives, claims or submits while the lane
    // that met it pauses the pipeline.
    this.#deps =
      (options.lanes?.count ?? 1) > 1
        ? sharedStop(deps, () => {
            if (this.#paused === 'none') this.#paused = 'claimed';
          })
        : deps;
  }

  /** The lanes this invocation started with. */
  get laneCount(): number {
    return Math.max(1, this.options.lanes?.count ?? 1);
  }

  /** Runs every lane to its end: the invocation ends when its last lane does. */
  async run(): Promise<void> {
    const lanes = Array.from({ length: this.laneCount }, (_, index) =>
      runLane(this, index, index === 0 ? this.event.Records : []),
    );
    await Promise.all(lanes);
  }

  get deps(): WorkerDeps {
    return this.#deps;
  }

  get signal(): AbortSignal | undefined {
    return this.options.signal;
  }

  /** Options for one record of a lane, with its answer callback. */
  recordOptions(onAnswered: () => void): ProcessOptions {
    return { ...this.options, onAnswered, stopping: () => this.isStopped() };
  }

  /** Nothing more is worked: the pipeline is paused (or a stop met here could not pause it). */
  isStopped(): boolean {
    return this.#paused !== 'none';
  }

  /** The invocation is ending: its deadline is near. */
  isAborted(): boolean {
    return this.options.signal?.aborted === true;
  }

  /** Whether a lane may take another message itself: not stopped, not aborted, the chain open. */
  mayTake(): boolean {
    return !this.isStopped() && !this.isAborted() && chainOpen(this.options);
  }

  /** Whether lane `index` is still within the lanes the published shape allows (always for one lane). */
  async laneAllowed(index: number): Promise<boolean> {
    if (!this.options.lanes) return true;
    try {
      return index < (await this.options.lanes.allowed());
    } catch (err) {
      // The slot ledger counts this lane whatever the shape says: an unknown shape keeps it.
      this.#deps.logger.warn('could not read the lane shape; the lane keeps its place', errorSummary(err));
      return true;
    }
  }

  /**
   * Reads the pipeline state before a record: UNREADABLE when it cannot be read; a paused state
   * stops the invocation's lanes.
   */
  async readState(): Promise<PipelineState | typeof UNREADABLE> {
    const state = await readStateSafely(this.#deps);
    if (state !== UNREADABLE && state.paused && this.#paused === 'none') {
      this.#paused = 'state';
      this.#deps.logger.info('pipeline is paused; leaving the rest of the batch in the queue', {
        pauseReason: state.reason,
      });
    }
    return state;
  }

  /**
   * The next message for a lane (./chain.ts). With one lane an empty receive ends the chain, as
   * always. With lanes, a lane that ends on an empty receive leaves its thread idle until the
   * whole invocation ends (the mapping cannot start another while r run), so it asks a few times,
   * EMPTY_RECEIVE_WAIT_MS apart, while the chain is open: a queue fed as it drains is often empty
   * for a moment only.
   */
  async takeNext(): Promise<SQSRecord | undefined> {
    for (let attempt = 1; ; attempt++) {
      const record = await receiveSafely(this.#deps, this.options.receiveVisibility?.());
      if (record || this.laneCount <= 1 || attempt >= EMPTY_RECEIVE_TRIES || !this.mayTake()) return record;
      await this.#deps.sleep(
        Math.max(MIN_EMPTY_RECEIVE_WAIT_MS, EMPTY_RECEIVE_WAIT_MS * this.#deps.config.timeScale),
        this.options.signal,
      );
      // The window may have closed while the lane waited: no record starts after it.
      if (!this.mayTake()) return undefined;
    }
  }

  /** A lane ended because it is no longer allowed, its last record ended: its lane goes back. */
  async laneLeft(): Promise<void> {
    await this.options.lanes?.left?.();
  }

  /** A message the chain took that will not be worked: visible again at once, never reported. */
  giveBack(record: SQSRecord): void {
    this.#givenBack.push(record);
  }

  /** One of the event's records left untouched (paused or aborted): a batch item failure. */
  leaveUntouched(record: SQSRecord): void {
    this.#failures.push(record.messageId);
    this.#untouched.push(record);
  }

  noteChained(): void {
    this.#chained++;
  }

  noteExchange(exchange: Promise<unknown> | undefined): void {
    if (exchange) this.#exchanges.push(exchange);
  }

  /** Accounts for a record's result: deleted, retried, or left as another lane's stop left it. */
  async account(record: SQSRecord, own: boolean, result: RecordResult): Promise<void> {
    if (result.kind === 'retry' && !result.notBefore && BACK_BEFORE_IN_PHP.has(result.reason)) {
      // Nothing of it was sent. Another lane of this invocation met the stop first and owns it
      // (the record goes back untouched, as the later records of a stopped batch do), or too
      // little of the invocation is left for its in.php (another lane may take it now). A
      // message the chain took is visible again at once; one of the event's is left untouched
      // after a stop, and otherwise retried like any other.
      if (own) {
        this.giveBack(record);
        return;
      }
      if (result.reason === REASON.STOPPED_BY_ANOTHER_LANE) {
        this.leaveUntouched(record);
        return;
      }
    }
    if (result.kind === 'retry') {
      if (!own) this.#failures.push(record.messageId);
      this.#retried.push({ record, notBefore: result.notBefore });
    } else if (own) {
      await deleteReceived(this.#deps, record);
    }
    if (result.kind === 'stopped') this.#paused = 'by-us';
    else if ((this.#paused === 'none' || this.#paused === 'claimed') && metStopUnpaused(result))
      this.#paused = 'unpaused-stop';
  }

  /** After the lanes: exchanges still under way, and every message's visibility as its result needs. */
  async settle(): Promise<void> {
    const deps = this.#deps;
    if (this.#exchanges.length > 0) {
      const wait = new Promise((resolve) => setTimeout(resolve, EXCHANGE_WAIT_MS).unref());
      await Promise.race([Promise.all(this.#exchanges), wait]);
    }
    if (this.#chained > 0) deps.logger.info('chain ended', { chainedRecords: this.#chained });
    const untouchedBackIn = untouchedVisibility(this.#paused, deps);
    if (untouchedBackIn !== undefined && this.#untouched.length > 0)
      await setVisibility(deps, this.#untouched, untouchedBackIn);
    // After a stop that could not pause, the mapping may still deliver into the refused key: what
    // the lanes took waits out its own visibility instead of coming back at once.
    if (this.#givenBack.length > 0 && this.#paused !== 'unpaused-stop' && this.#paused !== 'claimed')
      await setVisibility(deps, this.#givenBack, 0);
    // Without this a retried message would wait out the queue's whole visibility timeout
    // (6 x the function timeout, 43 min at the defaults) before its next try.
    for (const [seconds, records] of retryDelays(this.#retried, deps))
      await setVisibility(deps, records, seconds);
  }

  /** The partial batch response: only the event's own ids. */
  response(): SQSBatchResponse {
    return { batchItemFailures: this.#failures.map((itemIdentifier) => ({ itemIdentifier })) };
  }
}

/**
 * One lane: today's one-task-at-a-time loop. It works `first` (lane 0: the event's records), then,
 * while the chain is open, messages it takes from the queue itself. The next record starts once
 * the previous one's answer is in hand or it has ended; at most two records of a lane are open.
 */
async function runLane(inv: Invocation, index: number, first: SQSRecord[]): Promise<void> {
  // With lanes, the environment's garbage collection waits until every lane is waiting.
  const laneEnded = inv.laneCount > 1 ? inv.deps.idle?.laneStarted() : undefined;
  try {
    if ((await laneLoop(inv, index, first)) === 'not-allowed') await inv.laneLeft();
  } finally {
    laneEnded?.();
  }
}

/** Runs a lane to its end; 'not-allowed': it ended because the published shape allows fewer lanes. */
async function laneLoop(
  inv: Invocation,
  index: number,
  first: SQSRecord[],
): Promise<'not-allowed' | 'ended'> {
  const { deps } = inv;
  let previous: Promise<void> = Promise.resolve();
  for (let i = 0; ; i++) {
    const own = i >= first.length;
    if (own && !inv.mayTake()) break;
    // A lane beyond the lanes now allowed (the cap fell) takes no more records.
    if (own && !(await inv.laneAllowed(index))) {
      await previous;
      return 'not-allowed';
    }
    if (!inv.isStopped() && !inv.isAborted()) {
      const state = await inv.readState();
      // The chain's own receive is not stopped by the disabled mapping: an unknown state ends it.
      if (own && state === UNREADABLE) break;
    }
    if (own && inv.isStopped()) break;
    const record = own ? await inv.takeNext() : first[i];
    if (!record) break;
    if (own && (inv.isStopped() || inv.isAborted())) {
      // Not the event's: Lambda must never see its id among the batch item failures.
      inv.giveBack(record);
      continue;
    }
    if (inv.isStopped() || inv.isAborted()) {
      inv.leaveUntouched(record);
      continue;
    }
    if (own) inv.noteChained();
    // Beside the record, when due (at most every 15 s, scaled, never below 5 s): a chain runs for minutes, so
    // an exchange only at the invocation's start would leave the environment learning alone.
    inv.noteExchange(deps.exchangeSolveTimes?.());
    let answered!: () => void;
    const answer = new Promise<void>((resolve) => {
      answered = resolve;
    });
    const ended = workSafely(record, deps, inv.recordOptions(answered)).then((result) =>
      inv.account(record, own, result),
    );
    await Promise.race([answer, ended]);
    await previous;
    previous = ended;
  }
  await previous;
  return 'ended';
}

/**
 * The deps of an invocation with several lanes: one pause for all of them (lanes that meet a
 * stop-class error together make one mapping update, not several failing each other with
 * ResourceInUse), and one stop: the lane that meets it first records it (row, DLQ copy, pause);
 * the others give their records back untouched (../records/decisions.ts decideStopMetElsewhere).
 */
function sharedStop(deps: WorkerDeps, onClaimed: () => void): WorkerDeps {
  let pausing: Promise<unknown> | undefined;
  let stopOwned = false;
  return {
    ...deps,
    pipeline: {
      ...deps.pipeline,
      pause: (reason, by, code) => {
        const attempt = pausing ?? deps.pipeline.pause(reason, by, code);
        pausing = attempt;
        // A failed pause may be tried again by the lane that owns the stop.
        attempt.catch(() => {
          if (pausing === attempt) pausing = undefined;
        });
        return attempt as ReturnType<WorkerDeps['pipeline']['pause']>;
      },
    },
    stops: {
      claim: () => {
        if (stopOwned) return false;
        stopOwned = true;
        onClaimed();
        return true;
      },
    },
  };
}

/** Whether the invocation may still take a message itself (see ./chain.ts). */
function chainOpen(options: ProcessOptions): boolean {
  return options.chainUntil !== undefined && performance.now() < options.chainUntil;
}

/** The next message for the chain; a failed receive ends the chain (the mapping delivers it later). */
async function receiveSafely(deps: WorkerDeps, visibilitySeconds?: number): Promise<SQSRecord | undefined> {
  try {
    return await receiveNext(deps, visibilitySeconds);
  } catch (err) {
    deps.logger.warn('could not take the next message; the chain ends here', errorSummary(err));
    return undefined;
  }
}

/** One record to its result; a crash outside the mapping goes to applyCrash (./effects.ts). */
async function workSafely(
  record: SQSRecord,
  deps: WorkerDeps,
  options: ProcessOptions,
): Promise<RecordResult> {
  try {
    return await processRecord(record, deps, options);
  } catch (err) {
    deps.logger.error('record crashed; it will be retried', {
      messageId: record.messageId,
      ...errorSummary(err),
    });
    return applyCrash(err, { record, deps, log: deps.logger });
  }
}

/** Reasons a record goes back to the queue before its in.php (../records/decisions.ts). */
const BACK_BEFORE_IN_PHP: ReadonlySet<string> = new Set([
  REASON.STOPPED_BY_ANOTHER_LANE,
  REASON.INVOCATION_ENDING,
]);

/** Receives a lane makes on an empty queue before it ends (lanes only; see Invocation.takeNext). */
const EMPTY_RECEIVE_TRIES = 4;
/** The wait between them at time scale 1, and its floor at small time scales. */
const EMPTY_RECEIVE_WAIT_MS = 1_000;
const MIN_EMPTY_RECEIVE_WAIT_MS = 50;

/** After its records, the invocation waits at most this long for an exchange still under way. */
const EXCHANGE_WAIT_MS = 2_000;

/**
 * Retried records grouped by their visibility delay: the configured retry delay, or until
 * `notBefore` has passed (plus a second, so the next claim sees the lease expired).
 */
function retryDelays(
  retried: { record: SQSRecord; notBefore?: number }[],
  deps: WorkerDeps,
): Map<number, SQSRecord[]> {
  const now = deps.now();
  const groups = new Map<number, SQSRecord[]>();
  for (const { record, notBefore } of retried) {
    const seconds = retryVisibilitySeconds(deps, notBefore, now);
    groups.set(seconds, [...(groups.get(seconds) ?? []), record]);
  }
  return groups;
}

/**
 * Whether, and by whom, the rest of the batch is left untouched (see processBatch). 'claimed': a
 * lane met a stop-class error and is pausing the pipeline; the others stop at once.
 */
type Paused = 'none' | 'state' | 'claimed' | 'unpaused-stop' | 'by-us';

/**
 * When the records a pause left untouched come back, in seconds, by who paused (see the header);
 * undefined: after the queue's own visibility timeout.
 */
function untouchedVisibility(paused: Paused, deps: WorkerDeps): number | undefined {
  if (paused === 'by-us') return 0;
  if (paused === 'state') return deps.config.retryDelaySeconds;
  return undefined;
}

/** The pipeline state could not be read. */
const UNREADABLE = 'unreadable';

/**
 * The pipeline state, or UNREADABLE. For a record the mapping delivered, an unreadable state is
 * read as not paused (a disabled mapping delivers nothing more, and a throttled read must not
 * fail records alone); the chain's own next message is not taken on an unknown state.
 */
async function readStateSafely(deps: WorkerDeps): Promise<PipelineState | typeof UNREADABLE> {
  try {
    return await deps.pipeline.readState();
  } catch (err) {
    deps.logger.warn('could not read the pipeline state', errorSummary(err));
    return UNREADABLE;
  }
}

/**
 * A record met a stop-class error that could not pause the pipeline (PAUSE_FAILED, or the stop
 * recorded on its last receive): nothing more is worked here, as after a pause.
 */
function metStopUnpaused(result: RecordResult): boolean {
  return (
    (result.kind === 'retry' && result.reason === REASON.PAUSE_FAILED) ||
    (result.kind === 'done' && result.status === 'stopped')
  );
}
