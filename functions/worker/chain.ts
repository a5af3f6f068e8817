import {
  ChangeMessageVisibilityBatchCommand,
  DeleteMessageCommand,
  type Message,
  ReceiveMessageCommand,
} from '@aws-sdk/client-sqs';
import type { SQSRecord } from 'aws-lambda';
import { errorSummary, type WorkerDeps } from './types.js';

/**
 * The chain: an invocation whose record's answer is in hand takes the next message from the queue
 * itself and submits its task while the previous record's form POST and final write are still
 * under way. The CaptchaAI thread is free once the answer is read, so the slot starts its next
 * task at once instead of holding no task through the POST, the final write and the gap to the
 * next invocation. One task at a time per invocation, as before: the next in.php follows the
 * previous task's answer (or the previous record's end), so in flight stays within the cap.
 * How long an invocation chains is bounded (CHAIN_SECONDS, and never while fewer than a record's
 * worst case is left before its timeout); the stack adds that window to the function timeout.
 *
 * Messages received here are this invocation's own: the event source mapping never saw them, so
 * the worker deletes them when they are done and sets their visibility when they are retried.
 */

/**
 * One message from the jobs queue in Lambda's record shape, or undefined when none is visible.
 * `visibilitySeconds`: how long it stays hidden (the invocation's remaining time plus a margin),
 * so a message of an invocation that dies comes back within minutes, not after the queue's
 * visibility timeout (6 × the function timeout); the record's lease still guards its work.
 */
export async function receiveNext(
  deps: WorkerDeps,
  visibilitySeconds?: number,
): Promise<SQSRecord | undefined> {
  const out = await deps.sqs.send(
    new ReceiveMessageCommand({
      QueueUrl: deps.config.queueUrl,
      MaxNumberOfMessages: 1,
      WaitTimeSeconds: 0,
      ...(visibilitySeconds === undefined ? {} : { VisibilityTimeout: visibilitySeconds }),
      MessageSystemAttributeNames: ['All'],
      MessageAttributeNames: ['All'],
    }),
  );
  const m = out.Messages?.[0];
  if (!m?.MessageId || !m.ReceiptHandle) return undefined;
  return toSqsRecord(m, deps.config.queueArn, deps.config.queueArn.split(':')[3] ?? '');
}

/**
 * Lambda's SQS record shape for one received message (the local runtime's poller builds its
 * events with it too, local/runtime/pollers/sqs-event.ts).
 */
export function toSqsRecord(message: Message, queueArn: string, region: string): SQSRecord {
  const messageAttributes: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(message.MessageAttributes ?? {})) {
    messageAttributes[name] = {
      stringValue: value.StringValue,
      binaryValue: value.BinaryValue ? Buffer.from(value.BinaryValue).toString('base64') : undefined,
      stringListValues: value.StringListValues ?? [],
      binaryListValues: (value.BinaryListValues ?? []).map((b) => Buffer.from(b).toString('base64')),
      dataType: value.DataType,
    };
  }
  return {
    messageId: message.MessageId,
    receiptHandle: message.ReceiptHandle,
    body: message.Body ?? '',
    attributes: { ...(message.Attributes ?? {}) },
    messageAttributes,
    md5OfBody: message.MD5OfBody,
    ...(message.MD5OfMessageAttributes ? { md5OfMessageAttributes: message.MD5OfMessageAttributes } : {}),
    eventSource: 'aws:sqs',
    eventSourceARN: queueArn,
    awsRegion: region,
  } as unknown as SQSRecord;
}

/**
 * Deletes a message this invocation received itself and finished. Not fatal when it fails: the
 * message comes back after its visibility timeout and meets its final row (a duplicate, deleted).
 */
export async function deleteReceived(deps: WorkerDeps, record: SQSRecord): Promise<void> {
  try {
    await deps.sqs.send(
      new DeleteMessageCommand({ QueueUrl: deps.config.queueUrl, ReceiptHandle: record.receiptHandle }),
    );
  } catch (err) {
    deps.logger.warn('could not delete a finished message; it comes back as a duplicate', {
      messageId: record.messageId,
      ...errorSummary(err),
    });
  }
}

/** SQS's longest visibility timeout. */
const MAX_VISIBILITY_SECONDS = 43_200;

/**
 * A retried message's visibility, in seconds: the configured retry delay, or until `notBefore`
 * (epoch ms) has passed plus a second, at most SQS's longest.
 */
export function retryVisibilitySeconds(
  deps: WorkerDeps,
  notBefore: number | undefined,
  now = deps.now(),
): number {
  const untilThen = notBefore === undefined ? 0 : Math.ceil((notBefore - now) / 1000) + 1;
  return Math.min(MAX_VISIBILITY_SECONDS, Math.max(deps.config.retryDelaySeconds, untilThen));
}

/** Sets the visibility of messages, ten at a time; a failure is logged (they come back after their own). */
export async function setVisibility(deps: WorkerDeps, records: SQSRecord[], seconds: number): Promise<void> {
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
