import { setTimeout as sleep } from 'node:timers/promises';
import { type EventSourceMappingConfiguration, GetEventSourceMappingCommand } from '@aws-sdk/client-lambda';
import {
  ChangeMessageVisibilityBatchCommand,
  DeleteMessageBatchCommand,
  GetQueueUrlCommand,
  type Message,
  ReceiveMessageCommand,
} from '@aws-sdk/client-sqs';
import { capInForce } from '../../../functions/pipeline/cap-policy.js';
import type { FunctionHost } from '../function-host.js';
import {
  errorMessage,
  type InvokeResult,
  type MappingStats,
  mappingPolls,
  type RuntimeContext,
} from '../types.js';
import { type MappingSettings, QueueWatch } from './queue-watch.js';
import { succeededMessageIds, toSqsRecord } from './sqs-event.js';

/**
 * How long a slot whose receive found the queue empty sleeps on the watch before it receives
 * again anyway (ms). The watch wakes it within ~50 ms of a message becoming visible (a send, or
 * a visibility timeout running out) or of a mapping change, so this only bounds a wake that was
 * missed. At 1 s, an idle stack's slots cost the emulator a ReceiveMessage per slot per second:
 * a fifth of an idle local stack's CPU, for nothing the watch does not already report.
 */
const EMPTY_QUEUE_RECHECK_MS = 10_000;

/**
 * Lambda's SQS poller for one event source mapping. Up to `limit` loops receive batches; a
 * received batch is invoked only while fewer than `limit` invocations of this mapping run,
 * so the limit holds even right after it drops. The mapping is current before each receive:
 * reported by a QueueWatch (at most ~100 ms old), or re-read (at most every `stateMaxAgeMs`)
 * where the emulator has no wake route; a batch received just before the mapping was disabled
 * is made visible again instead of being invoked. A slot whose receive found the queue empty
 * sleeps until the watch sees a visible message (short polls with an idle back-off up to 1 s
 * without a watch). The finished batch's delete runs while the slot receives its next one.
 */
export class SqsPoller {
  readonly stats: MappingStats;
  private queueUrl: string | undefined;
  private reportBatchItemFailures = false;
  private loops = 0;
  private active = 0;
  private readonly running: Promise<void>[] = [];
  private wake: (() => void)[] = [];
  private lastRead = 0;
  private reading: Promise<void> | undefined;
  private watch: QueueWatch | undefined;
  private readonly deleting = new Set<Promise<void>>();

  constructor(
    private readonly runtime: RuntimeContext,
    private readonly host: FunctionHost,
    mapping: EventSourceMappingConfiguration,
  ) {
    this.stats = {
      uuid: mapping.UUID ?? '',
      functionName: host.name,
      queueArn: mapping.EventSourceArn ?? '',
      enabled: false,
      batchSize: 10,
      maximumConcurrency: undefined,
      limit: 0,
      received: 0,
      deleted: 0,
      failedItems: 0,
    };
  }

  /** Re-reads the mapping; more loops start when the limit grows, surplus ones idle when it falls. */
  async refresh(): Promise<void> {
    if (!this.queueUrl) {
      const [, , , , account, queueName] = this.stats.queueArn.split(':');
      const q = await this.runtime.sqs.send(
        new GetQueueUrlCommand({ QueueName: queueName, QueueOwnerAWSAccountId: account }),
      );
      this.queueUrl = q.QueueUrl;
    }
    await this.readMapping();
    const endpoint = this.runtime.clientConfig.endpoint;
    if (!this.watch && endpoint && this.runtime.receiveWaitSeconds === 0 && !this.runtime.stopped) {
      this.watch = new QueueWatch(
        endpoint.replace(/\/+$/, ''),
        this.stats.queueArn,
        this.stats.uuid,
        (m) => {
          if (!m) return;
          this.host.stats.reservedConcurrency = m.ReservedConcurrentExecutions ?? undefined;
          this.applyMapping(m);
        },
        (message) => this.runtime.emit({ type: 'error', where: `wake ${this.stats.queueArn}`, message }),
      );
    }
    while (this.loops < this.stats.limit) {
      const index = this.loops++;
      this.running.push(this.loop(index));
    }
  }

  /** The mapping as of at most `stateMaxAgeMs` ago. */
  private fresh(): Promise<void> {
    if (this.watch?.isCurrent) return Promise.resolve();
    if (Date.now() - this.lastRead <= this.runtime.stateMaxAgeMs) return Promise.resolve();
    this.reading ??= this.readMapping().finally(() => {
      this.reading = undefined;
    });
    return this.reading;
  }

  private async readMapping(): Promise<void> {
    const m = await this.runtime.lambda.send(new GetEventSourceMappingCommand({ UUID: this.stats.uuid }));
    this.lastRead = Date.now();
    this.applyMapping(m);
  }

  /** True while a QueueWatch reports this mapping (and its function's reserved concurrency). */
  get watched(): boolean {
    return this.watch?.isCurrent === true;
  }

  private applyMapping(m: MappingSettings): void {
    const enabled = mappingPolls(m.State);
    const batchSize = Math.max(1, Math.min(m.BatchSize ?? 10, 10));
    const maximum = m.ScalingConfig?.MaximumConcurrency;
    const reserved = this.host.stats.reservedConcurrency;
    // unreservedLimit stands in for the account's unreserved pool only when neither knob is set.
    const limit =
      capInForce({ reservedConcurrency: reserved, mappingMaximum: maximum }, !enabled) ??
      this.runtime.unreservedLimit;
    this.reportBatchItemFailures = (m.FunctionResponseTypes ?? []).includes('ReportBatchItemFailures');
    const changed = limit !== this.stats.limit || enabled !== this.stats.enabled;
    Object.assign(this.stats, { enabled, batchSize, maximumConcurrency: maximum, limit });
    if (changed) {
      this.runtime.emit({
        type: 'limit',
        functionName: this.host.name,
        uuid: this.stats.uuid,
        limit,
        enabled,
      });
      this.runtime.runtimeLog.line(
        `mapping ${this.stats.uuid} → ${this.host.name}: ${enabled ? 'enabled' : 'disabled'}, concurrency ${limit} (reserved ${reserved ?? 'none'}, maximum ${maximum ?? 'none'})`,
      );
    }
    this.wakeAll();
  }

