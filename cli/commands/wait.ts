import { setTimeout as sleep } from 'node:timers/promises';
import type { Command } from 'commander';
import type { PipelineState } from '../../functions/pipeline/control.js';
import { type BatchCancel, BatchCancels } from '../../functions/records/cancellations.js';
import { ENDED_STATUSES } from '../../functions/records/fields.js';
import { type OutcomeRow, OutcomesStore } from '../../functions/records/store.js';
import { cancelRefreshMs } from '../../functions/worker/cancel-watch.js';
import { readCountsFile } from '../batch-counts.js';
import { type DlqHit, type DlqRead, dlqReader, NO_DLQ_MESSAGES } from '../dlq-read.js';
import { CliError, EXIT } from '../exit-codes.js';
import { formRefusalCounts, formRefusalText } from '../form-refusals.js';
import { Progress } from '../progress.js';
import { describeSelection, type Selection, SelectionLooks, selectionFrom } from '../record-selection.js';
import {
  type AwsContext,
  addStackOptions,
  output,
  pipelineControl,
  type StackOptions,
  withStack,
} from '../stack.js';
import { propagationBoundSeconds } from './cancel.js';
import { queueCounts } from './status.js';

/**
 * `threadgate wait`: polls until every record of a batch (or of a key file) has a final
 * outcome or its message is in the DLQ, then ends with an exit code a script can branch on.
 * `stopped` counts as ended (its message is in the DLQ, with the reason) and means the
 * pipeline paused. It never ends "done" while a selected row is `in_progress`, and a batch
 * that holds more records than expected is an error that says why (a reused batch_id, or a
 * count that misses a part). While records are pending it also ends early, and says why, when
 * the pipeline is paused (nothing will move until an operator resumes) or when nothing is left
 * to work on (jobs queue empty, nothing in flight) but records are still unaccounted for.
 */

/** The order counts are shown in. */
const SHOWN = ['submitted', 'failed', 'rejected', 'cancelled', 'stopped', 'dlq', 'in_progress'] as const;

export type WaitEnd = 'done' | 'paused' | 'missing' | 'too_many' | 'timeout' | 'cancelled';

export interface WaitReport {
  selection: string;
  batch_id?: string;
  expected: number;
  /** Records that ended: a final row, a stopped row or a DLQ message. */
  ended: number;
  /** Distinct records seen: every selected row, plus DLQ messages of the selection without a row. */
  records: number;
  /** Rows by status, plus `dlq` for records whose message is in the DLQ without a final row. */
  counts: Record<string, number>;
  /** Of the `failed` rows, those the form itself refused (FORM_REJECTED, FORM_UNCONFIRMED), by reason. */
  form_refused: Record<string, number>;
  pending: number;
  /** The DLQ's approximate message count and how many of them the last read saw (it hides none). */
  dlq: { messages: number; read: number };
  end: WaitEnd;
  exit_code: number;
  message: string;
  pipeline: PipelineState;
  /** The batch's cancel, when it was cancelled. */
  cancel?: BatchCancel;
  elapsed_s: number;
}

/** What one look at the pipeline found. */
export interface WaitSnapshot {
  rows: OutcomeRow[];
  pipeline: PipelineState;
  /** Jobs queue holds nothing visible, in flight or delayed. */
  queueIdle: boolean;
  /** The batch's cancel, when it was cancelled (`threadgate cancel`; batch selections only). */
  cancel?: BatchCancel;
}

export type { DlqHit } from '../dlq-read.js';

export interface WaitDeps {
  /** `full`: read every row of the selection; otherwise a look may read only what changed since the last. */
  look(o: { full: boolean }): Promise<WaitSnapshot>;
  /** Reads the DLQ without taking anything out of it or hiding anything. */
  dlq(): Promise<DlqRead>;
  now(): number;
  sleep(ms: number): Promise<void>;
  onProgress?(report: WaitReport): void;
}

export interface WaitOptions {
  selection: Selection;
  /**
   * The cancel's propagation bound (ms): until cancelledAt + this, a worker may still act on a
   * stale "not cancelled" and POST a record of the batch (functions/worker/cancel-watch.ts), so a
   * cancelled batch's wait does not end before it. @default cancelRefreshMs(1), 10 s
   */
  cancelBoundMs?: number;
  /** Records expected: the batch's count, or the number of keys. */
  expected: number;
  intervalMs: number;
  /** Undefined: no limit. */
  timeoutMs?: number;
}

