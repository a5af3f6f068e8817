import { GetQueueAttributesCommand, type Message, ReceiveMessageCommand } from '@aws-sdk/client-sqs';
import { batchIdOf, validateJobMessage } from '../functions/records/job-schema.js';
import type { AwsContext } from './stack.js';

/** A DLQ message that names a record (by its body's record_key or its attribute) or a batch. */
export interface DlqHit {
  recordKey?: string;
  batchId?: string;
}

/** What one read of the DLQ found. */
export interface DlqRead {
  hits: DlqHit[];
  /** Messages the DLQ holds (visible and in flight), by its approximate counts. */
  messages: number;
  /** Distinct messages read. Fewer than `messages`: the rest were hidden by another reader, or too many to read. */
  read: number;
}

/** The SQS calls the reader makes (the AWS SDK client satisfies it). */
export interface DlqReaderSqs {
  send(command: GetQueueAttributesCommand | ReceiveMessageCommand): Promise<{
    Attributes?: Record<string, string>;
    Messages?: Message[];
  }>;
}

/** Receives per read at most (10 messages each). */
const RECEIVE_LIMIT = 100;
/** Receives in a row that bring nothing new before the read stops. */
const DRY_RECEIVES = 3;

export const NO_DLQ_MESSAGES: DlqRead = { hits: [], messages: 0, read: 0 };

/**
 * Reads the DLQ without hiding anything: every receive asks for VisibilityTimeout 0, so each
 * message stays visible throughout and a `threadgate redrive` (or any consumer) running beside
 * it sees every message. The other way, receiving with a visibility timeout and making the
 * messages visible again afterwards, hides them while the read goes on (and for the whole
 * timeout when the process dies before its reset), and a redrive that meets an empty DLQ ends
 * and leaves them behind. The price of not hiding: SQS does not page through a queue for a
 * reader that leaves messages visible (each receive may return the same ones), so the read
 * first takes the queue's approximate counts (no receive at all when it is empty), stops once
 * it has seen that many distinct messages or after a few receives that bring nothing new, and
 * says how many of how many it read.
 */
export async function readDlq(sqs: DlqReaderSqs, dlqUrl: string): Promise<DlqRead> {
  const counts = await sqs.send(
    new GetQueueAttributesCommand({
      QueueUrl: dlqUrl,
      AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'],
    }),
  );
  const visible = Number(counts.Attributes?.ApproximateNumberOfMessages ?? 0);
  const messages = visible + Number(counts.Attributes?.ApproximateNumberOfMessagesNotVisible ?? 0);
  if (visible === 0) return { ...NO_DLQ_MESSAGES, messages };
  const seen = new Map<string, DlqHit>();
  let dry = 0;
  for (let i = 0; i < RECEIVE_LIMIT && seen.size < visible && dry < DRY_RECEIVES; i++) {
    const out = await sqs.send(
      new ReceiveMessageCommand({
        QueueUrl: dlqUrl,
        MaxNumberOfMessages: 10,
        VisibilityTimeout: 0,
        WaitTimeSeconds: 0,
        MessageAttributeNames: ['All'],
      }),
    );
    const fresh = (out.Messages ?? []).filter((m) => m.MessageId && !seen.has(m.MessageId));
    dry = fresh.length === 0 ? dry + 1 : 0;
    for (const m of fresh) seen.set(m.MessageId!, dlqHitOf(m));
  }
  return { hits: [...seen.values()], messages: Math.max(messages, seen.size), read: seen.size };
}

function dlqHitOf(message: Message): DlqHit {
  const body = message.Body ?? '';
  const attribute = message.MessageAttributes?.record_key?.StringValue;
  const verdict = validateJobMessage(body);
  const batchId = batchIdOf(body);
  const recordKey = verdict.ok ? verdict.job.record_key : (verdict.recordKey ?? attribute);
  return { ...(recordKey !== undefined ? { recordKey } : {}), ...(batchId !== undefined ? { batchId } : {}) };
}

/** The DLQ reader for a stack's context. */
export function dlqReader(aws: AwsContext, dlqUrl: string): () => Promise<DlqRead> {
  return () => readDlq(aws.clients.sqs as unknown as DlqReaderSqs, dlqUrl);
}
