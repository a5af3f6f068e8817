import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OutcomesStore } from '../functions/shared/outcomes-store.js';
import type { MotoServer } from '../local/moto.js';
import { type AwsClients, clientsFor, createOutcomeTable, startMoto } from './fixtures/aws.js';

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
});
