import { createHash } from 'node:crypto';
import {
  CancelMessageMoveTaskCommand,
  ChangeMessageVisibilityBatchCommand,
  DeleteMessageBatchCommand,
  GetQueueAttributesCommand,
  ListMessageMoveTasksCommand,
  type Message,
  type MessageAttributeValue,
  ReceiveMessageCommand,
  StartMessageMoveTaskCommand,
} from '@aws-sdk/client-sqs';
import type { Command } from 'commander';
import { batchIdOf } from '../../functions/records/job-schema.js';
import { CliError, EXIT } from '../exit-codes.js';
import { Progress } from '../progress.js';
import {
  type AwsContext,
  addStackOptions,
  explainAwsError,
  output,
  type StackOptions,
  sendMessageBatchWithRetries,
  withStack,
} from '../stack.js';
import { messageGroupOf } from '../tenant.js';

interface RedriveOptions extends StackOptions {
  max?: string;
  includeInvalid?: boolean;
  json?: boolean;
}

/** Why a DLQ message was left where it is. */
export interface RedriveSkipped {
  /** `error_code=INVALID_JOB`: unchanged it can only fail again (moved with --include-invalid). */
  invalid: number;
  /** Sent to the DLQ after this run started, or a body this run already moved: never moved twice in one run. */
  repeat: number;
}

export interface RedriveResult {
  method: 'StartMessageMoveTask' | 'receive-send-delete';
  moved: number;
  /** Messages whose send kept failing; they stay in the DLQ. */
  failed: number;
  skipped: RedriveSkipped;
  /** Stopped early by Ctrl-C (or a signal): the counts are what happened so far. */
  interrupted: boolean;
  taskHandle?: string;
}

export interface RedriveQueues {
  dlqUrl: string;
  queueUrl: string;
  queueArn: string;
  max: number | undefined;
  /** Move INVALID_JOB messages too (and allow StartMessageMoveTask, which cannot filter). */
  includeInvalid?: boolean;
}

export interface RedriveRunOptions {
  /** ListMessageMoveTasks interval. @default 2000 */
  pollMs?: number;
  /** Aborting stops after the batch in hand; the result says `interrupted`. */
  signal?: AbortSignal;
  /** Notes for the operator (stderr by default). */
  note?: (line: string) => void;
}

/** How long a received DLQ message stays hidden while it is being moved (or held back). */
const MOVE_VISIBILITY_SECONDS = 300;

export function registerRedrive(program: Command): void {
  addStackOptions(
    program
      .command('redrive')
      .description(
        'Move the messages now in the DLQ back to the jobs queue, each at most once, INVALID_JOB ones left out (receive → send → delete; StartMessageMoveTask with --include-invalid)',
      ),
  )
    .option('--max <n>', 'move at most N messages')
    .option(
      '--include-invalid',
      'also move messages with error_code=INVALID_JOB (they fail again unless fixed); uses StartMessageMoveTask where SQS has it',
    )
    .option('--json', 'print the result as JSON')
    .addHelpText(
      'after',
      '\nExamples:\n  $ npx threadgate redrive\n  $ npx threadgate redrive --max 100   # a few first, to see them go through\n' +
        '\nA run moves what was in the DLQ when it started, each message once: a message that fails again\n' +
        'and returns to the DLQ during the run stays there (counted as "back again"). INVALID_JOB messages\n' +
        '(no usable record_key or not JSON) stay unless --include-invalid. Ctrl-C stops after the batch in\n' +
        'hand and prints what was moved so far.\n' +
        'A paused pipeline stays paused: redriven messages wait in the queue until `threadgate resume`.\n',
    )
    .action(async (options: RedriveOptions) => {
      const max = options.max === undefined ? undefined : Number(options.max);
      if (max !== undefined && (!Number.isInteger(max) || max <= 0)) {
        throw new CliError(`--max must be a positive integer, got "${options.max}"`, EXIT.usage);
      }
      const aborter = new AbortController();
      const onSignal = () => {
        if (aborter.signal.aborted) process.exit(EXIT.interrupted); // a second Ctrl-C: now
        process.stderr.write('redrive: stopping after the batch in hand (Ctrl-C again to quit at once)\n');
        aborter.abort();
      };
      process.on('SIGINT', onSignal);
      process.on('SIGTERM', onSignal);
      try {
        await withStack(options, async (aws, stack) => {
          const result = await redrive(
            aws,
            {
              dlqUrl: output(stack, 'DlqUrl'),
              queueUrl: output(stack, 'QueueUrl'),
              queueArn: output(stack, 'QueueArn'),
              max,
              includeInvalid: options.includeInvalid === true,
            },
            { signal: aborter.signal },
          );
          if (options.json) process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
          else process.stdout.write(`${describeRedrive(result)}\n`);
          if (result.interrupted) process.exitCode = EXIT.interrupted;
          else if (result.failed) process.exitCode = EXIT.transient;
        });
      } finally {
        process.off('SIGINT', onSignal);
        process.off('SIGTERM', onSignal);
      }
    });
}