  private wakeAll(): void {
    for (const w of this.wake.splice(0)) w();
  }

  private waitForChange(ms = this.runtime.refreshMs): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.wake.push(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  private async loop(index: number): Promise<void> {
    let idleMs = 0;
    while (!this.runtime.stopped) {
      if (!this.stats.enabled || index >= this.stats.limit || !this.host.fn || !this.queueUrl) {
        await this.waitForChange();
        continue;
      }
      if (idleMs > 0) await sleep(idleMs);
      let messages: Message[];
      try {
        await this.fresh();
        if (!this.stats.enabled || index >= this.stats.limit) continue;
        const queueUrl = this.queueUrl;
        // Concurrent receives, like Lambda's pollers: the moto launcher makes each one safe
        // (local/emulator/moto_server.py), so one message never goes to two slots.
        const out = await this.runtime.sqs.send(
          new ReceiveMessageCommand({
            QueueUrl: queueUrl,
            MaxNumberOfMessages: this.stats.batchSize,
            WaitTimeSeconds: this.runtime.receiveWaitSeconds,
            MessageSystemAttributeNames: ['All'],
            MessageAttributeNames: ['All'],
          }),
        );
        messages = out.Messages ?? [];
      } catch (err) {
        if (this.runtime.stopped) return;
        this.runtime.emit({
          type: 'error',
          where: `receive ${this.stats.queueArn}`,
          message: errorMessage(err),
        });
        await sleep(1000);
        continue;
      }
      if (this.runtime.stopped) return;
      if (messages.length === 0) {
        // A long poll already waited for a message; the watch wakes this slot when one is
        // visible; short polls without it back off up to one second.
        if (this.watch?.supported) await this.watch.untilMessages(EMPTY_QUEUE_RECHECK_MS);
        else if (this.runtime.receiveWaitSeconds === 0) idleMs = Math.min(1000, Math.max(50, idleMs * 2));
        continue;
      }
      idleMs = 0;
      this.stats.received += messages.length;
      await this.dispatch(messages);
    }
  }

  /** Invokes the batch once a slot is free; a batch received as the mapping was disabled goes back to the queue. */
  private async dispatch(messages: Message[]): Promise<void> {
    try {
      await this.fresh();
    } catch {
      // Keep the last known state.
    }
    while (!this.runtime.stopped && this.stats.enabled && this.active >= this.stats.limit) {
      await this.waitForChange();
    }
    if (this.runtime.stopped) return;
    if (!this.stats.enabled) {
      await this.release(messages);
      return;
    }
    this.active++;
    try {
      await this.process(messages);
    } finally {
      this.active--;
      this.wakeAll();
    }
  }

  private async release(messages: Message[]): Promise<void> {
    try {
      await this.runtime.sqs.send(
        new ChangeMessageVisibilityBatchCommand({
          QueueUrl: this.queueUrl,
          Entries: messages.map((m, n) => ({
            Id: String(n),
            ReceiptHandle: m.ReceiptHandle,
            VisibilityTimeout: 0,
          })),
        }),
      );
    } catch (err) {
      this.runtime.emit({
        type: 'error',
        where: `release ${this.stats.queueArn}`,
        message: errorMessage(err),
      });
    }
  }

  private async process(messages: Message[]): Promise<void> {
    const records = messages.map((m) => toSqsRecord(m, this.stats.queueArn, this.runtime.region));
    let result: InvokeResult;
    try {
      result = await this.host.invoke({ Records: records });
    } catch (err) {
      result = { ok: false, error: { errorType: 'Runtime.Error', errorMessage: errorMessage(err) } };
    }
    if (this.runtime.stopped) return;
    const ids = messages.map((m) => m.MessageId ?? '');
    const succeeded = new Set(succeededMessageIds(ids, result, this.reportBatchItemFailures));
    this.stats.failedItems += ids.length - succeeded.size;
    const toDelete = messages.filter((m) => succeeded.has(m.MessageId ?? ''));
    // Not awaited: the slot receives its next batch meanwhile (the messages stay invisible until
    // deleted, far shorter than their visibility timeout); stop() waits for it.
    const deleting = this.delete(toDelete);
    this.deleting.add(deleting);
    void deleting.finally(() => this.deleting.delete(deleting));
  }

  private async delete(toDelete: Message[]): Promise<void> {
    for (let i = 0; i < toDelete.length; i += 10) {
      const chunk = toDelete.slice(i, i + 10);
      try {
        const out = await this.runtime.sqs.send(
          new DeleteMessageBatchCommand({
            QueueUrl: this.queueUrl,
            Entries: chunk.map((m, n) => ({ Id: String(n), ReceiptHandle: m.ReceiptHandle })),
          }),
        );
        this.stats.deleted += out.Successful?.length ?? 0;
      } catch (err) {
        this.runtime.emit({
          type: 'error',
          where: `delete ${this.stats.queueArn}`,
          message: errorMessage(err),
        });
      }
    }
  }

  async stop(): Promise<void> {
    this.wakeAll();
    await this.watch?.stop();
    await Promise.allSettled([...this.running, ...this.deleting]);
  }
}
