import type { IncomingMessage, ServerResponse } from 'node:http';
import { HOSTILE_KINDS, sendHostile } from '../hostile-reply.js';
import { checkFaults, NO_FAULTS, send, sendAnswer } from './http.js';
import type { Timers } from './timers.js';
import type { FaultRates, InjectableEndpoint, InjectedReply } from './types.js';

/**
 * The faults the stand-in injects in front of in.php and res.php `get`: the random
 * infrastructure faults (drop, slow, 502, IP ban, 429, …) drawn per request at the configured
 * rates, and the canned replies a test queues for the next requests. The per-task faults
 * (unsolvable, neverFinish) are drawn where a task is created (api.ts), with `hit`. A new kind
 * of fault is a rate in FaultRates (types.ts, NO_FAULTS in http.ts) and a method here.
 */

const HTML_429 =
  '<html>\r\n<head><title>429 Too Many Requests</title></head>\r\n<body>\r\n<center><h1>429 Too Many Requests</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n';

const HTML_502 =
  '<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n';

export interface FaultOptions {
  faults?: Partial<FaultRates>;
  random: () => number;
  timers: Timers;
  timeScale: number;
  /** Delay of a `slow` answer, already scaled. */
  slowMs: number;
  /** Counts an error answer under its code (the model's counters). */
  countError: (code: string) => void;
}

export class Faults {
  rates: FaultRates;
  private readonly injected: Record<InjectableEndpoint, InjectedReply[]> = { 'in.php': [], 'res.php': [] };

  constructor(private readonly o: FaultOptions) {
    this.rates = checkFaults({ ...NO_FAULTS, ...o.faults });
  }

  setRates(f: Partial<FaultRates>): void {
    this.rates = checkFaults({ ...this.rates, ...f });
  }

  inject(endpoint: InjectableEndpoint, replies: InjectedReply[]): void {
    this.injected[endpoint].push(...replies);
  }

  /** Draws a fault of this rate. */
  hit(rate: number): boolean {
    return rate > 0 && this.o.random() < rate;
  }

  /** Answers with the next queued reply for `endpoint`, if any. Returns true when it answered. */
  async injectedReply(endpoint: InjectableEndpoint, req: IncomingMessage, res: ServerResponse) {
    const reply = this.injected[endpoint].shift();
    if (!reply) return false;
    if (reply.delayMs) await this.o.timers.delay(reply.delayMs * this.o.timeScale);
    if (req.socket.destroyed) return true;
    if (reply.drop) {
      this.o.countError('DROPPED');
      req.socket.destroy();
      return true;
    }
    if (reply.hostile) {
      if (!HOSTILE_KINDS.includes(reply.hostile))
        throw new RangeError(`unknown hostile reply "${reply.hostile}"`);
      this.o.countError(`HOSTILE_${reply.hostile.toUpperCase()}`);
      await sendHostile(req, res, reply.hostile);
      return true;
    }
    const status = reply.status ?? 200;
    const body = reply.body ?? '';
    const code = status >= 500 ? `HTTP_${status}` : /(ERROR_[A-Z_]+|IP_BANNED)/.exec(body)?.[1];
    if (code) this.o.countError(code);
    send(res, status, body, reply.contentType ?? 'text/plain');
    return true;
  }

  /** Infrastructure faults shared by in.php and res.php get. Returns true when it answered. */
  async infra(req: IncomingMessage, res: ServerResponse, p: URLSearchParams): Promise<boolean> {
    const f = this.rates;
    const count = this.o.countError;
    if (this.hit(f.drop)) {
      count('DROPPED');
      req.socket.destroy();
      return true;
    }
    if (this.hit(f.slow)) {
      await this.o.timers.delay(this.o.slowMs);
      if (req.socket.destroyed) return true;
    }
    const plain: [number, string, string, number, string][] = [
      [f.html502, 'HTML_502', HTML_502, 502, 'text/html'],
      [f.ipBanned, 'IP_BANNED', 'IP_BANNED', 200, 'text/plain'],
      [f.http429, 'HTTP_429', HTML_429, 429, 'text/html'],
    ];
    for (const [rate, code, body, status, type] of plain) {
      if (!this.hit(rate)) continue;
      count(code);
      send(res, status, body, type);
      return true;
    }
    if (this.hit(f.tooManyRequests)) {
      count('ERROR_TOO_MUCH_REQUESTS');
      sendAnswer(res, p, false, 'ERROR_TOO_MUCH_REQUESTS');
      return true;
    }
    if (this.hit(f.plainTextError)) {
      count('ERROR_SERVER_ERROR');
      send(res, 200, 'ERROR_SERVER_ERROR', 'text/plain');
      return true;
    }
    return false;
  }
}
