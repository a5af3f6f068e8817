import type { Message } from '@aws-sdk/client-sqs';
import type { InvokeResult } from '../types.js';

/** Lambda's SQS contract on both sides of an invocation: the event's records and the partial batch response. */

/** Lambda's SQS record shape for one received message. */
export function toSqsRecord(message: Message, queueArn: string, region: string): Record<string, unknown> {
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
  };
}

/**
 * Which messages of a batch succeeded, by Lambda's rules for partial batch responses: with
 * ReportBatchItemFailures, every message not listed in `batchItemFailures`; a malformed
 * response or an identifier that is empty or not in the batch fails the whole batch.
 */
export function succeededMessageIds(
  messageIds: string[],
  result: InvokeResult,
  reportBatchItemFailures: boolean,
): string[] {
  if (!result.ok) return [];
  if (!reportBatchItemFailures) return messageIds;
  const payload = result.payload as { batchItemFailures?: unknown } | null | undefined;
  if (payload === null || payload === undefined || typeof payload !== 'object') return messageIds;
  const failures = payload.batchItemFailures;
  if (failures === undefined || failures === null) return messageIds;
  if (!Array.isArray(failures)) return [];
  const failed = new Set<string>();
  for (const item of failures) {
    const id = (item as { itemIdentifier?: unknown } | null)?.itemIdentifier;
    if (typeof id !== 'string' || id === '' || !messageIds.includes(id)) return [];
    failed.add(id);
  }
  return messageIds.filter((id) => !failed.has(id));
}
