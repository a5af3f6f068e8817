/**
 * `npx tsx scripts/backfill-batch-index.ts --table TABLE`: the one-time backfill after upgrading a
 * stack whose rows were written before the batch index was sharded (docs/deploying.md). Uses the
 * AWS SDK's default credentials and region (AWS_PROFILE, AWS_REGION); `--endpoint-url URL` for
 * an emulator. Prints what it read and fixed; safe to run again (a fixed row is skipped).
 */
import { parseArgs } from 'node:util';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { backfillBatchShards } from '../functions/records/batch-backfill.js';

const { values } = parseArgs({ options: { table: { type: 'string' }, 'endpoint-url': { type: 'string' } } });
if (!values.table) {
  process.stderr.write('usage: npx tsx scripts/backfill-batch-index.ts --table TABLE [--endpoint-url URL]\n');
  process.exit(64);
}
const endpoint = values['endpoint-url'];
const client = new DynamoDBClient(endpoint ? { endpoint } : {});
const result = await backfillBatchShards({ client, tableName: values.table });
process.stdout.write(
  `${values.table}: ${result.scanned} rows with a batch_id read, ${result.updated} given their batch shard\n`,
);
