import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ensureMoto, type MotoPythonOptions, MotoUnavailableError, motoPython } from './python-env.js';

export { MotoUnavailableError } from './python-env.js';

/**
 * Starts moto's server (AWS emulator) through `local/emulator/moto_server.py`, which switches off
 * moto's Docker-based execution of SQS event source mappings. Used by the local stack,
 * the CLI and the tests.
 */
export interface MotoServer {
  /** `http://localhost:PORT` — localhost, not 127.0.0.1: moto only treats template URLs as path-style for localhost. */
  endpoint: string;
  port: number;
  /** Environment for AWS SDK clients and the CDK CLI pointed at this server. */
  awsEnv: Record<string, string>;
  stop(): Promise<void>;
}

export interface StartMotoOptions {
  /** 0 (default) picks a free port. */
  port?: number;
  /** Extra environment for the server, e.g. MOTO_LAMBDA_CONCURRENCY_QUOTA. */
  env?: Record<string, string>;
  /** A Python used as it is (as THREADGATE_PYTHON is): no virtual environment, no install. */
  python?: string;
  /** Where the Python is found or made otherwise (local/emulator/python-env.ts); tests point it elsewhere. */
  pythonEnv?: Omit<MotoPythonOptions, 'fixed'>;
}

export const MOTO_REGION = 'us-east-1';
export const MOTO_ACCOUNT = '123456789012';

const LAUNCHER = fileURLToPath(new URL('./moto_server.py', import.meta.url));
const ZYGOTE = fileURLToPath(new URL('./zygote.py', import.meta.url));

export function awsEnvFor(endpoint: string): Record<string, string> {
  return {
    AWS_ENDPOINT_URL: endpoint,
    AWS_REGION: MOTO_REGION,
    AWS_DEFAULT_REGION: MOTO_REGION,
    AWS_ACCESS_KEY_ID: 'testing',
    AWS_SECRET_ACCESS_KEY: 'testing',
  };
}

/** moto_server.py's exit code when python3 cannot import moto's server. */
const MOTO_NOT_IMPORTABLE = 3;

/**
 * Names the Unix socket of a running zygote (startMotoZygote). While it is set, `startMoto`
 * (without an explicit `python` or `pythonEnv`) forks its server from that zygote instead of launching Python.
 * The test suite sets it for its whole run (test/fixtures/moto-zygote.ts); child processes
 * (the CLI) inherit it.
 */
export const MOTO_ZYGOTE_ENV = 'THREADGATE_MOTO_ZYGOTE';

/** The launcher could not start because python3 lacks moto's server (or python3 itself is missing). */
class MotoMissing extends Error {}

/**
 * Starts moto's server. The common case (moto installed) costs one Python process: the launcher
 * itself says when moto's server is not importable (exit 3), and only then does `ensureMoto`
 * find or make a Python that can (python-env.ts: the project's virtual environment), and the
 * launcher starts again. (Probing first cost a second
 * Python process importing moto, about 1 s of CPU, at every start.) With MOTO_ZYGOTE_ENV set,
 * it costs no Python start at all: the zygote forks a server that has its imports done.
 */
export async function startMoto(options: StartMotoOptions = {}): Promise<MotoServer> {
  // A Python named here (a test's) is launched as asked, not the zygote's.
  const zygote =
    options.python === undefined && options.pythonEnv === undefined
      ? process.env[MOTO_ZYGOTE_ENV]
      : undefined;
  if (zygote) return forkFrom(zygote, options);
  const where: MotoPythonOptions = { ...options.pythonEnv, fixed: options.python };
  try {
    return await launch(motoPython(where), options);
  } catch (err) {
    if (!(err instanceof MotoMissing)) throw err;
    return launch(ensureMoto(where), options);
  }
}

/** What a server prints once it listens: {"port": N, "pid": P}, then its log. */
interface Ready {
  port: number;
  pid: number;
}

/**
 * Resolves with the server's ready line on `out`; keeps a tail of everything else the server
 * writes to `log` (warnings, a traceback) for error messages, read through `tail()`.
 */
function watchServer(out: NodeJS.ReadableStream, log: NodeJS.ReadableStream) {
  let tail = '';
  const keep = (chunk: Buffer | string) => {
    tail = (tail + chunk.toString()).slice(-4000);
  };
  log.on('data', keep);
  const ready = new Promise<Ready>((resolve) => {
    let seen = '';
    const onData = (chunk: Buffer | string) => {
      seen += chunk.toString();
      const line = seen.split('\n').find((l) => l.startsWith('{"port"'));
      if (!line) return;
      out.off('data', onData);
      if (out !== log) out.resume();
      resolve(JSON.parse(line) as Ready);
    };
    out.on('data', onData);
  });
  return { ready, tail: () => tail.trim() };
}