const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? '' : 's'}`;

/** The operator's summary: what moved, what stayed and why. */
export function describeRedrive(r: RedriveResult): string {
  const lines = [
    `${r.interrupted ? 'interrupted: ' : ''}moved ${plural(r.moved, 'message')} from the DLQ to the jobs queue (${r.method})`,
  ];
  if (r.failed) lines.push(`  ${r.failed} could not be sent and stay in the DLQ`);
  if (r.skipped.invalid) {
    lines.push(
      `  skipped ${r.skipped.invalid} INVALID_JOB (no usable record_key or not JSON: unchanged they fail again; fix and enqueue them, or --include-invalid)`,
    );
  }
  if (r.skipped.repeat) {
    lines.push(
      `  skipped ${r.skipped.repeat} back again (reached the DLQ after this run started, or a body this run already moved: a message moves once per run)`,
    );
  }
  return lines.join('\n');
}

/** Moves DLQ messages to the jobs queue; exported for tests of the StartMessageMoveTask path. */
export async function redrive(
  aws: AwsContext,
  q: RedriveQueues,
  o: RedriveRunOptions = {},
): Promise<RedriveResult> {
  const note = o.note ?? ((line: string) => process.stderr.write(`redrive: ${line}\n`));
  // Taken before anything is read: a message sent to the DLQ after this is not one "in the DLQ
  // when the run started" (the SentTimestamp of a message SQS itself moved to the DLQ stays its
  // original one, so those count as old, which they are).
  const startedAt = Date.now();
  const dlq = await aws.clients.sqs.send(
    new GetQueueAttributesCommand({
      QueueUrl: q.dlqUrl,
      AttributeNames: ['QueueArn', 'ApproximateNumberOfMessages'],
    }),
  );
  const dlqArn = dlq.Attributes?.QueueArn;
  const waiting = Number(dlq.Attributes?.ApproximateNumberOfMessages ?? 0);
  if (!dlqArn) throw new CliError(`cannot read the DLQ's ARN from ${q.dlqUrl}`, EXIT.failure);
  if (q.max === undefined && q.includeInvalid) {
    const task = await startMoveTask(aws, dlqArn, q.queueArn, note);
    if (task !== undefined) {
      note(
        `StartMessageMoveTask moves every message in the DLQ, INVALID_JOB included (about ${waiting} now); ` +
          'it is cancelled once it has moved as many as it counted at its start, so none moves twice',
      );
      return await followMoveTask(aws, dlqArn, task, waiting, o);
    }
  } else if (q.max === undefined) {
    note(
      'moving by receive → send → delete, which leaves INVALID_JOB messages in the DLQ ' +
        '(StartMessageMoveTask cannot filter; --include-invalid uses it where SQS has it)',
    );
  }
  return await moveByHand(aws, q, { waiting, startedAt }, o);
}

