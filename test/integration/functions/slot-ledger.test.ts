import { GetItemCommand } from '@aws-sdk/client-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LEDGER_PARTITION, type LeaseTimes, SlotLedger } from '../../../functions/pipeline/ledger.js';
import { InvocationLease, type LeaseOptions } from '../../../functions/worker/invocation/lease.js';
import type { MotoServer } from '../../../local/emulator/moto.js';
import { type AwsClients, clientsFor, createPkSkTable, startMoto } from '../../fixtures/aws.js';

let moto: MotoServer;
let clients: AwsClients;
let clock = 1_000_000;
const now = () => clock;
const times: LeaseTimes = { ttlMs: 10_000, tailMs: 20_000 };
let tables = 0;

/** A ledger table as the stack makes it (pk, sk), fresh for each test. */
async function freshLedger(cap?: number): Promise<SlotLedger> {
  const tableName = await createPkSkTable(clients.ddb, `ledger-${++tables}`);
  const ledger = new SlotLedger({ client: clients.ddb, tableName, now });
  if (cap !== undefined) await ledger.setCap(cap);
  return ledger;
}

function leaseOptions(
  overrides: Partial<LeaseOptions & { waitUntil: number }> = {},
): LeaseOptions & { waitUntil: number } {
  return {
    times,
    now,
    sleep: async (ms) => {
      clock += ms;
    },
    logger: { info: () => undefined, warn: () => undefined },
    pollMs: 1_000,
    reclaimEveryMs: 2_000,
    submitMarginMs: 500,
    waitUntil: clock,
    ...overrides,
  };
}

beforeAll(async () => {
  moto = await startMoto();
  clients = clientsFor(moto);
});
afterAll(async () => {
  await moto?.stop();
});

describe('SlotLedger (on the emulator)', () => {
  it('grants lanes up to the cap and no more: 4 + 4 + 4 of a cap of 10 is 4, 4, 2', async () => {
    // Prepare
    const ledger = await freshLedger(10);
    // Act
    const grants = [
      await ledger.take('a', 4, times),
      await ledger.take('b', 4, times),
      await ledger.take('c', 4, times),
      await ledger.take('d', 4, times),
    ];
    // Assess
    expect(grants.map((g) => g.lanes)).toEqual([4, 4, 2, 0]);
    expect(await ledger.count()).toEqual({ held: 10, cap: 10 });
  });

  it('grants concurrent takers no more than the cap between them', async () => {
    const ledger = await freshLedger(6);
    const grants = await Promise.all(Array.from({ length: 8 }, (_, i) => ledger.take(`t${i}`, 1, times)));
    const granted = grants.reduce((sum, g) => sum + g.lanes, 0);
    expect(granted).toBeLessThanOrEqual(6);
    expect((await ledger.count()).held).toBe(granted);
  });

  it('gives lanes back one at a time and whole leases at the end', async () => {
    const ledger = await freshLedger(8);
    await ledger.take('a', 4, times);
    await ledger.giveBack('a', 1, false);
    expect((await ledger.count()).held).toBe(3);
    await ledger.giveBack('a', 3, true);
    expect((await ledger.count()).held).toBe(0);
    // A lease given back twice moves the count once.
    await ledger.giveBack('a', 3, true);
    expect((await ledger.count()).held).toBe(0);
  });

  it('frees a dead lease only after its expiry plus the task tail, and a renewed one not at all', async () => {
    // Prepare: two leases; only 'alive' is renewed
    const ledger = await freshLedger(4);
    const start = clock;
    await ledger.take('dead', 2, times);
    await ledger.take('alive', 2, times);
    // Act + Assess: within expiry + tail nothing is freed (its tasks may still hold threads)
    clock = start + times.ttlMs + times.tailMs - 1;
    expect(await ledger.renew('alive', times)).toBe(clock + times.ttlMs);
    expect((await ledger.reclaimExpired()).freed).toBe(0);
    expect((await ledger.take('new', 1, times)).lanes).toBe(0);
    clock = start + times.ttlMs + times.tailMs + 1;
    const reclaimed = await ledger.reclaimExpired();
    expect(reclaimed.freed).toBe(2);
    expect(reclaimed.nextAt).toBe(start + times.ttlMs + times.tailMs - 1 + times.ttlMs + times.tailMs);
    expect(await ledger.count()).toEqual({ held: 2, cap: 4 });
    // The dead owner's renewal and give-back find the lease gone and move nothing.
    expect(await ledger.renew('dead', times)).toBe('lost');
    await ledger.giveBack('dead', 2, true);
    expect((await ledger.count()).held).toBe(2);
  });

  it('counts lanes before the adjuster has written a cap, and enforces the cap once written', async () => {
    const ledger = await freshLedger();
    expect((await ledger.take('a', 3, times)).lanes).toBe(3);
    await ledger.setCap(4);
    expect(await ledger.count()).toEqual({ held: 3, cap: 4 });
    expect((await ledger.take('b', 3, times)).lanes).toBe(1);
  });

  it('bounds takes by the deployed cap until the adjuster writes one, then by the written cap', async () => {
    const ledger = await freshLedger();
    expect((await ledger.take('a', 4, times, { firstCap: 6 })).lanes).toBe(4);
    expect((await ledger.take('b', 4, times, { firstCap: 6 })).lanes).toBe(2);
    expect((await ledger.take('c', 1, times, { firstCap: 6 })).lanes).toBe(0);
    await ledger.setCap(8);
    expect((await ledger.take('c', 4, times, { firstCap: 6 })).lanes).toBe(2);
  });

  it('keeps every lease item in its one partition', async () => {
    const ledger = await freshLedger(2);
    await ledger.take('only', 2, times);
    const tableName = `ledger-${tables}`;
    const out = await clients.ddb.send(
      new GetItemCommand({
        TableName: tableName,
        Key: { pk: { S: LEDGER_PARTITION }, sk: { S: 'lease#only' } },
      }),
    );
    expect(out.Item?.lanes?.N).toBe('2');
    expect(Number(out.Item?.reclaim_after?.N) - Number(out.Item?.expires_at?.N)).toBe(times.tailMs);
  });
});