async function launch(python: string, options: StartMotoOptions): Promise<MotoServer> {
  const child: ChildProcess = spawn(python, [LAUNCHER, '--port', String(options.port ?? 0)], {
    stdio: ['pipe', 'pipe', 'pipe'],
    env: { ...process.env, ...options.env },
  });
  const server = watchServer(child.stdout as NodeJS.ReadableStream, child.stderr as NodeJS.ReadableStream);
  const { port } = await Promise.race([
    server.ready,
    new Promise<never>((_, reject) => {
      child.once('exit', (code) =>
        reject(
          code === MOTO_NOT_IMPORTABLE
            ? new MotoMissing(server.tail())
            : new MotoUnavailableError(`moto's server exited (${code}): ${server.tail()}`),
        ),
      );
      child.once('error', (err) => reject(new MotoMissing(err.message)));
    }),
  ]);
  return served(port, async () => {
    if (child.exitCode !== null) return;
    const exited = once(child, 'exit');
    child.stdin?.end();
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
    await exited;
    clearTimeout(timer);
  });
}

/**
 * A server forked by the zygote at `socketPath`. The connection is the server's stdio: it
 * prints its ready line and its log there, and it stops when the connection closes, so the
 * server cannot outlive this process. It is not a child of this process: `stop` signals its
 * pid and waits for the connection to close, which happens when the server has exited.
 */
async function forkFrom(socketPath: string, options: StartMotoOptions): Promise<MotoServer> {
  const conn = connect(socketPath);
  const server = watchServer(conn, conn);
  let failure: Error | undefined;
  // An error (no zygote listening, a reset) is followed by 'close', which settles everything.
  conn.on('error', (err) => {
    failure ??= err;
  });
  let closed = false;
  // Not events.once: that rejects on 'error', and 'close' comes after it anyway.
  const gone = new Promise<void>((resolve) =>
    conn.once('close', () => {
      closed = true;
      resolve();
    }),
  );
  conn.write(`${JSON.stringify({ port: options.port ?? 0, env: options.env ?? {} })}\n`);
  const { port, pid } = await Promise.race([
    server.ready,
    gone.then(() => {
      throw new MotoUnavailableError(
        failure
          ? `cannot reach the moto zygote at ${socketPath} (${failure.message}); unset ${MOTO_ZYGOTE_ENV} to start moto's server directly`
          : `moto's server exited: ${server.tail()}`,
      );
    }),
  ]);
  return served(port, async () => {
    if (closed) return;
    conn.end();
    signal(pid, 'SIGTERM');
    const timer = setTimeout(() => signal(pid, 'SIGKILL'), 5000);
    await gone;
    clearTimeout(timer);
  });
}

function signal(pid: number, name: NodeJS.Signals): void {
  try {
    process.kill(pid, name);
  } catch {
    // already gone
  }
}

function served(port: number, stop: () => Promise<void>): MotoServer {
  const endpoint = `http://localhost:${port}`;
  return { endpoint, port, awsEnv: awsEnvFor(endpoint), stop };
}

export interface MotoZygote {
  /** The Unix socket to put in MOTO_ZYGOTE_ENV. */
  socket: string;
  stop(): Promise<void>;
}

/**
 * Starts local/emulator/zygote.py: one Python process that imports moto and the services the
 * stack uses once (about 2.4 s of CPU) and forks a ready server per `startMoto`, where each
 * launch pays about 3 s of CPU in imports before its first calls are served. Throws
 * MotoUnavailableError when it cannot start (python3 without moto's server, say): callers then
 * leave MOTO_ZYGOTE_ENV unset and `startMoto` launches (and installs) as usual. Its Python is
 * `motoPython()`'s: THREADGATE_PYTHON, the project's virtual environment once made, or python3.
 */
export async function startMotoZygote(python = motoPython()): Promise<MotoZygote> {
  const dir = mkdtempSync(join(tmpdir(), 'threadgate-moto-'));
  const socket = join(dir, 'zygote.sock');
  const child = spawn(python, [ZYGOTE, socket], { stdio: ['pipe', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (chunk: string) => {
    stderr = (stderr + chunk).slice(-4000);
  });
  const exited = once(child, 'exit');
  try {
    await new Promise<void>((resolve, reject) => {
      let out = '';
      child.stdout.on('data', (chunk: Buffer) => {
        out += chunk.toString('utf8');
        if (out.includes('\n')) resolve();
      });
      void exited.then(([code]) =>
        reject(new MotoUnavailableError(`the moto zygote exited (${code}): ${stderr.trim()}`)),
      );
      child.once('error', (err) => reject(new MotoUnavailableError(`cannot run ${python}: ${err.message}`)));
    });
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  child.stdout.resume();
  return {
    socket,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        child.stdin.end();
        await exited;
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