/** Starts SQS's own move task; undefined when the endpoint does not implement it (moto). */
async function startMoveTask(
  aws: AwsContext,
  sourceArn: string,
  destinationArn: string,
  note: (line: string) => void,
): Promise<string | undefined> {
  try {
    const out = await aws.clients.sqs.send(
      new StartMessageMoveTaskCommand({ SourceArn: sourceArn, DestinationArn: destinationArn }),
    );
    return out.TaskHandle ?? '';
  } catch (err) {
    if (notImplemented(err)) {
      // A 5xx might also mean the task started anyway; never run two movers at once.
      const running = await runningMoveTask(aws, sourceArn).catch(() => undefined);
      if (running !== undefined) return running;
      note('StartMessageMoveTask is not available at this endpoint; moving by receive → send → delete');
      return undefined;
    }
    throw explainAwsError(err, aws);
  }
}

function notImplemented(err: unknown): boolean {
  const e = err as { name?: string; message?: string; $metadata?: { httpStatusCode?: number } };
  const status = e.$metadata?.httpStatusCode ?? 0;
  return (
    /UnsupportedOperation|InvalidAction|NotImplemented|UnknownOperation/i.test(e.name ?? '') ||
    status === 404 ||
    status === 501 ||
    (status >= 500 && /Deserialization error|not valid JSON|parse error/i.test(e.message ?? ''))
  );
}

async function runningMoveTask(aws: AwsContext, sourceArn: string): Promise<string | undefined> {
  const out = await aws.clients.sqs.send(
    new ListMessageMoveTasksCommand({ SourceArn: sourceArn, MaxResults: 1 }),
  );
  const task = out.Results?.[0];
  return task?.Status === 'RUNNING' ? (task.TaskHandle ?? '') : undefined;
}

const NOTHING_SKIPPED: RedriveSkipped = { invalid: 0, repeat: 0 };

/**
 * Follows a move task to its end. SQS counts the messages to move when the task starts
 * (ApproximateNumberOfMessagesToMove); once that many have moved the task is cancelled, so a
 * message that fails again and returns to the DLQ meanwhile is not moved a second time.
 * Aborting (Ctrl-C) cancels the task too.
 */
async function followMoveTask(
  aws: AwsContext,
  sourceArn: string,
  handle: string,
  waiting: number,
  o: RedriveRunOptions,
): Promise<RedriveResult> {
  const progress = new Progress({ label: 'redrive', unit: 'messages', total: waiting });
  const result = (moved: number, interrupted: boolean): RedriveResult => {
    progress.finish();
    return {
      method: 'StartMessageMoveTask',
      moved,
      failed: 0,
      skipped: { ...NOTHING_SKIPPED },
      interrupted,
      taskHandle: handle,
    };
  };
  let bound = waiting;
  for (;;) {
    const out = await aws.clients.sqs.send(
      new ListMessageMoveTasksCommand({ SourceArn: sourceArn, MaxResults: 1 }),
    );
    const task = out.Results?.[0];
    const moved = Number(task?.ApproximateNumberOfMessagesMoved ?? 0);
    if (task?.ApproximateNumberOfMessagesToMove !== undefined) {
      bound = task.ApproximateNumberOfMessagesToMove;
      progress.setTotal(bound);
    }
    progress.update(moved);
    if (!task || task.Status === 'COMPLETED') return result(moved, false);
    if (task.Status === 'FAILED' || task.Status === 'CANCELLED') {
      progress.finish();
      throw new CliError(
        `the move task ${task.Status.toLowerCase()} after ${moved} messages${task.FailureReason ? `: ${task.FailureReason}` : ''}; ` +
          'run `threadgate redrive` again to move the rest',
        EXIT.transient,
      );
    }
    const interrupted = o.signal?.aborted === true;
    if (interrupted || (task.Status === 'RUNNING' && moved >= bound)) {
      await cancelMoveTask(aws, task.TaskHandle ?? handle);
      return result(moved, interrupted);
    }
    await new Promise((resolve) => setTimeout(resolve, o.pollMs ?? 2000));
  }
}

