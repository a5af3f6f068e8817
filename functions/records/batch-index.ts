import type { OutcomeRow } from './outcome-row.js';

/**
 * The batch index: the global secondary index that reads one batch's rows (docs/design.md
 * "The batch index at scale"). Its partition key is the row's `batch_shard`,
 * `<batch_id>#<n>` with n = batchShardNumber(record_key) in [0, BATCH_SHARDS), so one batch
 * spreads its index writes over BATCH_SHARDS partitions instead of one; a reader queries every
 * shard. Its sort key is `status_at`: set by the row's first write (claim or reject) and by
 * every write that ends it (final or `stopped`), so a waiter asks only for the rows that entered
 * or ended since its last look. It projects BATCH_INDEX_ATTRIBUTES. Write units: a record's entry
 * is entered by its claim (1) and moved by its final write (2: the sort key changes); the task
 * marker, `posting_at`, a release, a lease and a later claim (status_at kept) change nothing the
 * index holds, but the claim that takes a `stopped` row again changes its status (1). Rows
 * without a batch_shard (no batch_id, or written before the index was sharded and not
 * backfilled) are not in it.
 */
export const BATCH_INDEX_NAME = 'batch_shard-status_at';
/** The index's partition key: `<batch_id>#<n>` (batchShardOf); set with batch_id, never changed after. */
export const BATCH_INDEX_PARTITION_KEY = 'batch_shard';
/** The index's sort key (ISO 8601): when the row was first written, or last ended. */
export const BATCH_INDEX_SORT_KEY = 'status_at';
/** The attributes the batch index carries beside its keys (and record_key): what a waiter counts. */
export const BATCH_INDEX_ATTRIBUTES = ['batch_id', 'status', 'reason'] as const;

/**
 * Index partitions one batch is spread over. A partition takes 1,000 write units a second; a
 * record costs its shard 3 (claim 1, final write 2), so one batch stops near
 * 16 × 1,000 / 3 ≈ 5,300 records a second (docs/design.md "The batch index at scale").
 * Changing it moves every row of every batch to other keys: it is a constant, not a setting.
 */
export const BATCH_SHARDS = 16;

/** A row as the batch index holds it: its keys, batch_id, status and reason. */
export type BatchIndexRow = Pick<
  OutcomeRow,
  'record_key' | 'batch_id' | 'batch_shard' | 'status_at' | 'status' | 'reason'
>;

/** The shard number of a record key: FNV-1a (32 bits) of its UTF-8 bytes, mod BATCH_SHARDS. */
export function batchShardNumber(recordKey: string, shards = BATCH_SHARDS): number {
  let hash = 0x811c9dc5;
  for (const byte of new TextEncoder().encode(recordKey)) {
    hash ^= byte;
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash % shards;
}

/** The index partition key of a record of a batch: `<batch_id>#<n>`. */
export function batchShardOf(batchId: string, recordKey: string): string {
  return `${batchId}#${batchShardNumber(recordKey)}`;
}

/** Every index partition key of a batch, shard 0 first. */
export function batchShardsOf(batchId: string): string[] {
  return Array.from({ length: BATCH_SHARDS }, (_, n) => `${batchId}#${n}`);
}
