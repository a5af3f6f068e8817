import {
  type AttributeValue,
  ConditionalCheckFailedException,
  type DynamoDBClient,
  paginateScan,
  UpdateItemCommand,
} from '@aws-sdk/client-dynamodb';
import { batchShardOf } from './batch-index.js';

/**
 * The one-time backfill of an upgrade (docs/deploying.md): rows written before the batch index
 * was sharded carry a batch_id but no batch_shard, so the index (./batch-index.ts) does not hold
 * them; a row of that kind claimed under another batch after the upgrade got that batch's shard.
 * This gives every row with a batch_id the shard of its own batch_id, and a status_at (its
 * updated_at) where it has none. One Scan of the table (the rows' keys and batch attributes
 * only) and one conditional UpdateItem per row it fixes (1 write unit, and 1 in the index as
 * the entry enters it): a row changed since the Scan is left as its writer made it.
 */
export interface BackfillResult {
  /** Rows the Scan read. */
  scanned: number;
  /** Rows given their batch shard now. */
  updated: number;
}

export async function backfillBatchShards(options: {
  client: DynamoDBClient;
  tableName: string;
  now?: () => number;
}): Promise<BackfillResult> {
  const now = options.now ?? Date.now;
  const result: BackfillResult = { scanned: 0, updated: 0 };
  const pages = paginateScan(
    { client: options.client },
    {
      TableName: options.tableName,
      ProjectionExpression: 'record_key, batch_id, batch_shard, status_at, updated_at',
      FilterExpression: 'attribute_exists(batch_id)',
    },
  );
  for await (const page of pages) {
    for (const item of page.Items ?? []) {
      result.scanned += 1;
      const recordKey = item.record_key?.S;
      const batchId = item.batch_id?.S;
      if (recordKey === undefined || batchId === undefined) continue;
      const shard = batchShardOf(batchId, recordKey);
      if (item.batch_shard?.S === shard && item.status_at?.S !== undefined) continue;
      if (
        await fixRow(options, recordKey, batchId, shard, item.updated_at?.S ?? new Date(now()).toISOString())
      ) {
        result.updated += 1;
      }
    }
  }
  return result;
}

/** Sets the row's shard (and a status_at where none), while its batch_id is still `batchId`. */
async function fixRow(
  options: { client: DynamoDBClient; tableName: string },
  recordKey: string,
  batchId: string,
  shard: string,
  statusAt: string,
): Promise<boolean> {
  const s = (value: string): AttributeValue => ({ S: value });
  try {
    await options.client.send(
      new UpdateItemCommand({
        TableName: options.tableName,
        Key: { record_key: s(recordKey) },
        ConditionExpression: 'batch_id = :batch',
        UpdateExpression: 'SET batch_shard = :shard, status_at = if_not_exists(status_at, :at)',
        ExpressionAttributeValues: { ':batch': s(batchId), ':shard': s(shard), ':at': s(statusAt) },
      }),
    );
    return true;
  } catch (err) {
    if (
      err instanceof ConditionalCheckFailedException ||
      (err as { name?: string }).name === 'ConditionalCheckFailedException'
    ) {
      return false;
    }
    throw err;
  }
}