async function cancelMoveTask(aws: AwsContext, handle: string): Promise<void> {
  try {
    await aws.clients.sqs.send(new CancelMessageMoveTaskCommand({ TaskHandle: handle }));
  } catch (err) {
    // It may have completed between the last look and the cancel: that is the wanted end anyway.
    if ((err as { name?: string }).name !== 'ResourceNotFoundException') throw explainAwsError(err, aws);
  }
}

function digest(body: string | undefined): string {
  return createHash('sha256')
    .update(body ?? '')
    .digest('base64');
}

/**
 * The fallback mover, and the one that can leave messages behind. Each received message is
 * sent to the jobs queue first and deleted from the DLQ only after its send succeeded, so a
 * crash can at worst leave a message in both queues (the worker's idempotent outcome write
 * absorbs that), never lose one. A run ends: it moves only messages that were in the DLQ when
 * it started and never the same body twice. Messages it leaves (INVALID_JOB, ones that came
 * back) are held invisible until the end, so the receives run dry, and then made visible again.
 * Message ids already sent are remembered: if one shows up again (its delete failed and its
 * visibility ran out) it is deleted without a second send.
 */
async function moveByHand(
  aws: AwsContext,
  q: RedriveQueues,
  at: { waiting: number; startedAt: number },
  o: RedriveRunOptions,
): Promise<RedriveResult> {
  const sqs = aws.clients.sqs;
  const { max } = q;
  const progress = new Progress({
    label: 'redrive',
    unit: 'messages',
    total: max === undefined ? at.waiting : Math.min(max, at.waiting),
  });
  const sent = new Set<string>();
  const movedBodies = new Set<string>();
  const held = new Map<string, Message>();
  const refused: Message[] = [];
  const skipped: RedriveSkipped = { invalid: 0, repeat: 0 };
  let moved = 0;
  let emptyReceives = 0;
  while (!o.signal?.aborted && (max === undefined || moved < max)) {
    const want = Math.min(10, max === undefined ? 10 : max - moved);
    const out = await sqs.send(
      new ReceiveMessageCommand({
        QueueUrl: q.dlqUrl,
        MaxNumberOfMessages: want,
        VisibilityTimeout: MOVE_VISIBILITY_SECONDS,
        WaitTimeSeconds: emptyReceives > 0 ? 1 : 0,
        MessageAttributeNames: ['All'],
        MessageSystemAttributeNames: ['SentTimestamp', 'MessageGroupId'],
      }),
    );
    const messages = out.Messages ?? [];
    if (messages.length === 0) {
      // SQS may answer empty while messages remain on other hosts; ask twice more before stopping.
      if (++emptyReceives >= 3) break;
      continue;
    }
    emptyReceives = 0;
    const again: Message[] = [];
    const fresh: Message[] = [];
    for (const m of messages) {
      const id = m.MessageId ?? '';
      if (sent.has(id)) again.push(m);
      else if (held.has(id))
        held.set(id, m); // held longer than its visibility: keep the new receipt
      else if (!q.includeInvalid && m.MessageAttributes?.error_code?.StringValue === 'INVALID_JOB') {
        held.set(id, m);
        skipped.invalid++;
      } else if (
        Number(m.Attributes?.SentTimestamp ?? 0) >= at.startedAt ||
        movedBodies.has(digest(m.Body))
      ) {
        held.set(id, m);
        skipped.repeat++;
      } else fresh.push(m);
    }
    const delivered = await sendToJobsQueue(aws, q.queueUrl, fresh);
    for (const m of fresh) {
      if (!delivered.has(m.MessageId ?? '')) continue;
      sent.add(m.MessageId ?? '');
      movedBodies.add(digest(m.Body));
    }
    refused.push(...fresh.filter((m) => !delivered.has(m.MessageId ?? '')));
    await deleteWithRetries(aws, q.dlqUrl, [
      ...again,
      ...fresh.filter((m) => delivered.has(m.MessageId ?? '')),
    ]);
    moved += delivered.size;
    const handled = moved + refused.length + skipped.invalid;
    progress.update(handled);
    // Everything that was there at the start is accounted for and only returners are left.
    if (fresh.length === 0 && again.length === 0 && handled >= at.waiting) break;
  }
  progress.finish();
  await makeVisibleAgain(aws, q.dlqUrl, [...refused, ...held.values()]);
  return {
    method: 'receive-send-delete',
    moved,
    failed: refused.length,
    skipped,
    interrupted: o.signal?.aborted === true,
  };
}

