import { type AttributeValue, ConditionalCheckFailedException } from '@aws-sdk/client-dynamodb';
import type { OutcomeRow } from './outcome-row.js';

/** An outcome row's attributes to and from DynamoDB's typed values (./store.ts). */

export function s(value: string): AttributeValue {
  return { S: value };
}
export function n(value: number): AttributeValue {
  return { N: String(value) };
}

export function rowFrom(item: Record<string, AttributeValue> | undefined): OutcomeRow | undefined {
  if (!item?.record_key?.S) return undefined;
  const row: Record<string, string | number> = {};
  for (const [key, value] of Object.entries(item)) {
    if (value.S !== undefined) row[key] = value.S;
    else if (value.N !== undefined) row[key] = Number(value.N);
  }
  return row as unknown as OutcomeRow;
}

export function conditionFailed(err: unknown): err is ConditionalCheckFailedException {
  return (
    err instanceof ConditionalCheckFailedException ||
    (err as { name?: string }).name === 'ConditionalCheckFailedException'
  );
}
