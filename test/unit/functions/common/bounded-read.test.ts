import { describe, expect, it } from 'vitest';
import { drainAtMost } from '../../../../functions/common/bounded-read.js';

function body(chunks: number[]): { stream: ReadableStream<Uint8Array>; cancelled: () => boolean } {
  let cancelled = false;
  let i = 0;
  const stream = new ReadableStream<Uint8Array>({
    pull(controller) {
      const size = chunks[i++];
      if (size === undefined) controller.close();
      else controller.enqueue(new Uint8Array(size));
    },
    cancel() {
      cancelled = true;
    },
  });
  return { stream, cancelled: () => cancelled };
}

describe('drainAtMost', () => {
  it('counts a body within the limit and says it is complete', async () => {
    const b = body([1000, 1000, 48]);
    expect(await drainAtMost(b.stream, 2048)).toEqual({ length: 2048, complete: true });
  });

  it('stops reading past the limit and cancels the stream', async () => {
    const b = body([1000, 1000, 1000, 1000]);
    expect(await drainAtMost(b.stream, 2048)).toEqual({ length: 2048, complete: false });
    expect(b.cancelled()).toBe(true);
  });

  it('takes a missing body as empty', async () => {
    expect(await drainAtMost(null, 10)).toEqual({ length: 0, complete: true });
  });
});
