import { fork } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { Readable } from 'node:stream';
import { Worker } from 'node:worker_threads';
import { type CpuShare, cpuShareWanted, limitCpu } from './cpu-share.js';
import { lambdaNodeArgs, lambdaNodeBinary } from './lambda-node.js';
import type { LogSink } from './log-sink.js';
import { type DeployedFunction, errorMessage, type InvokeResult, type MemorySample } from './types.js';

const THREAD_BOOTSTRAP = new URL('./lambda-environment.mjs', import.meta.url);

/** What the environment runs in: a worker thread or a process of its own, behind one interface. */
interface EnvironmentChannel {
  post(message: unknown): void;
  // biome-ignore lint/suspicious/noExplicitAny: Worker and ChildProcess type their events apart; each caller types its own listener.
  on(event: 'message' | 'error' | 'exit', listener: (arg: any) => void): void;
  readonly stdout: Readable | null;
  readonly stderr: Readable | null;
  terminate(): Promise<number>;
  /** Lambda's CPU share for the environment's process (process isolation with THREADGATE_LOCAL_CPU=lambda). */
  readonly cpu?: CpuShare;
  /** The environment's own process (process isolation), whose memory is measured and enforced. */
  readonly pid?: number;
}

/** How often a process-isolated environment's peak RSS is read while it runs an invocation. */
const MEMORY_POLL_MS = 100;

