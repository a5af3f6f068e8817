import {
  type AttributeValue,
  type DynamoDBClient,
  GetItemCommand,
  PutItemCommand,
} from '@aws-sdk/client-dynamodb';
import { ThreadgateError } from '../common/errors.js';

/**
 * Batch cancellations (`threadgate cancel --batch ID`), kept in the outcomes table itself: one
 * item per cancelled batch under the key `cancelled batch <batch_id>`. A record key never holds a
 * space (functions/records/job-schema.ts), so such a key can never be a record's. The item has no
 * `status` and no `batch_id`: it is not an outcome, the outcome stream publishes nothing for it
 * and the batch index does not hold it. Why here and not in the state item
 * (../pipeline/state-item.ts): every role that works records already reaches the table, a cancel
 * is one atomic conditional write of an item of its own (one per batch, where the state item is
 * one item every worker reads), and an IAM condition on the key (`dynamodb:LeadingKeys`) can let
 * a producer cancel only its own batches (Threadgate.grantCancelBatches). A cancel is final: it is
 * never removed or changed.
 */
export const CANCEL_KEY_PREFIX = 'cancelled batch ';

/** The outcome-table key of a batch's cancellation. */
export function cancelKeyOf(batchId: string): string {
  return `${CANCEL_KEY_PREFIX}${batchId}`;
}

/** True for the key of a cancellation item (never a record's: record keys have no spaces). */
export function isCancelKey(recordKey: unknown): boolean {
  return typeof recordKey === 'string' && recordKey.startsWith(CANCEL_KEY_PREFIX);
}

export interface BatchCancel {
  batchId: string;
  /** Why, as given to `threadgate cancel --reason`; absent when none was given. */
  reason?: string;
  /** ISO timestamp of the first cancel (a second cancel changes nothing). */
  cancelledAt: string;
  /** Who cancelled: `operator`, or the name a producer passed. */
  by?: string;
}

/** A cancellation item's attributes (besides `record_key`). */
const ATTR = {
  batch: 'cancelled_batch',
  reason: 'cancel_reason',
  at: 'cancelled_at',
  by: 'cancelled_by',
} as const;

/**
 * Every attribute a cancellation item may hold, its key included: Threadgate.grantCancelBatches
 * allows writing and reading these and no other (an IAM condition on `dynamodb:Attributes`).
 */
export const CANCEL_ITEM_ATTRIBUTES: readonly string[] = ['record_key', ...Object.values(ATTR)];

/** Reads a cancellation from its item (a scan's plain item or a GetItem's typed one). */
export function cancelFrom(item: Record<string, unknown> | undefined): BatchCancel | undefined {
  if (!item || !isCancelKey(plain(item.record_key))) return undefined;
  const batchId = plain(item[ATTR.batch]);
  const cancelledAt = plain(item[ATTR.at]);
  if (batchId === undefined || cancelledAt === undefined) return undefined;
  const reason = plain(item[ATTR.reason]);
  const by = plain(item[ATTR.by]);
  return {
    batchId,
    cancelledAt,
    ...(reason === undefined ? {} : { reason }),
    ...(by === undefined ? {} : { by }),
  };
}

function plain(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  const typed = value as AttributeValue | undefined;
  return typeof typed?.S === 'string' ? typed.S : undefined;
}

/** The outcome row's `reason` of a record its batch's cancel ended. */
export function cancelledReason(cancel: Pick<BatchCancel, 'reason'>): string {
  return cancel.reason ? `${BATCH_CANCELLED}: ${cancel.reason}` : BATCH_CANCELLED;
}

/** The reason code of a `cancelled` row (followed by `: <the cancel's reason>` when one was given). */
export const BATCH_CANCELLED = 'BATCH_CANCELLED';

/**
 * The record's batch is cancelled (functions/worker/record-flow.ts asks before every in.php and
 * before the POST): the record ends `cancelled` (functions/records/decisions.ts).
 */
export class BatchCancelledError extends ThreadgateError {
  override name = 'BatchCancelledError';
  constructor(readonly cancel: BatchCancel) {
    super(`batch ${cancel.batchId} was cancelled at ${cancel.cancelledAt}`);
  }
}

/**
 * No read of the batch's cancel has succeeded within the bound (functions/worker/cancel-watch.ts):
 * whether the batch is cancelled is unknown, so nothing is sent to in.php or the form; the claim
 * is released and the record tried again later, as a resolver hiccup is (decisions.ts).
 */
export class CancelUnknownError extends ThreadgateError {
  override name = 'CancelUnknownError';
  readonly code = 'CANCEL_UNKNOWN';
  constructor(
    readonly batchId: string,
    options?: { cause?: unknown },
  ) {
    super(
      `the cancel of batch ${batchId} could not be read within the bound; nothing is sent until it can be`,
      options,
    );
  }
}

/** Longest cancel reason kept (the rest is cut): it becomes part of every cancelled row's reason. */
export const MAX_CANCEL_REASON = 500;

export class BatchCancels {
  constructor(private readonly options: { client: DynamoDBClient; tableName: string; now?: () => number }) {}

  /**
   * Cancels the batch, once: a batch already cancelled keeps its first cancel (reason, time, by),
   * which is returned with `already: true`.
   */
  async cancel(
    batchId: string,
    o: { reason?: string; by?: string } = {},
  ): Promise<{ cancel: BatchCancel; already: boolean }> {
    const reason = o.reason?.trim().slice(0, MAX_CANCEL_REASON) || undefined;
    const cancel: BatchCancel = {
      batchId,
      cancelledAt: new Date((this.options.now ?? Date.now)()).toISOString(),
      by: o.by ?? 'operator',
      ...(reason ? { reason } : {}),
    };
    try {
      await this.options.client.send(
        new PutItemCommand({
          TableName: this.options.tableName,
          Item: {
            record_key: { S: cancelKeyOf(batchId) },
            [ATTR.batch]: { S: batchId },
            [ATTR.at]: { S: cancel.cancelledAt },
            [ATTR.by]: { S: cancel.by as string },
            ...(reason ? { [ATTR.reason]: { S: reason } } : {}),
          },
          // Final: the first cancel stands, a second one changes nothing.
          ConditionExpression: 'attribute_not_exists(record_key)',
        }),
      );
      return { cancel, already: false };
    } catch (err) {
      if ((err as { name?: string }).name !== 'ConditionalCheckFailedException') throw err;
      const first = await this.get(batchId);
      if (!first) throw err;
      return { cancel: first, already: true };
    }
  }

  /** The batch's cancel, if it has one (a strongly consistent read: a cancel just written is seen). */
  async get(batchId: string): Promise<BatchCancel | undefined> {
    const out = await this.options.client.send(
      new GetItemCommand({
        TableName: this.options.tableName,
        Key: { record_key: { S: cancelKeyOf(batchId) } },
        ConsistentRead: true,
        // Named, not all: a role granted only these attributes (grantCancelBatches) may read them.
        ProjectionExpression: CANCEL_ITEM_ATTRIBUTES.join(', '),
      }),
    );
    return cancelFrom(out.Item);
  }
}
