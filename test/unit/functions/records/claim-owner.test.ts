import { describe, expect, it } from 'vitest';
import { claimOwner, ownerMessageId } from '../../../../functions/records/claim-owner.js';

describe('ownerMessageId: the SQS message a claim was made for', () => {
  it('reads it back from an owner claimOwner made', () => {
    expect(ownerMessageId(claimOwner('5ee2ddf4-7cee', 3, 'r4nd'))).toBe('5ee2ddf4-7cee');
  });

  it.each([undefined, '', 'worker-1', 'a/b', '/3/r4nd', 'a/b/c/d'])('knows no message for %j', (owner) => {
    expect(ownerMessageId(owner)).toBeUndefined();
  });
});
