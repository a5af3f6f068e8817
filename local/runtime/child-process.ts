import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { createWriteStream, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { LocalRuntimeOptions } from './types.js';

/**
 * The local runtime in a process of its own (local/runtime/child-main.ts), so that the whole fleet of
 * execution environments can be killed at once with no chance to clean up (SIGKILL): what a
 * crashed host or a lost machine does to running Lambda invocations. The lease-expiry e2e test
 * uses it; the in-process LocalRuntime is the same code.
 *
 * The options (the API key among the redactions) go to the child on its stdin, never in its
 * arguments or environment. The child stops cleanly when its stdin closes (the parent exited).
 */
export type RuntimeProcessOptions = Pick<
  LocalRuntimeOptions,
  'awsEnv' | 'logDir' | 'timeScale' | 'redact' | 'codeCacheDir' | 'prewarm' | 'refreshMs'
>;

export interface RuntimeProcess {
  pid: number;
  /** Resolves with how the process ended. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** SIGKILL: every execution environment dies at once, nothing in the process runs again. */
  kill(): Promise<void>;
  /** A clean stop (the runtime terminates its environments), then the process exits. */
  stop(): Promise<void>;
}

const MAIN = fileURLToPath(new URL('./child-main.ts', import.meta.url));
/** Printed by the child once polling has started. */
export const READY_LINE = 'threadgate-runtime: ready';

export async function spawnRuntimeProcess(
  options: RuntimeProcessOptions,
  { startTimeoutMs = 180_000 } = {},
): Promise<RuntimeProcess> {
  mkdirSync(options.logDir, { recursive: true });
  const child: ChildProcess = spawn(process.execPath, ['--import', 'tsx', MAIN], {
    stdio: ['pipe', 'pipe', 'pipe'],
    env: { ...process.env, ...options.awsEnv },
  });
  // The child's own output (start-up errors) goes to a file beside the runtime's logs.
  const out = createWriteStream(join(options.logDir, 'runtime-process.log'), { flags: 'a' });
  child.stderr?.pipe(out);
  const exited = once(child, 'exit').then(([code, signal]) => ({
    code: code as number | null,
    signal: signal as NodeJS.Signals | null,
  }));
  child.stdin?.write(`${JSON.stringify(options)}\n`);

  await new Promise<void>((resolve, reject) => {
    let seen = '';
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(
        new Error(`the runtime process did not start within ${startTimeoutMs} ms (see runtime-process.log)`),
      );
    }, startTimeoutMs);
    child.stdout?.on('data', (chunk: Buffer) => {
      seen += chunk.toString('utf8');
      if (seen.includes(READY_LINE)) {
        clearTimeout(timer);
        resolve();
      }
    });
    void exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(
        new Error(
          `the runtime process exited during start-up (code ${code}, signal ${signal}); see runtime-process.log`,
        ),
      );
    });
  });
  exited.catch(() => undefined);

  return {
    pid: child.pid ?? -1,
    exited,
    async kill() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.stdin?.end();
      await exited;
    },
  };
}
