import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { awsClientOptions } from '../../../../functions/common/aws-clients.js';
import { BATCH_SHARDS, batchShardOf } from '../../../../functions/records/batch-index.js';
import { claimOwner } from '../../../../functions/records/claim-owner.js';
import { decidePriorPhase } from '../../../../functions/records/decisions.js';
import { OutcomesStore, WRITE_TRIES } from '../../../../functions/records/store.js';
import { addAwsFaults, awsFaults, clearAwsFaults } from '../../../../local/emulator/fault-client.js';
import { MOTO_REGION, type MotoServer } from '../../../../local/emulator/moto.js';
import { awsUsage, resetAwsUsage } from '../../../../local/emulator/usage.js';
import { type AwsClients, clientsFor, createOutcomeTable, startMoto } from '../../../fixtures/aws.js';

let moto: MotoServer;
let clients: AwsClients;
let tableName: string;
let clock = Date.parse('2026-01-01T00:00:00Z');
let store: OutcomesStore;
let next = 0;
const key = () => `rec-${++next}`;

beforeAll(async () => {
  moto = await startMoto();
  clients = clientsFor(moto);
  tableName = 'outcomes-store-test';
  await createOutcomeTable(clients.ddb, tableName);
  store = new OutcomesStore({ client: clients.ddb, tableName, now: () => clock });
});
afterAll(async () => {
  await moto?.stop();
});

const lease = { leaseMs: 60_000, captchaType: 'recaptcha_v2' };

/** A client of its own for moto, so a test can add a middleware to it. */
function motoDdb(): DynamoDBClient {
  return new DynamoDBClient(motoConfig());
}

/**
 * A store whose client makes one attempt per call (as the functions' clients do), after a fault
 * rule that lets `k`'s next claim land at moto and replaces its answer with a 500.
 */
async function loseNextClaimAnswer(k: string): Promise<OutcomesStore> {
  await addAwsFaults(moto.endpoint, [
    { operation: 'UpdateItem', key: { record_key: k }, contains: [CLAIM_CONDITION], apply: true },
  ]);
  return retryingStore();
}

/** Text only a release's request carries. */
const RELEASE_UPDATE = 'SET lease_expires_at = :zero';

/** A store whose tries do not wait, on a client bounded as the functions' are. */
function retryingStore(): OutcomesStore {
  return new OutcomesStore({
    client: new DynamoDBClient({ ...motoConfig(), ...awsClientOptions() }),
    tableName,
    now: () => clock,
    sleep: async () => undefined,
  });
}

/** Text only a claim's request carries. */
const CLAIM_CONDITION = 'attribute_not_exists(record_key)';

function motoConfig() {
  return {
    endpoint: moto.endpoint,
    region: MOTO_REGION,
    credentials: { accessKeyId: 'testing', secretAccessKey: 'testing' },
  };
}

