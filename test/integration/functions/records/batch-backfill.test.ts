import { PutItemCommand } from '@aws-sdk/client-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backfillBatchShards } from '../../../../functions/records/batch-backfill.js';
import { batchShardOf } from '../../../../functions/records/batch-index.js';
import { OutcomesStore } from '../../../../functions/records/store.js';
import type { MotoServer } from '../../../../local/emulator/moto.js';
import { type AwsClients, clientsFor, createOutcomeTable, startMoto } from '../../../fixtures/aws.js';

let moto: MotoServer;
let clients: AwsClients;
const tableName = 'backfill-outcomes';

beforeAll(async () => {
  moto = await startMoto();
  clients = clientsFor(moto);
  await createOutcomeTable(clients.ddb, tableName);
});
afterAll(async () => {
  await moto?.stop();
});

describe('batch index backfill', () => {
  it('puts rows written before the index was sharded under their own batch shard, once', async () => {
    // Prepare: two rows as an older build left them (batch_id, no shard), one claimed after the
    // upgrade under another batch (that batch's shard), one without a batch
    const put = (item: Record<string, string>) =>
      clients.ddb.send(
        new PutItemCommand({
          TableName: tableName,
          Item: Object.fromEntries(Object.entries(item).map(([k, v]) => [k, { S: v }])),
        }),
      );
    const old = { status: 'submitted', updated_at: '2026-11-01T00:00:00.000Z', batch_id: 'old-batch' };
    await put({ record_key: 'r-1', ...old });
    await put({ record_key: 'r-2', ...old });
    await put({
      record_key: 'r-3',
      ...old,
      status: 'in_progress',
      batch_shard: batchShardOf('new-batch', 'r-3'),
      status_at: '2026-12-01T00:00:00.000Z',
    });
    await put({ record_key: 'r-4', status: 'submitted', updated_at: old.updated_at });
    const store = new OutcomesStore({ client: clients.ddb, tableName });
    const read = async (batch: string) => {
      const rows = [];
      for await (const row of store.batchRows(batch)) rows.push(row);
      return rows.map((r) => [r.record_key, r.status_at]).sort();
    };
    expect(await read('old-batch')).toEqual([]);
    // Act
    const first = await backfillBatchShards({ client: clients.ddb, tableName });
    const again = await backfillBatchShards({ client: clients.ddb, tableName });
    // Assess: the batch reads all three; a status_at already there is kept; the second run fixes nothing
    expect(await read('old-batch')).toEqual([
      ['r-1', old.updated_at],
      ['r-2', old.updated_at],
      ['r-3', '2026-12-01T00:00:00.000Z'],
    ]);
    expect(await read('new-batch')).toEqual([]);
    expect(first).toEqual({ scanned: 3, updated: 3 });
    expect(again).toEqual({ scanned: 3, updated: 0 });
  });
});