export interface Tally {
  counts: Record<string, number>;
  /** Records that ended (a final or stopped row, or a DLQ message without such a row). */
  ended: number;
  /** Expected records not ended yet: max(0, expected − ended). */
  pending: number;
  /** Distinct records seen (rows, and DLQ messages without a row). */
  records: number;
  /** Rows that have not ended (in_progress) and have no DLQ message. */
  open: number;
}

/** Counts the selection's rows and DLQ hits; pure, so the exit-code rules are tested alone. */
export function tally(
  selection: Selection,
  expected: number,
  rows: readonly OutcomeRow[],
  dlq: readonly DlqHit[],
): Tally {
  const counts: Record<string, number> = {};
  const byKey = new Map(rows.map((r) => [r.record_key, r]));
  const ended = (row: OutcomeRow | undefined) =>
    row !== undefined && (ENDED_STATUSES as readonly string[]).includes(row.status);
  // A DLQ message counts for a record that has not ended otherwise, once per record (or once per
  // unkeyed message of the batch: those can never have a row).
  const inDlq = new Set<string>();
  let unkeyed = 0;
  for (const hit of dlq) {
    if (hit.recordKey !== undefined) {
      const wanted =
        selection.kind === 'keys'
          ? selection.keys.includes(hit.recordKey)
          : hit.batchId === selection.batchId;
      if (wanted && !ended(byKey.get(hit.recordKey))) inDlq.add(hit.recordKey);
    } else if (selection.kind === 'batch' && hit.batchId === selection.batchId) unkeyed += 1;
  }
  let endedRows = 0;
  let open = 0;
  for (const row of rows) {
    if (inDlq.has(row.record_key)) continue; // counted as dlq below
    counts[row.status] = (counts[row.status] ?? 0) + 1;
    if (ended(row)) endedRows += 1;
    else open += 1;
  }
  const dlqCount = inDlq.size + unkeyed;
  if (dlqCount > 0) counts.dlq = dlqCount;
  const endedCount = endedRows + dlqCount;
  const withoutRow = [...inDlq].filter((key) => !byKey.has(key)).length;
  return {
    counts,
    ended: endedCount,
    pending: Math.max(0, expected - endedCount),
    records: rows.length + unkeyed + withoutRow,
    open,
  };
}

/**
 * Exit code once every record ended: 3 if one was stopped, 5 if one was cancelled, 2 if one
 * failed, was rejected or is in the DLQ.
 */
export function doneExitCode(counts: Record<string, number>): number {
  if ((counts.stopped ?? 0) > 0) return EXIT.stop;
  if ((counts.cancelled ?? 0) > 0) return EXIT.cancelled;
  if ((counts.failed ?? 0) + (counts.rejected ?? 0) + (counts.dlq ?? 0) > 0) return EXIT.badTask;
  return EXIT.ok;
}

function countsText(counts: Record<string, number>): string {
  const parts = SHOWN.filter((s) => counts[s]).map((s) => `${s} ${counts[s]}`);
  return parts.length ? parts.join(', ') : 'no outcomes yet';
}

function cancelledText(cancel: BatchCancel | undefined): string {
  if (!cancel) return 'some records were cancelled';
  return `the batch was cancelled at ${cancel.cancelledAt}${cancel.by ? ` by ${cancel.by}` : ''}${
    cancel.reason ? `: ${cancel.reason}` : ''
  }`;
}

/** ` (the form said no: FORM_REJECTED 2; see expect_rule)`, or '' when the form refused none. */
function refusedText(rows: readonly OutcomeRow[]): string {
  const text = formRefusalText(formRefusalCounts(rows));
  return text ? ` (the form said no: ${text}; each row's expect_rule names the check)` : '';
}

function pausedText(state: PipelineState): string {
  const who = state.by ? ` by ${state.by}` : '';
  const since = state.since ? ` since ${state.since}` : '';
  return `the pipeline is paused${who}${since}: ${state.reason ?? 'no reason recorded'}`;
}

/** A batch holds more records than expected: the count cannot become right by waiting longer. */
function tooManyText(what: string, expected: number, t: Tally): string {
  return (
    `${what}: ${t.records} records carry this batch_id, more than the ${expected} expected ` +
    `(${t.ended} ended, ${t.open} in_progress). Either the batch_id was used before (rows of an earlier ` +
    'run carry it: use a new batch_id for each run) or the expected count misses a part (a batch sent ' +
    'in several `threadgate enqueue` runs: `--counts FILE` adds the parts up; `--expect` needs the total). ' +
    '`threadgate wait --keys FILE` waits for exactly the records of one job file.'
  );
}

