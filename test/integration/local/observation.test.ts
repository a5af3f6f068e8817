import { BatchWriteCommand, DynamoDBDocumentClient, PutCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { awsRequests } from '../../../local/emulator/fault-client.js';
import type { MotoServer } from '../../../local/emulator/moto.js';
import { readOutcomesOf, STATUS_FIELDS } from '../../../local/stack/observation.js';
import { type AwsClients, clientsFor, createOutcomeTable, startMoto } from '../../fixtures/aws.js';

/**
 * Reading a run's outcome rows back by key (local/stack/observation.ts readOutcomesOf), as the
 * progress loops of `local`, chaos, load and the e2e tests do, against moto: the calls the
 * emulator serves follow the keys asked for and shrink as rows become final.
 */

let moto: MotoServer;
let clients: AwsClients;
let documents: DynamoDBDocumentClient;
let table = 0;

beforeAll(async () => {
  moto = await startMoto();
  clients = clientsFor(moto);
  documents = DynamoDBDocumentClient.from(clients.ddb);
});
afterAll(async () => {
  await moto?.stop();
});

async function tableWith(rows: Record<string, unknown>[]) {
  const name = `observation-${++table}`;
  await createOutcomeTable(clients.ddb, name);
  for (let i = 0; i < rows.length; i += 25) {
    await documents.send(
      new BatchWriteCommand({
        RequestItems: { [name]: rows.slice(i, i + 25).map((Item) => ({ PutRequest: { Item } })) },
      }),
    );
  }
  return { documents, outputs: { TableName: name } } as Parameters<typeof readOutcomesOf>[0];
}

/** BatchGetItem calls moto served since `since`, and the next mark. */
async function batchGets(since: number): Promise<{ calls: number; next: number }> {
  const log = await awsRequests(moto.endpoint, since);
  return { calls: log.entries.filter((e) => e.op.endsWith('.BatchGetItem')).length, next: log.next };
}

describe('readOutcomesOf (moto)', () => {
  it('reads only the keys asked for, 100 per call, and leaves out keys without a row', async () => {
    // Prepare: 250 rows in the table; the run asks for 150 of them and 5 that have none.
    const rows = Array.from({ length: 250 }, (_, i) => ({
      record_key: `r-${i}`,
      status: i % 2 ? 'submitted' : 'in_progress',
      reason: i % 2 ? 'OK' : undefined,
      attempts: 1,
    }));
    const stack = await tableWith(rows);
    const keys = [
      ...rows.slice(0, 150).map((r) => r.record_key),
      'none-1',
      'none-2',
      'none-3',
      'none-4',
      'none-5',
    ];
    const { next } = await batchGets(0);
    // Act
    const read = await readOutcomesOf(stack, keys);
    // Assess
    expect(read.size).toBe(150);
    expect(read.get('r-1')).toMatchObject({ status: 'submitted', reason: 'OK', attempts: 1 });
    expect(read.has('r-150')).toBe(false);
    expect((await batchGets(next)).calls).toBe(2);
  });

  it('reads only the projected fields when asked to', async () => {
    const stack = await tableWith([
      { record_key: 'p-1', status: 'failed', reason: 'POLL_TIMEOUT', attempts: 2 },
    ]);
    const read = await readOutcomesOf(stack, ['p-1'], STATUS_FIELDS);
    expect(read.get('p-1')).toEqual({ record_key: 'p-1', status: 'failed', reason: 'POLL_TIMEOUT' });
  });

  it('reads a final row once, and a row that is not final again on every call', async () => {
    // Prepare
    const stack = await tableWith([
      { record_key: 'f-1', status: 'submitted', reason: 'OK' },
      { record_key: 'f-2', status: 'in_progress' },
    ]);
    await readOutcomesOf(stack, ['f-1', 'f-2'], STATUS_FIELDS);
    await documents.send(
      new PutCommand({
        TableName: stack.outputs.TableName,
        Item: { record_key: 'f-2', status: 'failed', reason: 'X' },
      }),
    );
    const { next } = await batchGets(0);
    // Act
    const second = await readOutcomesOf(stack, ['f-1', 'f-2'], STATUS_FIELDS);
    const mark = await batchGets(next);
    const third = await readOutcomesOf(stack, ['f-1', 'f-2'], STATUS_FIELDS);
    // Assess: the second call asked for f-2 alone; the third made no call at all.
    expect(second.get('f-2')).toMatchObject({ status: 'failed' });
    expect(mark.calls).toBe(1);
    expect((await batchGets(mark.next)).calls).toBe(0);
    expect([...third.values()].map((r) => r.status).sort()).toEqual(['failed', 'submitted']);
  });
});
