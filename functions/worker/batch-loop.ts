import { ChangeMessageVisibilityBatchCommand } from '@aws-sdk/client-sqs';
import type { SQSBatchResponse, SQSEvent, SQSRecord } from 'aws-lambda';
import type { PipelineState } from '../pipeline/control.js';
import { REASON } from '../records/decisions.js';
import { deleteReceived, receiveNext } from './chain.js';
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
  const failures: string[] = [];
  const untouched: SQSRecord[] = [];
  /** Messages the chain received but did not work (the invocation is ending): visible again at once. */
  const givenBack: SQSRecord[] = [];
  const retried: { record: SQSRecord; notBefore?: number }[] = [];
  // Widened, not narrowed to 'none': `account` sets it from the records' promises.
  // 'state': the pipeline state says paused; 'unpaused-stop': a stop met here could not pause;
  // 'by-us': this invocation paused.
  let paused = 'none' as Paused;
  let previous: Promise<void> = Promise.resolve();
  let chained = 0;
  const exchanges: Promise<unknown>[] = [];
  const account = async (record: SQSRecord, own: boolean, result: RecordResult): Promise<void> => {
    if (result.kind === 'retry') {
      if (!own) failures.push(record.messageId);
      retried.push({ record, notBefore: result.notBefore });
    } else if (own) {
      await deleteReceived(deps, record);
    }
    if (result.kind === 'stopped') paused = 'by-us';
    else if (paused === 'none' && metStopUnpaused(result)) paused = 'unpaused-stop';
  };
  try {
    for (let i = 0; ; i++) {
      const own = i >= event.Records.length;
      if (own && (paused !== 'none' || options.signal?.aborted || !chainOpen(options))) break;
      if (paused === 'none' && !options.signal?.aborted) {
        const state = await readStateSafely(deps);
        // The chain's own receive is not stopped by the disabled mapping: an unknown state ends it.
        if (own && state === UNREADABLE) break;
        if (state !== UNREADABLE && state.paused) {
          paused = 'state';
          deps.logger.info('pipeline is paused; leaving the rest of the batch in the queue', {
            pauseReason: state.reason,
          });
        }
      }
      if (own && paused !== 'none') break;
      const record = own ? await receiveSafely(deps) : event.Records[i];
      if (!record) break;
      if (own && (paused !== 'none' || options.signal?.aborted)) {
        // Not the event's: Lambda must never see its id among the batch item failures.
        givenBack.push(record);
        continue;
      }
      if (paused !== 'none' || options.signal?.aborted) {
        failures.push(record.messageId);
        untouched.push(record);
        continue;
      }
      if (own) chained++;
      // Beside the record, when due (at most every 15 s, scaled, never below 5 s): a chain runs for minutes, so
      // an exchange only at the invocation's start would leave the environment learning alone.
      const exchanged = deps.exchangeSolveTimes?.();
      if (exchanged) exchanges.push(exchanged);
      let answered!: () => void;
      const answer = new Promise<void>((resolve) => {
        answered = resolve;
      });
      const ended = workSafely(record, deps, { ...options, onAnswered: answered }).then((result) =>
        account(record, own, result),
      );
      await Promise.race([answer, ended]);
      await previous;
      previous = ended;
    }
    await previous;
    if (exchanges.length > 0) {
      const wait = new Promise((resolve) => setTimeout(resolve, EXCHANGE_WAIT_MS).unref());
      await Promise.race([Promise.all(exchanges), wait]);
    }
    if (chained > 0) deps.logger.info('chain ended', { chainedRecords: chained });
    const untouchedBackIn = untouchedVisibility(paused, deps);
    if (untouchedBackIn !== undefined && untouched.length > 0)
      await setVisibility(deps, untouched, untouchedBackIn);
    if (givenBack.length > 0) await setVisibility(deps, givenBack, 0);
    // Without this a retried message would wait out the queue's whole visibility timeout
    // (6 x the function timeout, 43 min at the defaults) before its next try.
    for (const [seconds, records] of retryDelays(retried, deps)) await setVisibility(deps, records, seconds);
  } finally {
    // Per-record metrics (outcomes, conflicts) are single metrics, already published.
    if (deps.metrics.hasStoredMetrics()) deps.metrics.publishStoredMetrics();
  }
  return { batchItemFailures: failures.map((itemIdentifier) => ({ itemIdentifier })) };
}

/** Whether the invocation may still take a message itself (see ./chain.ts). */
function chainOpen(options: ProcessOptions): boolean {
  return options.chainUntil !== undefined && performance.now() < options.chainUntil;
}

/** The next message for the chain; a failed receive ends the chain (the mapping delivers it later). */
async function receiveSafely(deps: WorkerDeps): Promise<SQSRecord | undefined> {
  try {
    return await receiveNext(deps);
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

/** After its records, the invocation waits at most this long for an exchange still under way. */
const EXCHANGE_WAIT_MS = 2_000;

/** SQS's longest visibility timeout. */
const MAX_VISIBILITY_SECONDS = 43_200;

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
    const untilThen = notBefore === undefined ? 0 : Math.ceil((notBefore - now) / 1000) + 1;
    const seconds = Math.min(MAX_VISIBILITY_SECONDS, Math.max(deps.config.retryDelaySeconds, untilThen));
    groups.set(seconds, [...(groups.get(seconds) ?? []), record]);
  }
  return groups;
}

/** Whether, and by whom, the rest of the batch is left untouched (see processBatch). */
type Paused = 'none' | 'state' | 'unpaused-stop' | 'by-us';

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

async function setVisibility(deps: WorkerDeps, records: SQSRecord[], seconds: number): Promise<void> {
  for (let i = 0; i < records.length; i += 10) {
    const chunk = records.slice(i, i + 10);
    try {
      await deps.sqs.send(
        new ChangeMessageVisibilityBatchCommand({
          QueueUrl: deps.config.queueUrl,
          Entries: chunk.map((r, j) => ({
            Id: String(j),
            ReceiptHandle: r.receiptHandle,
            VisibilityTimeout: seconds,
          })),
        }),
      );
    } catch (err) {
      // Not fatal: they come back after their visibility timeout instead.
      deps.logger.warn('could not change the visibility of records to retry', errorSummary(err));
    }
  }
}
