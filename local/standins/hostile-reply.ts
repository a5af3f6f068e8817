import { once } from 'node:events';
import type { IncomingMessage, ServerResponse } from 'node:http';

/**
 * Answers a broken or hostile peer gives, for both stand-ins (tests drive them over real HTTP):
 * - `huge`: a 200 with a body of `hugeBytes` (default 50 MiB), sent as fast as the reader takes it;
 * - `endless`: a 200 whose chunked body never ends (16 KiB every 5 ms);
 * - `hang-after-headers`: a 200 whose headers promise a body that never comes.
 * Each stops when the client goes away, so an abandoned read costs the stand-in nothing.
 */
export type HostileKind = 'huge' | 'endless' | 'hang-after-headers';

export const HOSTILE_KINDS: readonly HostileKind[] = ['huge', 'endless', 'hang-after-headers'];

export const DEFAULT_HUGE_BYTES = 50 * 1024 * 1024;

const CHUNK = Buffer.alloc(16 * 1024, 'x');

export async function sendHostile(
  req: IncomingMessage,
  res: ServerResponse,
  kind: HostileKind,
  headers: Record<string, string> = {},
  hugeBytes = DEFAULT_HUGE_BYTES,
): Promise<void> {
  const gone = () => res.destroyed || req.socket.destroyed;
  if (kind === 'hang-after-headers') {
    res.writeHead(200, { 'content-type': 'text/plain', 'content-length': '1024', ...headers });
    res.flushHeaders();
    await once(res, 'close');
    return;
  }
  if (kind === 'huge') {
    res.writeHead(200, { 'content-type': 'text/html', 'content-length': String(hugeBytes), ...headers });
    for (let sent = 0; sent < hugeBytes && !gone(); sent += CHUNK.length) {
      const part = sent + CHUNK.length <= hugeBytes ? CHUNK : CHUNK.subarray(0, hugeBytes - sent);
      if (!res.write(part)) await Promise.race([once(res, 'drain'), once(res, 'close')]);
    }
    if (!gone()) res.end();
    return;
  }
  res.writeHead(200, { 'content-type': 'text/html', ...headers });
  const timer = setInterval(() => {
    if (gone()) clearInterval(timer);
    else res.write(CHUNK);
  }, 5);
  await once(res, 'close');
  clearInterval(timer);
}
