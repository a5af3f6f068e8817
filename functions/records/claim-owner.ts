import type { AttributeValue } from '@aws-sdk/client-dynamodb';

/**
 * The lease owner of a claim made for receive `receiveCount` of SQS message `messageId`:
 * "<messageId>/<receiveCount>/<random>". A later receive of the same message may take over a
 * lease an earlier one left (its handling threw after the claim landed with its answer lost, or
 * the row could not be read to release it): that handling is over, since the message came back
 * only after it gave the message up or its invocation ended, so the lease protects nothing the
 * takeover does not (the takeover returns the row's phase markers, which decidePriorPhase obeys as
 * for an expired lease). Without it the redelivery met its own record as another owner's, spent a
 * receive on the refusal, and waited out the whole lease; in a load run on a saturated emulator
 * such records ran out of receives and ended in the DLQ. The random part keeps two copies of one
 * receive (SQS may deliver a message twice) apart: neither takes over the other.
 */
export function claimOwner(messageId: string, receiveCount: number, random: string): string {
  return `${receivePrefix(messageId, receiveCount)}${random}`;
}

/** The SQS message a claim's owner was made for, or undefined for an owner of another shape. */
export function ownerMessageId(owner: string | undefined): string | undefined {
  const parts = owner?.split('/');
  return parts?.length === 3 && parts[0] ? parts[0] : undefined;
}

/** The start every owner of a message's claims shares, and with a receive count that receive's. */
function receivePrefix(messageId: string, receiveCount?: number): string {
  return receiveCount === undefined ? `${messageId}/` : `${messageId}/${receiveCount}/`;
}

/** The SQS receive a claim is made for. */
export interface ClaimReceive {
  messageId: string;
  count: number;
}

/** What a claim takes the record with (./store.ts OutcomesStore.claim). */
export interface ClaimRequest {
  owner: string;
  leaseMs: number;
  captchaType: string;
  batchId?: string;
  /** The SQS receive this claim is made for: a lease an earlier receive of it left is taken over. */
  receive?: ClaimReceive;
}

/**
 * The part of the claim's condition that lets it take over a lease an earlier receive of the
 * same message left (see claimOwner), and its values; nothing without a receive.
 */
export function earlierReceiveCondition(receive: ClaimReceive | undefined): {
  condition: string;
  values: Record<string, AttributeValue>;
} {
  if (!receive) return { condition: '', values: {} };
  return {
    condition: ' OR (begins_with(lease_owner, :message) AND NOT begins_with(lease_owner, :receive))',
    values: {
      ':message': { S: receivePrefix(receive.messageId) },
      ':receive': { S: receivePrefix(receive.messageId, receive.count) },
    },
  };
}