describe('InvocationLease (on the emulator)', () => {
  it('waits for room, reclaiming a dead lease once its tail has passed, then runs', async () => {
    // Prepare: the cap is held by an invocation that died (never renews)
    const ledger = await freshLedger(2);
    const diedAt = clock;
    await ledger.take('died', 2, times);
    // Act
    const lease = await InvocationLease.take(
      ledger,
      2,
      leaseOptions({ waitUntil: clock + times.ttlMs + times.tailMs + 10_000 }),
    );
    // Assess
    expect(lease).toBeInstanceOf(InvocationLease);
    expect(clock).toBeGreaterThan(diedAt + times.ttlMs + times.tailMs);
    const taken = lease as InvocationLease;
    expect(taken.lanes).toBe(2);
    expect(taken.live()).toBe(true);
    await taken.end();
    expect(taken.live()).toBe(false);
    expect((await ledger.count()).held).toBe(0);
  });

  it('gives up at its bound with the moment the held lease can be reclaimed', async () => {
    const ledger = await freshLedger(1);
    const start = clock;
    await ledger.take('holder', 1, times);
    const result = await InvocationLease.take(ledger, 1, leaseOptions({ waitUntil: clock + 3_000 }));
    expect(result).toEqual({ retryAt: start + times.ttlMs + times.tailMs });
    expect((await ledger.count()).held).toBe(1);
  });

  it('submits nothing once its lease may have expired unrenewed', async () => {
    const ledger = await freshLedger(1);
    const lease = (await InvocationLease.take(ledger, 1, leaseOptions())) as InvocationLease;
    expect(lease.live()).toBe(true);
    clock += times.ttlMs - 400; // inside the submit margin
    expect(lease.live()).toBe(false);
    await lease.end();
  });

  it('sheds a lane back to the ledger when a lane leaves early', async () => {
    const ledger = await freshLedger(4);
    const lease = (await InvocationLease.take(ledger, 4, leaseOptions())) as InvocationLease;
    await lease.shed();
    expect(lease.lanes).toBe(3);
    expect((await ledger.count()).held).toBe(3);
    await lease.end();
    expect((await ledger.count()).held).toBe(0);
  });
});
