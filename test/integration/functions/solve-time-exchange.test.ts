import { PutItemCommand } from '@aws-sdk/client-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LearnedPollSchedule } from '../../../functions/captchaai/poll-schedule.js';
import { DEFAULT_TIMINGS } from '../../../functions/captchaai/timings.js';
import {
  decodeIntervals,
  encodeIntervals,
  PEERS_PER_PERIOD,
  SOLVE_TIMES_PARTITION,
  SolveTimeExchange,
  type SolveTimeExchangeOptions,
} from '../../../functions/pipeline/solve-time-exchange.js';
import type { MotoServer } from '../../../local/emulator/moto.js';
import { awsUsage, resetAwsUsage } from '../../../local/emulator/usage.js';
import { type AwsClients, clientsFor, createPkSkTable, startMoto } from '../../fixtures/aws.js';

let moto: MotoServer;
let clients: AwsClients;
const tableName = 'solve-times-test';
let clock = 1_000_000;
const now = () => clock;

/** A solve-times table as the stack makes it (pk, sk). */
const createTable = (name: string) => createPkSkTable(clients.ddb, name);

beforeAll(async () => {
  moto = await startMoto();
  clients = clientsFor(moto);
  await createTable(tableName);
});
afterAll(async () => {
  await moto?.stop();
});

function environment(name: string, table = tableName, options: Partial<SolveTimeExchangeOptions> = {}) {
  const schedule = new LearnedPollSchedule(DEFAULT_TIMINGS);
  const exchange = new SolveTimeExchange({
    client: clients.ddb,
    tableName: table,
    environment: name,
    schedule,
    everyMs: 15_000,
    now,
    ...options,
  });
  return { schedule, exchange };
}

/** An item written by hand, as another environment (or something else) might have left it. */
async function putItem(sk: string, env: string, intervals: string, updatedAt: number): Promise<void> {
  await clients.ddb.send(
    new PutItemCommand({
      TableName: tableName,
      Item: {
        pk: { S: SOLVE_TIMES_PARTITION },
        sk: { S: sk },
        environment: { S: env },
        intervals: { S: intervals },
        updated_at: { N: String(updatedAt) },
      },
    }),
  );
}

describe('solve times shared through DynamoDB', () => {
  it('gives an environment that has seen nothing the answers another one read', async () => {
    const a = environment('env-a');
    for (let i = 0; i < 10; i++) a.schedule.observe('recaptcha_v2', 6_000 + 100 * i, 6_500 + 100 * i);
    await expect(a.exchange.maybeExchange()).resolves.toEqual({ written: 1, read: 0 });

    const b = environment('env-b');
    expect(b.schedule.scheduleOf('recaptcha_v2')).toBeUndefined();
    await expect(b.exchange.maybeExchange()).resolves.toEqual({ written: 0, read: 10 });
    const learned = b.schedule.scheduleOf('recaptcha_v2');
    expect(learned).toMatchObject({ observations: 10, sharedObservations: 10 });
    // A's answers came at 6–7.5 s: B's first poll is no longer the static 15 s.
    expect(learned!.firstPollMs).toBeLessThan(8_000);
  });

  it('does not read its own item back, and exchanges at most once per interval', async () => {
    const a = environment('env-c');
    for (let i = 0; i < 4; i++) a.schedule.observe('turnstile', 0, 4_000 + i);
    const first = await a.exchange.maybeExchange();
    // The other answers in the table are env-a's ten (recaptcha_v2); env-c's own four are skipped.
    expect(first).toEqual({ written: 1, read: 10 });
    await expect(a.exchange.maybeExchange()).resolves.toBeUndefined();
    clock += 15_000;
    // Nothing new to share: the next exchange only reads.
    await expect(a.exchange.maybeExchange()).resolves.toEqual({ written: 0, read: 10 });
  });

  it('ignores items older than the maximum age and intervals that do not parse', async () => {
    await putItem('image#31', 'env-old', '0-3000,0-3100', clock - 700_000);
    await putItem('recaptcha_v3#30', 'env-bad', '1000-2000,garbage,-5-3,9000-100,3000-3500', clock);
    const d = environment('env-d');
    const r = await d.exchange.maybeExchange();
    // env-a's 10, env-c's 4 and env-bad's 2 well-formed pairs; env-old is past the maximum age.
    expect(r).toEqual({ written: 0, read: 16 });
    expect(d.schedule.scheduleOf('image')).toBeUndefined();
  });

  it('rejects when the table cannot be reached, and tries again after a period doubled by each failure in a row', async () => {
    const e = environment('env-e', 'no-such-table');
    for (let i = 0; i < 4; i++) e.schedule.observe('recaptcha_v2', 0, 15_000);
    await expect(e.exchange.maybeExchange()).rejects.toThrow();
    await expect(e.exchange.maybeExchange()).resolves.toBeUndefined();
    clock += 15_000;
    await expect(e.exchange.maybeExchange()).resolves.toBeUndefined();
    clock += 15_000;
    await expect(e.exchange.maybeExchange()).rejects.toThrow();
    expect(e.exchange.periodMs()).toBe(60_000);
  });
});

