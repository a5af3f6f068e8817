import {
  type AttributeValue,
  BatchGetItemCommand,
  type ConditionalCheckFailedException,
  type DynamoDBClient,
  GetItemCommand,
  paginateQuery,
  UpdateItemCommand,
  type UpdateItemCommandOutput,
} from '@aws-sdk/client-dynamodb';
import { awsWaitMs } from '../common/aws-clients.js';
import { BATCH_INDEX_NAME, type BatchIndexRow, batchShardOf, batchShardsOf } from './batch-index.js';
import { type ClaimRequest, earlierReceiveCondition } from './claim-owner.js';
import { FINAL_STATUSES } from './fields.js';
import type { ClaimResult, FinalOutcome, OutcomeRow, WriteResult } from './outcome-row.js';
import { conditionFailed, n, rowFrom, s } from './row-attributes.js';

/**
 * The outcome table: one row per record_key (docs/design.md "Outcome row"). All writes are
 * conditional, which is what makes the worker idempotent:
 * - claim: allowed when there is no row, the row is `stopped`, or it is `in_progress` with
 *   an expired lease, or with a lease an earlier receive of the same SQS message left
 *   (./claim-owner.ts). A failed claim returns the existing row (ALL_OLD) to say why; when the
 *   emulator leaves the row out of the error, a consistent read fetches it (see existingRow).
 * - finish / release / the phase markers (task_id + task_submitted_at, posting_at): only while
 *   this owner still holds the claim. A successful claim returns the row it replaced, markers
 *   and all, so the claimant knows what an earlier claim left behind.
 * - reject: only when there is no row at all (a malformed duplicate never overwrites).
 * batch_id is set by the first claim or reject that carries one and never changed after: a
 * record sent again under another batch keeps its first row, and so its first batch, whose
 * cancel is the one that holds it (a claim returns the row it took, batch_id and all:
 * functions/worker/record-flow.ts asks that batch's cancel, not the message's).
 * Never stores a token or a key.
 */
export type { ClaimResult, FinalOutcome, OutcomeRow, OutcomeStatus, WriteResult } from './outcome-row.js';

export interface OutcomesStoreOptions {
  client: DynamoDBClient;
  tableName: string;
  /** Epoch ms; leases compare against it. */
  now?: () => number;
  /** Waits between tries of a write that threw (see WRITE_TRIES). */
  sleep?: (ms: number) => Promise<void>;
  /** The worker's time scale: the waits between tries follow it (../common/aws-clients.ts awsWaitMs). @default 1 */
  timeScale?: number;
  /**
   * How long a row is kept after its claim or final write, in ms (OUTCOME_RETENTION_DAYS): each
   * sets `expires_at` (epoch seconds), which the table's TTL reads. Unset: rows are kept.
   */
  retentionMs?: number;
}

/**
 * A write of the record's own claim (final outcome, phase marker) that throws (throttling, a 5xx
 * after the SDK's own retries) is tried this many times in all, waiting WRITE_BACKOFF_MS, then
 * twice that, and so on between tries. A conditional refusal is an answer, never retried.
 */
export const WRITE_TRIES = 4;
export const WRITE_BACKOFF_MS = 250;

/** The wait after a write's try number `attempt` (1-based) at a time scale. */
export function writeBackoffMs(attempt: number, timeScale = 1): number {
  return awsWaitMs(WRITE_BACKOFF_MS * 2 ** (attempt - 1), timeScale);
}

/** The longest the back-off between WRITE_TRIES tries of one write adds up to. */
export function writeBackoffTotalMs(timeScale = 1): number {
  let total = 0;
  for (let attempt = 1; attempt < WRITE_TRIES; attempt++) total += writeBackoffMs(attempt, timeScale);
  return total;
}

/** The condition of every write to a claim: `:owner` still holds it and the row is in progress. */
const OWNED = 'lease_owner = :owner AND #status = :in_progress';

/** The final statuses: a record with one of them is finished (`stopped` is not: a redrive may claim it again). */
export { FINAL_STATUSES };

const FINISHED: ReadonlySet<string> = new Set(FINAL_STATUSES);

export function isFinalStatus(status: unknown): boolean {
  return typeof status === 'string' && FINISHED.has(status);
}

export type { BatchIndexRow } from './batch-index.js';

