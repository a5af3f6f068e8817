import {
  type AttributeValue,
  type DynamoDBClient,
  GetItemCommand,
  QueryCommand,
  TransactionCanceledException,
  TransactWriteItemsCommand,
  UpdateItemCommand,
} from '@aws-sdk/client-dynamodb';

/**
 * The slot ledger: a lease-counted semaphore of lanes in the ledger table, so the cap holds after
 * a crash. Reserved concurrency counts invocations and frees a slot the moment an invocation
 * dies, while the dead invocation's CaptchaAI tasks (up to L of them, one at lanes 1) still hold
 * threads until their deadline plus the cool-down. The ledger frees those lanes only then.
 *
 * One partition, `pk` = "ledger":
 *   - `sk` = "count": `held` (lanes held by live or not-yet-reclaimed leases) and `cap` (solves
 *     allowed at once, written by the cap adjuster every run);
 *   - `sk` = "lease#<invocation id>": one per invocation, `lanes` it holds, `expires_at` (it
 *     submits no in.php at or after this unless a renewal moved it) and `reclaim_after`
 *     (`expires_at` plus the task tail: by then every task it may have submitted is finished).
 * Taking and giving back lanes moves the count and the lease in one transaction, so `held` is
 * always the sum of the leases' lanes. A lease is written per invocation, never per solve, and
 * renewed every `ttlMs` / 3: a few write units per invocation, whatever its records.
 *
 * Why a table of its own: the outcomes table's stream feeds the outcome publisher, which would
 * see every lease write; and the lease items need a sort key to be found again (one Query).
 */
export const LEDGER_PARTITION = 'ledger';
const COUNT_SK = 'count';
const LEASE_PREFIX = 'lease#';

/** How long a lease lasts and what it covers, in ms. */
export interface LeaseTimes {
  /** A lease not renewed for this long expires (its owner submits nothing more). */
  ttlMs: number;
  /** After expiry, until every task the owner may have submitted is finished: deadline + cool-down + margin. */
  tailMs: number;
}

/** The ledger's count as read. */
export interface LedgerCount {
  /** Lanes held now. */
  held: number;
  /** Solves allowed at once; undefined until the cap adjuster has written one. */
  cap: number | undefined;
}

/** A lease the ledger granted: `lanes` > 0, valid until `expiresAt` (epoch ms) unless renewed. */
export interface Grant {
  lanes: number;
  expiresAt: number;
}

export class SlotLedger {
  constructor(
    private readonly o: {
      client: DynamoDBClient;
      tableName: string;
      /** Epoch ms. */
      now?: () => number;
    },
  ) {}