describe('when an environment writes its answers', () => {
  /** PutItems moto served since the last reset, and their write units (local/emulator/usage.py). */
  async function puts() {
    const rows = (await awsUsage(moto.endpoint)).calls.filter((r) => r.operation === 'PutItem');
    return {
      requests: rows.reduce((a, r) => a + r.requests, 0),
      units: rows.reduce((a, r) => a + r.write_units, 0),
    };
  }

  it('writes a type first after 4 answers, then again only after 16 new ones', async () => {
    // Prepare
    const { schedule, exchange } = environment('env-f', tableName, { youngExchanges: 100 });
    const answer = (n: number) => {
      for (let i = 0; i < n; i++) schedule.observe('image', 2_000, 2_500 + i);
    };
    const exchangeLater = async () => {
      clock += 15_000;
      return (await exchange.maybeExchange())?.written;
    };
    await resetAwsUsage(moto.endpoint);
    // Act / Assess: a record's answer at a time, as a worker with one lane exchanges beside them
    answer(3);
    expect(await exchangeLater()).toBe(0);
    answer(1);
    expect(await exchangeLater()).toBe(1);
    const shared: number[] = [];
    for (let record = 0; record < 16; record++) {
      answer(1);
      shared.push((await exchangeLater()) ?? 0);
    }
    expect(shared).toEqual([...Array(15).fill(0), 1]);
    // No new answer, however old the item: nothing to write.
    clock += 600_000;
    expect(await exchangeLater()).toBe(0);
    // 20 answers and 19 exchanges: 2 PutItems, each under 1 KB, on the wire
    expect(await puts()).toEqual({ requests: 2, units: 2 });
  });

  it('reads every 15 s for its first 8 exchanges, then every 60 s', async () => {
    // Prepare
    const { exchange } = environment('env-h');
    await resetAwsUsage(moto.endpoint);
    // Act: a record every 15 s for 5 minutes
    let made = 0;
    for (let record = 0; record < 20; record++) {
      if (await exchange.maybeExchange()) made += 1;
      clock += 15_000;
    }
    // Assess: 8 young exchanges (0–105 s), then at 165, 225 and 285 s
    expect(made).toBe(11);
    const queries = (await awsUsage(moto.endpoint)).calls.filter((r) => r.operation === 'Query');
    expect(queries.reduce((a, r) => a + r.requests, 0)).toBe(11);
  });

  it('widens its period with the peers it reads: 16 fresh peers, one Query per 30 s instead of 15 s', async () => {
    // Prepare: 16 other environments' fresh items in a table of its own
    const table = await createTable('solve-times-peers');
    for (let peer = 0; peer < 2 * PEERS_PER_PERIOD; peer++) {
      await clients.ddb.send(
        new PutItemCommand({
          TableName: table,
          Item: {
            pk: { S: SOLVE_TIMES_PARTITION },
            sk: { S: `recaptcha_v2#${peer}` },
            environment: { S: `peer-${peer}` },
            intervals: { S: '20000-23000' },
            updated_at: { N: String(clock) },
          },
        }),
      );
    }
    const { exchange } = environment('env-w', table);
    // Act: a record every 5 s for a minute
    const at: number[] = [];
    for (let t = 0; t < 60_000; t += 5_000) {
      if (await exchange.maybeExchange()) at.push(t);
      clock += 5_000;
    }
    // Assess
    expect(at).toEqual([0, 30_000]);
    expect(exchange.periodMs()).toBe(30_000);
  });

  it('makes its first exchange at a random moment within firstWithinMs of its start, never later', async () => {
    // Prepare
    const started = clock;
    const firsts: number[] = [];
    // Act: 8 environments started together, each asked every second
    for (let e = 0; e < 8; e++) {
      clock = started;
      const { exchange } = environment(`env-j${e}`, tableName, { firstWithinMs: 10_000 });
      while (!(await exchange.maybeExchange())) clock += 1_000;
      firsts.push(clock - started);
    }
    // Assess
    expect(Math.max(...firsts)).toBeLessThanOrEqual(10_000);
    expect(new Set(firsts).size).toBeGreaterThan(1);
  });

  it('keeps a full item of 64 answers at their longest under 1 KB: one write unit', async () => {
    // Prepare
    // The worker names its environment by a UUID (36 characters), and the longest type is enterprise.
    const { schedule, exchange } = environment(`env-g-${'0'.repeat(30)}`);
    for (let i = 0; i < 64; i++) schedule.observe('recaptcha_enterprise', 119_000 + i, 119_900 + i);
    await resetAwsUsage(moto.endpoint);
    // Act
    clock += 15_000;
    await exchange.maybeExchange();
    // Assess
    expect(await puts()).toEqual({ requests: 1, units: 1 });
  });
});

describe('interval encoding', () => {
  it('round-trips whole milliseconds and drops malformed pairs', () => {
    const text = encodeIntervals([
      { lowMs: 0, highMs: 15_000.4 },
      { lowMs: 15_000, highMs: 18_000 },
    ]);
    expect(text).toBe('0-15000,15000-18000');
    expect(decodeIntervals(`${text},x-1,7-3,,12`)).toEqual([
      { lowMs: 0, highMs: 15_000 },
      { lowMs: 15_000, highMs: 18_000 },
    ]);
  });
});