/** BatchGetItem takes at most 100 keys per call. */
const BATCH_GET_KEYS = 100;

export class OutcomesStore {
  private readonly now: () => number;
  private readonly sleep: (ms: number) => Promise<void>;
  private readonly timeScale: number;

  constructor(private readonly options: OutcomesStoreOptions) {
    this.now = options.now ?? Date.now;
    this.timeScale = options.timeScale ?? 1;
    this.sleep = options.sleep ?? ((ms) => new Promise((resolve) => setTimeout(resolve, ms)));
  }

  /** `:ttl`, the row's expiry in epoch seconds, when rows are kept for a retention; else nothing. */
  private expiry(now: number): { ':ttl': AttributeValue } | undefined {
    const { retentionMs } = this.options;
    return retentionMs === undefined ? undefined : { ':ttl': n(Math.ceil((now + retentionMs) / 1000)) };
  }

  async get(recordKey: string): Promise<OutcomeRow | undefined> {
    const out = await this.options.client.send(
      new GetItemCommand({
        TableName: this.options.tableName,
        Key: { record_key: s(recordKey) },
        ConsistentRead: true,
      }),
    );
    return rowFrom(out.Item);
  }

  /**
   * Takes the record for `leaseMs`. See the class comment for when that is allowed. A claim that
   * throws (a timeout, a 5xx) is tried like the other writes (WRITE_TRIES, withTries): its try may
   * have landed with its answer lost, so every try also takes a row this `owner` already holds.
   * Such a row is the landed try's: it kept the earlier claim's phase markers (a claim never
   * touches them), so as `previous` it tells decidePriorPhase what the row it replaced told. One
   * lease end and one `now` serve every try, so whichever try landed set the same lease. Without
   * the tries a lost answer would crash the record and its redelivery would meet its own claim as
   * another owner's, waiting out the whole lease.
   */
  async claim(recordKey: string, claim: ClaimRequest): Promise<ClaimResult> {
    const now = this.now();
    const leaseExpiresAt = now + claim.leaseMs;
    const earlier = earlierReceiveCondition(claim.receive);
    const expiry = this.expiry(now);
    const input = {
      TableName: this.options.tableName,
      Key: { record_key: s(recordKey) },
      ConditionExpression:
        'attribute_not_exists(record_key) OR #status = :stopped OR ' +
        `(#status = :in_progress AND (lease_expires_at < :now OR lease_owner = :owner${earlier.condition}))`,
      UpdateExpression:
        'SET #status = :in_progress, lease_owner = :owner, lease_expires_at = :expires, captcha_type = :type, ' +
        `updated_at = :iso, status_at = if_not_exists(status_at, :iso), created_at = if_not_exists(created_at, :iso)${
          expiry ? ', expires_at = :ttl' : ''
        }${
          claim.batchId === undefined
            ? ''
            : ', batch_id = if_not_exists(batch_id, :batch), batch_shard = if_not_exists(batch_shard, :shard)'
        } REMOVE reason, target_status, solve_ms, expect_rule`,
      ExpressionAttributeNames: { '#status': 'status' },
      ExpressionAttributeValues: {
        ':stopped': s('stopped'),
        ':in_progress': s('in_progress'),
        ':now': n(now),
        ':owner': s(claim.owner),
        ':expires': n(leaseExpiresAt),
        ':type': s(claim.captchaType),
        ':iso': s(new Date(now).toISOString()),
        ...expiry,
        ...(claim.batchId === undefined
          ? {}
          : { ':batch': s(claim.batchId), ':shard': s(batchShardOf(claim.batchId, recordKey)) }),
        ...earlier.values,
      },
      // The row before the claim: its phase markers say what an earlier claim left behind.
      ReturnValues: 'ALL_OLD',
      ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
    } as const;
    // A conditional refusal is an answer, not a failed try.
    type Answer = { out: UpdateItemCommandOutput } | { refused: ConditionalCheckFailedException };
    const answer = await this.withTries(async (): Promise<Answer> => {
      try {
        return { out: await this.options.client.send(new UpdateItemCommand(input)) };
      } catch (err) {
        if (conditionFailed(err)) return { refused: err };
        throw err;
      }
    });
    if ('refused' in answer) {
      const row = await this.existingRow(recordKey, answer.refused);
      // No row at all now (deleted since the check failed): `leased`, so the message is retried
      // and its next claim finds the record free, rather than being dropped as finished.
      return { claimed: false, why: row && FINISHED.has(row.status) ? 'finished' : 'leased', row };
    }
    const previous = rowFrom(answer.out.Attributes);
    return previous ? { claimed: true, leaseExpiresAt, previous } : { claimed: true, leaseExpiresAt };
  }