describe('outcomes store (moto DynamoDB)', () => {
  it('claims a record that has no row and writes an in_progress row with the lease', async () => {
    const k = key();
    expect(await store.claim(k, { owner: 'a', ...lease })).toEqual({
      claimed: true,
      leaseExpiresAt: clock + 60_000,
    });
    expect(await store.get(k)).toMatchObject({
      record_key: k,
      status: 'in_progress',
      lease_owner: 'a',
      lease_expires_at: clock + 60_000,
      captcha_type: 'recaptcha_v2',
    });
  });

  it('lets exactly one of 5 concurrent claims of a record win', async () => {
    const k = key();
    const results = await Promise.all(
      ['a', 'b', 'c', 'd', 'e'].map((owner) => store.claim(k, { owner, ...lease })),
    );
    expect(results.filter((r) => r.claimed)).toHaveLength(1);
    expect(results.filter((r) => !r.claimed && r.why === 'leased')).toHaveLength(4);
  });

  it('refuses a second claim while the lease is live and says it is leased', async () => {
    const k = key();
    await store.claim(k, { owner: 'a', ...lease });
    const second = await store.claim(k, { owner: 'b', ...lease });
    expect(second).toMatchObject({
      claimed: false,
      why: 'leased',
      row: { status: 'in_progress', lease_owner: 'a' },
    });
  });

  it('lets a later receive of the same message take over the live lease an earlier receive left, and no other claim', async () => {
    // Prepare: receive 1 of message m1 claimed and left its lease (its handling threw), with a task marker
    const k = key();
    const receive = (messageId: string, count: number) => ({ messageId, count });
    await store.claim(k, { owner: claimOwner('m1', 1, 'x'), ...lease, receive: receive('m1', 1) });
    await store.markSubmitted(k, claimOwner('m1', 1, 'x'), { taskId: '71', submittedAt: clock, attempts: 1 });
    // Act
    const twin = await store.claim(k, {
      owner: claimOwner('m1', 1, 'y'),
      ...lease,
      receive: receive('m1', 1),
    });
    const otherMessage = await store.claim(k, {
      owner: claimOwner('m2', 2, 'z'),
      ...lease,
      receive: receive('m2', 2),
    });
    const later = await store.claim(k, {
      owner: claimOwner('m1', 2, 'w'),
      ...lease,
      receive: receive('m1', 2),
    });
    const earlierWrites = await store.finish(k, claimOwner('m1', 1, 'x'), {
      status: 'submitted',
      reason: 'OK',
      attempts: 1,
    });
    // Assess: a second copy of the same receive and another message meet the lease; the later receive takes it with the marker
    expect(twin).toMatchObject({ claimed: false, why: 'leased' });
    expect(otherMessage).toMatchObject({ claimed: false, why: 'leased' });
    expect(later).toMatchObject({
      claimed: true,
      previous: { lease_owner: claimOwner('m1', 1, 'x'), task_id: '71' },
    });
    expect(earlierWrites.written).toBe(false);
    expect(await store.get(k)).toMatchObject({
      status: 'in_progress',
      lease_owner: claimOwner('m1', 2, 'w'),
    });
  });

  it('lets a claim take over an in_progress row whose lease expired, and the old owner can no longer finish', async () => {
    // Prepare
    const k = key();
    await store.claim(k, { owner: 'a', ...lease });
    clock += 60_001;
    // Act
    const takeover = await store.claim(k, { owner: 'b', ...lease });
    const late = await store.finish(k, 'a', {
      status: 'submitted',
      reason: 'OK',
      targetStatus: 200,
      attempts: 1,
    });
    // Assess
    expect(takeover.claimed).toBe(true);
    expect(late).toMatchObject({ written: false, row: { lease_owner: 'b' } });
    expect((await store.get(k))?.status).toBe('in_progress');
  });

  it('finishes while holding the claim, then reports the record as finished to later claims', async () => {
    const k = key();
    await store.claim(k, { owner: 'a', ...lease });
    expect(
      await store.finish(k, 'a', {
        status: 'submitted',
        reason: 'OK',
        targetStatus: 200,
        attempts: 1,
        solveMs: 1234,
      }),
    ).toEqual({ written: true });
    expect(await store.claim(k, { owner: 'b', ...lease })).toMatchObject({
      claimed: false,
      why: 'finished',
      row: { status: 'submitted' },
    });
    const row = await store.get(k);
    expect(row).toMatchObject({
      status: 'submitted',
      reason: 'OK',
      target_status: 200,
      attempts: 1,
      solve_ms: 1234,
    });
    expect(row?.lease_expires_at).toBeUndefined();
  });

  it('with a retention, stamps the claim and the final write with the expiry the table’s TTL reads; without, none', async () => {
    // Prepare: a store that keeps rows 30 days after their last write
    const day = 86_400_000;
    const kept = new OutcomesStore({
      client: clients.ddb,
      tableName,
      now: () => clock,
      retentionMs: 30 * day,
    });
    const [k, plain] = [key(), key()];
    const expiresAt = async (recordKey: string) =>
      ((await store.get(recordKey)) as unknown as Record<string, unknown> | undefined)?.expires_at;
    // Act / Assess: the claim sets it, the final write a day later moves it
    await kept.claim(k, { owner: 'a', ...lease });
    expect(await expiresAt(k)).toBe(Math.ceil((clock + 30 * day) / 1000));
    clock += day;
    await kept.finish(k, 'a', { status: 'submitted', reason: 'OK', attempts: 1 });
    expect(await expiresAt(k)).toBe(Math.ceil((clock + 30 * day) / 1000));
    await store.claim(plain, { owner: 'a', ...lease });
    await store.finish(plain, 'a', { status: 'submitted', reason: 'OK', attempts: 1 });
    expect(await expiresAt(plain)).toBeUndefined();
  });

  it('lets a stopped record be claimed again and adds up attempts over claims', async () => {
    const k = key();
    await store.claim(k, { owner: 'a', ...lease });
    await store.finish(k, 'a', { status: 'stopped', reason: 'ERROR_KEY_DOES_NOT_EXIST', attempts: 1 });
    expect((await store.claim(k, { owner: 'b', ...lease })).claimed).toBe(true);
    await store.finish(k, 'b', { status: 'failed', reason: 'POLL_TIMEOUT', attempts: 2 });
    expect(await store.get(k)).toMatchObject({ status: 'failed', reason: 'POLL_TIMEOUT', attempts: 3 });
  });

  it('releases a claim so the next claim succeeds at once', async () => {
    const k = key();
    await store.claim(k, { owner: 'a', ...lease });
    expect(await store.release(k, 'a', 1)).toEqual({ written: true });
    expect((await store.claim(k, { owner: 'b', ...lease })).claimed).toBe(true);
    expect((await store.get(k))?.attempts).toBe(1);
  });

  it('tries a release the emulator throttles again, so the next claim succeeds at once', async () => {
    // Prepare: moto throttles the first release of this record.
    const k = key();
    await store.claim(k, { owner: 'a', ...lease });
    await addAwsFaults(moto.endpoint, [
      {
        operation: 'UpdateItem',
        key: { record_key: k },
        contains: [RELEASE_UPDATE],
        times: 1,
        error: 'ProvisionedThroughputExceededException',
      },
    ]);
    try {
      // Act
      const result = await retryingStore().release(k, 'a', 1);
      const rules = await awsFaults(moto.endpoint);
      // Assess: the emulator failed one try, the next landed; the lease is over.
      expect(result).toEqual({ written: true });
      expect(rules.map((r) => r.failed)).toEqual([1]);
      expect((await store.claim(k, { owner: 'b', ...lease })).claimed).toBe(true);
      expect((await store.get(k))?.attempts).toBe(1);
    } finally {
      await clearAwsFaults(moto.endpoint);
    }
  });

  it('counts a release whose answer was lost after it landed as written, and adds its attempts once', async () => {
    // Prepare: the first release lands at moto and its answer is replaced by a 500.
    const k = key();
    await store.claim(k, { owner: 'a', ...lease });
    await addAwsFaults(moto.endpoint, [
      { operation: 'UpdateItem', key: { record_key: k }, contains: [RELEASE_UPDATE], apply: true },
    ]);
    try {
      // Act
      const result = await retryingStore().release(k, 'a', 1);
      // Assess
      expect(result).toEqual({ written: true });
      expect((await awsFaults(moto.endpoint)).map((r) => r.failed)).toEqual([1]);
      expect(await store.get(k)).toMatchObject({ status: 'in_progress', lease_expires_at: 0, attempts: 1 });
      expect((await store.claim(k, { owner: 'b', ...lease })).claimed).toBe(true);
    } finally {
      await clearAwsFaults(moto.endpoint);
    }
  });

  it('returns the row a claim took over (an expired lease), with the task and posting markers the earlier claim wrote', async () => {
    // Prepare
    const k = key();
    await store.claim(k, { owner: 'a', ...lease });
    expect(await store.markSubmitted(k, 'a', { taskId: '7001', submittedAt: clock, attempts: 1 })).toEqual({
      written: true,
    });
    expect(await store.markPosting(k, 'a')).toEqual({ written: true });
    clock += 60_001;
    // Act
    const takeover = await store.claim(k, { owner: 'b', ...lease });
    // Assess
    expect(takeover).toMatchObject({
      claimed: true,
      previous: {
        status: 'in_progress',
        lease_owner: 'a',
        task_id: '7001',
        task_submitted_at: clock - 60_001,
        posting_at: clock - 60_001,
      },
    });
  });

  it('tries a claim whose answer was lost after it landed, and takes the row its own landed try holds', async () => {
    // Prepare: the first claim reaches moto and lands; its answer is a 500 (one attempt per call,
    // as the functions' clients make).
    const k = key();
    const lossy = await loseNextClaimAnswer(k);
    try {
      // Act
      const claim = await lossy.claim(k, { owner: 'a', ...lease });
      // Assess: claimed by its second try; the lost try had landed, the lease is the one lease end.
      const [rule] = await awsFaults(moto.endpoint);
      expect(rule).toMatchObject({ seen: 2, failed: 1 });
      expect(claim).toMatchObject({ claimed: true, leaseExpiresAt: clock + lease.leaseMs });
      expect(await store.get(k)).toMatchObject({
        status: 'in_progress',
        lease_owner: 'a',
        lease_expires_at: clock + lease.leaseMs,
      });
      // Another owner is still refused while that lease is live.
      expect(await store.claim(k, { owner: 'b', ...lease })).toMatchObject({ claimed: false, why: 'leased' });
    } finally {
      await clearAwsFaults(moto.endpoint);
    }
  });

  it('keeps the earlier claim’s markers in `previous` when a takeover’s answer was lost after it landed', async () => {
    // Prepare: owner a's claim with a task and posting marker, its lease expired; b's takeover
    // lands but its answer is lost.
    const k = key();
    await store.claim(k, { owner: 'a', ...lease });
    await store.markSubmitted(k, 'a', { taskId: '7101', submittedAt: clock, attempts: 1 });
    await store.markPosting(k, 'a');
    const markedAt = clock;
    clock += 60_001;
    const lossy = await loseNextClaimAnswer(k);
    try {
      // Act
      const takeover = await lossy.claim(k, { owner: 'b', ...lease });
      // Assess: the markers a left still say what decidePriorPhase must know (it posted).
      expect(takeover).toMatchObject({
        claimed: true,
        previous: {
          status: 'in_progress',
          task_id: '7101',
          task_submitted_at: markedAt,
          posting_at: markedAt,
        },
      });
      expect(
        decidePriorPhase(takeover.claimed ? takeover.previous : undefined, {
          now: clock,
          deadlineMs: 120_000,
          cooldownMs: 60_000,
        }).kind,
      ).toBe('posted');
    } finally {
      await clearAwsFaults(moto.endpoint);
    }
  });

  it('writes the phase markers only while the owner holds the claim', async () => {
    const k = key();
    await store.claim(k, { owner: 'a', ...lease });
    clock += 60_001;
    await store.claim(k, { owner: 'b', ...lease });
    expect(
      await store.markSubmitted(k, 'a', { taskId: '7002', submittedAt: clock, attempts: 1 }),
    ).toMatchObject({ written: false });
    expect(await store.markPosting(k, 'a')).toMatchObject({ written: false });
    const row = await store.get(k);
    expect(row?.task_id).toBeUndefined();
    expect(row?.posting_at).toBeUndefined();
  });

  it('removes the task markers when a claim is released (its tasks are finished by then)', async () => {
    const k = key();
    await store.claim(k, { owner: 'a', ...lease });
    await store.markSubmitted(k, 'a', { taskId: '7003', submittedAt: clock, attempts: 1 });
    await store.release(k, 'a', 1);
    const row = await store.get(k);
    expect(row?.task_id).toBeUndefined();
    expect(row?.task_submitted_at).toBeUndefined();
  });

  it('tries a final write that throws again, and counts a try that landed although its answer was lost as written', async () => {
    // Prepare: the first finish reaches moto and lands, but its answer is replaced by a throttling error.
    const k = key();
    await store.claim(k, { owner: 'a', ...lease });
    const ddb = motoDdb();
    let finishes = 0;
    ddb.middlewareStack.add(
      (next, context) => async (args) => {
        const isFinish =
          context.commandName === 'UpdateItemCommand' &&
          String((args.input as { UpdateExpression?: string }).UpdateExpression).includes(
            'REMOVE lease_expires_at',
          );
        if (!isFinish) return next(args);
        finishes += 1;
        const out = await next(args);
        if (finishes === 1) throw Object.assign(new Error('rate exceeded'), { name: 'ThrottlingException' });
        return out;
      },
      { step: 'initialize' },
    );
    const flaky = new OutcomesStore({
      client: ddb,
      tableName,
      now: () => clock,
      sleep: async () => undefined,
    });
    // Act
    const result = await flaky.finish(k, 'a', {
      status: 'submitted',
      reason: 'OK',
      targetStatus: 200,
      attempts: 1,
    });
    // Assess
    expect(result).toEqual({ written: true });
    expect(finishes).toBe(2);
    expect(await store.get(k)).toMatchObject({ status: 'submitted', attempts: 1 });
  });

  it('gives a final write that always throws up after WRITE_TRIES tries with a doubling back-off', async () => {
    const k = key();
    await store.claim(k, { owner: 'a', ...lease });
    const ddb = motoDdb();
    let tries = 0;
    ddb.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName !== 'UpdateItemCommand') return next(args);
        tries += 1;
        throw Object.assign(new Error('internal'), { name: 'InternalServerError' });
      },
      { step: 'initialize' },
    );
    const waits: number[] = [];
    const broken = new OutcomesStore({
      client: ddb,
      tableName,
      now: () => clock,
      sleep: async (ms) => void waits.push(ms),
    });
    await expect(broken.finish(k, 'a', { status: 'failed', reason: 'X' })).rejects.toThrow('internal');
    expect(tries).toBe(WRITE_TRIES);
    expect(waits).toEqual([250, 500, 1000]);
    expect((await store.get(k))?.status).toBe('in_progress');
  });

  it('writes rejected only when the record has no row', async () => {
    const fresh = key();
    expect(await store.reject(fresh, 'pageurl: must be an absolute http(s) URL')).toEqual({ written: true });
    expect(await store.get(fresh)).toMatchObject({
      status: 'rejected',
      reason: 'pageurl: must be an absolute http(s) URL',
    });
    const taken = key();
    await store.claim(taken, { owner: 'a', ...lease });
    expect(await store.reject(taken, 'sitekey: is required')).toMatchObject({
      written: false,
      row: { status: 'in_progress' },
    });
  });

  it('keeps the batch of the first claim when the record is sent again under another batch', async () => {
    // Prepare
    const k = key();
    await store.claim(k, { owner: 'a', ...lease, batchId: 'batch-first' });
    await store.finish(k, 'a', { status: 'stopped', reason: 'ERROR_KEY_DOES_NOT_EXIST', attempts: 1 });
    // Act: the record comes back under another batch, is claimed again and finishes
    expect((await store.claim(k, { owner: 'b', ...lease, batchId: 'batch-second' })).claimed).toBe(true);
    await store.finish(k, 'b', { status: 'submitted', reason: 'OK', targetStatus: 200, attempts: 1 });
    // Assess
    expect(await store.get(k)).toMatchObject({ status: 'submitted', batch_id: 'batch-first' });
  });

  it('reads one batch through the batch index and nothing of other batches', async () => {
    // Prepare
    const batch = `batch-${key()}`;
    const mine = [key(), key(), key()];
    for (const k of mine) await store.claim(k, { owner: 'a', ...lease, batchId: batch });
    const rejected = key();
    await store.reject(rejected, 'sitekey: is required', batch);
    await store.claim(key(), { owner: 'a', ...lease, batchId: `${batch}-other` });
    await store.claim(key(), { owner: 'a', ...lease });
    // Act
    const rows = [];
    for await (const row of store.batchRows(batch)) rows.push(row);
    // Assess
    expect(rows.map((r) => r.record_key).sort()).toEqual([...mine, rejected].sort());
    expect(rows.every((r) => r.batch_id === batch)).toBe(true);
  });

  it('spreads one batch over the index shards by record key, and reads only the rows that ended since a time', async () => {
    // Prepare: 48 records of one batch claimed, then 3 of them end a minute later
    const batch = `batch-${key()}`;
    const keys = Array.from({ length: 48 }, () => key());
    for (const k of keys) await store.claim(k, { owner: 'w-s', ...lease, batchId: batch });
    clock += 60_000;
    const since = new Date(clock).toISOString();
    for (const k of keys.slice(0, 3)) {
      await store.finish(k, 'w-s', { status: 'submitted', reason: 'OK', targetStatus: 200, attempts: 1 });
    }
    // Act
    const all = [];
    for await (const row of store.batchRows(batch)) all.push(row);
    const changed = [];
    for await (const row of store.batchRows(batch, since)) changed.push(row);
    // Assess: each row under its own shard, more than one shard used; only the ended rows since
    expect(all).toHaveLength(48);
    for (const row of all) expect(row.batch_shard).toBe(batchShardOf(batch, row.record_key));
    expect(new Set(all.map((r) => r.batch_shard)).size).toBeGreaterThan(8);
    expect(changed.map((r) => r.record_key).sort()).toEqual(keys.slice(0, 3).sort());
    expect(changed.every((r) => r.status === 'submitted' && r.status_at === since)).toBe(true);
  });

  it('reads a batch with Query on the batch index and keys with BatchGetItem, never a Scan', async () => {
    // Prepare: a client that records every command it sends to moto (SDK middleware, so the
    // SDK's paginators accept it as a real client)
    const sent: { name: string; index?: string }[] = [];
    const recording = clientsFor(moto).ddb;
    recording.middlewareStack.add(
      (next, context) => async (args) => {
        sent.push({
          name: context.commandName ?? '',
          index: (args.input as { IndexName?: string }).IndexName,
        });
        return next(args);
      },
      { step: 'initialize' },
    );
    const spied = new OutcomesStore({ client: recording, tableName, now: () => clock });
    const batch = `batch-${key()}`;
    const k = key();
    await store.reject(k, 'sitekey: is required', batch);
    // Act
    const rows = [];
    for await (const row of spied.batchRows(batch)) rows.push(row);
    await spied.getMany([k]);
    // Assess
    expect(rows).toHaveLength(1);
    expect(sent).toEqual([
      ...Array.from({ length: BATCH_SHARDS }, () => ({
        name: 'QueryCommand',
        index: 'batch_shard-status_at',
      })),
      { name: 'BatchGetItemCommand', index: undefined },
    ]);
  });

  it('reads rows by key in chunks of 100 and leaves out keys that have no row', async () => {
    // Prepare: 120 rows, more than one BatchGetItem holds
    const keys = Array.from({ length: 120 }, () => key());
    for (const k of keys) await store.reject(k, 'sitekey: is required');
    // Act
    const rows = await store.getMany([...keys, 'no-such-key', keys[0]!]);
    // Assess
    expect(rows.size).toBe(120);
    expect(rows.has('no-such-key')).toBe(false);
    expect(rows.get(keys[119]!)).toMatchObject({ status: 'rejected' });
  });
});

