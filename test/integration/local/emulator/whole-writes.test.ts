import {
  type AttributeValue,
  BatchGetItemCommand,
  DynamoDBClient,
  GetItemCommand,
  QueryCommand,
  ScanCommand,
  UpdateItemCommand,
} from '@aws-sdk/client-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MotoServer } from '../../../../local/emulator/moto.js';
import { createOutcomeTable, startMoto } from '../../../fixtures/aws.js';

/**
 * A read never sees half of a write. moto applies an UpdateItem to the stored item one SET at a
 * time (a new item is stored with its key first), and serves a concurrent read from the same
 * item: stock moto answered a read with `status` set and `reason` not yet. Real DynamoDB applies
 * an item's write whole, so the launcher serves DynamoDB reads under its write lock.
 */
let moto: MotoServer;
let ddb: DynamoDBClient;
const TABLE = 'whole-writes';
/** Attributes between `status` and `reason` in each write: a wider window for a torn read. */
const FILLER = 60;
const ROUNDS = 12;

beforeAll(async () => {
  moto = await startMoto();
  ddb = new DynamoDBClient({
    endpoint: moto.endpoint,
    region: 'us-east-1',
    credentials: { accessKeyId: 'testing', secretAccessKey: 'testing' },
  });
  await createOutcomeTable(ddb, TABLE);
});
afterAll(async () => {
  ddb?.destroy();
  await moto?.stop();
});

function write(key: string) {
  const names: Record<string, string> = { '#s': 'status' };
  const values: Record<string, AttributeValue> = { ':s': { S: 'rejected' }, ':r': { S: 'a reason' } };
  const sets = ['#s = :s'];
  for (let i = 0; i < FILLER; i++) {
    sets.push(`f${i} = :f${i}`);
    values[`:f${i}`] = { S: `filler ${i}` };
  }
  sets.push('reason = :r');
  return ddb.send(
    new UpdateItemCommand({
      TableName: TABLE,
      Key: { record_key: { S: key } },
      ConditionExpression: 'attribute_not_exists(record_key)',
      UpdateExpression: `SET ${sets.join(', ')}`,
      ExpressionAttributeNames: names,
      ExpressionAttributeValues: values,
    }),
  );
}

type Item = Record<string, AttributeValue> | undefined;
const reads: Record<string, (key: string) => Promise<Item[]>> = {
  GetItem: async (key) => [
    (
      await ddb.send(
        new GetItemCommand({ TableName: TABLE, Key: { record_key: { S: key } }, ConsistentRead: true }),
      )
    ).Item,
  ],
  BatchGetItem: async (key) =>
    (
      await ddb.send(
        new BatchGetItemCommand({
          RequestItems: { [TABLE]: { Keys: [{ record_key: { S: key } }], ConsistentRead: true } },
        }),
      )
    ).Responses?.[TABLE] ?? [],
  Query: async (key) =>
    (
      await ddb.send(
        new QueryCommand({
          TableName: TABLE,
          KeyConditionExpression: 'record_key = :k',
          ExpressionAttributeValues: { ':k': { S: key } },
          ConsistentRead: true,
        }),
      )
    ).Items ?? [],
  Scan: async (key) =>
    (
      await ddb.send(
        new ScanCommand({
          TableName: TABLE,
          FilterExpression: 'record_key = :k',
          ExpressionAttributeValues: { ':k': { S: key } },
          ConsistentRead: true,
        }),
      )
    ).Items ?? [],
};

describe('the moto launcher: reads against concurrent writes', () => {
  for (const [name, read] of Object.entries(reads)) {
    it(`${name} sees an item written whole or not at all`, async () => {
      let seen = 0;
      const torn: string[] = [];
      for (let round = 0; round < ROUNDS; round++) {
        const key = `${name}-${round}`;
        let done = false;
        const writing = write(key).finally(() => {
          done = true;
        });
        const readers = [0, 1, 2].map(async () => {
          while (!done) {
            for (const item of await read(key)) {
              seen++;
              const attributes = Object.keys(item ?? {}).length;
              if (item && attributes !== FILLER + 3) torn.push(`${key}: ${attributes} attributes`);
            }
          }
        });
        await Promise.all([writing, ...readers]);
      }
      expect(torn).toEqual([]);
      // Reads landed while the writes ran (else the test proves nothing).
      expect(seen).toBeGreaterThan(0);
    }, 60_000);
  }
});