  /** The final write (or `stopped`), only while `owner` still holds the claim. */
  async finish(recordKey: string, owner: string, outcome: FinalOutcome): Promise<WriteResult> {
    const now = this.now();
    const sets = ['#status = :status', 'reason = :reason', 'updated_at = :iso', 'status_at = :iso'];
    const values: Record<string, AttributeValue> = {
      ':status': s(outcome.status),
      ':reason': s(outcome.reason),
      ':iso': s(new Date(now).toISOString()),
      ':owner': s(owner),
      ':in_progress': s('in_progress'),
      ':attempts': n(outcome.attempts ?? 0),
      ':zero': n(0),
    };
    sets.push('attempts = if_not_exists(attempts, :zero) + :attempts');
    const expiry = this.expiry(now);
    if (expiry) {
      sets.push('expires_at = :ttl');
      Object.assign(values, expiry);
    }
    if (outcome.targetStatus !== undefined) {
      sets.push('target_status = :target');
      values[':target'] = n(outcome.targetStatus);
    }
    if (outcome.expectRule !== undefined) {
      sets.push('expect_rule = :rule');
      values[':rule'] = s(outcome.expectRule);
    }
    if (outcome.solveMs !== undefined) {
      sets.push('solve_ms = :solve');
      values[':solve'] = n(Math.round(outcome.solveMs));
    }
    const update = {
      ConditionExpression: OWNED,
      UpdateExpression: `SET ${sets.join(', ')} REMOVE lease_expires_at`,
      ExpressionAttributeValues: values,
    };
    // A landed try leaves the row ours, with this outcome.
    return this.ownedWrite(
      recordKey,
      owner,
      () => update,
      (row) => row.status === outcome.status,
    );
  }

  /**
   * Phase marker: in.php answered with `taskId` at `submittedAt` (one conditional write, only
   * while `owner` holds the claim). A worker that takes over an expired lease resumes that task
   * while its deadline has not passed, instead of submitting another.
   */
  async markSubmitted(
    recordKey: string,
    owner: string,
    task: { taskId: string; submittedAt: number; attempts: number },
  ): Promise<WriteResult> {
    const update = (retry: boolean) => ({
      // A try whose answer was lost may have landed: a retry never counts the attempts twice.
      ConditionExpression: retry ? `${OWNED} AND (attribute_not_exists(task_id) OR task_id <> :task)` : OWNED,
      // `attempts`: in.php calls not yet counted on the row, so a claim that dies still counts them.
      UpdateExpression:
        'SET task_id = :task, task_submitted_at = :at, attempts = if_not_exists(attempts, :zero) + :attempts',
      ExpressionAttributeValues: {
        ':owner': s(owner),
        ':in_progress': s('in_progress'),
        ':task': s(task.taskId),
        ':at': n(task.submittedAt),
        ':zero': n(0),
        ':attempts': n(task.attempts),
      },
    });
    return this.ownedWrite(recordKey, owner, update, (row) => row.task_id === task.taskId);
  }

  /**
   * Phase marker, written just before the form POST, only while `owner` holds the claim: from
   * now on the form may have taken the token, so no later claim may post again (it ends the
   * record `failed OUTCOME_UNKNOWN`). Not written, no POST.
   */
  async markPosting(recordKey: string, owner: string): Promise<WriteResult> {
    const at = this.now();
    return this.withTries(() =>
      this.conditionalUpdate(recordKey, {
        ConditionExpression: OWNED,
        UpdateExpression: 'SET posting_at = :at',
        ExpressionAttributeValues: { ':owner': s(owner), ':in_progress': s('in_progress'), ':at': n(at) },
      }),
    );
  }

  /**
   * Takes the posting marker back, only while `owner` holds the claim: the POST it announced was
   * provably never sent (the resolver failed before a connection was opened), so a later claim
   * may post the record after all. A write whose answer was lost may have landed; trying it again
   * is harmless (REMOVE of an absent attribute).
   */
  async unmarkPosting(recordKey: string, owner: string): Promise<WriteResult> {
    return this.withTries(() =>
      this.conditionalUpdate(recordKey, {
        ConditionExpression: OWNED,
        UpdateExpression: 'REMOVE posting_at',
        ExpressionAttributeValues: { ':owner': s(owner), ':in_progress': s('in_progress') },
      }),
    );
  }