/**
 * DynamoDB Local (LocalStack's DynamoDB) has been reported to answer a failed conditional
 * UpdateItem without the `Item` that ReturnValuesOnConditionCheckFailure=ALL_OLD asks for. This
 * client talks to moto but drops `Item` from every ConditionalCheckFailedException, and records
 * the GetItem calls the store makes.
 */
function _clientWithoutConditionItem(gets: Record<string, unknown>[]): DynamoDBClient {
  const client = new DynamoDBClient({
    endpoint: moto.endpoint,
    region: MOTO_REGION,
    credentials: { accessKeyId: 'testing', secretAccessKey: 'testing' },
  });
  client.middlewareStack.add(
    (next, context) => async (args) => {
      if (context.commandName === 'GetItemCommand') gets.push(args.input as Record<string, unknown>);
      try {
        return await next(args);
      } catch (err) {
        if ((err as { name?: string }).name === 'ConditionalCheckFailedException') {
          delete (err as { Item?: unknown }).Item;
        }
        throw err;
      }
    },
    { step: 'initialize', name: 'dropConditionFailureItem' },
  );
  return client;
}

/**
 * The write units a record's row costs, as DynamoDB bills them: the moto launcher works them out
 * from the item before and after each write and the batch index's key and projection
 * (local/emulator/usage.py), not from what the store thinks it wrote.
 */
