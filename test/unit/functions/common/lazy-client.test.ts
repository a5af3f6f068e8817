import { describe, expect, it } from 'vitest';
import { clientOf, lazyClient } from '../../../../functions/common/lazy-client.js';

describe('lazy clients', () => {
  it('makes the client on first use, once, and hands a given client through', async () => {
    let made = 0;
    const factory = lazyClient(async () => ({ id: ++made }));
    expect(made).toBe(0);
    const [a, b] = await Promise.all([clientOf(factory), clientOf(factory)]);
    expect(a).toBe(b);
    expect(made).toBe(1);
    const given = { id: 'given' };
    expect(await clientOf(given)).toBe(given);
  });

  it('does not keep a failed make: the next use tries again', async () => {
    let attempts = 0;
    const factory = lazyClient(async () => {
      attempts += 1;
      if (attempts === 1) throw new Error('module not loaded');
      return { attempts };
    });
    await expect(clientOf(factory)).rejects.toThrow('module not loaded');
    expect(await clientOf(factory)).toEqual({ attempts: 2 });
  });
});
