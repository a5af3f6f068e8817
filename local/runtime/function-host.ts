import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import {
  type FunctionConfiguration,
  GetFunctionCommand,
  GetFunctionConcurrencyCommand,
} from '@aws-sdk/client-lambda';
import { ExecutionEnvironment } from './execution-environment.js';
import { lambdaNodeBinary } from './lambda-node.js';
import { LogSink } from './log-sink.js';
import type {
  DeployedFunction,
  EnvironmentMemory,
  FunctionStats,
  InvokeResult,
  RuntimeContext,
} from './types.js';

/** A deployed function: its configuration, its idle environments and its counters. */
export class FunctionHost {
  readonly stats: FunctionStats = {
    invocations: 0,
    inFlight: 0,
    maxInFlight: 0,
    errors: 0,
    timeouts: 0,
    throttles: 0,
    reservedConcurrency: undefined,
    memory: { environments: [], processPeakRss: 0 },
  };
  private readonly seen = new Map<string, EnvironmentMemory>();
  private idle: ExecutionEnvironment[] = [];
  private readonly busy = new Set<ExecutionEnvironment>();
  private readonly log: LogSink;
  /** Worker threads, or a process per environment (LocalRuntimeOptions.isolation). */
  private readonly isolation: 'thread' | 'process';
  fn: DeployedFunction | undefined;

  constructor(
    readonly name: string,
    private readonly runtime: RuntimeContext,
    /** The function's unzipped code for this CodeSha256 and the zip's location. */
    private readonly codeDirFor: (codeSha: string, location: string | undefined) => Promise<string>,
  ) {
    this.log = new LogSink(join(runtime.options.logDir, `${name}.log`), runtime.redactions);
    this.isolation =
      runtime.options.isolation ??
      (process.env.THREADGATE_LOCAL_ENVIRONMENTS === 'process' ? 'process' : 'thread');
    // Without Lambda's Node.js major a process-isolated run would measure the wrong runtime: fail at start.
    if (this.isolation === 'process') lambdaNodeBinary();
  }

  private environment(fn: DeployedFunction): ExecutionEnvironment {
    return new ExecutionEnvironment(fn, this.runtime.options.awsEnv, this.log, this.isolation);
  }

  /** Re-reads configuration and reserved concurrency; new code or env retires idle environments. */
  async refresh(): Promise<void> {
    const out = await this.runtime.lambda.send(new GetFunctionCommand({ FunctionName: this.name }));
    const conf = out.Configuration as FunctionConfiguration;
    const reserved = await this.runtime.lambda.send(
      new GetFunctionConcurrencyCommand({ FunctionName: this.name }),
    );
    this.stats.reservedConcurrency = reserved.ReservedConcurrentExecutions;
    const env = conf.Environment?.Variables ?? {};
    const codeSha = conf.CodeSha256 ?? '';
    const changed =
      !this.fn ||
      this.fn.codeSha !== codeSha ||
      this.fn.handler !== conf.Handler ||
      this.fn.timeoutSeconds !== (conf.Timeout ?? 3) ||
      JSON.stringify(this.fn.env) !== JSON.stringify(env);
    if (!changed) return;
    const taskRoot = await this.codeDirFor(codeSha, out.Code?.Location);
    this.fn = {
      name: this.name,
      arn: conf.FunctionArn ?? this.name,
      handler: conf.Handler ?? 'index.handler',
      timeoutSeconds: conf.Timeout ?? 3,
      memorySize: conf.MemorySize ?? 128,
      runtime: conf.Runtime ?? 'nodejs22.x',
      env,
      codeSha,
      taskRoot,
    };
    const stale = this.idle;
    this.idle = [];
    await Promise.all(stale.map((e) => e.terminate()));
  }

  /** Reserved concurrency left for one more invocation (scheduled invocations are throttled beyond it). */
  hasCapacity(): boolean {
    const reserved = this.stats.reservedConcurrency;
    return reserved === undefined || this.stats.inFlight < reserved;
  }

  /** Starts `count` idle environments and waits for their init phase (see LocalRuntimeOptions.prewarm). */
  async prewarm(count: number): Promise<void> {
    const fn = this.fn;
    if (!fn) return;
    const fresh = Array.from({ length: Math.max(0, count - this.idle.length) }, () => this.environment(fn));
    await Promise.all(fresh.map((e) => e.whenReady()));
    this.idle.push(...fresh.filter((e) => !e.dead));
  }

