import { describe, expect, it } from 'vitest';
import {
  BATCH_SHARDS,
  batchShardNumber,
  batchShardOf,
  batchShardsOf,
} from '../../../../functions/records/batch-index.js';

describe('batch index shards', () => {
  it('hashes a record key with 32-bit FNV-1a over its UTF-8 bytes', () => {
    // Assess: the published FNV-1a test vectors, mod 2^32 (so any shard count can be checked)
    expect(batchShardNumber('', 2 ** 32)).toBe(0x811c9dc5);
    expect(batchShardNumber('a', 2 ** 32)).toBe(0xe40c292c);
    expect(batchShardNumber('foobar', 2 ** 32)).toBe(0xbf9cf968);
    // UTF-8 bytes (0xc3 0xa9), not the UTF-16 code unit 0xe9: the Python package hashes the same
    expect(batchShardNumber('é', 2 ** 32)).toBe(0x1e9de8c1);
  });

  it('puts a record of a batch under `<batch_id>#<n>`, n in [0, BATCH_SHARDS), the same every time', () => {
    // Prepare
    const keys = Array.from({ length: 1_000 }, (_, i) => `order-${i}`);
    // Act
    const shards = keys.map((k) => batchShardOf('nightly-1', k));
    // Assess
    expect(BATCH_SHARDS).toBe(16);
    expect(shards[0]).toMatch(/^nightly-1#([0-9]|1[0-5])$/);
    expect(keys.map((k) => batchShardOf('nightly-1', k))).toEqual(shards);
    expect(batchShardOf('a#b', 'order-1')).toBe(`a#b#${batchShardNumber('order-1')}`);
  });

  it('spreads a batch evenly: 16,000 keys leave no shard more than 10 % above its share', () => {
    // Prepare
    const counts = new Map<string, number>();
    // Act
    for (let i = 0; i < 16_000; i++) {
      const shard = batchShardOf('b', `rec-${i}`);
      counts.set(shard, (counts.get(shard) ?? 0) + 1);
    }
    // Assess: every shard used, the busiest within 10 % of 1,000
    expect([...counts.keys()].sort()).toEqual([...batchShardsOf('b')].sort());
    expect(Math.max(...counts.values())).toBeLessThan(1_100);
  });

  it('lists every shard of a batch, shard 0 first', () => {
    expect(batchShardsOf('b')).toEqual(Array.from({ length: 16 }, (_, n) => `b#${n}`));
  });
});