/** Process `pid`'s peak RSS in bytes (VmHWM, what Lambda's Max Memory Used reports), or undefined once it is gone or off Linux. */
function peakRssOf(pid: number): number | undefined {
  try {
    const hwm = /^VmHWM:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return hwm ? Number(hwm[1]) * 1024 : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Lambda's words for an environment that ended under an invocation (errorType Runtime.ExitError):
 * "signal: killed" for a kill from outside (out of memory, a crash of the host: SIGKILL, or a
 * thread terminated by `kill`), else the signal or the exit status.
 */
function exitMessage(code: number | null, signal: string | null | undefined, killed: boolean): string {
  if (killed || signal === 'SIGKILL') return 'Runtime exited with error: signal: killed';
  return `Runtime exited with error: ${signal ? `signal: ${signal}` : `exit status ${code}`}`;
}

function threadChannel(env: Record<string, string>, data: unknown): EnvironmentChannel {
  // execArgv: none of the host's flags. A thread inherits them by default, and the runtime's own
  // process (local/runtime/child-process.ts) runs with `--import tsx`: every environment would
  // load tsx's loader first, which Lambda's runtime does not have (about 50 ms of CPU each).
  const worker = new Worker(THREAD_BOOTSTRAP, {
    env,
    workerData: data,
    stdout: true,
    stderr: true,
    execArgv: [],
  });
  return {
    post: (m) => worker.postMessage(m),
    on: (event, listener) => worker.on(event, listener),
    stdout: worker.stdout,
    stderr: worker.stderr,
    terminate: () => worker.terminate(),
  };
}

function processChannel(
  env: Record<string, string>,
  data: unknown,
  memoryMb: number,
  name: string,
): EnvironmentChannel {
  const child = fork(THREAD_BOOTSTRAP, [JSON.stringify(data)], {
    env,
    // Lambda's Node.js major with Lambda's heap flags: the environment's memory is measured as Lambda's.
    execPath: lambdaNodeBinary(),
    execArgv: lambdaNodeArgs(memoryMb),
    stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
    serialization: 'advanced',
  });
  // Into its cgroup at once: only Node's own start-up (before the bundle loads) runs unlimited.
  const cpu = cpuShareWanted() && child.pid !== undefined ? limitCpu(child.pid, memoryMb, name) : undefined;
  if (cpu) child.once('exit', () => cpu.remove());
  return {
    cpu,
    pid: child.pid,
    post: (m) => child.send(m as never),
    on: (event, listener) => child.on(event, listener),
    stdout: child.stdout,
    stderr: child.stderr,
    terminate: () =>
      new Promise((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) return resolve(child.exitCode ?? 1);
        child.once('exit', (code) => resolve(code ?? 1));
        child.kill('SIGKILL');
      }),
  };
}

/** One worker thread (or process) = one execution environment, reused between invocations like a warm Lambda. */
export class ExecutionEnvironment {
  readonly id: string;
  private readonly worker: EnvironmentChannel;
  private pending: { id: string; resolve: (r: InvokeResult) => void } | undefined;
  /** Resolves after the init phase: undefined when the handler loaded, else the init error. */
  private readonly ready: Promise<{ errorType: string; errorMessage: string } | undefined>;
  private markReady: (error?: { errorType: string; errorMessage: string }) => void = () => undefined;
  dead = false;
  /** Killed from outside (`kill`): its invocation ends as Lambda reports a killed environment. */
  private killed = false;
  /** Its process's peak RSS when it was killed for passing the memory size (bytes). */
  private killedAtRss: number | undefined;

  constructor(
    readonly fn: DeployedFunction,
    awsEnv: Record<string, string>,
    log: LogSink,
    readonly isolation: 'thread' | 'process' = 'thread',
  ) {
    this.id = randomUUID().slice(0, 8);
    const region = awsEnv.AWS_REGION ?? 'us-east-1';
    const env: Record<string, string> = {
      ...fn.env,
      ...awsEnv,
      AWS_LAMBDA_FUNCTION_NAME: fn.name,
      // Not set by Lambda: names the function in the SDK's user agent, for the emulator's usage counts.
      AWS_SDK_UA_APP_ID: fn.name.slice(0, 50),
      AWS_LAMBDA_FUNCTION_VERSION: '$LATEST',
      AWS_LAMBDA_FUNCTION_MEMORY_SIZE: String(fn.memorySize),
      AWS_LAMBDA_LOG_GROUP_NAME: `/aws/lambda/${fn.name}`,
      AWS_LAMBDA_LOG_STREAM_NAME: `local/${this.id}`,
      AWS_EXECUTION_ENV: `AWS_Lambda_${fn.runtime}`,
      AWS_LAMBDA_INITIALIZATION_TYPE: 'on-demand',
      AWS_REGION: region,
      AWS_DEFAULT_REGION: region,
      LAMBDA_TASK_ROOT: fn.taskRoot,
      _HANDLER: fn.handler,
      // Lambda runs Node 22; the SDK's notice about this machine's Node 20 is noise in the log.
      AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true',
    };
    const data = { taskRoot: fn.taskRoot, handler: fn.handler };
    this.worker =
      isolation === 'process' ? processChannel(env, data, fn.memorySize, this.id) : threadChannel(env, data);
    for (const stream of [this.worker.stdout, this.worker.stderr]) {
      if (!stream) continue;
      let buffered = '';
      stream.setEncoding('utf8');
      stream.on('data', (chunk: string) => {
        buffered += chunk;
        const lines = buffered.split('\n');
        buffered = lines.pop() ?? '';
        for (const line of lines) log.line(`${this.id} ${line}`);
      });
      stream.on('end', () => {
        if (buffered) log.line(`${this.id} ${buffered}`);
      });
    }
    this.ready = new Promise((resolve) => {
      this.markReady = resolve;
    });
    this.worker.on(
      'message',
      (msg: {
        type: string;
        id: string;
        ok: boolean;
        payload?: unknown;
        error?: never;
        memory?: MemorySample;
      }) => {
        if (msg.type === 'ready' || msg.type === 'init-error') {
          this.markReady(msg.type === 'ready' ? undefined : msg.error);
          return;
        }
        if (msg.type !== 'result' || this.pending?.id !== msg.id) return;
        if (msg.memory) this.noteMemory(msg.memory);
        const { resolve } = this.pending;
        this.pending = undefined;
        resolve({ ok: msg.ok, payload: msg.payload, error: msg.error });
      },
    );
    const fail = (errorType: string, errorMessage: string) => {
      this.dead = true;
      this.markReady({ errorType, errorMessage });
      if (!this.pending) return;
      const { resolve } = this.pending;
      this.pending = undefined;
      resolve({
        ok: false,
        error: { errorType, errorMessage },
        ...(this.killedAtRss === undefined ? {} : { killedAtRss: this.killedAtRss }),
      });
    };
    this.worker.on('error', (err: Error) => fail('Runtime.ExitError', errorMessage(err)));
    // A thread's exit gives its code; a process's its code and signal.
    this.worker.on('exit', (code: number | null, signal?: NodeJS.Signals | null) =>
      fail('Runtime.ExitError', exitMessage(code, signal, this.killed)),
    );
  }

  /** Peaks of this environment's heap (bytes) and of the process's RSS, after its invocations. */
  readonly memory = {
    peakHeapUsed: 0,
    peakHeapTotal: 0,
    peakExternal: 0,
    peakRss: 0,
    /** The operating system's peak RSS of the environment's process (all threads' in thread mode). */
    peakOsRss: 0,
    invocations: 0,
    last: undefined as MemorySample | undefined,
  };

  /** The environment's CPU share (process isolation under THREADGATE_LOCAL_CPU=lambda), or undefined. */
  get cpu(): CpuShare | undefined {
    return this.worker.cpu;
  }

  private noteMemory(m: MemorySample): void {
    this.memory.peakHeapUsed = Math.max(this.memory.peakHeapUsed, m.heapUsed);
    this.memory.peakHeapTotal = Math.max(this.memory.peakHeapTotal, m.heapTotal);
    this.memory.peakExternal = Math.max(this.memory.peakExternal, m.external);
    this.memory.peakRss = Math.max(this.memory.peakRss, m.rss);
    this.memory.peakOsRss = Math.max(this.memory.peakOsRss, m.peakRss ?? 0);
    this.memory.invocations += 1;
    this.memory.last = m;
  }

  async whenReady(): Promise<void> {
    await this.ready;
  }

  /**
   * Runs one invocation. The init phase (loading the module) is not part of the function
   * timeout, as in Lambda; on a loaded two-core machine a cold start of a large bundle can
   * take seconds.
   */
  async invoke(event: unknown, requestId: string, region: string): Promise<InvokeResult> {
    const initError = await this.ready;
    if (initError) {
      this.dead = true;
      return { ok: false, error: initError };
    }
    if (this.dead) {
      return {
        ok: false,
        error: { errorType: 'Runtime.ExitError', errorMessage: 'execution environment exited' },
      };
    }
    const timeoutMs = this.fn.timeoutSeconds * 1000;
    const deadlineMs = Date.now() + timeoutMs;
    return new Promise<InvokeResult>((resolve) => {
      const unwatch = this.watchMemory();
      const timer = setTimeout(() => {
        if (this.pending?.id !== requestId) return;
        unwatch();
        this.pending = undefined;
        this.dead = true;
        void this.worker.terminate();
        resolve({
          ok: false,
          timedOut: true,
          error: {
            errorType: 'Sandbox.Timedout',
            errorMessage: `Task timed out after ${this.fn.timeoutSeconds} seconds`,
          },
        });
      }, timeoutMs);
      this.pending = {
        id: requestId,
        resolve: (r) => {
          clearTimeout(timer);
          unwatch();
          resolve(r);
        },
      };
      this.worker.post({
        type: 'invoke',
        id: requestId,
        event,
        context: {
          functionName: this.fn.name,
          functionVersion: '$LATEST',
          invokedFunctionArn: this.fn.arn,
          memoryLimitInMB: String(this.fn.memorySize),
          awsRequestId: requestId,
          logGroupName: `/aws/lambda/${this.fn.name}`,
          logStreamName: `local/${this.id}`,
          deadlineMs,
          region,
        },
      });
    });
  }

  /**
   * Lambda stops an environment whose memory passes the function's memory size. A process-isolated
   * environment's peak RSS is read every MEMORY_POLL_MS while it runs an invocation, and it is
   * killed once the peak passes the size. A worker thread has no memory of its own to measure:
   * nothing is enforced on it. Returns what stops the watch.
   */
  private watchMemory(): () => void {
    const pid = this.worker.pid;
    if (pid === undefined) return () => undefined;
    const limit = this.fn.memorySize * 1024 * 1024;
    const timer = setInterval(() => {
      const peak = peakRssOf(pid);
      if (peak === undefined || peak <= limit) return;
      clearInterval(timer);
      this.killedAtRss = peak;
      this.memory.peakOsRss = Math.max(this.memory.peakOsRss, peak);
      void this.kill();
    }, MEMORY_POLL_MS);
    return () => clearInterval(timer);
  }

  /**
   * Kills the environment from outside, as the platform does on an out-of-memory kill or a crash:
   * SIGKILL to its process, or its thread terminated. An invocation it runs fails with
   * Runtime.ExitError ("signal: killed") and counts as an Error of the function.
   */
  kill(): Promise<number> {
    this.killed = true;
    return this.terminate();
  }

  terminate(): Promise<number> {
    this.dead = true;
    return this.worker.terminate();
  }
}
