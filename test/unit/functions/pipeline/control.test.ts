import { describe, expect, it } from 'vitest';
import { stopReason } from '../../../../functions/pipeline/control.js';

describe('stopReason', () => {
  it.each([
    [
      'a message that already names the answer',
      ['ERROR_WRONG_USER_KEY', 'CaptchaAI answered ERROR_WRONG_USER_KEY: the key is wrong'],
      'CaptchaAI answered ERROR_WRONG_USER_KEY: the key is wrong',
    ],
    [
      'the call that got the answer',
      ['ERROR_KEY_DOES_NOT_EXIST', 'CaptchaAI answered ERROR_KEY_DOES_NOT_EXIST: no such key', 'threadsinfo'],
      'CaptchaAI answered ERROR_KEY_DOES_NOT_EXIST to threadsinfo: no such key',
    ],
    [
      'a message that continues the sentence',
      ['ERROR_ZERO_BALANCE', 'CaptchaAI answered ERROR_ZERO_BALANCE and 0 of 5 threads work: no active plan'],
      'CaptchaAI answered ERROR_ZERO_BALANCE and 0 of 5 threads work: no active plan',
    ],
    [
      'a bare message',
      ['IP_BANNED', 'banned for 5 minutes'],
      'CaptchaAI answered IP_BANNED: banned for 5 minutes',
    ],
  ])('says the answer once for %s', (_, args, reason) => {
    // Act + Assess
    expect(stopReason(...(args as [string, string, string?]))).toBe(reason);
  });
});