  #now(): number {
    return (this.o.now ?? Date.now)();
  }

  /** Reads the count (strongly consistent: one read unit). */
  async count(): Promise<LedgerCount> {
    const out = await this.o.client.send(
      new GetItemCommand({
        TableName: this.o.tableName,
        Key: key(COUNT_SK),
        ConsistentRead: true,
      }),
    );
    return {
      held: Math.max(0, numberOf(out.Item?.held) ?? 0),
      cap: numberOf(out.Item?.cap),
    };
  }

  /**
   * Takes up to `want` lanes for invocation `id` (a lease of its own; with `adding`, more lanes on
   * the lease it holds): as many as the cap leaves room for; before the cap adjuster has written
   * a cap, `firstCap` (the deployed one) stands for it. Returns the lanes granted, 0 when there is
   * no room. A race with another taker is read again and tried once more.
   */
  async take(
    id: string,
    want: number,
    times: LeaseTimes,
    o: { adding?: boolean; firstCap?: number } = {},
  ): Promise<Grant | { lanes: 0 }> {
    const adding = o.adding === true;
    for (let attempt = 0; attempt < 3; attempt++) {
      const count = await this.count();
      const { held } = count;
      const cap = count.cap ?? o.firstCap;
      const written = count.cap !== undefined;
      const lanes = cap === undefined ? want : Math.min(want, cap - held);
      if (lanes <= 0) return { lanes: 0 };
      const expiresAt = this.#now() + times.ttlMs;
      try {
        await this.o.client.send(
          new TransactWriteItemsCommand({
            TransactItems: [
              {
                Update: {
                  TableName: this.o.tableName,
                  Key: key(COUNT_SK),
                  // Room for `lanes` under the cap read above (written, or the first one); a cap
                  // that changed since is read again.
                  ConditionExpression: `${written ? '#cap = :cap' : 'attribute_not_exists(#cap)'}${
                    cap === undefined ? '' : ' AND (attribute_not_exists(#held) OR #held <= :limit)'
                  }`,
                  UpdateExpression: 'SET #held = if_not_exists(#held, :zero) + :lanes',
                  ExpressionAttributeNames: { '#held': 'held', '#cap': 'cap' },
                  ExpressionAttributeValues: {
                    ':lanes': num(lanes),
                    ':zero': num(0),
                    ...(written ? { ':cap': num(cap ?? 0) } : {}),
                    ...(cap === undefined ? {} : { ':limit': num(cap - lanes) }),
                  },
                },
              },
              {
                Update: {
                  TableName: this.o.tableName,
                  Key: key(LEASE_PREFIX + id),
                  ConditionExpression: adding ? 'attribute_exists(lanes)' : 'attribute_not_exists(lanes)',
                  UpdateExpression:
                    'SET lanes = if_not_exists(lanes, :zero) + :lanes, expires_at = :expires, reclaim_after = :reclaim',
                  ExpressionAttributeValues: {
                    ':lanes': num(lanes),
                    ':zero': num(0),
                    ':expires': num(expiresAt),
                    ':reclaim': num(expiresAt + times.tailMs),
                  },
                },
              },
            ],
          }),
        );
        return { lanes, expiresAt };
      } catch (err) {
        if (!isConditionRace(err)) throw err;
      }
    }
    return { lanes: 0 };
  }

  /**
   * Renews invocation `id`'s lease: the new expiry, or 'lost' when the lease is gone (reclaimed:
   * its owner must submit nothing more).
   */
  async renew(id: string, times: LeaseTimes): Promise<number | 'lost'> {
    const expiresAt = this.#now() + times.ttlMs;
    try {
      await this.o.client.send(
        new UpdateItemCommand({
          TableName: this.o.tableName,
          Key: key(LEASE_PREFIX + id),
          ConditionExpression: 'attribute_exists(lanes)',
          UpdateExpression: 'SET expires_at = :expires, reclaim_after = :reclaim',
          ExpressionAttributeValues: {
            ':expires': num(expiresAt),
            ':reclaim': num(expiresAt + times.tailMs),
          },
        }),
      );
      return expiresAt;
    } catch (err) {
      if ((err as { name?: string }).name === 'ConditionalCheckFailedException') return 'lost';
      throw err;
    }
  }

  /**
   * Gives `lanes` of invocation `id`'s lease back (all of them: `remove`, the lease is deleted).
   * Nothing happens when the lease is gone or holds fewer (it was reclaimed): the count was
   * moved then.
   */
  async giveBack(id: string, lanes: number, remove: boolean): Promise<void> {
    if (lanes <= 0 && !remove) return;
    const leaseKey = key(LEASE_PREFIX + id);
    try {
      await this.o.client.send(
        new TransactWriteItemsCommand({
          TransactItems: [
            remove
              ? {
                  Delete: {
                    TableName: this.o.tableName,
                    Key: leaseKey,
                    ConditionExpression: 'lanes = :lanes',
                    ExpressionAttributeValues: { ':lanes': num(lanes) },
                  },
                }
              : {
                  Update: {
                    TableName: this.o.tableName,
                    Key: leaseKey,
                    ConditionExpression: 'lanes >= :lanes',
                    UpdateExpression: 'SET lanes = lanes - :lanes',
                    ExpressionAttributeValues: { ':lanes': num(lanes) },
                  },
                },
            decrement(this.o.tableName, lanes),
          ],
        }),
      );
    } catch (err) {
      if (!isConditionRace(err)) throw err;
    }
  }

  /**
   * Frees the lanes of every lease past its `reclaim_after` (its owner died or lost it, and every
   * task it may have submitted is finished). Returns the lanes freed and when the next lease still
   * held could be reclaimed at the earliest (undefined: none is held). One Query of the
   * partition's leases (at most one item per running invocation), one transaction per lease freed.
   */
  async reclaimExpired(): Promise<{ freed: number; nextAt: number | undefined }> {
    const now = this.#now();
    let freed = 0;
    let nextAt: number | undefined;
    let start: Record<string, AttributeValue> | undefined;
    do {
      const page = await this.o.client.send(
        new QueryCommand({
          TableName: this.o.tableName,
          KeyConditionExpression: 'pk = :pk AND begins_with(sk, :lease)',
          ExpressionAttributeValues: { ':pk': str(LEDGER_PARTITION), ':lease': str(LEASE_PREFIX) },
          ConsistentRead: true,
          ...(start ? { ExclusiveStartKey: start } : {}),
        }),
      );
      for (const item of page.Items ?? []) {
        const lanes = numberOf(item.lanes) ?? 0;
        const reclaimAfter = numberOf(item.reclaim_after) ?? 0;
        if (reclaimAfter >= now) {
          nextAt = Math.min(nextAt ?? reclaimAfter, reclaimAfter);
          continue;
        }
        try {
          await this.o.client.send(
            new TransactWriteItemsCommand({
              TransactItems: [
                {
                  Delete: {
                    TableName: this.o.tableName,
                    Key: { pk: str(LEDGER_PARTITION), sk: item.sk ?? str('') },
                    // Not renewed meanwhile, and still the lanes read.
                    ConditionExpression: 'reclaim_after < :now AND lanes = :lanes',
                    ExpressionAttributeValues: { ':now': num(now), ':lanes': num(lanes) },
                  },
                },
                decrement(this.o.tableName, lanes),
              ],
            }),
          );
          freed += lanes;
        } catch (err) {
          if (!isConditionRace(err)) throw err;
        }
      }
      start = page.LastEvaluatedKey;
    } while (start);
    return { freed, nextAt };
  }

  /** Writes the cap (the cap adjuster, every run): one write unit. */
  async setCap(cap: number): Promise<void> {
    await this.o.client.send(
      new UpdateItemCommand({
        TableName: this.o.tableName,
        Key: key(COUNT_SK),
        UpdateExpression: 'SET #cap = :cap, #held = if_not_exists(#held, :zero)',
        ExpressionAttributeNames: { '#cap': 'cap', '#held': 'held' },
        ExpressionAttributeValues: { ':cap': num(cap), ':zero': num(0) },
      }),
    );
  }
}

