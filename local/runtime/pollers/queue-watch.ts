import type { EventSourceMappingConfiguration } from '@aws-sdk/client-lambda';

/** The wake route of local/emulator/moto_server.py (WAKE_PATH there). */
export const WAKE_PATH = '/_threadgate/wake';

/** How long one wait at the launcher lasts at most, in seconds. */
const WAIT_SECONDS = 10;
/** The launcher checks a mapping every 50 ms; an answer this recent (or a wait in progress) is current. */
const CURRENT_MS = 100;

/** The mapping's settings that a poller's limit rests on. */
export type MappingSettings = Pick<
  EventSourceMappingConfiguration,
  'State' | 'BatchSize' | 'ScalingConfig' | 'FunctionResponseTypes'
>;

/** The mapping's settings and its function's reserved concurrency, as the wake wait reports them. */
export type WatchedMapping = MappingSettings & { ReservedConcurrentExecutions: number | null };

interface WakeAnswer {
  mapping: WatchedMapping | null;
  version: string;
  visible: number;
}

/**
 * The local runtime's equivalent of Lambda's long polling, for one SQS event source mapping: one
 * wait at a time at the moto launcher, which returns when the mapping's settings change or, while
 * a poller slot waits for work, when the queue has a visible message. The mapping's settings
 * include its function's reserved concurrency, so a new cap is seen as soon as it is written. It receives nothing, so a
 * slot asleep on an empty queue wakes the moment a message is sent, and a disable that happens
 * meanwhile never costs a message a receive (a long ReceiveMessage would take it anyway).
 *
 * While the watch works, the mapping it reports is at most ~100 ms old, so the poller need not
 * read the mapping before each receive. Against a server without the route (a plain moto) it
 * switches itself off and the poller keeps its own reads and idle back-off.
 */
export class QueueWatch {
  /** False once the server showed it has no wake route. */
  supported = true;
  private version = '';
  private lastAnswerAt = 0;
  private waiting = false;
  private wantsMessages = false;
  private inFlight: AbortController | undefined;
  private sleepers: (() => void)[] = [];
  private stopped = false;
  private readonly running: Promise<void>;

  constructor(
    private readonly endpoint: string,
    private readonly queueArn: string,
    private readonly mappingUuid: string,
    /** A changed mapping (undefined: deleted); called before any sleeper wakes. */
    private readonly onMapping: (m: WatchedMapping | undefined) => void,
    private readonly onError: (message: string) => void,
  ) {
    this.running = this.run();
  }

  /** The mapping as the watch reported it is current (a wait is under way or just answered). */
  get isCurrent(): boolean {
    return this.supported && (this.waiting || Date.now() - this.lastAnswerAt <= CURRENT_MS);
  }

  /** Resolves when the queue has a visible message, the mapping changed, or after `maxMs`. */
  untilMessages(maxMs: number): Promise<void> {
    if (!this.supported || this.stopped) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        resolve();
      };
      const timer = setTimeout(() => {
        this.sleepers = this.sleepers.filter((s) => s !== done);
        resolve();
      }, maxMs);
      this.sleepers.push(done);
      // A wait that does not return on messages is cut short and asked again with them.
      if (!this.wantsMessages) this.inFlight?.abort();
    });
  }

  private wakeSleepers(): void {
    for (const s of this.sleepers.splice(0)) s();
  }

  private async run(): Promise<void> {
    while (!this.stopped && this.supported) {
      const wantsMessages = this.sleepers.length > 0;
      const controller = new AbortController();
      this.inFlight = controller;
      this.wantsMessages = wantsMessages;
      const query = new URLSearchParams({
        queue_arn: this.queueArn,
        mapping: this.mappingUuid,
        seen: this.version,
        messages: wantsMessages ? '1' : '0',
        timeout: String(WAIT_SECONDS),
      });
      this.waiting = true;
      let answer: WakeAnswer;
      try {
        const res = await fetch(`${this.endpoint}${WAKE_PATH}?${query}`, { signal: controller.signal });
        if (res.status === 404 || res.status === 405) {
          // moto's own dispatcher answered: no wake route on this server.
          this.supported = false;
          break;
        }
        if (!res.ok) throw new Error(`wake answered HTTP ${res.status}: ${(await res.text()).slice(0, 200)}`);
        answer = (await res.json()) as WakeAnswer;
      } catch (err) {
        this.waiting = false;
        if (this.stopped) break;
        if (controller.signal.aborted) continue; // re-asked with messages
        this.onError(err instanceof Error ? err.message : String(err));
        this.wakeSleepers();
        await new Promise((resolve) => setTimeout(resolve, 1000));
        continue;
      }
      this.waiting = false;
      this.lastAnswerAt = Date.now();
      if (answer.version !== this.version) {
        this.version = answer.version;
        this.onMapping(answer.mapping ?? undefined);
        this.wakeSleepers();
      }
      if (wantsMessages && answer.visible > 0) this.wakeSleepers();
    }
    this.waiting = false;
    this.wakeSleepers();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.inFlight?.abort();
    await this.running;
  }
}