/** Nothing queued or in flight, and records still unaccounted for. */
function missingText(what: string, o: WaitOptions, t: Tally, rows: number, dlq: DlqRead): string {
  const batch = o.selection.kind === 'batch';
  const unread =
    dlq.read < dlq.messages
      ? ` The DLQ holds ${dlq.messages} messages and ${dlq.read} of them could be read without hiding them ` +
        '(the others are in flight at another reader, e.g. a redrive, or too many to read that way).'
      : '';
  if (rows === 0 && t.ended === 0) {
    return `${what}: no such records — nothing in the outcomes table${batch ? ' under this batch_id' : ''}, nothing queued or in flight, nothing in the DLQ. Is the ${batch ? 'batch id' : 'key file'} right, and were the records sent?${unread}`;
  }
  const stuck =
    t.open > 0
      ? ` ${t.open} of them have a row still in_progress with no message left to finish it (the worker that held it ended and its message is gone).`
      : '';
  return `${what}: ${t.pending} of ${o.expected} records are not accounted for: no final outcome${
    batch ? ' under this batch_id' : ''
  }, nothing queued or in flight, not in the DLQ.${stuck}${
    batch
      ? ' A record sent before under another batch keeps its first batch; is the expected count right?'
      : ''
  }${unread}`;
}

/** How a look ends the wait, if it does. */
type WaitEnding = [end: WaitEnd, exitCode: number, message: string];

/** What one look found, as decideEnding needs it. */
interface LookState {
  look: WaitSnapshot;
  t: Tally;
  dlq: DlqRead;
  /** When the look started. */
  lookedAt: number;
  /** Idle looks of the jobs queue in a row, this one included. */
  idleLooks: number;
}

/** Whether a look ends the wait, and how (the timeout aside); pure. */
function decideEnding(o: WaitOptions, what: string, boundMs: number, s: LookState): WaitEnding | undefined {
  const { look, t } = s;
  if (t.records > o.expected) return ['too_many', EXIT.badTask, tooManyText(what, o.expected, t)];
  if (t.pending === 0 && t.open === 0) {
    const code = doneExitCode(t.counts);
    const tail =
      code === EXIT.stop
        ? `; ${pausedText(look.pipeline)}`
        : code === EXIT.cancelled
          ? `; ${cancelledText(look.cancel)}`
          : code === EXIT.badTask
            ? `; some records did not submit${refusedText(look.rows)}`
            : '';
    return ['done', code, `${what}: all ${o.expected} records ended${tail}`];
  }
  // A cancelled batch ends the wait once none of its records is being worked on, on a look that
  // started after the cancel's bound: before it a worker with a stale cache may still claim and
  // POST a record (and the batch index may lag). What is still queued then ends `cancelled`
  // without a task, so there is nothing left worth waiting for.
  if (look.cancel && t.open === 0 && s.lookedAt >= Date.parse(look.cancel.cancelledAt) + boundMs) {
    const rest =
      t.pending > 0 ? `; the other ${t.pending} end \`cancelled\` as the worker reaches their messages` : '';
    const ended = `${t.ended} of ${o.expected} records ended, none is in progress`;
    return ['cancelled', EXIT.cancelled, `${what}: ${cancelledText(look.cancel)}; ${ended}${rest}`];
  }
  if (look.pipeline.paused) {
    const next =
      'Nothing moves until `threadgate resume`; then `threadgate redrive` for the stopped records.';
    const pending = `${t.pending} of ${o.expected} records have not ended`;
    return ['paused', EXIT.stop, `${what}: ${pending} and ${pausedText(look.pipeline)}. ${next}`];
  }
  // Two idle looks in a row: the index is eventually consistent, so one more look settles it.
  // (A cancelled batch with nothing in progress waits for its bound instead, then ends above.)
  if (s.idleLooks >= 2 && !(look.cancel && t.open === 0)) {
    return ['missing', EXIT.badTask, missingText(what, o, t, look.rows.length, s.dlq)];
  }
  return undefined;
}

/**
 * Polls until the selection ends, the pipeline pauses, nothing is left to wait for, or the
 * timeout. The first look reads every row (`full`); later ones may read only what changed
 * (SelectionLooks in ../record-selection.ts), so an end they find is confirmed by a full look
 * right away, and the wait ends only on what that one finds.
 */