function decrement(tableName: string, lanes: number) {
  return {
    Update: {
      TableName: tableName,
      Key: key(COUNT_SK),
      UpdateExpression: 'SET #held = #held - :lanes',
      ExpressionAttributeNames: { '#held': 'held' },
      ExpressionAttributeValues: { ':lanes': num(lanes) },
    },
  };
}

/** A transaction cancelled by a condition (a race with another writer, or a lease already gone). */
function isConditionRace(err: unknown): boolean {
  if (
    err instanceof TransactionCanceledException ||
    (err as { name?: string }).name === 'TransactionCanceledException'
  ) {
    const reasons = (err as TransactionCanceledException).CancellationReasons ?? [];
    return reasons.some((r) => r.Code === 'ConditionalCheckFailed' || r.Code === 'TransactionConflict');
  }
  return (err as { name?: string }).name === 'ConditionalCheckFailedException';
}

function key(sk: string): Record<string, AttributeValue> {
  return { pk: str(LEDGER_PARTITION), sk: str(sk) };
}

const str = (s: string): AttributeValue => ({ S: s });
const num = (n: number): AttributeValue => ({ N: String(n) });

function numberOf(v: AttributeValue | undefined): number | undefined {
  if (!v || !('N' in v) || v.N === undefined) return undefined;
  const n = Number(v.N);
  return Number.isFinite(n) ? n : undefined;
}
