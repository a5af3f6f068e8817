import {
  type AttributeValue,
  type DynamoDBClient,
  GetItemCommand,
  UpdateItemCommand,
} from '@aws-sdk/client-dynamodb';

/**
 * The state item: the pipeline state (JSON `{paused, reason, code, since, by}`, ./control.ts)
 * and, on a stack with lanes, the lane shape the cap adjuster publishes (JSON `{cap, r, L, since,
 * drain?}`, ./lanes.ts), one DynamoDB item in the slot ledger's table (./ledger.ts).
 *
 * Why DynamoDB and not Parameter Store: the worker reads the state before its records (at lanes 1
 * before every record, with lanes once per environment every 2 s), and Parameter Store's
 * GetParameter throughput (40 a second by default) is shared by the whole account and region, so
 * a large plan throttled everyone's parameters and its own reads. A strongly consistent GetItem of
 * an item under 4 KB costs 1 read unit, on-demand, with no shared quota.
 *
 * Why its own partition (`pk` "pipeline", not the ledger's "ledger"): an IAM condition on
 * `dynamodb:LeadingKeys` then confines operators and data jobs to this item, away from the leases
 * and the cap; and its reads do not share a key with the ledger's count, which every lease take
 * reads and writes in a transaction.
 *
 * Why one attribute each, JSON strings: each writer sets its own attribute with one UpdateItem
 * (a pause or a resume `state`, the adjuster `shape`), so neither overwrites the other, while the
 * worker reads both in one GetItem; the JSON is the values' one format (the CLI's `--json`, the
 * Python package's `wait` parse the state the same way). A missing item, or attribute, is a
 * running pipeline with no published shape: a new stack writes nothing at deploy.
 */
export const STATE_ITEM_KEY = { pk: 'pipeline', sk: 'state' } as const;

/** The state item's attributes besides its key. */
export const STATE_ITEM_ATTRIBUTE = { state: 'state', shape: 'shape' } as const;

export type StateItemAttribute = keyof typeof STATE_ITEM_ATTRIBUTE;

/**
 * The attributes a reader or writer of `attributes` names, the key included: the IAM grants on
 * the item allow these and no other (a condition on `dynamodb:Attributes`).
 */
export function stateItemAttributes(attributes: readonly StateItemAttribute[]): string[] {
  return ['pk', 'sk', ...attributes.map((a) => STATE_ITEM_ATTRIBUTE[a])];
}

/** The raw JSON of `attributes` (undefined: not written yet), in one strongly consistent GetItem. */
export async function readStateItem(
  client: DynamoDBClient,
  tableName: string,
  attributes: readonly StateItemAttribute[],
): Promise<Partial<Record<StateItemAttribute, string>>> {
  const out = await client.send(
    new GetItemCommand({
      TableName: tableName,
      Key: itemKey(),
      // Consistent: a pause written a moment ago is what the next read answers (1 read unit).
      ConsistentRead: true,
      // Only the attributes asked for: a role granted the state alone reads nothing else.
      ProjectionExpression: attributes.map((a) => `#${a}`).join(', '),
      ExpressionAttributeNames: names(attributes),
    }),
  );
  const values: Partial<Record<StateItemAttribute, string>> = {};
  for (const a of attributes) {
    const value = out.Item?.[STATE_ITEM_ATTRIBUTE[a]];
    if (value && 'S' in value && value.S !== undefined) values[a] = value.S;
  }
  return values;
}

/** Sets one attribute to `json` (UpdateItem: the other attribute is left as it is; 1 write unit). */
export async function writeStateItem(
  client: DynamoDBClient,
  tableName: string,
  attribute: StateItemAttribute,
  json: string,
): Promise<void> {
  await client.send(
    new UpdateItemCommand({
      TableName: tableName,
      Key: itemKey(),
      UpdateExpression: `SET #${attribute} = :value`,
      ExpressionAttributeNames: names([attribute]),
      ExpressionAttributeValues: { ':value': { S: json } },
    }),
  );
}

function itemKey(): Record<string, AttributeValue> {
  return { pk: { S: STATE_ITEM_KEY.pk }, sk: { S: STATE_ITEM_KEY.sk } };
}

/** `state` is a DynamoDB reserved word: every expression names the attributes through placeholders. */
function names(attributes: readonly StateItemAttribute[]): Record<string, string> {
  return Object.fromEntries(attributes.map((a) => [`#${a}`, STATE_ITEM_ATTRIBUTE[a]]));
}