export async function waitForRecords(deps: WaitDeps, o: WaitOptions): Promise<WaitReport> {
  const started = deps.now();
  const what = describeSelection(o.selection);
  let dlq: DlqRead = NO_DLQ_MESSAGES;
  let idleLooks = 0;
  let full = true;
  const cancelBoundMs = o.cancelBoundMs ?? cancelRefreshMs(1);
  for (;;) {
    // When this look started: a look that started after cancelledAt + the bound sees every record
    // a worker could still have been working on.
    const lookedAt = deps.now();
    const look = await deps.look({ full });
    idleLooks = look.queueIdle ? idleLooks + 1 : 0;
    // The DLQ is read only when the queue is idle: before that a missing record may still be on its way.
    if (idleLooks > 0) dlq = await deps.dlq();
    const t = tally(o.selection, o.expected, look.rows, dlq.hits);
    const report = (end: WaitEnd, exitCode: number, message: string): WaitReport => ({
      selection: what,
      ...(o.selection.kind === 'batch' ? { batch_id: o.selection.batchId } : {}),
      expected: o.expected,
      ended: t.ended,
      records: t.records,
      counts: t.counts,
      form_refused: formRefusalCounts(look.rows),
      pending: t.pending,
      dlq: { messages: dlq.messages, read: dlq.read },
      end,
      exit_code: exitCode,
      message,
      pipeline: look.pipeline,
      ...(look.cancel ? { cancel: look.cancel } : {}),
      elapsed_s: Math.round((deps.now() - started) / 100) / 10,
    });
    const ending = decideEnding(o, what, cancelBoundMs, { look, t, dlq, lookedAt, idleLooks });
    if (ending && !full) {
      full = true; // confirm it on every row, now
      continue;
    }
    if (ending) return report(...ending);
    full = false;
    if (o.timeoutMs !== undefined && deps.now() - started >= o.timeoutMs) {
      return report(
        'timeout',
        EXIT.transient,
        `${what}: timed out after ${Math.round(o.timeoutMs / 1000)} s with ${t.pending} of ${o.expected} records not ended`,
      );
    }
    deps.onProgress?.(report('done', EXIT.ok, ''));
    await deps.sleep(o.intervalMs);
  }
}

interface WaitCliOptions extends StackOptions {
  batch?: string;
  keys?: string;
  expect?: string;
  counts?: string;
  timeout?: string;
  interval: string;
  json?: boolean;
}

