/**
 * Reads an HTTP body without trusting the peer: at most `maxBytes` are kept, and reading stops
 * (the stream is cancelled, the connection dropped) as soon as the body grows past that. Time
 * is bounded by the caller's abort signal on the request, which also ends a body that stalls
 * after the headers. Used for every body threadgate reads (target pages through drainAtMost below), the target's answer
 * to the POST, and CaptchaAI's answers.
 */
export interface BoundedBody {
  bytes: Uint8Array;
  /** False when the body was longer than maxBytes (bytes then holds its first maxBytes). */
  complete: boolean;
}

export async function readAtMost(
  body: ReadableStream<Uint8Array> | null,
  maxBytes: number,
): Promise<BoundedBody> {
  if (!body) return { bytes: new Uint8Array(0), complete: true };
  const reader = body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return { bytes: concat(chunks, total), complete: true };
      if (total + value.byteLength > maxBytes) {
        chunks.push(value.subarray(0, maxBytes - total));
        total = maxBytes;
        await reader.cancel().catch(() => undefined);
        return { bytes: concat(chunks, total), complete: false };
      }
      chunks.push(value);
      total += value.byteLength;
    }
  } finally {
    reader.releaseLock();
  }
}

/**
 * Like readAtMost, for a body only its length matters for (a target page: the worker needs the
 * page load for the session's cookies, not its text): the chunks are dropped as they come, so a
 * page near the cap never sits in memory twice (chunks, then their concatenation).
 */
export async function drainAtMost(
  body: ReadableStream<Uint8Array> | null,
  maxBytes: number,
): Promise<{ length: number; complete: boolean }> {
  if (!body) return { length: 0, complete: true };
  const reader = body.getReader();
  let total = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return { length: total, complete: true };
      total += value.byteLength;
      if (total > maxBytes) {
        await reader.cancel().catch(() => undefined);
        return { length: maxBytes, complete: false };
      }
    }
  } finally {
    reader.releaseLock();
  }
}

function concat(chunks: Uint8Array[], total: number): Uint8Array {
  const out = new Uint8Array(total);
  let offset = 0;
  for (const chunk of chunks) {
    out.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return out;
}
