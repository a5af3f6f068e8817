import { CliError, EXIT } from './exit-codes.js';

/**
 * Tenants for SQS fair queues: a message's MessageGroupId names its tenant on a standard queue,
 * and SQS then keeps one tenant's backlog from holding the others' messages back
 * (docs/producers.md "Tenants"). The worker and the chain never read it.
 */

/** SQS's limit on a MessageGroupId. */
export const MAX_GROUP_ID = 128;

/**
 * A message's MessageGroupId: the tenant given, else its batch_id (cut to SQS's 128 characters:
 * two batches that share their first 128 only share a tenant), else none. The Python package's
 * send() picks it the same way.
 */
export function messageGroupOf(batchId: string | undefined, tenant: string | undefined): string | undefined {
  const group = tenant ?? batchId;
  return group ? group.slice(0, MAX_GROUP_ID) : undefined;
}

/** Checks a --tenant value: what SQS takes as a MessageGroupId. */
export function tenantOf(raw: string): string {
  if (raw.length === 0 || raw.length > MAX_GROUP_ID || !/^[\x21-\x7e]+$/.test(raw)) {
    throw new CliError(
      `--tenant must be 1-${MAX_GROUP_ID} printable ASCII characters without spaces (SQS's MessageGroupId), got "${raw}"`,
      EXIT.usage,
    );
  }
  return raw;
}