  /**
   * Like Lambda's REPORT line, with the environment's own heap in place of its max memory used;
   * for an environment killed for its memory, Lambda's own (Max Memory Used is the memory size)
   * after what was measured.
   */
  private noteMemory(env: ExecutionEnvironment, requestId: string, killedAtRss: number | undefined): void {
    const m = env.memory;
    const mb = (b: number) => (b / 1048576).toFixed(1);
    const size = env.fn.memorySize;
    if (killedAtRss !== undefined) {
      this.log.line(
        `${env.id} memory: peak RSS ${mb(killedAtRss)} MB passed the memory size ${size} MB: killed`,
      );
      this.log.line(
        `${env.id} REPORT RequestId: ${requestId} Memory Size: ${size} MB Max Memory Used: ${size} MB`,
      );
    } else if (m.last) {
      this.log.line(
        `${env.id} REPORT RequestId: ${requestId} Heap Used: ${mb(m.last.heapUsed)} MB Peak Heap Total: ${mb(m.peakHeapTotal)} MB Peak External: ${mb(m.peakExternal)} MB Process RSS: ${mb(m.last.rss)} MB${env.isolation === 'process' ? ` Max Memory Used: ${mb(m.peakOsRss)} MB` : ''}`,
      );
    } else return;
    let entry = this.seen.get(env.id);
    if (!entry) {
      entry = { id: env.id, peakHeapUsed: 0, peakHeapTotal: 0, peakExternal: 0 };
      this.seen.set(env.id, entry);
      this.stats.memory.environments.push(entry);
    }
    Object.assign(entry, {
      peakHeapUsed: m.peakHeapUsed,
      peakHeapTotal: m.peakHeapTotal,
      peakExternal: m.peakExternal,
      invocations: m.invocations,
      ...(env.isolation === 'process' ? { peakRss: m.peakOsRss } : {}),
      ...(m.last?.cpuMicros !== undefined ? { cpuSeconds: m.last.cpuMicros / 1e6 } : {}),
      ...(m.last?.loopDelay ? { loopDelay: m.last.loopDelay } : {}),
      ...(env.cpu
        ? { cpuShare: { share: env.cpu.share, error: env.cpu.error, ...env.cpu.throttled() } }
        : {}),
    });
    this.stats.memory.processPeakRss = Math.max(this.stats.memory.processPeakRss, m.peakRss);
  }

  async invoke(event: unknown): Promise<InvokeResult> {
    const fn = this.fn;
    if (!fn) throw new Error(`function ${this.name} is not loaded`);
    const requestId = randomUUID();
    const env = this.idle.pop() ?? this.environment(fn);
    this.busy.add(env);
    this.stats.invocations++;
    this.stats.inFlight++;
    this.stats.maxInFlight = Math.max(this.stats.maxInFlight, this.stats.inFlight);
    this.log.line(`${env.id} START RequestId: ${requestId}`);
    const started = Date.now();
    let killedAtRss: number | undefined;
    try {
      const result = await env.invoke(event, requestId, this.runtime.region);
      killedAtRss = result.killedAtRss;
      if (!result.ok) {
        this.stats.errors++;
        this.runtime.metrics.count(this.name, 'Errors');
        if (result.timedOut) {
          this.stats.timeouts++;
          this.runtime.emit({ type: 'timeout', functionName: this.name, timeoutSeconds: fn.timeoutSeconds });
        } else {
          this.runtime.emit({
            type: 'invoke-error',
            functionName: this.name,
            errorType: result.error?.errorType ?? 'Error',
            errorMessage: result.error?.errorMessage ?? '',
          });
        }
        this.log.line(`${env.id} ERROR ${result.error?.errorType}: ${result.error?.errorMessage}`);
      }
      return result;
    } finally {
      this.stats.inFlight--;
      this.busy.delete(env);
      this.runtime.metrics.count(this.name, 'Invocations');
      this.log.line(`${env.id} END RequestId: ${requestId} Duration: ${Date.now() - started} ms`);
      this.noteMemory(env, requestId, killedAtRss);
      if (!env.dead && this.fn === fn && !this.runtime.stopped) this.idle.push(env);
      else void env.terminate();
    }
  }

  /** A scheduled invocation refused for want of reserved concurrency (Lambda's Throttles). */
  throttled(): void {
    this.stats.throttles++;
    this.runtime.metrics.count(this.name, 'Throttles');
  }

  /**
   * Kills execution environments from outside, as the platform does on an out-of-memory kill or
   * a crash (ExecutionEnvironment.kill): `busy` true only those running an invocation (each
   * fails with Runtime.ExitError and counts as an Error; its messages come back as their
   * visibility says), false only idle ones, unset both; at most `max` of them. Returns how many
   * it killed. Later invocations get new environments.
   */
  async kill(which: { busy?: boolean; max?: number } = {}): Promise<number> {
    const candidates =
      which.busy === undefined ? [...this.busy, ...this.idle] : which.busy ? [...this.busy] : [...this.idle];
    const chosen = candidates.slice(0, which.max ?? candidates.length);
    this.idle = this.idle.filter((e) => !chosen.includes(e));
    await Promise.all(chosen.map((e) => e.kill()));
    return chosen.length;
  }

  async stop(): Promise<void> {
    const all = [...this.idle, ...this.busy];
    this.idle = [];
    await Promise.all(all.map((e) => e.terminate()));
    await this.log.close();
  }
}