/** Messages the jobs queue refused stay in the DLQ; make them visible there again now, not in 5 minutes. */
async function makeVisibleAgain(aws: AwsContext, dlqUrl: string, messages: Message[]): Promise<void> {
  for (let i = 0; i < messages.length; i += 10) {
    const batch = messages.slice(i, i + 10);
    await aws.clients.sqs
      .send(
        new ChangeMessageVisibilityBatchCommand({
          QueueUrl: dlqUrl,
          Entries: batch.map((m, j) => ({
            Id: String(j),
            ReceiptHandle: m.ReceiptHandle,
            VisibilityTimeout: 0,
          })),
        }),
      )
      .catch(() => undefined); // they become visible anyway when the move's visibility timeout ends
  }
}

function attributesOf(m: Message): Record<string, MessageAttributeValue> | undefined {
  const attrs = m.MessageAttributes;
  if (!attrs || Object.keys(attrs).length === 0) return undefined;
  const copy: Record<string, MessageAttributeValue> = {};
  for (const [name, v] of Object.entries(attrs)) {
    copy[name] = {
      DataType: v.DataType,
      ...(v.StringValue !== undefined ? { StringValue: v.StringValue } : {}),
      ...(v.BinaryValue !== undefined ? { BinaryValue: v.BinaryValue } : {}),
    };
  }
  return copy;
}

/** Sends received DLQ messages to the jobs queue; returns the message ids that were sent. */
async function sendToJobsQueue(aws: AwsContext, queueUrl: string, messages: Message[]): Promise<Set<string>> {
  if (messages.length === 0) return new Set();
  const byEntry = new Map(messages.map((m, i) => [`m${i}`, m]));
  const result = await sendMessageBatchWithRetries(
    aws,
    queueUrl,
    [...byEntry].map(([id, m]) => {
      // The tenant stays: SQS keeps it on what it moved itself; the worker's DLQ copies carry none,
      // so their tenant is the default one, the batch (../tenant.ts).
      const group = m.Attributes?.MessageGroupId ?? messageGroupOf(batchIdOf(m.Body ?? ''), undefined);
      return {
        Id: id,
        MessageBody: m.Body ?? '',
        MessageAttributes: attributesOf(m),
        ...(group === undefined ? {} : { MessageGroupId: group }),
      };
    }),
  );
  for (const f of result.failed) {
    const m = byEntry.get(f.id);
    process.stderr.write(
      `redrive: message ${m?.MessageId ?? f.id} not sent (${f.code}: ${f.message}); it stays in the DLQ\n`,
    );
  }
  return new Set(result.sent.map((id) => byEntry.get(id)?.MessageId ?? ''));
}

async function deleteWithRetries(aws: AwsContext, dlqUrl: string, messages: Message[]): Promise<void> {
  let pending = messages.map((m, i) => ({ Id: `d${i}`, ReceiptHandle: m.ReceiptHandle ?? '' }));
  for (let attempt = 1; pending.length > 0 && attempt <= 5; attempt++) {
    if (attempt > 1) await new Promise((resolve) => setTimeout(resolve, 200 * 2 ** (attempt - 2)));
    try {
      const out = await aws.clients.sqs.send(
        new DeleteMessageBatchCommand({ QueueUrl: dlqUrl, Entries: pending }),
      );
      const failedIds = new Set((out.Failed ?? []).map((f) => f.Id));
      pending = pending.filter((p) => failedIds.has(p.Id));
    } catch (err) {
      if (attempt === 5) throw explainAwsError(err, aws);
    }
  }
  if (pending.length) {
    // Already sent; if they reappear in this run they are deleted without a second send.
    process.stderr.write(
      `redrive: ${pending.length} moved message(s) could not be deleted from the DLQ yet\n`,
    );
  }
}
