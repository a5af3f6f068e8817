import { setTimeout as sleep } from 'node:timers/promises';
import { GetCommand } from '@aws-sdk/lib-dynamodb';
import type { LocalStack } from '../local/stack/local-stack.js';
import { queueDepth } from '../local/stack/observation.js';

/** Times the emulator's own answers to the calls the worker and the feeder make, beside the run. */
export class EmulatorProbe {
  readonly samples: Record<string, number[]> = {
    dynamodb_get_item: [],
    state_get_item: [],
    sqs_get_queue_attributes: [],
  };
  /** Per probe round: seconds since the run started, the slowest call's ms, the visible queue depth. */
  readonly rounds: { t: number; slowestMs: number; queued: number | undefined }[] = [];
  private stopped = false;
  private loop: Promise<void> | undefined;
  paused = false;

  constructor(
    private readonly stack: LocalStack,
    private readonly origin: number,
  ) {}

  /** Every 2 s: the probe's calls are part of the emulator's load, which is part of what is measured. */
  start(periodMs = 2000): void {
    let slowest = 0;
    const time = async <T>(name: string, call: () => Promise<T>): Promise<T | undefined> => {
      const t = performance.now();
      try {
        const out = await call();
        const ms = performance.now() - t;
        this.samples[name]?.push(ms);
        slowest = Math.max(slowest, ms);
        return out;
      } catch {
        // A failed probe says nothing about latency.
        return undefined;
      }
    };
    this.loop = (async () => {
      while (!this.stopped) {
        slowest = 0;
        const t = (performance.now() - this.origin) / 1000;
        await time('dynamodb_get_item', () =>
          this.stack.documents.send(
            new GetCommand({ TableName: this.stack.outputs.TableName, Key: { record_key: 'bench-probe' } }),
          ),
        );
        // The pipeline state, as the worker reads it (a strongly consistent GetItem of the state item).
        await time('state_get_item', async () => {
          this.paused = (await this.stack.control.readState()).paused;
        });
        const depth = await time('sqs_get_queue_attributes', () =>
          queueDepth(this.stack, this.stack.outputs.QueueUrl),
        );
        this.rounds.push({ t, slowestMs: slowest, queued: depth?.visible });
        await sleep(periodMs);
      }
    })();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.loop;
  }
}