export function registerWait(program: Command): void {
  addStackOptions(
    program
      .command('wait')
      .description(
        'Wait until every record of a batch (or of a key file) has a final outcome or is in the DLQ; the exit code says how it ended',
      ),
  )
    .option('--batch <id>', 'wait for this batch_id (needs --expect N or --counts FILE)')
    .option('--keys <file>', 'wait for these record keys (one per line, or the JSON lines of a job file)')
    .option('--expect <n>', 'records the batch holds (threadgate enqueue prints it)')
    .option(
      '--counts <file>',
      'read the expected count from the file `threadgate enqueue --counts FILE` added the parts of the batch to',
    )
    .option('--timeout <seconds>', 'give up after this long (exit 4); default: no limit')
    .option('--interval <seconds>', 'seconds between looks', '2')
    .option('--json', 'print the final report as JSON on stdout')
    .addHelpText(
      'after',
      '\nExamples:\n  $ threadgate enqueue jobs.jsonl --counts counts.json && threadgate wait --batch nightly-1 --counts counts.json\n' +
        '  $ threadgate wait --batch nightly-1 --expect 5000 --timeout 3600 --json\n' +
        '  $ threadgate wait --keys jobs.jsonl\n' +
        'Exit codes: 0 all submitted; 2 some failed (the form saying no included: FORM_REJECTED,\n' +
        'FORM_UNCONFIRMED), were rejected or are in the DLQ, or records are missing\n' +
        '(no such batch), or the batch holds more records than expected (a reused batch_id, or a part not\n' +
        'counted); 3 the pipeline paused on a stop-class error (the reason is printed); 4 timeout;\n' +
        '5 the batch was cancelled (`threadgate cancel`): ends once none of its records is in progress\n' +
        "and the cancel's bound (10 s × the time scale, at least 1 s) has passed since it was made;\n" +
        '64 usage error.\n' +
        'Never "done" while a record it waits for is in_progress. The DLQ is read, never consumed or hidden.\n',
    )
    .action(async (options: WaitCliOptions) => {
      const selection = await selectionFrom(options);
      if (!selection) throw new CliError('pass --batch ID or --keys FILE', EXIT.usage);
      const expected = await expectedCount(selection, options);
      const intervalMs = positiveSeconds(options.interval, '--interval') * 1000;
      const timeoutMs =
        options.timeout === undefined ? undefined : positiveSeconds(options.timeout, '--timeout') * 1000;
      await withStack(options, async (aws, stack) => {
        const store = new OutcomesStore({
          client: aws.clients.dynamodb,
          tableName: output(stack, 'TableName'),
        });
        const control = pipelineControl(aws, stack);
        const cancels = new BatchCancels({
          client: aws.clients.dynamodb,
          tableName: output(stack, 'TableName'),
        });
        const queueUrl = output(stack, 'QueueUrl');
        const dlqUrl = output(stack, 'DlqUrl');
        // The deployed worker's bound (its time scale); only a cancelled batch's wait uses it.
        const cancelBoundMs =
          selection.kind === 'batch' ? (await propagationBoundSeconds(aws, stack)) * 1000 : undefined;
        const progress = new Progress({
          label: `wait ${describeSelection(selection)}`,
          unit: 'records',
          total: expected,
        });
        const looks = new SelectionLooks(store, selection);
        const report = await waitForRecords(
          {
            look: async ({ full }) => {
              const [rows, pipeline, queueIdle, cancel] = await Promise.all([
                looks.look(full),
                control.readState(),
                isQueueIdle(aws, queueUrl),
                selection.kind === 'batch' ? cancels.get(selection.batchId) : undefined,
              ]);
              return { rows, pipeline, queueIdle, ...(cancel ? { cancel } : {}) };
            },
            dlq: dlqReader(aws, dlqUrl),
            now: Date.now,
            sleep: (ms) => sleep(ms),
            onProgress: (r) => {
              progress.setDetail(countsText(r.counts));
              progress.update(r.ended);
            },
          },
          {
            selection,
            expected,
            intervalMs,
            timeoutMs,
            ...(cancelBoundMs === undefined ? {} : { cancelBoundMs }),
          },
        );
        progress.setDetail(countsText(report.counts));
        progress.update(report.ended);
        progress.finish();
        if (options.json) process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
        else process.stdout.write(`${report.message}\n${countsText(report.counts)}\n`);
        process.exitCode = report.exit_code;
      });
    });
}

function positiveSeconds(raw: string, flag: string): number {
  const n = Number(raw);
  if (!Number.isFinite(n) || n <= 0)
    throw new CliError(`${flag} must be a positive number of seconds, got "${raw}"`, EXIT.usage);
  return n;
}

async function expectedCount(selection: Selection, o: WaitCliOptions): Promise<number> {
  if (selection.kind === 'keys') {
    if (o.expect !== undefined || o.counts !== undefined) {
      throw new CliError(
        '--expect and --counts go with --batch; with --keys every key is expected',
        EXIT.usage,
      );
    }
    return selection.keys.length;
  }
  if (o.expect !== undefined && o.counts !== undefined) {
    throw new CliError('pass --expect N or --counts FILE, not both', EXIT.usage);
  }
  if (o.expect !== undefined) {
    const n = Number(o.expect);
    if (!Number.isInteger(n) || n < 1)
      throw new CliError(`--expect must be a positive integer, got "${o.expect}"`, EXIT.usage);
    return n;
  }
  if (o.counts !== undefined) {
    const counts = await readCountsFile(o.counts);
    const n = counts[selection.batchId];
    if (n === undefined) {
      const known = Object.keys(counts);
      throw new CliError(
        `--counts ${o.counts} has no count for batch ${JSON.stringify(selection.batchId)}${
          known.length ? ` (it has ${known.map((k) => JSON.stringify(k)).join(', ')})` : ''
        }: the batch is missing there; pass --expect N if you know the count`,
        EXIT.badTask,
      );
    }
    return n;
  }
  throw new CliError(
    '--batch needs the number of records to wait for: --expect N, or --counts FILE as written by `threadgate enqueue --counts FILE`',
    EXIT.usage,
  );
}

async function isQueueIdle(aws: AwsContext, queueUrl: string): Promise<boolean> {
  const q = await queueCounts(aws, queueUrl);
  return q.visible + q.notVisible + q.delayed === 0;
}