  /**
   * A conditional write of `owner`'s claim, tried like withTries. A try whose answer was lost may
   * have landed; the next one is then refused, and a refusal that finds the row still `owner`'s
   * and `landed` says so counts as written.
   */
  private ownedWrite(
    recordKey: string,
    owner: string,
    update: (retry: boolean) => Parameters<OutcomesStore['conditionalUpdate']>[1],
    landed: (row: OutcomeRow) => boolean,
  ): Promise<WriteResult> {
    return this.withTries(async (retry) => {
      const result = await this.conditionalUpdate(recordKey, update(retry));
      if (!result.written && retry && result.row?.lease_owner === owner && landed(result.row)) {
        return { written: true };
      }
      return result;
    });
  }

  /** Runs a write up to WRITE_TRIES times while it throws, with a doubling back-off. */
  private async withTries<T>(write: (retry: boolean) => Promise<T>): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await write(attempt > 1);
      } catch (err) {
        if (attempt >= WRITE_TRIES) throw err;
        await this.sleep(writeBackoffMs(attempt, this.timeScale));
      }
    }
  }

  /**
   * Gives the claim up without an outcome (a failure that will be retried): the lease ends now,
   * so the redelivery can claim at once. Tried like the other writes (WRITE_TRIES), else a
   * throw would leave the lease on for the redelivery to wait out. A later try writes only while
   * the lease is on: one whose answer was lost after it landed is found released, written.
   * `due`: the UNSOLVABLE resubmission is due (OutcomeRow.resubmission_due_at).
   */
  async release(recordKey: string, owner: string, attempts = 0, due = false): Promise<WriteResult> {
    const values = {
      ':owner': s(owner),
      ':in_progress': s('in_progress'),
      ':zero': n(0),
      ':attempts': n(attempts),
      ':iso': s(new Date(this.now()).toISOString()),
      ...(due ? { ':due': n(this.now()) } : {}),
    };
    return this.ownedWrite(
      recordKey,
      owner,
      (retry) => ({
        ConditionExpression: retry ? `${OWNED} AND lease_expires_at <> :zero` : OWNED,
        // Released only when no task of this claim can still hold a thread: its task markers go.
        UpdateExpression: `SET lease_expires_at = :zero, updated_at = :iso, attempts = if_not_exists(attempts, :zero) + :attempts${
          due ? ', resubmission_due_at = :due' : ''
        } REMOVE task_id, task_submitted_at`,
        ExpressionAttributeValues: values,
      }),
      (row) => row.status === 'in_progress' && row.lease_expires_at === 0,
    );
  }

  /** `rejected` for an invalid job message; only when the record has no row yet. */
  async reject(recordKey: string, reason: string, batchId?: string): Promise<WriteResult> {
    const iso = new Date(this.now()).toISOString();
    return this.conditionalUpdate(recordKey, {
      ConditionExpression: 'attribute_not_exists(record_key)',
      UpdateExpression: `SET #status = :status, reason = :reason, attempts = :zero, created_at = :iso, updated_at = :iso, status_at = :iso${
        batchId === undefined ? '' : ', batch_id = :batch, batch_shard = :shard'
      }`,
      ExpressionAttributeValues: {
        ':status': s('rejected'),
        ':reason': s(reason),
        ':zero': n(0),
        ':iso': s(iso),
        ...(batchId === undefined
          ? {}
          : { ':batch': s(batchId), ':shard': s(batchShardOf(batchId, recordKey)) }),
      },
    });
  }

  /**
   * One batch's rows as the batch index holds them (BatchIndexRow: enough to count them), shard by
   * shard, each in the order its rows' statuses were written: a Query per shard (no scan). With
   * `since` (ISO), only the rows whose status was written at or after it (a waiter's later looks).
   * The index is eventually consistent: a row written a moment ago may show its previous status,
   * which is why waiters poll. An entry whose batch_id is not this batch (a row of an older build
   * claimed under another batch before the backfill) is left out. For whole rows, see batchFullRows.
   */
  async *batchRows(batchId: string, since?: string): AsyncGenerator<BatchIndexRow> {
    for (const shard of batchShardsOf(batchId)) {
      const pages = paginateQuery(
        { client: this.options.client },
        {
          TableName: this.options.tableName,
          IndexName: BATCH_INDEX_NAME,
          KeyConditionExpression: `batch_shard = :shard${since === undefined ? '' : ' AND status_at >= :since'}`,
          ExpressionAttributeValues: {
            ':shard': s(shard),
            ...(since === undefined ? {} : { ':since': s(since) }),
          },
        },
      );
      for await (const page of pages) {
        for (const item of page.Items ?? []) {
          const row = rowFrom(item);
          if (row && row.batch_id === batchId) yield row;
        }
      }
    }
  }

  /**
   * One batch's whole rows, in the index's order: the keys from the batch index, the rows by
   * key (getMany, strongly consistent). A row the index still lists but that is gone by then is
   * left out. An export reads this once; a waiter polls batchRows, which is all it needs.
   */
  async batchFullRows(batchId: string): Promise<OutcomeRow[]> {
    const keys: string[] = [];
    for await (const row of this.batchRows(batchId)) keys.push(row.record_key);
    const rows = await this.getMany(keys);
    return keys.flatMap((key) => {
      const row = rows.get(key);
      return row ? [row] : [];
    });
  }

  /**
   * The rows of these keys (missing keys are simply absent from the result), by BatchGetItem
   * in chunks of 100 with strongly consistent reads; unprocessed keys are asked for again
   * with a growing pause.
   */
  async getMany(
    recordKeys: readonly string[],
    o: { sleep?: (ms: number) => Promise<void> } = {},
  ): Promise<Map<string, OutcomeRow>> {
    const sleep = o.sleep ?? ((ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms)));
    const rows = new Map<string, OutcomeRow>();
    const unique = [...new Set(recordKeys)];
    for (let i = 0; i < unique.length; i += BATCH_GET_KEYS) {
      let keys: Record<string, AttributeValue>[] = unique
        .slice(i, i + BATCH_GET_KEYS)
        .map((key) => ({ record_key: s(key) }));
      for (let round = 0; keys.length > 0; round++) {
        if (round > 0) await sleep(Math.min(2_000, 50 * 2 ** round));
        const out = await this.options.client.send(
          new BatchGetItemCommand({
            RequestItems: { [this.options.tableName]: { Keys: keys, ConsistentRead: true } },
          }),
        );
        for (const item of out.Responses?.[this.options.tableName] ?? []) {
          const row = rowFrom(item);
          if (row) rows.set(row.record_key, row);
        }
        keys = out.UnprocessedKeys?.[this.options.tableName]?.Keys ?? [];
      }
    }
    return rows;
  }

  private async conditionalUpdate(
    recordKey: string,
    update: {
      ConditionExpression: string;
      UpdateExpression: string;
      ExpressionAttributeValues: Record<string, AttributeValue>;
    },
  ): Promise<WriteResult> {
    try {
      await this.options.client.send(
        new UpdateItemCommand({
          TableName: this.options.tableName,
          Key: { record_key: s(recordKey) },
          ...update,
          ExpressionAttributeNames: { '#status': 'status' },
          ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
        }),
      );
      return { written: true };
    } catch (err) {
      if (!conditionFailed(err)) throw err;
      return { written: false, row: await this.existingRow(recordKey, err) };
    }
  }

  /**
   * The row that made a conditional write fail. DynamoDB returns it in the error
   * (ReturnValuesOnConditionCheckFailure=ALL_OLD), but DynamoDB Local, which LocalStack's
   * DynamoDB runs on, has been reported to leave `Item` out for UpdateItem
   * (github.com/aws/aws-sdk-go-v2/issues/2600; LocalStack only added ALL_OLD with DynamoDB
   * Local 2.2.0: localstack/localstack#9040, #9984). Without the row every conflict would read
   * as "leased" and a finished record's duplicate would be retried towards the DLQ, so read it
   * (consistently: the write that beat us must be visible) before deciding.
   */
  private async existingRow(
    recordKey: string,
    err: ConditionalCheckFailedException,
  ): Promise<OutcomeRow | undefined> {
    return rowFrom(err.Item) ?? (await this.get(recordKey));
  }
}