describe('outcomes store write units (moto launcher usage counts)', () => {
  async function unitsOf(act: () => Promise<unknown>) {
    await resetAwsUsage(moto.endpoint);
    await act();
    const writes = (await awsUsage(moto.endpoint)).calls.filter((r) => r.operation === 'UpdateItem');
    const sum = (f: (r: (typeof writes)[number]) => number) => writes.reduce((a, r) => a + f(r), 0);
    return {
      requests: sum((r) => r.requests),
      table: sum((r) => r.write_units),
      index: sum((r) => r.index_write_units),
    };
  }

  it('writes a record of a batch in 4 table units and 3 index units: its claim enters the index, its final write moves it to its end time', async () => {
    // Prepare
    const k = key();
    const owner = 'w-units';
    // Act: every marker the invariants need (claim, task, posting_at, the final write)
    const units = await unitsOf(async () => {
      await store.claim(k, { owner, ...lease, batchId: `batch-${k}` });
      await store.markSubmitted(k, owner, { taskId: 't-1', submittedAt: clock, attempts: 1 });
      await store.markPosting(k, owner);
      clock += 1_000;
      await store.finish(k, owner, { status: 'submitted', reason: 'OK', targetStatus: 200, solveMs: 20_000 });
    });
    // Assess
    expect(units).toEqual({ requests: 4, table: 4, index: 3 });
    expect(await store.get(k)).toMatchObject({ status: 'submitted', task_id: 't-1', attempts: 1 });
  });

  it('writes no index entry for a release or the claim that takes the released record again', async () => {
    // Prepare
    const k = key();
    await store.claim(k, { owner: 'w-first', ...lease, batchId: `batch-${k}` });
    await store.markSubmitted(k, 'w-first', { taskId: 't-1', submittedAt: clock, attempts: 1 });
    // Act: a transient failure gives the claim up; the redelivery claims and ends the record
    const units = await unitsOf(async () => {
      clock += 1_000;
      await store.release(k, 'w-first');
      await store.claim(k, { owner: 'w-second', ...lease, batchId: `batch-${k}` });
      await store.finish(k, 'w-second', {
        status: 'failed',
        reason: 'ERROR_CAPTCHA_UNSOLVABLE',
        attempts: 1,
      });
    });
    // Assess: only the final write reaches the index (it moves the entry to its end time)
    expect(units).toEqual({ requests: 3, table: 3, index: 2 });
  });

  it('keeps only batch_id, status and reason in the batch index, and reads whole rows of a batch by key in the index order', async () => {
    // Prepare
    const batch = `batch-${key()}`;
    const [first, second] = [key(), key()];
    await store.claim(first, { owner: 'w-a', ...lease, batchId: batch });
    clock += 1_000;
    await store.claim(second, { owner: 'w-a', ...lease, batchId: batch });
    clock += 1_000;
    await store.finish(second, 'w-a', {
      status: 'failed',
      reason: 'FORM_REJECTED',
      expectRule: 'status',
      attempts: 1,
    });
    // Act
    const indexed = [];
    for await (const row of store.batchRows(batch)) indexed.push(row);
    const whole = await store.batchFullRows(batch);
    // Assess: status_at is the claim's time, then the final write's
    const byKey = (a: { record_key: string }, b: { record_key: string }) =>
      a.record_key.localeCompare(b.record_key);
    expect([...indexed].sort(byKey)).toEqual(
      [
        {
          record_key: first,
          batch_id: batch,
          batch_shard: batchShardOf(batch, first),
          status_at: new Date(clock - 2_000).toISOString(),
          status: 'in_progress',
        },
        {
          record_key: second,
          batch_id: batch,
          batch_shard: batchShardOf(batch, second),
          status_at: new Date(clock).toISOString(),
          status: 'failed',
          reason: 'FORM_REJECTED',
        },
      ].sort(byKey),
    );
    expect(whole.map((r) => r.record_key)).toEqual(indexed.map((r) => r.record_key));
    const [wholeFirst, wholeSecond] = whole[0]?.record_key === first ? whole : [whole[1], whole[0]];
    expect(wholeFirst).toMatchObject({
      status: 'in_progress',
      lease_owner: 'w-a',
      captcha_type: 'recaptcha_v2',
    });
    expect(wholeSecond).toMatchObject({
      status: 'failed',
      expect_rule: 'status',
      attempts: 1,
      updated_at: expect.any(String),
    });
  });
});
